"""The role fork-server: import MXNet once, then fork one fresh process per role of an epoch.

`import mxnet` costs seconds of CPU, and ps-lite membership is fixed per process, so every
epoch needs fresh processes. A function replica therefore keeps one of these alive (on the
local backend forked from the zygote, `zygote.py`, which has imported MXNet already): it imports
MXNet without DMLC_ROLE (so no role starts), then, for each task line on stdin, forks a child
that sets the DMLC environment and only then becomes a scheduler, server or worker. MXNet
registers pthread_atfork handlers for its engine, and nothing has used OpenMP before the fork.

Protocol on stdout (one JSON object per line; model prints go to stderr):
    {"event": "ready"}                       once, after the imports
    {"event": "started", "pid": P}           per task, P leads its own process group
    {"event": "finished", "code": C, "result": {...} | null[, "crash": "..."]}   when P has exited;
                                             `crash`: the Python frames of a fatal signal (faulthandler)
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import select
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from typing import IO, Any

from coach.errors import SpecError
from coach.models.limit import on_native_hang

PARENT_ENV = "COACH_PARENT_PID"


def exit_with_parent(poll_s: float = 1.0, parent: int | None = None) -> None:
    """Exit (with our whole process group) once the parent process is gone.

    PR_SET_PDEATHSIG would fire when the parent *thread* that spawned us ends, and the
    runtime spawns from short-lived request threads, so the parent is watched instead. The
    spawner names itself in COACH_PARENT_PID, so a parent that died before we got here
    counts as gone too. A fork-server the zygote forked (`zygote.py`) is not its replica's
    child: it watches the replica through a pidfd, which also reads as gone once it has died.
    """
    if parent is None:
        parent = int(os.environ.get(PARENT_ENV) or os.getppid())

    def watch() -> None:
        if os.getppid() != parent:   # forked by the zygote, or the parent is gone already
            _wait_for_exit(parent, poll_s)
        while os.getppid() == parent:
            time.sleep(poll_s)
        try:
            os.killpg(os.getpgrp(), signal.SIGKILL)
        finally:
            os._exit(1)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


def _wait_for_exit(pid: int, poll_s: float) -> None:
    """Until `pid`, not our child, has died (a zombie counts as dead through a pidfd)."""
    try:
        select.select([os.pidfd_open(pid)], [], [])
        return
    except ProcessLookupError:
        return
    except OSError:   # no pidfds here (an old kernel, a seccomp filter): ask every poll_s
        pass
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            pass
        time.sleep(poll_s)


def _dmlc_env(task: Any) -> dict[str, str]:
    env = {
        "DMLC_ROLE": task.role,
        "DMLC_PS_ROOT_URI": task.root_uri,
        "DMLC_PS_ROOT_PORT": str(task.root_port),
        "DMLC_NUM_SERVER": str(task.servers),
        "DMLC_NUM_WORKER": str(task.workers),
    }
    if task.node_host:
        env["DMLC_NODE_HOST"] = task.node_host
    return env


SCHEDULER_WAIT_S = 5.0


def await_scheduler(host: str, port: int, within_s: float = SCHEDULER_WAIT_S) -> bool:
    """Whether the ps-lite scheduler's port took a connection within `within_s`.

    ps-lite connects to the scheduler through ZeroMQ, which tries a refused connection again
    only 100 ms later, and all roles of an epoch start at once: the servers and workers that
    came before the scheduler had bound its port lost those 100 ms on every epoch (0.2 s from
    a worker's start to its kvstore, 0.1 s once they wait here). Past `within_s`, ZeroMQ's own
    retries go on as before."""
    end = time.monotonic() + within_s
    while True:
        try:   # a connection dropped on the way (not refused) is given up soon, and tried again
            socket.create_connection((host, port), timeout=max(0.01, min(0.1, end - time.monotonic()))).close()
            return True
        except OSError:
            if time.monotonic() >= end:
                return False
            time.sleep(0.002)


def _run_role(task: Any) -> dict[str, Any]:
    """Inside the forked child: become the task's role and answer its measurements."""
    from coach.training import worker

    t0 = time.monotonic()
    os.environ.update(_dmlc_env(task))
    try:
        if task.role != "scheduler":
            await_scheduler(task.root_uri, task.root_port)
        if task.role == "worker":
            result = worker.run_worker(task)
        else:
            from mxnet.kvstore import kvstore_server

            # returns via sys.exit once the group shuts down; in a group the job loop watches,
            # the function kills it once the workers are done (they skip the shutdown)
            kvstore_server._init_kvstore_server_module()
            result = {"role": task.role}
    except SystemExit as e:
        _keep(e, task)
        if task.role == "worker":   # only a server leaves this way on its own; a worker through user code
            where = _user_frame(e, task) or "the training"
            result = {"role": task.role, "error": f"{where} called sys.exit({e.code!r}) in a worker",
                      "permanent": True}
        else:
            result = {"role": task.role}
    except Exception as e:  # reported to the caller as a failed role, with the reason
        _keep(e, task)
        traceback.print_exc()
        from coach.errors import CheckpointError, TaskError, UserCodeError, one_line

        result = {"role": task.role, "error": f"{type(e).__name__}: {e}",   # the same code, file or task would fail again
                  "permanent": isinstance(e, (UserCodeError, CheckpointError, TaskError)),
                  "resumable": isinstance(e, CheckpointError)}   # once the file is restored
        if not isinstance(e, UserCodeError) and (where := _user_frame(e, task)):
            # raised in the user's own network code: the same code would fail again
            first = one_line(e)
            result.update(error=f"{where}: {type(e).__name__}: {first}", permanent=True)
    if not task.abort_file:
        # free the kvstore now: its destructor runs ps-lite's shutdown (barriers, the servers'
        # stop, closing the sockets). A group the job loop watches (it has an attempt folder)
        # skips it: its functions end the scheduler and servers once every worker has answered
        # (`attempt_files.WORKERS_DONE`), which saved the 0.3 s the shutdown took per epoch.
        gc.collect()
    result["wall_s"] = time.monotonic() - t0
    return result


_KEPT: list[BaseException] = []


def _keep(failure: BaseException, task: Any) -> None:
    """Keep a failed role's frames, and the kvstore in them, until the process ends (`os._exit`),
    in a group the job loop watches. Freed with the failure, the kvstore's destructor waits at
    ps-lite's exit barrier for the other workers, which wait in their own: a worker whose model
    failed once its rendezvous had formed never answered, and its epoch ran to the deadline. The
    job loop ends the group once one role has answered."""
    if task.abort_file:
        _KEPT.append(failure)


def _user_frame(e: BaseException, task: Any) -> str | None:
    """"FILE line N" of the innermost frame of `e` in the job's model file, if it passed there."""
    file = (getattr(task, "model", None) or {}).get("file")
    if not file:
        return None
    target = os.path.realpath(file)
    line = None
    for frame, lineno in traceback.walk_tb(e.__traceback__):
        if os.path.realpath(frame.f_code.co_filename) == target:
            line = lineno
    return None if line is None else f"{file} line {line}"


_answering = threading.Lock()   # taken once per role process, never released: one answer


def _answer_and_exit(write_fd: int, result: dict[str, Any], code: int) -> None:
    """Answer and end the role process, from any thread: the main thread when the role is done,
    or the user-code watchdog while the main thread is stuck. Whoever comes second waits here
    until the first has ended the process."""
    _answering.acquire()
    os.write(write_fd, (json.dumps(result) + "\n").encode())
    os._exit(code)


CRASH_REPORT_BYTES = 16384   # a fatal error's report beyond this is cut (Python 3.11 adds every extension module)


def _crash_file() -> IO[bytes] | None:
    """Where a role process's faulthandler writes, for its fork-server to read back; None if no
    temporary file can be made (a full disk): the report then goes to the log alone."""
    try:
        return tempfile.TemporaryFile()
    except OSError:
        return None


def _fork_role(task: Any, emit: Any) -> None:
    crash = _crash_file()   # a fatal signal's Python frames (a segfault in MXNet or in a model's native code)
    read_fd, write_fd = os.pipe()
    server = os.getpid()
    pid = os.fork()
    if pid == 0:  # the role process
        try:
            os.close(read_fd)
            os.setsid()
            # MXNet's own handler only says "Segmentation fault: 11" (it runs after this one)
            faulthandler.enable(file=crash or sys.stderr, all_threads=True)
            exit_with_parent(parent=server)   # threads do not survive fork: watch anew
            on_native_hang(lambda message: _answer_and_exit(
                write_fd, {"role": task.role, "error": f"UserCodeError: {message}", "permanent": True}, 3))
            result = _run_role(task)
            _answer_and_exit(write_fd, result, 0 if "error" not in result else 3)
        finally:
            os._exit(3)   # only if answering failed
    os.close(write_fd)
    emit({"event": "started", "pid": pid})
    chunks = []
    while chunk := os.read(read_fd, 65536):
        chunks.append(chunk)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    data = b"".join(chunks)
    try:
        result = json.loads(data) if data.endswith(b"\n") else None
    except ValueError:   # cut short or garbled: as if it had not answered
        result = None
    report = ""
    if crash is not None:
        with crash:
            crash.seek(0)
            report = crash.read(CRASH_REPORT_BYTES).decode(errors="replace")
    if report:
        sys.stderr.write(report)   # into the replica's log
    emit({"event": "finished", "code": os.waitstatus_to_exitcode(status), "result": result,
          **({"crash": report} if report else {})})


# what `import mxnet` imports only if it can, for parts Coach never uses
OPTIONAL_IMPORTS = ("sklearn", "scipy.stats")


def import_mxnet() -> None:
    """`import mxnet`, the expensive part, paid once per replica: without its optional imports.

    mxnet.model imports sklearn (and with it pandas) only as the base class of its legacy
    FeedForward, and mxnet.contrib.quantization scipy.stats only for entropy calibration;
    both fall back when the import fails. Together they were 0.9 s of the import's 2.8 s of CPU
    per replica, every job paying it for each of its replicas before its first epoch. Both stay
    importable afterwards, for the digits dataset and for the user's own model code.
    """
    hidden = [name for name in OPTIONAL_IMPORTS if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None   # importing it raises ImportError meanwhile
    try:
        import mxnet  # noqa: F401
    finally:
        for name in hidden:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


def warm_up() -> None:
    """What a fork-server has loaded before it says it is ready: MXNet (no role may start during
    its import) and the training code. In a fork-server the zygote forked, all of it is there."""
    for var in ("DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT"):
        os.environ.pop(var, None)
    import_mxnet()
    tempfile.gettempdir()   # found once (it writes a probe file), not on a role's first fork
    from coach.data import load_dataset  # noqa: F401
    from coach.roles.protocol import parse_task  # noqa: F401
    from coach.training import worker  # noqa: F401


def main() -> int:
    exit_with_parent()  # a role process never outlives the function replica that started it
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def emit(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj) + "\n")

    warm_up()
    from coach.data import load_dataset
    from coach.roles.protocol import parse_task

    emit({"event": "ready", "at": time.monotonic()})   # the system-wide clock the replica reads too

    for line in sys.stdin:
        task = parse_task(line)
        if task.role == "worker":  # load once here; every forked worker shares it copy-on-write
            try:
                load_dataset(task.dataset["name"], {k: v for k, v in task.dataset.items() if k != "name"})
            except Exception as e:   # this event fails, the replica stays warm
                emit({"event": "finished", "code": 3, "result": {
                    "role": task.role, "error": f"dataset {task.dataset}: {type(e).__name__}: {e}",
                    # options a job file could not give fail again; a full memory or a disk may not
                    "permanent": isinstance(e, (SpecError, KeyError, TypeError, ValueError)),
                    # a data folder moved, unmounted or damaged can be restored: then a resume goes on
                    "resumable": isinstance(e, SpecError) and e.field == "path"}})
                continue
        _fork_role(task, emit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
