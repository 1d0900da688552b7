"""The runtime behind every role function's Nuclio handler.

One function replica serves one event at a time (HTTP trigger with one worker). It keeps a
fork-server that has already imported MXNet (see runner.py); for each event a fresh role
process is forked, and the handler watches four things until it ends: the process exiting,
the task's wall-clock deadline, the attempt's abort marker (written by the job loop when
another process of the same epoch failed, since a ps-lite group whose member died hangs
forever), and, for a scheduler or server, the marker saying every worker has answered
(then it has nothing left to serve, and is ended with a success). Whatever happens, the
role process is gone when the handler answers.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from coach.roles import attempt_files
from coach.roles.protocol import EpochTask, EventError, parse_task
from coach.roles.runner import PARENT_ENV
from coach.roles.zygote import SOCKET_ENV, Forked

POLL_S = 0.05
KILL_GRACE_S = 10.0   # a killed role must be reported finished within this
ABORT_READ_BYTES = 4096   # an abort marker's reason is a line the job loop wrote


def _abort_reason(abort: Path) -> str:
    """What the abort marker says, if it is a file the job loop could have written: a folder
    raised IsADirectoryError out of the watch, and a FIFO or /dev/zero blocked or filled memory."""
    try:
        if not stat.S_ISREG(abort.stat().st_mode):
            return ""
        with open(abort, "rb") as f:
            return f.read(ABORT_READ_BYTES).decode("utf-8", errors="replace").strip()
    except OSError:   # removed meanwhile, unreadable
        return ""


class ForkServer:
    """The replica's fork-server (`coach.roles.runner`), which forks one role process per event."""

    def __init__(self) -> None:
        self._adopt(_start_fork_server())
        self.ready_at: float | None = None   # when MXNet was imported (time.monotonic())

    def _adopt(self, proc: subprocess.Popen | Forked) -> None:
        self.proc = proc
        assert proc.stdout is not None
        self._out = proc.stdout.fileno()
        os.set_blocking(self._out, False)
        self._buffer = b""
        self._closed = False   # its stdout has ended: `wait` sleeps instead
        self._poll = select.poll()   # poll, not select: no limit on the descriptor's number
        self._poll.register(self._out, select.POLLIN)

    def alive(self) -> bool:
        if self.proc.poll() is None:
            return True
        if isinstance(self.proc, Forked) and not self.proc.forked:   # the zygote ended before it forked one
            self.proc.abandon()
            self._adopt(_started_fork_server())
            return True
        return False

    def send(self, task: EpochTask) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(task.to_json().encode() + b"\n")
        self.proc.stdin.flush()

    def events(self) -> list[dict[str, Any]]:
        """Protocol lines that have arrived since the last call (never blocks)."""
        try:
            while chunk := os.read(self._out, 65536):
                self._buffer += chunk
            self._closed = True
        except BlockingIOError:
            pass
        *lines, self._buffer = self._buffer.split(b"\n")
        found = [json.loads(line) for line in lines if line.strip()]
        for e in found:
            if e["event"] == "ready":
                self.ready_at = e["at"]
        return [e for e in found if e["event"] != "ready"]

    def wait(self, timeout_s: float) -> None:
        """Until the fork-server has said something or `timeout_s` has passed (all of it once its
        output has ended): a role's end is answered when it comes, not at the next poll (25 ms
        sooner per role, on average)."""
        if self._closed:   # an ended pipe would wake the poll at once, over and over
            time.sleep(timeout_s)
        else:
            self._poll.poll(timeout_s * 1000)

    def close(self) -> None:
        if isinstance(self.proc, Forked) and not self.proc.forked:
            self.proc.abandon()   # not forked yet: not waited for (the zygote may still be importing)
            return
        if self.proc.poll() is None:
            _kill_group(self.proc.pid)
        self.proc.wait()


def _start_fork_server() -> subprocess.Popen | Forked:
    """Forked by the local backend's zygote, which has imported MXNet already; else started,
    importing it itself (on Nuclio, or once the zygote is gone)."""
    if path := os.environ.get(SOCKET_ENV):
        try:
            return Forked(path)
        except OSError as e:
            print(f"the zygote at {path} did not answer ({e}); starting a fork-server", file=sys.stderr)
    return _started_fork_server()


def _started_fork_server() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "coach.roles.runner"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=dict(os.environ, **{PARENT_ENV: str(os.getpid())}),
                            start_new_session=True)


def _kill_group(pid: int) -> None:
    """Kill the role process and its group (before its setsid() the group is not yet its own)."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def crash_site(report: str, model_file: str | None = None) -> str:
    """Where a role process died, from its faulthandler report: "Segmentation fault in f (FILE
    line N)", and the innermost frame in the job's model file when that is another; "" if the
    report names no frame. Without it a crash read "killed by SIGABRT" and nothing else.

    Of the report's first fatal error (MXNet's handler aborts after it: a second report): the
    thread that crashed, or, when that is none of Python's (an MXNet engine thread), the thread
    in the model file, else the one faulthandler lists last (the main thread)."""
    first, _, _ = report.partition("\nFatal Python error: ")
    lines = first.splitlines()
    fatal = next((ln.removeprefix("Fatal Python error: ").strip() for ln in lines
                  if ln.startswith("Fatal Python error: ")), "a fatal error")
    threads: list[tuple[bool, list[tuple[str, str, str]]]] = []   # (current?, frames innermost first)
    for ln in lines:
        if ln.startswith(("Current thread ", "Thread ")):
            threads.append((ln.startswith("Current"), []))
        elif threads and (match := _FRAME.match(ln)):
            threads[-1][1].append(match.groups())
    target = os.path.realpath(model_file) if model_file else None

    def in_model(frame: tuple[str, str, str]) -> bool:
        return target is not None and os.path.realpath(frame[0]) == target

    current = next((frames for is_current, frames in threads if is_current and frames), None)
    listed = [frames for _, frames in threads if frames]
    frames = current or next((f for f in listed if any(map(in_model, f))), None) or (listed[-1] if listed else None)
    if frames is None:
        return ""
    where = f"{fatal} in" if current else f"{fatal} in a thread outside Python; Python was in"
    site = f"{where} {frames[0][2]} ({frames[0][0]} line {frames[0][1]})"
    user = next(filter(in_model, frames), None)
    if user is not None and user != frames[0]:
        site += f", called from {user[2]} ({user[0]} line {user[1]})"
    return site


_FRAME = re.compile(r'^\s+File "(.*)", line (\d+|\?\?\?) in (\S+)')


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class FunctionRuntime:
    """What one role function replica keeps between events: its role and a warm process."""

    def __init__(self, role: str) -> None:
        self.role = role
        self._lock = threading.Lock()
        self._server = ForkServer()
        self._role_pid: int | None = None   # the role process of the event being served
        if role == "worker":   # what reading a worker's event imports (numpy): 0.05 s of its first event
            import coach.data.datasets  # noqa: F401

    def readiness(self) -> tuple[int, str]:
        """Whether this replica serves an event at once: (200, ...) once its fork-server has
        imported MXNet, (503, ...) while it imports, (500, why) if it died doing so. Nuclio takes
        events once a replica's handler has loaded; here the import goes on after, so a backend
        waits for this before it invokes: a role whose event came first was charged the wait for
        a new sibling's import (a grown epoch cost 4.4× its predicted cost)."""
        if self._server.ready_at is None and self._lock.acquire(blocking=False):
            try:   # no event is served, so no task was sent: "ready" is all the fork-server says
                self._server.events()
            finally:
                self._lock.release()
        if self._server.ready_at is not None:
            return 200, "ready"
        if not self._server.alive():
            return 500, f"{self.role} fork-server {_describe_exit(self._server.proc.returncode)} while importing MXNet"
        return 503, f"{self.role} fork-server is importing MXNet"

    def handle(self, context: Any, event: Any) -> Any:
        """Run one role of one epoch; answer JSON (200), or an error naming the problem."""
        Response = context.Response
        try:
            task = parse_task(event.body)
            if task.role != self.role:
                raise EventError("role", f"this is the {self.role} function, got {task.role!r}")
        except EventError as e:
            return Response(body=json.dumps({"error": str(e), "field": e.field}),
                            content_type="application/json", status_code=400)
        if not self._lock.acquire(blocking=False):
            return Response(body=json.dumps({"error": "busy: this replica is running another epoch"}),
                            content_type="application/json", status_code=503)
        try:
            status, body = self._run(task, context)
        finally:
            self._lock.release()
        return Response(body=json.dumps(body), content_type="application/json", status_code=status)

    def _run(self, task: EpochTask, context: Any) -> tuple[int, dict[str, Any]]:
        t0 = time.monotonic()
        if not self._server.alive():
            self._server.close()
            self._server = ForkServer()
        server = self._server   # `_watch` may replace a stuck one
        server.send(task)
        status, body = self._watch(task, t0)
        body.setdefault("role", task.role)
        # charged from when the replica could serve: its start-up (importing MXNet) is not the
        # event's, as on Nuclio, where a replica takes events once its handler has loaded;
        # charging it when an event happened to wait for it cost one of two identical jobs 4× more.
        # Never ready (killed or aborted while importing, e.g. by a Ctrl-C): it served nothing
        ready = server.ready_at
        body["function_s"] = 0.0 if ready is None else time.monotonic() - max(t0, ready)
        if task.abort_file and body["function_s"] > 0:
            attempt_files.mark_served(Path(task.abort_file).parent, task.role, body["function_s"])
        if status != 200:
            context.logger.warn(f"{task.job_id} epoch {task.epoch} {task.role}: {body.get('error')}")
        return status, body

    def _watch(self, task: EpochTask, t0: float) -> tuple[int, dict[str, Any]]:
        """Wait for the role process to finish, killing it on deadline, abort or (a scheduler or
        server) once the workers are done.

        The attempt's folder disappears when the job loop is done with the epoch, so an
        event that arrives late (or a marker that vanished) counts as aborted too. Once a
        verdict is reached the role is killed on every poll; if the fork-server has not
        reported it finished KILL_GRACE_S later, the fork-server itself is replaced.
        """
        abort = Path(task.abort_file) if task.abort_file else None
        pid: int | None = None
        pid_file: Path | None = None
        verdict: tuple[int, dict[str, Any]] | None = None
        verdict_at = beat = 0.0
        try:
            while True:
                for ev in self._server.events():
                    if ev["event"] == "started":
                        pid = self._role_pid = ev["pid"]
                        pid_file = self._pid_file(task, pid)
                        beat = time.monotonic()
                    elif ev["event"] == "finished":
                        return verdict or self._finished(task, ev["code"], ev.get("result"), ev.get("crash") or "")
                if not self._server.alive():
                    self._server.events()
                    return 500, {"error": f"{task.role} fork-server {_describe_exit(self._server.proc.returncode)}"}
                if verdict is None:
                    verdict = self._verdict(task, t0, abort)
                    verdict_at = time.monotonic()
                if verdict is not None:
                    if pid is not None:
                        _kill_group(pid)   # the fork-server then reports "finished"
                    if time.monotonic() - verdict_at > KILL_GRACE_S:
                        self._server.close()   # stuck: start afresh for the next event
                        self._server = ForkServer()
                        return verdict
                if pid_file is not None and time.monotonic() - beat >= attempt_files.HEARTBEAT_S:
                    attempt_files.heartbeat(pid_file)   # also while it is being killed: that is served too
                    beat = time.monotonic()
                self._server.wait(POLL_S)
        except BaseException:
            # whatever failed here, the role must not outlive its event: its lines would answer the next
            if pid is not None:
                _kill_group(pid)
            self._server.close()
            self._server = ForkServer()
            raise
        finally:
            self._role_pid = None
            if pid_file is not None:
                pid_file.unlink(missing_ok=True)

    @staticmethod
    def _verdict(task: EpochTask, t0: float, abort: Path | None) -> tuple[int, dict[str, Any]] | None:
        if time.monotonic() - t0 > task.deadline_s:
            return 504, {"error": f"{task.role} exceeded its {task.deadline_s:.0f} s deadline; killed"}
        if abort is not None and (abort.exists() or not abort.parent.exists()):
            return 409, {"error": f"{task.role} aborted: {_abort_reason(abort) or 'the attempt was abandoned'}"}
        if abort is not None and task.role != "worker" and (abort.parent / attempt_files.WORKERS_DONE).exists():
            return 200, {"role": task.role, "ended": "every worker had answered"}
        return None

    @staticmethod
    def _finished(task: EpochTask, code: int, result: dict[str, Any] | None,
                  crash: str = "") -> tuple[int, dict[str, Any]]:
        if result is not None and "error" in result:
            return 500, {"error": f"{task.role} failed: {result['error']}",
                         "permanent": bool(result.get("permanent")), "resumable": bool(result.get("resumable"))}
        if code == 0 and result is not None:
            return 200, result
        site = crash_site(crash, task.model.get("file"))
        return 500, {"error": f"{task.role} process {_describe_exit(code)} before answering{': ' + site if site else ''}"}

    @staticmethod
    def _pid_file(task: EpochTask, pid: int) -> Path | None:
        """Name the role process next to the abort marker, for the job loop (`attempt_files`),
        operators and tests."""
        if not task.abort_file:
            return None
        key = str(task.shard) if task.role == "worker" else str(pid)
        return attempt_files.mark_running(Path(task.abort_file).parent, task.role, key, pid)

    def close(self) -> None:
        if self._role_pid is not None:
            _kill_group(self._role_pid)
        self._server.close()
