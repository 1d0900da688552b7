"""A stand-in for Nuclio's processor, for one function replica on this machine.

It reads the function's `function.yaml`, imports the handler exactly as Nuclio's python
wrapper does, builds real `nuclio_sdk` Context/Event objects for every HTTP request and turns
the handler's output into a response with `nuclio_sdk.Response.from_entrypoint_output`. Like
an HTTP trigger with `maxWorkers: 1`, it runs one event at a time.

    python -m coach.backends.local.processor FUNCTION_DIR   # prints "listening PORT" when ready
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import signal
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import nuclio_sdk
import yaml

from coach.roles.protocol import READY_PATH
from coach.roles.runner import exit_with_parent

HEALTH_PATH = "/__health"
MAX_BODY = 4 << 20
"""Nuclio's HTTP trigger refuses larger bodies (its `maxRequestBodySize`, 4 MiB by default)."""
BODY_TIMEOUT_S = 10.0
"""How long a body may go without a byte arriving: a caller that announces more than it sends
would otherwise hold the connection's thread for good (one that trickles it holds its own
connection's thread only)."""


class BadRequest(Exception):
    """A request whose body cannot be read: answered with `status` and the connection closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def read_body(rfile: Any, headers: Any) -> bytes:
    """The request's body, by its Content-Length or its chunks, at most MAX_BODY bytes.
    Raises BadRequest naming the header or the chunk at fault."""
    if "chunked" in (headers.get("Transfer-Encoding") or "").lower():
        return _read_chunks(rfile)
    text = (headers.get("Content-Length") or "0").strip()
    if not text.isascii() or not text.isdigit():
        raise BadRequest(400, f"Content-Length must be a whole number of bytes, got {text[:40]!r}")
    digits = text.lstrip("0") or "0"
    if len(digits) > 9 or int(digits) > MAX_BODY:
        shown = digits if len(digits) <= 20 else f"{digits[:20]}… ({len(digits)} digits)"
        raise BadRequest(413, f"Content-Length {shown} is larger than {MAX_BODY >> 20} MiB, the HTTP trigger's limit")
    length = int(digits)
    body = rfile.read(length) if length else b""
    if len(body) < length:
        raise BadRequest(400, f"body ended after {len(body)} of the {length} bytes its Content-Length announced")
    return body


def _read_chunks(rfile: Any) -> bytes:
    body = bytearray()
    while True:
        line = rfile.readline(1026)
        if not line:
            raise BadRequest(400, "chunked body ended before its last (zero-size) chunk")
        size_text = line.split(b";")[0].strip().decode("latin-1")
        if not 0 < len(size_text) <= 16 or any(c not in "0123456789abcdefABCDEF" for c in size_text):
            raise BadRequest(400, f"chunk size must be a hexadecimal number, got {size_text[:40]!r}")
        size = int(size_text, 16)
        if len(body) + size > MAX_BODY:
            raise BadRequest(413, f"chunked body larger than {MAX_BODY >> 20} MiB, the HTTP trigger's limit")
        if size == 0:
            while rfile.readline(1026) not in (b"\r\n", b"\n", b""):   # trailers: not used
                pass
            return bytes(body)
        chunk = rfile.read(size)
        if len(chunk) < size or rfile.readline(3) not in (b"\r\n", b"\n"):
            raise BadRequest(400, "chunked body ended inside a chunk")
        body += chunk


def load_function(function_dir: Path) -> tuple[dict[str, Any], Any]:
    """The parsed function.yaml and the imported handler module."""
    config = yaml.safe_load((function_dir / "function.yaml").read_text())
    module_name, _, _ = config["spec"]["handler"].partition(":")
    spec = importlib.util.spec_from_file_location(module_name, function_dir / f"{module_name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return config, module


def make_server(function_dir: Path, port: int = 0) -> tuple[ThreadingHTTPServer, Any]:
    config, module = load_function(function_dir)
    entry = getattr(module, config["spec"]["handler"].partition(":")[2])
    logger = nuclio_sdk.Logger(logging.INFO, name=config["metadata"]["name"])
    logger.set_handler("stderr", sys.stderr, nuclio_sdk.logger.HumanReadableFormatter())
    trigger = nuclio_sdk.TriggerInfo("http", "http")
    context = nuclio_sdk.Context(logger=logger, platform=nuclio_sdk.Platform("local"), worker_id=0,
                                 trigger=trigger)
    if hasattr(module, "init_context"):
        module.init_context(context)
    one_worker = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # the headers and the body go out in two writes; with Nagle's algorithm the body waited
        # for the caller's delayed ACK of the headers, 40 ms on Linux: every answer of an epoch
        # came 40 ms after its role had finished (bench/answer_latency.py)
        disable_nagle_algorithm = True

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet: the job loop logs
            pass

        def _reply(self, status: int, body: str, content_type: str, headers: dict[str, Any]) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, str(v))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == HEALTH_PATH:
                self._reply(200, "ok", "text/plain", {})
            elif self.path == READY_PATH:
                runtime = getattr(context.user_data, "runtime", None)
                self._reply(*(runtime.readiness() if runtime is not None else (200, "ready")), "text/plain", {})
            else:
                self._event()

        def do_POST(self) -> None:
            self._event()

        def _event(self) -> None:
            self.connection.settimeout(BODY_TIMEOUT_S)
            try:
                body = read_body(self.rfile, self.headers)
            except (BadRequest, socket.timeout) as e:
                status, message = (e.status, str(e)) if isinstance(e, BadRequest) else (
                    408, f"body did not arrive within {BODY_TIMEOUT_S:g} s")
                self.close_connection = True   # where the next request starts is unknown
                self._reply(status, json.dumps({"error": message}), "application/json", {"Connection": "close"})
                return
            finally:
                self.connection.settimeout(None)
            event = nuclio_sdk.Event(body=body, content_type=self.headers.get("Content-Type"),
                                     trigger=trigger, headers=dict(self.headers.items()),
                                     method=self.command, path=self.path, size=len(body))
            if not one_worker.acquire(blocking=False):   # one worker: a busy replica says so
                out = nuclio_sdk.Response(body=json.dumps({"error": "busy: no free worker"}),
                                          content_type="application/json", status_code=503)
            else:
                try:
                    out = entry(context, event)
                except Exception as e:  # Nuclio answers 500 with the exception text
                    out = nuclio_sdk.Response(body=f"handler raised {type(e).__name__}: {e}", status_code=500)
                finally:
                    one_worker.release()
            r = nuclio_sdk.Response.from_entrypoint_output(json.dumps, out)
            self._reply(r.get("status_code", 200), r["body"], r.get("content_type", "text/plain"),
                        r.get("headers") or {})

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    return server, context


def main() -> int:
    exit_with_parent()  # no function replica outlives the Coach process that started it
    function_dir = Path(sys.argv[1])
    server, context = make_server(function_dir)

    def stop(signum: int, frame: Any) -> None:
        runtime = getattr(context.user_data, "runtime", None)
        if runtime is not None:
            runtime.close()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
