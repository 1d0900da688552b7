"""The zygote: replicas' fork-servers forked from one MXNet import, and what happens when a
replica, a fork-server or the zygote itself dies. Real processes throughout (the zygote, the
local processor, the fork-servers and their role processes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from coach.backends.local import LocalBackend
from coach.roles.protocol import READY_PATH
from coach.roles.zygote import SOCKET_ENV, Forked, start_zygote
from tests.unit.test_function_events import VALID, fresh_replica


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def eventually(check, timeout: float = 30.0):
    end = time.monotonic() + timeout
    while not (result := check()) and time.monotonic() < end:
        time.sleep(0.05)
    return result


@pytest.fixture()
def zygote() -> Iterator[tuple[subprocess.Popen, str]]:
    proc, path = start_zygote(dict(os.environ))
    try:
        yield proc, path
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def replica(socket_path: str):
    """A worker function's replica asking the zygote at `socket_path`."""
    return fresh_replica("worker", env={SOCKET_ENV: socket_path})


def ready(url: str) -> bool:
    return httpx.get(url.rstrip("/") + READY_PATH, timeout=10).status_code == 200


def sockets_of(pid: int) -> list[str]:
    links = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            links.append(os.readlink(fd))
        except OSError:
            pass
    return [link for link in links if link.startswith("socket:")]


def test_a_replica_serves_events_from_a_fork_server_the_zygote_forked(zygote) -> None:
    z, path = zygote
    with replica(path) as (first, url), replica(path) as (second, other):
        assert eventually(lambda: ready(url) and ready(other))
        fork_servers = children_of(z.pid)   # the zygote's children, not the replicas'
        assert len(fork_servers) == 2 and children_of(first.pid) == children_of(second.pid) == []
        # none holds the zygote's socket, or another replica's connection to it
        assert [sockets_of(pid) for pid in fork_servers] == [[], []]
        # an event whose group never forms: the fork-server forks the role, which is killed at
        # its deadline and reported finished, and the replica stays warm on the same fork-server
        r = httpx.post(url, json=dict(VALID, deadline_s=2), timeout=60)
        assert r.status_code == 504, r.text
        assert ready(url) and sorted(children_of(z.pid)) == sorted(fork_servers)


def test_the_fork_server_ends_with_its_replica(zygote) -> None:
    z, path = zygote
    with replica(path) as (proc, url):
        assert eventually(lambda: ready(url))
        [fork_server] = children_of(z.pid)
        proc.kill()
        assert eventually(lambda: fork_server not in children_of(z.pid), timeout=10)
    assert z.poll() is None   # the zygote serves on


@pytest.mark.parametrize("kill, code", [(signal.SIGKILL, -signal.SIGKILL), (signal.SIGTERM, -signal.SIGTERM)])
def test_a_fork_server_that_dies_is_reported_with_its_code(zygote, kill: signal.Signals, code: int) -> None:
    _, path = zygote
    forked = Forked(path)
    assert json.loads(forked.stdout.readline())["event"] == "ready"
    assert forked.poll() is None
    os.killpg(forked.pid, kill)
    assert forked.wait() == code and forked.poll() == code


def test_once_the_zygote_is_gone_its_fork_servers_serve_on_and_new_replicas_import_mxnet(zygote) -> None:
    z, path = zygote
    forked = Forked(path)
    assert json.loads(forked.stdout.readline())["event"] == "ready"
    os.killpg(z.pid, signal.SIGKILL)
    z.wait()
    assert forked.poll() is None   # alive: watched through its pidfd now
    os.killpg(forked.pid, signal.SIGKILL)
    assert forked.wait() == 1   # its code went with the zygote
    with pytest.raises(ConnectionRefusedError):
        Forked(path)
    with replica(path) as (_, url):   # starts a fork-server of its own, which imports MXNet
        assert eventually(lambda: ready(url), timeout=120)


def test_the_backend_starts_one_zygote_and_again_once_it_died(tmp_path) -> None:
    backend = LocalBackend(log_dir=tmp_path)
    try:
        backend.deploy("j", {"scheduler": 1, "server": 1, "worker": 1})
        [z] = [pid for pid in children_of(os.getpid()) if b"coach.roles.zygote" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(children_of(z)) == 3   # one fork-server per replica, all of one import
        os.killpg(z, signal.SIGKILL)   # waitable once all its threads have exited, not once a zombie
        assert eventually(lambda: os.waitid(os.P_PID, z, os.WEXITED | os.WNOHANG | os.WNOWAIT), timeout=10)
        backend.deploy("j", {"scheduler": 1, "server": 1, "worker": 2})
        [again] = [pid for pid in children_of(os.getpid()) if b"coach.roles.zygote" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert again != z and len(children_of(again)) == 1
    finally:
        backend.close()
    assert not any(b"coach.roles.zygote" in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in children_of(os.getpid()))


def test_closing_ends_the_zygote_even_when_a_teardown_fails(tmp_path, monkeypatch) -> None:
    """On the cluster backend a teardown fails once the control plane is gone: the Ctrl-C handler's
    close() raised, which read "progress stopped (…); the jobs go on" and skipped the zygote's kill."""
    from coach.errors import BackendError

    backend = LocalBackend(log_dir=tmp_path)
    try:
        backend.deploy("j", {"scheduler": 1, "server": 1, "worker": 1})
        real = backend.teardown

        def gone(job_id: str) -> None:
            real(job_id)
            raise BackendError("apiserver: DELETE …: [Errno 111] Connection refused")

        monkeypatch.setattr(backend, "teardown", gone)
        backend.close()   # no error
    finally:
        monkeypatch.undo()
        backend.close()
    assert not any(b"coach.roles.zygote" in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in children_of(os.getpid()))


def test_asking_does_not_wait_for_the_zygotes_import(tmp_path, monkeypatch) -> None:
    """A zygote still importing MXNet is a socket that has not accepted yet: the replica's
    runtime starts at once (and then says it is not ready), instead of blocking its start, and
    is closed at once. One that dies before it forks leaves the replica to start its own."""
    import socket

    from coach.roles.function import FunctionRuntime

    path = str(tmp_path / "socket")
    importing = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    importing.bind(path)
    importing.listen(8)
    try:
        forked = Forked(path)
        assert forked.poll() is None and not forked.forked
        monkeypatch.setenv(SOCKET_ENV, path)
        runtime, closing = FunctionRuntime("worker"), FunctionRuntime("worker")
        assert runtime.readiness()[0] == 503
        done = threading.Thread(target=closing.close)
        done.start()
        done.join(5)
        assert not done.is_alive(), "closing waited for the zygote's import"
        importing.settimeout(1)
        for _ in range(3):   # the zygote, done importing, takes the requests and dies before forking
            importing.accept()[0].close()
        assert forked.wait() == 1 and not forked.forked
        # the replica starts a fork-server of its own, which imports MXNet
        assert eventually(lambda: runtime.readiness()[0] == 200, timeout=120)
        runtime.close()
    finally:
        importing.close()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to ask as another user")
def test_the_zygote_forks_only_for_its_own_user(zygote) -> None:
    """Its socket is in the abstract namespace, which any user can reach: a request from another
    user is refused, and the zygote serves its own user on."""
    _, name = zygote
    pid = os.fork()
    if pid == 0:   # a process of user nobody asks
        code = 2
        try:
            os.setgid(65534)
            os.setuid(65534)
            forked = Forked(name)
            assert eventually(lambda: forked.forked or forked.poll() is not None)
            code = 1 if forked.forked else 0   # refused: the zygote closed without forking
            if forked.forked:
                os.killpg(forked.pid, signal.SIGKILL)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "another user's request was served"
    forked = Forked(name)
    assert json.loads(forked.stdout.readline())["event"] == "ready"
    os.killpg(forked.pid, signal.SIGKILL)
    assert forked.wait() == -signal.SIGKILL
