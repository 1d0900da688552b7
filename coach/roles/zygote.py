"""One warm MXNet import for every replica on this machine: fork-servers forked, not started.

Each function replica keeps a fork-server (`runner.py`) that imports MXNet, about 2 s of CPU.
A job's five replicas on a 2-core machine paid that side by side, about 5 s before its first
epoch. The local backend therefore starts one zygote per distinct function environment (MXNet
reads OMP_NUM_THREADS and its own variables when it loads): it imports MXNet once, and a
replica's fork-server is forked from it in milliseconds. On Nuclio every replica is its own
container and pays its own import; nothing outside the local backend uses this.

Protocol, over a SOCK_SEQPACKET unix socket of the same user (one message each, in order):
    replica → zygote   {"env": {...}, "cwd": "..."}, with fds: stdin, stdout, stderr
    zygote → replica   {"pid": P}    the fork-server, which then runs `runner.main` as if started
    zygote → replica   {"code": C}   once P has ended (C as Popen's returncode)
The fork-server watches the replica (PARENT_ENV) as a started one watches its parent.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import traceback
from typing import Any, IO

from coach.roles.runner import PARENT_ENV, exit_with_parent, warm_up

SOCKET_ENV = "COACH_ZYGOTE"      # the replica's environment names the zygote's socket
LISTEN_FD_ENV = "COACH_ZYGOTE_FD"   # the zygote's: the listening socket its starter bound
MAX_MESSAGE = 1 << 20


def start_zygote(env: dict[str, str], stderr: int | IO[bytes] = subprocess.DEVNULL) -> tuple[subprocess.Popen, str]:
    """A zygote with this environment, and its socket's name. The socket is bound and listening
    before the zygote starts, so a replica can ask at once: its fork-server comes once the zygote
    has imported MXNet. Once the zygote is gone, asking is refused (ConnectionRefusedError).

    The name is in Linux's abstract namespace ("@…"): no file to remove however the zygote ends,
    no path-length limit. Anyone on the machine can connect to it, so the zygote serves only
    processes of its own user (SO_PEERCRED)."""
    name = f"@coach-zygote-{os.getpid()}-{secrets.token_hex(8)}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        listener.bind(_address(name))
        listener.listen(256)
        proc = subprocess.Popen([sys.executable, "-m", "coach.roles.zygote"], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=stderr, pass_fds=(listener.fileno(),),
                                env={**env, PARENT_ENV: str(os.getpid()), LISTEN_FD_ENV: str(listener.fileno())},
                                start_new_session=True)
    finally:
        listener.close()   # the zygote holds it now
    return proc, name


def _address(name: str) -> str:
    """A socket name as an environment variable can hold it ("@…" for the abstract namespace,
    whose names start with a NUL byte) → its address."""
    return "\0" + name[1:] if name.startswith("@") else name


def _same_user(conn: socket.socket) -> bool:
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return uid == os.getuid()


class Forked:
    """A fork-server the zygote forks for this replica, with what `ForkServer` uses of a Popen:
    `pid`, `stdin`, `stdout`, `poll()`, `wait()` and `returncode`; `forked` is False until
    the zygote has forked it (or if it never did).

    Asking does not wait for the zygote's import: the fork-server says "ready" on stdout once
    it is forked, as a started one does once it has imported MXNet. Its exit code comes from
    the zygote; if the zygote is gone first, the fork-server is watched through a pidfd and an
    end reads as code 1 (the real code went with the zygote).
    """

    def __init__(self, socket_name: str) -> None:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pipes: list[int] = []
        try:
            conn.connect(_address(socket_name))
            pipes = [*os.pipe(), *os.pipe()]
            in_r, in_w, out_r, out_w = pipes
            request = {"env": dict(os.environ, **{PARENT_ENV: str(os.getpid())}), "cwd": os.getcwd()}
            socket.send_fds(conn, [json.dumps(request).encode()], [in_r, out_w, 2])
        except BaseException:
            for fd in pipes:
                os.close(fd)
            conn.close()
            raise
        os.close(in_r)
        os.close(out_w)
        self.stdin = os.fdopen(in_w, "wb")
        self.stdout = os.fdopen(out_r, "rb", buffering=0)
        self._conn = conn
        self._lock = threading.Lock()   # the replica's readiness, events and stop may ask at once
        self._pid: int | None = None
        self._pidfd: int | None = None
        self.returncode: int | None = None

    @property
    def forked(self) -> bool:
        self.poll()
        return self._pid is not None

    @property
    def pid(self) -> int:
        """The fork-server's pid; waits for the zygote to fork it."""
        with self._lock:
            while self._pid is None and self.returncode is None:
                self._receive(block=True)
        if self._pid is None:
            raise ProcessLookupError("the zygote ended without forking a fork-server")
        return self._pid

    def _receive(self, block: bool) -> bool:
        """Take one thing the zygote sent (the fork-server's pid, then its exit code), or notice
        that the zygote is gone; whether anything changed. Called with the lock held."""
        try:
            message = self._conn.recv(MAX_MESSAGE, 0 if block else socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except ConnectionError:   # reset: the zygote died with our request unread
            message = b""
        if message:
            said = json.loads(message)
            if "pid" in said:
                self._pid = int(said["pid"])
                try:
                    self._pidfd = os.pidfd_open(self._pid)
                except OSError:   # ended and reaped already (its code is on its way), or no pidfds here
                    pass
            else:
                self._settle(int(said["code"]))
            return True
        if self._pidfd is None or select.select([self._pidfd], [], [], None if block else 0)[0]:
            self._settle(1)   # the zygote is gone, and so is the fork-server (or it never forked one)
            return True
        return False

    def _settle(self, code: int) -> None:
        self.returncode = code
        self._conn.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def poll(self) -> int | None:
        if self._lock.acquire(blocking=False):   # else another thread is waiting for the news
            try:
                while self.returncode is None and self._receive(block=False):
                    pass
            finally:
                self._lock.release()
        return self.returncode

    def wait(self) -> int:
        with self._lock:
            while self.returncode is None:
                self._receive(block=True)
        return self.returncode

    def abandon(self) -> None:
        """Let go of a fork-server not forked yet (one forked later ends at once on its stdin's
        EOF), or of one that has ended: close the pipes and the connection."""
        self.stdin.close()
        self.stdout.close()
        with self._lock:
            if self.returncode is None:
                self._settle(1)


def _become_fork_server(request: dict[str, Any], fds: list[int]) -> int:
    """In the forked child: take the replica's pipes and environment, then serve as runner.main."""
    os.setsid()   # first, as a started one's Popen(start_new_session=True): killpg(pid) reaches it from its pid on
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    from coach.roles import runner

    return runner.main()


def _close_all(fds: list[int], *socks: socket.socket) -> None:
    for fd in fds:
        os.close(fd)
    for sock in socks:
        sock.close()


def serve(listener: socket.socket) -> None:
    """Fork a fork-server per request; report each one's end to the replica that asked."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)   # only to wake the selector
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    while True:
        for key, _ in selector.select():
            if key.fileobj is not listener:
                os.read(wake_r, 4096)
                continue
            conn, _ = listener.accept()
            fds: list[int] = []
            try:
                if not _same_user(conn):
                    raise PermissionError("a request from another user")
                message, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, 3)
                request = json.loads(message)
                if len(fds) != 3:
                    raise ValueError(f"{len(fds)} file descriptors, not 3")
                pid = os.fork()
            except (OSError, ValueError) as e:   # a bad request, or no fork to be had: the replica starts its own
                print(f"zygote: no fork-server: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                _close_all(fds, conn)
                continue
            if pid == 0:
                code = 1
                try:   # nothing of the zygote's stays open in it: replicas read EOF from the zygote only
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    selector.close()
                    _close_all([wake_r, wake_w], listener, conn, *children.values())
                    code = _become_fork_server(request, fds)
                except BaseException:
                    traceback.print_exc()
                finally:
                    os._exit(code)
            _close_all(fds)
            try:
                conn.send(json.dumps({"pid": pid}).encode())
            except OSError:   # the replica is gone already; its fork-server follows it
                pass
            children[pid] = conn
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if (conn := children.pop(pid, None)) is not None:
                try:
                    conn.send(json.dumps({"code": os.waitstatus_to_exitcode(status)}).encode())
                except OSError:
                    pass
                conn.close()


def main() -> int:
    exit_with_parent()   # the zygote ends with the Coach process that started it
    listener = socket.socket(fileno=int(os.environ.pop(LISTEN_FD_ENV)))
    warm_up()
    serve(listener)
    return 0


if __name__ == "__main__":
    sys.exit(main())
