"""Run each role function replica as a local processor process on loopback.

Replicas are plain child processes of Coach (`coach.backends.local.processor`), one per
(job, role, index), invoked over HTTP with httpx. They exit with Coach and are torn down
with their job, so no function outlives the run that needed it. Their fork-servers are
forked from one zygote per function environment (`coach.roles.zygote`), which imports MXNet
once for every replica of every job this process runs.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import httpx
import yaml

from coach.backends.base import NO_ANSWER, Capacity, Invocation, Placement
from coach.errors import BackendError, CoachError, SpecError
from coach.models.limit import USER_CODE_LIMIT_ENV, user_code_limit
from coach.ports import free_port
from coach.roles.protocol import READY_PATH, ROLES
from coach.roles.runner import PARENT_ENV
from coach.roles.zygote import SOCKET_ENV, start_zygote

FUNCTIONS_DIR = Path(__file__).resolve().parents[3] / "functions"
START_TIMEOUT_S = 60.0
READY_TIMEOUT_S = 300.0   # a new replica's `import mxnet`: 2-10 s here, more on a machine short of memory
READY_POLL_S = 0.1
STOP_POLL_S = 0.25   # how often a replica's start checks for a stop
STOP_TIMEOUT_S = 5.0


@dataclass
class _Replica:
    proc: subprocess.Popen
    port: int


@dataclass
class _Zygote:
    proc: subprocess.Popen
    socket: str


@dataclass
class _Job:
    replicas: dict[str, list[_Replica]] = field(default_factory=lambda: {r: [] for r in ROLES})
    idle: dict[str, list[_Replica]] = field(default_factory=lambda: {r: [] for r in ROLES})


class LocalBackend:
    """The embedded backend: everything on this machine, ps-lite traffic on 127.0.0.1."""

    name = "local"
    keep_warm = True   # replicas scaled away stay warm for the next epoch

    def __init__(self, cpu: float | None = None, memory_gib: float | None = None,
                 functions_dir: Path | None = None, log_dir: Path | None = None) -> None:
        total_mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        self.capacity = Capacity(cpu=float(cpu or os.cpu_count() or 1),
                                 memory_gib=float(memory_gib or round(total_mem * 0.8, 1)))
        self.functions_dir = Path(os.environ.get("COACH_FUNCTIONS_DIR", functions_dir or FUNCTIONS_DIR))
        for role in ROLES:
            if not (self.functions_dir / role / "function.yaml").is_file():
                raise BackendError(f"{self.functions_dir / role}: no function.yaml; set COACH_FUNCTIONS_DIR "
                                   "to the repository's functions/ folder")
        self.log_dir = log_dir
        self._configs: dict[str, dict[str, Any]] = {}
        worker_env = self._function_env("worker")
        try:   # read by every worker: a bad value would fail each epoch's attempts
            user_code_limit(dict(os.environ, **worker_env))
        except SpecError as e:
            if USER_CODE_LIMIT_ENV not in worker_env:
                raise
            raise SpecError(str(self.functions_dir / "worker" / "function.yaml"), f"spec.env {USER_CODE_LIMIT_ENV}",
                            e.problem) from None
        self._closed = False
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.Lock()
        self._zygotes: dict[tuple[tuple[str, str], ...], _Zygote] = {}
        self._zygote_lock = threading.Lock()
        self._http = httpx.Client(limits=httpx.Limits(max_connections=256, max_keepalive_connections=64))

    # -- lifecycle -------------------------------------------------------------------------
    def _function_config(self, role: str) -> dict[str, Any]:
        """The role's function.yaml, read once."""
        if role not in self._configs:
            self._configs[role] = yaml.safe_load((self.functions_dir / role / "function.yaml").read_text())
        return self._configs[role]

    def _function_env(self, role: str) -> dict[str, str]:
        """The plain `value` entries of the function's `spec.env` (as Nuclio would set them);
        `valueFrom` entries (the pod IP) have their local meaning set by the caller."""
        return {e["name"]: str(e["value"]) for e in self._function_config(role)["spec"].get("env", [])
                if "value" in e}

    def _zygote(self, env: dict[str, str]) -> str | None:
        """The socket of the zygote for replicas with this environment, started on first use and
        again if it died; None if none can start (each replica then imports MXNet itself)."""
        key = tuple(sorted(env.items()))
        with self._zygote_lock:
            if self._closed:   # shutting down: the replica being started is stopped anyway
                return None
            z = self._zygotes.get(key)
            if z is not None and z.proc.poll() is None:
                return z.socket
            log: Any = subprocess.DEVNULL
            if self.log_dir is not None:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                log = open(self.log_dir / "zygote.log", "ab")
            try:
                proc, path = start_zygote(env, log)
            except OSError:   # e.g. no more processes: each replica imports MXNet itself
                return None
            finally:
                if log is not subprocess.DEVNULL:
                    log.close()
            self._zygotes[key] = _Zygote(proc, path)
            return path

    def prewarm(self) -> None:
        """Start the zygotes now, so that their import of MXNet (a second) overlaps what the
        caller does before its first deploy: `coach submit` loading the job loop and scipy and
        recording the jobs, 0.6 s, all before the first deploy until session 38."""
        for role in ROLES:
            self._zygote(self._replica_env(role))

    def _replica_env(self, role: str) -> dict[str, str]:
        return dict(os.environ, **self._function_env(role), DMLC_NODE_HOST="127.0.0.1", PYTHONUNBUFFERED="1")

    def _start(self, job_id: str, role: str) -> subprocess.Popen:
        env = self._replica_env(role)
        if zygote := self._zygote(env):
            env[SOCKET_ENV] = zygote
        env[PARENT_ENV] = str(os.getpid())
        stderr: Any = subprocess.DEVNULL
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            stderr = open(self.log_dir / f"{job_id}-{role}.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", "coach.backends.local.processor",
                                 str(self.functions_dir / role)], stdout=subprocess.PIPE,
                                stderr=stderr, env=env, start_new_session=True)
        if stderr is not subprocess.DEVNULL:
            stderr.close()
        return proc

    def _await_port(self, proc: subprocess.Popen, role: str, should_stop: Callable[[], bool]) -> int:
        """The port a new replica listens on, once its handler is loaded ("listening PORT"; its
        fork-server goes on importing MXNet). Under a second here, up to START_TIMEOUT_S on a busy
        machine: a stop or a shutdown meanwhile ends the wait at once, not when the replica is ready."""
        assert proc.stdout is not None
        ready, end = [], time.monotonic() + START_TIMEOUT_S
        while not ready and time.monotonic() < end:
            if self._closed:
                raise BackendError("the local backend is shut down (interrupted)")
            if should_stop():
                raise BackendError(f"stopped by request while a local {role} function started")
            ready, _, _ = select.select([proc.stdout], [], [], min(STOP_POLL_S, max(0.0, end - time.monotonic())))
        line = proc.stdout.readline().decode().strip() if ready else ""
        if not line.startswith("listening "):
            self._stop(proc)
            why = f"exit code {proc.returncode}" if ready else f"no answer in {START_TIMEOUT_S:.0f} s"
            raise BackendError(f"local {role} function did not start ({why}); see {self.log_dir or 'its stderr'}")
        return int(line.split()[1])

    def _await_ready(self, fresh: list[tuple[str, _Replica]], should_stop: Callable[[], bool]) -> None:
        """Until every new replica serves an event at once (its fork-server has imported MXNet),
        as a Nuclio replica takes events only once its handler has loaded. Invoked before, the
        roles already warm waited in their ps-lite group for the new one's import, and were
        charged for it: an epoch grown by one server cost 4.4× its prediction and overspent the
        job's budget by three epochs' worth."""
        waiting, end = list(fresh), time.monotonic() + READY_TIMEOUT_S
        while waiting:
            if should_stop():
                raise BackendError(f"stopped by request while a local {waiting[0][0]} function started")
            still = []
            for role, replica in waiting:
                try:
                    if self._closed:
                        raise RuntimeError
                    r = self._http.get(f"http://127.0.0.1:{replica.port}{READY_PATH}", timeout=10)
                except RuntimeError:   # a Ctrl-C's close() closes the client too, perhaps since the check
                    raise BackendError("the local backend is shut down (interrupted)") from None
                except httpx.HTTPError as e:
                    raise BackendError(f"local {role} function stopped answering while it started "
                                       f"({type(e).__name__}); see {self.log_dir or 'its stderr'}") from None
                if r.status_code == 500:
                    raise BackendError(f"local {role} function did not start: {r.text}; see "
                                       f"{self.log_dir or 'its stderr'}")
                if r.status_code != 200:
                    still.append((role, replica))
            waiting = still
            if waiting and time.monotonic() > end:
                raise BackendError(f"local {waiting[0][0]} function was not ready in {READY_TIMEOUT_S:.0f} s "
                                   f"(importing MXNet); see {self.log_dir or 'its stderr'}")
            if waiting:
                time.sleep(READY_POLL_S)

    @staticmethod
    def _stop(proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def deploy(self, job_id: str, group: Mapping[str, int], placement: Placement = Placement(),
               on_wait: Callable[[str], None] | None = None,
               should_stop: Callable[[], bool] = lambda: False) -> str | None:
        """Scale each role to `group[role]` replicas, starting the missing ones side by side.
        Replicas scaled away stay warm (idle, not invocable) until the job is torn down, like
        functions that have not yet scaled to zero, unless `keep_warm` is off."""
        missing: dict[str, int] = {}
        with self._lock:
            if self._closed:
                raise BackendError("the local backend is shut down (interrupted)")
            job = self._jobs.setdefault(job_id, _Job())
            retired: list[_Replica] = []
            for role, replicas in group.items():
                for pool in (job.replicas, job.idle):
                    for dead in (r for r in pool[role] if r.proc.poll() is not None):
                        dead.proc.wait()
                    pool[role] = [r for r in pool[role] if r.proc.poll() is None]
                current = job.replicas[role]
                while len(current) < replicas and job.idle[role]:
                    current.append(job.idle[role].pop())
                (job.idle[role] if self.keep_warm else retired).extend(current[replicas:])
                del current[replicas:]
                missing[role] = replicas - len(current)
        for r in retired:
            self._stop(r.proc)
        started = [(role, self._start(job_id, role)) for role, n in missing.items() for _ in range(n)]
        try:
            fresh = [(role, _Replica(p, self._await_port(p, role, should_stop))) for role, p in started]
            self._await_ready(fresh, should_stop)
        except BaseException:   # also a store error from should_stop, a Ctrl-C: none is registered yet
            for _, p in started:
                self._stop(p)
            raise
        with self._lock:
            if not self._closed and job_id in self._jobs:
                for role, r in fresh:
                    self._jobs[job_id].replicas[role].append(r)
                return None
        for _, r in fresh:   # closed or torn down meanwhile: these must not outlive it
            self._stop(r.proc)
        raise BackendError("the local backend is shut down (interrupted)")

    def invoke(self, job_id: str, role: str, replica: int, payload: dict[str, Any],
               timeout_s: float) -> Invocation:
        with self._lock:
            replicas = self._jobs.get(job_id, _Job()).replicas[role]
            if replica >= len(replicas):
                raise BackendError(f"{job_id}: no {role} replica {replica} deployed")
            port = replicas[replica].port
        try:
            r = self._http.post(f"http://127.0.0.1:{port}/", json=payload, timeout=timeout_s,
                                headers={"X-Nuclio-Invoke-Timeout": f"{int(timeout_s)}s"})
        except httpx.HTTPError as e:
            return Invocation(NO_ANSWER, {"error": f"{role} function unreachable: {type(e).__name__}: {e}"})
        try:
            body = r.json()
        except ValueError:
            body = {"error": r.text[:500]}
        return Invocation(r.status_code, body if isinstance(body, dict) else {"error": str(body)})

    def ps_root(self, job_id: str) -> tuple[str, int, str]:
        return "127.0.0.1", free_port(), "127.0.0.1"

    def teardown(self, job_id: str) -> None:
        with self._lock:
            job = self._jobs.pop(job_id, None)
        if job is not None:
            for pool in (job.replicas, job.idle):
                for reps in pool.values():
                    for r in reps:
                        self._stop(r.proc)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        for job_id in list(self._jobs):
            try:
                self.teardown(job_id)
            except CoachError:   # a cluster gone: a Ctrl-C then read "progress stopped (…); the jobs go on"
                pass   # its pods, if any are left, are a dead run's: the next submit clears them
        with self._zygote_lock:   # after the replicas: their fork-servers' ends are reported by it
            for z in self._zygotes.values():
                if z.proc.poll() is None:
                    os.killpg(z.proc.pid, signal.SIGKILL)
                z.proc.wait()
            self._zygotes.clear()
        self._http.close()
