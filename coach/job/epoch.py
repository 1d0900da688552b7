"""Run one epoch of one job on a backend: every role at once, bounded in time, retried whole.

A ps-lite group whose member died hangs forever, so an attempt ends as soon as any role
fails: the abort marker is written, every other role's handler kills its process, and the
attempt is retried from the last checkpoint with fresh processes (a new root port too). It
succeeds once every worker has answered: the scheduler and servers are then ended through the
workers-done marker, without ps-lite's shutdown.
"""

from __future__ import annotations

import math
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from coach.backends.base import NO_ANSWER, Backend, Invocation, Placement
from coach.errors import BackendError, Diverged, EpochFailed, FailsAgain, OverBudget
from coach.roles import attempt_files
from coach.roles.protocol import ROLES

HTTP_MARGIN_S = 30.0   # the HTTP call outlives the role's own deadline by this much
ATTEMPTS = "attempts"   # under the job's folder: one folder per epoch being run, one per attempt in it
DEPLOY_RETRY_S = 1.0   # pause before retrying an epoch whose functions could not be deployed; doubles each time


@dataclass(frozen=True)
class EpochPlan:
    """What to run: the loop decides it, the runner only executes it."""

    job_id: str
    phase: str
    epoch: int
    workers: int
    servers: int
    seed: int
    limit: int | None              # samples in a tuning mini-epoch; None = the whole training set
    deadline_s: float
    checkpoint_in: str | None
    checkpoint_out: str
    task: dict[str, Any]           # dataset, model, hyper (the job's constants)
    placement: Placement = Placement()   # how the functions ask a cluster for room
    keep: Mapping[str, int] = field(default_factory=dict)   # replicas kept ready beyond those this epoch invokes
    first: int = 0                 # the samples start here in the epoch's permutation (after tuning's share)
    probe: int = 0                 # the first samples, measured on server 0 alone as (workers, 1): `Probe`

    @property
    def label(self) -> str:
        return f"{self.phase} epoch {self.epoch} on ({self.workers}, {self.servers})"


@dataclass(frozen=True)
class Probe:
    """An epoch's first `EpochPlan.probe` samples, trained through server 0 alone
    (`coach.training.keys`) and measured as a tuning mini-epoch on (workers, 1) would be."""

    train_loss: float
    val_loss: float                # on a mini-epoch's share of the held-out split
    samples: int
    wall_s: float                  # from the first invocation until its slowest worker had validated
    samples_per_s: float


@dataclass
class EpochOutcome:
    """A successful epoch, measured (after its probe, if it had one)."""

    train_loss: float
    val_loss: float
    samples: int
    wall_s: float                  # from the first invocation to the last answer
    samples_per_s: float           # steady training rate of the group (past each worker's warm-up steps)
    function_s: dict[str, float]   # per role, summed over replicas and attempts (for cost)
    retries: int
    checkpoint: str
    folder: str = ""               # the epoch's attempt folder, which recording the epoch settles
    probe: Probe | None = None


class EpochRunner:
    """Executes EpochPlans on one backend; knows nothing about losses, budgets or planning."""

    def __init__(self, backend: Backend, work_dir: Path, max_retries: int,
                 on_event: Callable[[str, str], None], on_wait: Callable[[str], None] = lambda _: None) -> None:
        self.backend = backend
        self.work_dir = work_dir
        self.max_retries = max_retries
        self.on_event = on_event
        self.on_wait = on_wait   # the job's message while its functions wait for room

    def run(self, plan: EpochPlan, should_stop: Callable[[], bool] = lambda: False,
            may_retry: Callable[[dict[str, float], int], str | None] = lambda *_: None,
            on_sent: Callable[[], None] = lambda: None) -> EpochOutcome:
        """Run the epoch, retried whole up to max_retries times while `may_retry(function_s so far,
        attempts)` names no reason not to, calling `on_sent()` once an attempt's events are on their
        way. Every attempt's folder is kept in one folder of the epoch (`folder` of the outcome or
        of the EpochFailed), which the caller removes once it has recorded the charge: a run killed
        before that leaves it for the next run (`abandoned`)."""
        function_s = dict.fromkeys(ROLES, 0.0)
        errors: list[str] = []
        epoch_dir = self.work_dir / ATTEMPTS / f"{plan.phase}-{plan.epoch:04d}-{uuid.uuid4().hex[:6]}"
        for attempt in range(self.max_retries + 1):
            try:
                if attempt and (why := may_retry(function_s, attempt)):
                    raise OverBudget(f"{plan.phase} epoch {plan.epoch} failed {attempt} times and is not "
                                     f"tried again: {why}; last error: {errors[-1]}")
                if should_stop():   # also an attempt a stop cut short: no retry, but its time is paid
                    raise EpochFailed(f"{plan.phase} epoch {plan.epoch}: stopped by request")
                outcome, error = self._attempt(plan, epoch_dir / str(attempt), attempt, function_s, should_stop,
                                               on_sent)
                if outcome is None and should_stop():
                    raise EpochFailed(f"{plan.phase} epoch {plan.epoch}: stopped by request")
            except EpochFailed as e:
                e.function_s, e.folder = function_s, str(epoch_dir)
                raise
            if outcome is not None:
                outcome.folder = str(epoch_dir)
                return outcome
            errors.append(error)
            self.on_event("retry" if attempt < self.max_retries else "epoch_failed",
                          f"{plan.phase} epoch {plan.epoch} attempt {attempt + 1} failed: {error}")
            if error.startswith("deploy:") and attempt < self.max_retries:
                # an apiserver that is gone, or a full node, is not back a millisecond later: all the
                # retries failed within one second
                _pause(DEPLOY_RETRY_S * 2 ** attempt, should_stop)
        failed = EpochFailed(f"{plan.phase} epoch {plan.epoch} failed {self.max_retries + 1} times; "
                             f"last error: {errors[-1]}")
        failed.function_s, failed.folder = function_s, str(epoch_dir)   # failed attempts cost money too
        raise failed

    def _attempt(self, plan: EpochPlan, attempt_dir: Path, attempt: int, function_s: dict[str, float],
                 should_stop: Callable[[], bool], on_sent: Callable[[], None]) -> tuple[EpochOutcome | None, str]:
        try:
            group = {"scheduler": 1, "server": plan.servers, "worker": plan.workers}
            group = {role: max(n, plan.keep.get(role, 0)) for role, n in group.items()}
            placed = self.backend.deploy(plan.job_id, group, plan.placement,
                                         on_wait=lambda why: self.on_wait(why or plan.label), should_stop=should_stop)
            if placed:
                self.on_event("placed", f"{plan.phase} epoch {plan.epoch}: {placed}")
        except BackendError as e:
            return None, f"deploy: {e}"
        attempt_id = f"{attempt_dir.parent.name}-{attempt}"
        attempt_dir.mkdir(parents=True, exist_ok=True)
        abort = attempt_dir / "abort"
        uri, port, node_host = self.backend.ps_root(plan.job_id)
        base = dict(plan.task, job_id=plan.job_id, epoch=plan.epoch, attempt=attempt_id, root_uri=uri,
                    root_port=port, node_host=node_host, workers=plan.workers, servers=plan.servers,
                    deadline_s=plan.deadline_s, abort_file=str(abort), seed=plan.seed, limit=plan.limit,
                    first=plan.first, probe=plan.probe, checkpoint_in=plan.checkpoint_in,
                    checkpoint_out=plan.checkpoint_out)
        calls = [("scheduler", 0, dict(base, role="scheduler"))]
        calls += [("server", i, dict(base, role="server")) for i in range(plan.servers)]
        calls += [("worker", i, dict(base, role="worker", shard=i)) for i in range(plan.workers)]
        t0 = time.monotonic()
        answers: list[tuple[str, Invocation, float]] = []   # (role, answer, when it came)
        first_error, permanent, resumable = "", False, False
        workers_ok = 0   # all of them: the checkpoint is complete, and the rest of the group is only ended
        with ThreadPoolExecutor(len(calls)) as pool:
            futures = {pool.submit(self.backend.invoke, plan.job_id, role, i, payload,
                                   plan.deadline_s + HTTP_MARGIN_S): role for role, i, payload in calls}
            on_sent()
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in done:
                    role = futures[f]
                    try:
                        inv = f.result()
                    except Exception as e:  # a backend bug must not hang the group
                        inv = Invocation(NO_ANSWER, {"error": f"{type(e).__name__}: {e}"})
                    answers.append((role, inv, time.time()))
                    if inv.ok and role == "worker":
                        workers_ok += 1
                        if workers_ok == plan.workers:
                            attempt_files.mark_workers_done(attempt_dir)   # the scheduler and servers are ended
                    if not inv.ok and not first_error and workers_ok < plan.workers:   # after: charged, not an error
                        first_error = f"{role}: {inv.error}"
                        permanent, resumable = bool(inv.body.get("permanent")), bool(inv.body.get("resumable"))
                        abort.write_text(first_error)   # the rest of the group stops now
        wall = time.monotonic() - t0
        # what the functions left in the folder covers answers that were lost: read before the
        # pid files, so that a function finishing in between is counted in neither, not in both
        left = attempt_files.served(attempt_dir)
        started = {role: [r.start for r in rs] for role, rs in attempt_files.running(attempt_dir).items()}
        for role in function_s:
            answered = sum(float(inv.body["function_s"]) for r, inv, _ in answers
                           if r == role and "function_s" in inv.body)
            function_s[role] += max(answered, left.get(role, 0.0))   # more left: an answer was lost after it finished
        for role, inv, at in answers:
            if "function_s" not in inv.body and inv.status == NO_ANSWER:   # killed, or the call was lost
                function_s[role] += _served(started.get(role, []), at)
            # else the function refused the event (busy, a bad event) before any role process: nothing
        if first_error and permanent:
            failed = FailsAgain(f"{plan.phase} epoch {plan.epoch} failed: {first_error} "
                                "(not retried: it would fail the same way every time)")
            failed.resumable = resumable
            raise failed
        if first_error:
            return None, first_error
        workers = [inv.body for role, inv, _ in answers if role == "worker"]
        chief = [w for w in workers if w.get("rank") == 0]
        if len(chief) != 1 or not chief[0].get("checkpoint"):
            return None, "no worker answered as rank 0 with a checkpoint"
        probe = None
        if plan.probe:
            parts = [w.get("probe") for w in workers]
            if not all(isinstance(p, dict) and "after_s" in p for p in parts):
                return None, "a worker answered without its probe's measurements"
            if (error := _unmeasured(parts)) is not None:
                return None, f"probe: {error}"
            samples, train_loss, val_loss = _losses(parts, plan, "the probe of ")
            probe_s = max(0.0, wall - max(float(p["after_s"]) for p in parts))   # after_s >= 0: within wall
            probe = Probe(train_loss, val_loss, samples, probe_s, _steady_rate(parts))
            wall -= probe_s
        if (error := _unmeasured(workers)) is not None:
            return None, error
        samples, train_loss, val_loss = _losses(workers, plan)
        return EpochOutcome(train_loss=train_loss, val_loss=val_loss, samples=samples,
                            wall_s=wall, samples_per_s=_steady_rate(workers),
                            function_s=dict(function_s), retries=attempt,
                            checkpoint=str(chief[0]["checkpoint"]), probe=probe), ""


def _unmeasured(workers: list[dict[str, Any]]) -> str | None:
    """What the workers' answers lack to measure the validation loss (None: nothing)."""
    if any(w.get("val_count") is None for w in workers) or not sum(int(w.get("val_count") or 0) for w in workers):
        return "a worker answered without its share of the validation loss (or the split is empty)"
    return None


def _losses(workers: list[dict[str, Any]], plan: EpochPlan, what: str = "") -> tuple[int, float, float]:
    """Samples, training loss and validation loss of the group, from each worker's share."""
    samples = sum(int(w["samples"]) for w in workers)
    train_loss = sum(float(w["train_loss"]) * int(w["samples"]) for w in workers) / max(1, samples)
    val_loss = sum(float(w["val_sum"]) for w in workers) / sum(int(w["val_count"]) for w in workers)
    if not (math.isfinite(train_loss) and math.isfinite(val_loss)):
        raise Diverged(f"{what}{plan.phase} epoch {plan.epoch} diverged: training loss {train_loss}, "
                       f"validation loss {val_loss}; lower the learning rate")
    return samples, train_loss, val_loss


@dataclass(frozen=True)
class Abandoned:
    """Epochs a killed run left unrecorded: what their functions served, and their folders."""

    function_s: dict[str, float]   # per role, as EpochOutcome's
    epochs: list[str]              # "training epoch 3", one per epoch
    folders: list[str]             # those to charge, and those already charged (`settled`), to remove


def abandoned(work_dir: Path, settled: set[str]) -> Abandoned | None:
    """What the epochs of a run killed mid-epoch still owe (None if no folder was left);
    `settled` names the folders whose charge is recorded.

    The caller of `EpochRunner.run` removes an epoch's folder once it has recorded the charge,
    in the transaction that records the folder as settled; so a folder found before a run starts
    is an epoch nobody charged, unless it is settled (the run died before it removed it).
    Answered events left what they charged; a role process still running when the run died is
    charged from its start to its function's last heartbeat (the functions die with the run,
    within seconds), so the figure falls short by up to about 3 s per process (a heartbeat a
    second, and each process of the chain notices its parent gone within a second).
    """
    root = work_dir / ATTEMPTS
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    if not folders:
        return None
    function_s = dict.fromkeys(ROLES, 0.0)
    unpaid = [f for f in folders if f.name not in settled]
    for attempt_dir in (a for folder in unpaid for a in folder.iterdir() if a.is_dir()):
        for role, seconds in attempt_files.served(attempt_dir).items():
            if role in function_s:
                function_s[role] += seconds
        for role, processes in attempt_files.running(attempt_dir).items():
            if role in function_s:
                function_s[role] += sum(max(0.0, p.seen - p.start) for p in processes)
    return Abandoned(function_s, [_epoch_label(f.name) for f in unpaid], [str(f) for f in folders])


def _epoch_label(folder: str) -> str:
    phase, _, rest = folder.partition("-")
    number = rest.split("-", 1)[0]
    return f"{phase} epoch {int(number)}" if number.isdigit() else folder


def _served(starts: list[float], answered_at: float) -> float:
    """Seconds to charge a call whose answer never came while its function still ran (it was
    killed, or the call was lost): from the start of a role process of its role that has not
    answered, so that a replica's `import mxnet`, which the function never charges, is not
    charged here either (a Ctrl-C'd first mini-epoch was charged 3× a whole one); nothing if none
    started. Which of a role's unanswered processes goes with which lost call does not matter to
    the sum but for the seconds between their ends."""
    return max(0.0, answered_at - starts.pop(0)) if starts else 0.0


def _pause(seconds: float, should_stop: Callable[[], bool]) -> None:
    """Sleep, but not past a stop request."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and not should_stop():
        time.sleep(min(0.2, max(0.0, end - time.monotonic())))


def _steady_rate(workers: list[dict[str, Any]]) -> float:
    """Samples per second of the whole group: synchronous workers move at the slowest one's pace."""
    slowest = max(float(w["steady_s"]) for w in workers)
    return sum(int(w["steady_samples"]) for w in workers) / slowest if slowest > 0 else 0.0
