"""What a role process and its function wait for, and what wakes them.

A server or worker waits for the ps-lite scheduler's port before ps-lite connects to it
(`runner.await_scheduler`): ZeroMQ would try a refused connection again only 100 ms later.
The function's handler waits on its fork-server's output, not a fixed sleep, so a role's end
is answered when it comes (`ForkServer.wait`).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import pytest

from coach.roles import function
from coach.roles.runner import await_scheduler

# (the scheduler's port listens this many seconds after the call, or never; within_s; answer)
CASES = [
    ("listening-already", 0.0, 5.0, True),
    ("listens-while-waiting", 0.3, 5.0, True),
    ("never-listens", None, 0.3, False),
]


@pytest.fixture
def port() -> int:
    """A port nothing listens on: connections are refused until a case listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("listens_after, within_s, answer", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_role_waits_for_the_schedulers_port(port: int, listens_after: float | None, within_s: float,
                                              answer: bool) -> None:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen() -> None:
        server.bind(("127.0.0.1", port))
        server.listen()

    timer = threading.Timer(listens_after, listen) if listens_after is not None else None
    if timer:
        timer.start()
    try:
        start = time.monotonic()
        got = await_scheduler("127.0.0.1", port, within_s)
        waited = time.monotonic() - start
    finally:
        if timer:
            timer.cancel()
            timer.join()
        server.close()
    assert got is answer
    if answer:   # answered once the port listened, not at the end of within_s
        assert (listens_after or 0.0) <= waited < within_s - 1.0
    else:
        assert waited >= within_s


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
