"""The local processor's HTTP layer: a request whose body cannot be read gets a 4xx naming the
header or chunk at fault, and neither a traceback nor a connection held for good (helper-31 saw
`Content-Length: abc` end in a traceback with no answer, `-1` hang its connection, and a chunked
body read as empty). Over real sockets, against the processor's own server."""

from __future__ import annotations

import io
import socket
import threading
from email.message import Message
from typing import Iterator

import pytest

from coach.backends.local import processor
from coach.backends.local.processor import MAX_BODY, BadRequest, make_server, read_body


def _headers(**fields: str) -> Message:
    m = Message()
    for k, v in fields.items():
        m[k.replace("_", "-")] = v
    return m


# (id, headers, raw body, the body read or (status, words in the message))
CASES = [
    ("no-body", {}, b"", b""),
    ("length", {"Content_Length": "2"}, b"{}", b"{}"),
    ("length-with-spaces", {"Content_Length": " 2 "}, b"{}", b"{}"),
    ("chunked", {"Transfer_Encoding": "chunked"}, b"2\r\n{\"\r\n1;x=y\r\n}\r\n0\r\n\r\n", b'{"}'),
    ("chunked-with-trailer", {"Transfer_Encoding": "chunked"}, b"1\r\nA\r\n0\r\nX-T: 1\r\n\r\n", b"A"),
    ("letters", {"Content_Length": "abc"}, b"", (400, "Content-Length must be a whole number")),
    ("exponent", {"Content_Length": "1e15"}, b"", (400, "'1e15'")),
    ("negative", {"Content_Length": "-1"}, b"", (400, "'-1'")),
    ("unicode-digits", {"Content_Length": "\u0662"}, b"", (400, "whole number")),
    ("too-large", {"Content_Length": str(MAX_BODY + 1)}, b"", (413, "larger than 4 MiB")),
    ("thousand-digits", {"Content_Length": "9" * 1000}, b"", (413, "(1000 digits)")),
    ("shorter-than-announced", {"Content_Length": "5"}, b"{}", (400, "after 2 of the 5 bytes")),
    ("chunk-size-not-hex", {"Transfer_Encoding": "chunked"}, b"zz\r\n", (400, "'zz'")),
    ("chunk-size-negative", {"Transfer_Encoding": "chunked"}, b"-1\r\n", (400, "'-1'")),
    ("chunks-too-large", {"Transfer_Encoding": "chunked"}, f"{MAX_BODY + 1:x}\r\n".encode(), (413, "chunked")),
    ("chunk-cut-short", {"Transfer_Encoding": "chunked"}, b"5\r\nab", (400, "inside a chunk")),
    ("chunks-never-end", {"Transfer_Encoding": "chunked"}, b"1\r\na\r\n", (400, "ended before its last")),
    ("leading-zeros", {"Content_Length": "0000000002"}, b"{}", b"{}"),   # was 413, "larger than 4 MiB"
]


@pytest.mark.parametrize("headers,raw,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_body_is_read_by_its_length_or_chunks_or_refused_naming_why(headers, raw, expected) -> None:
    if isinstance(expected, bytes):
        assert read_body(io.BytesIO(raw), _headers(**headers)) == expected
    else:
        with pytest.raises(BadRequest) as e:
            read_body(io.BytesIO(raw), _headers(**headers))
        assert (e.value.status, expected[1] in str(e.value)) == (expected[0], True), str(e.value)


@pytest.fixture
def echo_port(tmp_path, monkeypatch) -> Iterator[int]:
    """The processor serving a function that answers with its event's body length."""
    monkeypatch.setattr(processor, "BODY_TIMEOUT_S", 0.5)
    (tmp_path / "function.yaml").write_text("metadata:\n  name: f\nspec:\n  handler: main:handler\n")
    (tmp_path / "main.py").write_text("def handler(context, event):\n    return str(len(event.body))\n")
    server, _ = make_server(tmp_path)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _ask(port: int, raw: bytes, sock: socket.socket | None = None) -> tuple[bytes, socket.socket]:
    """The status line and body of one answer, read whole, and the socket (still open)."""
    s = sock or socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(raw)
    data = b""
    while b"\r\n\r\n" not in data:
        more = s.recv(65536)
        assert more, f"closed without an answer after {data!r}"
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += s.recv(65536)
    return head.split(b"\r\n")[0] + b" " + body, s


POST = b"POST / HTTP/1.1\r\nHost: x\r\n"


def test_a_bad_length_is_answered_and_its_connection_closed_others_are_served(echo_port: int) -> None:
    answer, bad = _ask(echo_port, POST + b"Content-Length: abc\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400") and b"Content-Length must be a whole number" in answer
    assert bad.recv(10) == b""   # closed: where the next request would start is unknown
    answer, good = _ask(echo_port, POST + b"Content-Length: 2\r\n\r\n{}")
    assert answer == b"HTTP/1.1 200 OK 2"
    answer, _ = _ask(echo_port, POST + b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", good)
    assert answer == b"HTTP/1.1 200 OK 3"   # the same connection, kept alive


def test_a_body_that_never_comes_is_answered_408_not_waited_for(echo_port: int) -> None:
    answer, s = _ask(echo_port, POST + b"Content-Length: 100\r\n\r\n{}")
    assert answer.startswith(b"HTTP/1.1 408") and b"within 0.5 s" in answer
    assert s.recv(10) == b""
