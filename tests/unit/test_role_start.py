"""What a role process and its function wait for, and what wakes them.

A server or worker waits for the ps-lite scheduler's port before ps-lite connects to it
(`runner.await_scheduler`): ZeroMQ would try a refused connection again only 100 ms later.
The function's handler waits on its fork-server's output, not a fixed sleep, so a role's end
is answered when it comes (`ForkServer.wait`), and its answer goes out without waiting for the
caller's ACK (Nagle's algorithm off).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest

from coach.backends.local.processor import make_server
from coach.roles import function
from coach.roles.runner import await_scheduler

# (the scheduler's port listens this many seconds after the call, or never; within_s; answer)
CASES = [
    ("listening-already", 0.0, 5.0, True),
    ("listens-while-waiting", 0.3, 5.0, True),
    ("never-listens", None, 0.3, False),
]


@pytest.mark.parametrize("listens_after, within_s, answer", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_role_waits_for_the_schedulers_port(listens_after: float | None, within_s: float, answer: bool) -> None:
    with socket.socket() as server:   # bound, not listening: connections are refused until it listens
        server.bind(("127.0.0.1", 0))
        listened: list[float] = []

        def listen() -> None:
            listened.append(time.monotonic())
            server.listen()

        if listens_after == 0.0:
            listen()
        timer = threading.Timer(listens_after, listen) if listens_after else None
        if timer:
            timer.start()
        try:
            got = await_scheduler("127.0.0.1", server.getsockname()[1], within_s)
            returned = time.monotonic()
        finally:
            if timer:
                timer.cancel()
                timer.join()
    assert got is answer
    if answer:   # answered once the port listened, not at the end of within_s
        assert listened and listened[0] <= returned < listened[0] + within_s - 1.0


def _fork_server(monkeypatch: pytest.MonkeyPatch, script: str) -> function.ForkServer:
    """A ForkServer whose process is `script`: the pipe handling without importing MXNet."""
    monkeypatch.setattr(function, "_start_fork_server", lambda: subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    return function.ForkServer()


def test_the_handler_wakes_when_the_fork_server_speaks(monkeypatch: pytest.MonkeyPatch) -> None:
    server = _fork_server(monkeypatch, "import time; time.sleep(0.3); print('{\"event\": \"started\", \"pid\": 1}')")
    try:
        start = time.monotonic()
        server.wait(30.0)
        assert time.monotonic() - start < 20.0   # woken by the line, not by the timeout
        time.sleep(0.05)   # the rest of the line, if it came in two reads
        assert server.events() == [{"event": "started", "pid": 1}]
    finally:
        server.close()


def test_the_handler_does_not_spin_on_an_ended_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    server = _fork_server(monkeypatch, "pass")
    try:
        server.proc.wait(30)
        assert server.events() == []   # reads the end of its output
        start = time.monotonic()
        server.wait(0.2)
        assert time.monotonic() - start >= 0.2   # an ended pipe is always readable: slept instead
    finally:
        server.close()


def test_a_replica_answers_without_waiting_for_the_callers_ack(tmp_path) -> None:
    # the headers and the body of an answer are two writes: with Nagle's algorithm the body
    # waited 40 ms for the job loop's delayed ACK (bench/answer_latency.py measures it)
    (tmp_path / "function.yaml").write_text("metadata:\n  name: f\nspec:\n  handler: main:handler\n")
    (tmp_path / "main.py").write_text("def handler(context, event):\n    return 'done'\n")
    server, _ = make_server(tmp_path)
    try:
        assert server.RequestHandlerClass.disable_nagle_algorithm is True
    finally:
        server.server_close()
