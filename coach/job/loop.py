"""One job from submission to a final status.

    tuning    mini-epochs of equal data on a few (w, s), so speeds are comparable; they train
              the head of training epoch 1, so tuning changes when a job learns, not what; the
              last (w, s) it measures trains the rest of epoch 1 (alone on the capacity)
    training  plan (w, s) → run the epoch on the backend → record → stop rule
    final     succeeded | failed | budget_exhausted | max_epochs | stopped

The stop rule: the validation loss (held-out split, evaluated once per epoch, each worker on its own slice) is
at or below the target for `consecutive` training epochs in a row; each epoch counts once.
Each job runs its own loop in its own thread; jobs meet only in the Coordinator.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from coach.backends.base import Backend, Placement
from coach.data import train_size
from coach.errors import BackendError, CoachError, Diverged, EpochFailed, FailsAgain, OverBudget, SpecError
from coach.estimate import EarlierRun, Eta, epoch_budget, eta, measured_cost
from coach.estimate.history import convergence_of, speed_of
from coach.estimate.progress import progress_of, streak_of, tuned_ahead
from coach.estimate.cost import epoch_cost
from coach.job.coordinator import Coordinator
from coach.job.earlier import NONE_FOUND, describe, find_earlier, speeds_before
from coach.job.epoch import Abandoned, EpochOutcome, EpochPlan, EpochRunner, abandoned
from coach.plan import Allocation, JobDemand, epochs_paid, predicted_epoch_cost
from coach.spec import JobSpec
from coach.state.records import WAIT_KEYS, EpochRecord
from coach.state.store import Store


TUNING_CONFIGS = ((1, 1), (2, 1), (2, 2), (1, 2))   # each step adds at most one function; see tuning_configs
TUNING_WAIT_S = 5.0          # a tuning config that does not fit soon is skipped, not waited for
FIRST_DEADLINE_S = 900.0     # before anything is measured (the replicas' import is the deploy's, not the epoch's)
TRAINING_SEED = 0
SEED_STRIDE = 1_000_000      # the job's `seed` moves every epoch's data order by this much
GAPS = 3                     # the ETA's time between epochs: the median of this run's last GAPS


@dataclass
class JobRun:
    """Everything one job's loop needs; the backend is opaque to it."""

    spec: JobSpec
    job_id: str
    store: Store
    backend: Backend
    coordinator: Coordinator
    work_dir: Path
    stop: threading.Event = field(default_factory=threading.Event)   # set by this process's Ctrl-C


def unpaid(work_dir: Path, store: Store, job_id: str, spec: JobSpec) -> tuple[float, Abandoned | None]:
    """What the job's killed run left unpaid, and where: charged when the job runs next, and
    counted by `coach resume --budget` before it accepts a budget."""
    left = abandoned(work_dir, store.settled(job_id))
    return (measured_cost(left.function_s, spec.resources, spec.prices) if left else 0.0), left


def deadline_for(history: list[EpochRecord], samples: int) -> float:
    """Wall-clock limit of an epoch: generous against noise, finite against hangs."""
    rates = sorted(r.duration_s / max(1, r.samples) for r in history[-6:])
    if not rates:
        return FIRST_DEADLINE_S
    return max(60.0, 4.0 * rates[len(rates) // 2] * samples + 30.0)


def _overheads(history: list[EpochRecord],
               seconds: Callable[[EpochRecord], float] = lambda r: r.duration_s) -> list[float]:
    """Each measured epoch's `seconds` beyond its steady-rate training (start-up, ps-lite,
    checkpoint), sorted; by default its wall time."""
    return sorted(max(0.0, seconds(r) - r.samples / r.samples_per_s) for r in history if r.samples_per_s > 0)


def _charged_overheads(history: list[EpochRecord], spec: JobSpec) -> list[float]:
    """The same, as charged: each record's cost as seconds of all its functions, what the budget
    is judged on. Until session 27 a record's wall time held every new replica's `import mxnet`,
    which is never charged: judged on the wall time, a static job's second epoch was predicted at
    9.9e-05 when its epochs cost about 2e-05, and it stopped `budget_exhausted` with about three
    epochs' worth of budget left."""
    def charged_s(r: EpochRecord) -> float:
        per_second = epoch_cost(r.workers, r.servers, spec.resources, 1.0, spec.prices)
        return r.cost / per_second if per_second > 0 else 0.0

    return _overheads(history, charged_s)


def _median(values: list[float]) -> float:
    """The median of sorted `values` (the upper one of an even count); 0 for none."""
    return values[len(values) // 2] if values else 0.0


def tuning_configs(spec: JobSpec, usable: Callable[[tuple[int, int]], bool] = lambda c: True
                   ) -> list[tuple[int, int]]:
    """What tuning measures, in order, within the job's limits and `usable` (it fits the backend,
    or was measured): (1, 1), (2, 1), (2, 2); (1, 2) only where (2, 2) cannot be. A second server
    is measured with two workers, where its share of the push/pull traffic is larger (Optimus'
    t2·w/s); the speed model can still take a job to (1, 2). Measuring it too cost a start-up
    (about 1.2 s) whenever a second server had sped up two workers by 5%. (1, 1) is left to the
    planner where a job alone measures (2, 1) inside (2, 2)'s epoch 1 (`JobLoop._tune`)."""
    allowed: list[tuple[int, int]] = []
    for w, s in TUNING_CONFIGS:   # (2, 2) before (1, 2): `usable` is not asked about (1, 2) after it
        if w <= spec.max_workers and s <= spec.max_servers and ((w, s) != (1, 2) or (2, 2) not in allowed) \
                and usable((w, s)):
            allowed.append((w, s))
    return allowed


def tuning_chunk(spec: JobSpec, n_train: int) -> int:
    """Samples per tuning mini-epoch: at most `tuning_samples`, and at most one share of
    training epoch 1 per configuration tuned (the last one trains the rest of it: `JobLoop._tune`);
    whole global batches, so that each step is one of a static job's epoch 1 (`shard_steps`).

    Tuning on a permutation of its own, as Coach did until 2026-11-26, trained 4,096 samples
    more than a static job on LeNet/mnist-5k (an extra epoch), on other samples: the two
    trajectories parted from the first step, and whether dynamic or static (2, 2) finished first
    hung on which met the noisy target in a row first (dynamic/static 0.64–1.49 by seed)."""
    chunk = min(spec.tuning_samples, n_train // len(tuning_configs(spec)))
    return chunk - chunk % spec.batch_size if chunk >= spec.batch_size else chunk


def tuned_head(history: list[EpochRecord]) -> int:
    """How many samples of training epoch 1's permutation the tuning mini-epochs trained (0 when
    a mini-epoch drew a permutation of its own: recorded by a Coach before 2026-11-26)."""
    return 0 if tuned_ahead(history) else sum(r.samples for r in history if r.phase == "tuning")


def _trained(history: list[EpochRecord]) -> int:
    """Training epochs done (tuning's mini-epochs are not counted against max_epochs)."""
    return sum(1 for r in history if r.phase == "training")


def between_epochs_s(history: list[EpochRecord], since: float) -> float:
    """The median wall time between the last training epochs that started after `since` (this
    run's): waiting for cores that other jobs hold, fitting, planning. A user waits for it too;
    an ETA of epoch times alone was 2–3× short for two jobs taking turns on the cores."""
    recent = [r for r in history if r.phase == "training" and r.started_at >= since][-GAPS - 1:]
    return _median(sorted(max(0.0, b.started_at - a.finished_at) for a, b in zip(recent, recent[1:])))


def _mini_epoch_cost(history: list[EpochRecord], w: int, s: int, spec: JobSpec) -> float | None:
    """What the next tuning mini-epoch on (w, s) will cost: its samples at the last measured
    rate plus the smallest start-up charged so far. Start-up is most of a mini-epoch's cost
    (about a second warm); leaving it out, as this once did, let mini-epochs start that the
    budget could not buy. Charged, not wall-clock: counting the import stopped a job as
    `budget_exhausted` with a mini-epoch predicted at 1.8× what the whole job cost."""
    if not history or history[-1].samples_per_s <= 0:
        return None
    last = history[-1]
    start_up = _charged_overheads(history, spec)[0]
    return epoch_cost(w, s, spec.resources, last.samples / last.samples_per_s + start_up, spec.prices)


def _probes(group: tuple[int, int], config: tuple[int, int]) -> bool:
    """Whether `group` can measure `config` through one of its servers: the same workers, one
    server in `config` and more in `group` (`coach.training.keys`)."""
    return group[0] == config[0] and config[1] == 1 < group[1]


def _fallback(group: tuple[int, int], probe: int) -> tuple[tuple[int, int] | None, int]:
    """What trains the rest of epoch 1 when `group` cannot: the configuration it was to measure
    inside it, measured on that rest instead; else the planner's choice (None)."""
    return ((group[0], 1) if probe else None), 0


def _instead(group: tuple[int, int], probe: int) -> str:
    """What an event says happens instead of `group` (`_fallback`)."""
    return (f"({group[0]}, 1), which it was to measure inside it, trains the rest of epoch 1 instead" if probe
            else "epoch 1 is planned on what tuning measured")


def _jobs_of(records: list[EpochRecord], configs: list[tuple[int, int]]) -> str:
    """The jobs whose `records` measured any of `configs`, in the records' order."""
    return ", ".join(dict.fromkeys(r.job_id for r in records if (r.workers, r.servers) in configs))


class JobLoop:
    def __init__(self, run: JobRun) -> None:
        self.run = run
        self.spec = run.spec
        self.store = run.store
        self.runner = EpochRunner(run.backend, run.work_dir, self.spec.max_retries, self._event, self._waiting_beside)
        # counted, not loaded (the workers load the data); a CIFAR-10 folder may have shrunk since submit
        self.n_train = train_size(self.spec.dataset["name"], {k: v for k, v in self.spec.dataset.items() if k != "name"})
        if self.spec.batch_size > self.n_train:
            raise SpecError(self.spec.source, "batch_size",
                            f"{self.spec.batch_size} is more than the {self.n_train} training samples of "
                            f"{self.spec.dataset['name']}: every epoch would be a single step")
        self._fit_cache: dict[tuple[int, bool], Any] = {}   # (records, with interval) → ConvergenceFit | None
        self._speed_cache: tuple | None = None   # (records, SpeedModel | None)
        self._earlier: list[EarlierRun] = []   # earlier runs of the same model and data, found when the job starts
        self._before: list[EpochRecord] = []   # earlier jobs' measured epochs (`speeds_before`)
        self._eta: tuple | None = None   # (records it was computed from, Eta | None, the (w, s) it was for)
        self._unshown: tuple | None = None   # the last epoch's (history, w, s, loss fields), not yet shown
        self._showing: Callable[[], None] | None = None   # waits until `_beside` has shown them
        self._started = time.time()   # this run's epochs: the gaps of a stop and resume are no wait
        self._wait: dict[str, float] = {}   # the expected wait shown in the ETA while the job waits for room
        self._eta_lock = threading.Lock()   # the ETA's thread and the wait both write the stored ETA

    # -- helpers ---------------------------------------------------------------------------
    def _event(self, kind: str, message: str) -> None:
        self.store.add_event(self.run.job_id, kind, message)

    def _stop_requested(self) -> bool:
        """A Ctrl-C of this process, or `coach stop` from any other."""
        return self.run.stop.is_set() or self.store.stop_requested(self.run.job_id)

    def _finish(self, status: str, message: str, **job: Any) -> str:
        self._shown()
        self.store.update_job(self.run.job_id, status=status, message=message, **job)
        self._event(status, message)
        return status

    def _history(self) -> list[EpochRecord]:
        return self.store.epochs(self.run.job_id)

    def _task(self) -> dict:
        s = self.spec
        return {"dataset": dict(s.dataset), "model": dict(s.model), "hyper": s.hyper}

    def _placement(self) -> Placement:
        r = self.spec.resources
        return Placement(cpu={role: r[role].cpu for role in r}, memory_gib={role: r[role].memory_gib for role in r},
                         scheduler=self.spec.scheduler)

    def _execute(self, phase: str, epoch: int, w: int, s: int, limit: int | None,
                 history: list[EpochRecord], keep: Mapping[str, int] | None = None, first: int = 0,
                 on_sent: Callable[[], None] = lambda: None, probe: int = 0) -> list[EpochRecord]:
        """Run one epoch and record it: a list of one record, or two when its first `probe` samples
        were measured as a tuning mini-epoch on (w, 1) (`EpochPlan.probe`)."""
        if self._stop_requested():   # before the job is shown on an epoch that then never ran
            raise EpochFailed(f"stopped by request before {phase} epoch {epoch} started")
        samples = min(limit or self.n_train, self.n_train - first)
        plan = EpochPlan(job_id=self.run.job_id, phase=phase, epoch=epoch, workers=w, servers=s,
                         seed=(TRAINING_SEED + (1 if phase == "tuning" else epoch)   # tuning trains epoch 1's head
                               + SEED_STRIDE * self.spec.seed) % 2**32, limit=limit, first=first,
                         deadline_s=deadline_for(history, samples), checkpoint_in=self.store.checkpoint(self.run.job_id),
                         checkpoint_out=str(self.run.work_dir / "checkpoints" / f"{phase}-{epoch:04d}"),
                         task=self._task(), placement=self._placement(), keep=keep or {}, probe=probe)
        (self.run.work_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
        self.store.update_job(self.run.job_id, status=phase, workers=w, servers=s, epoch=epoch,
                              message=plan.label)
        started = time.time()
        outcome: EpochOutcome = self.runner.run(plan, self._stop_requested, self._retry_within_budget, on_sent)
        cost, finished = measured_cost(outcome.function_s, self.spec.resources, self.spec.prices), time.time()
        recs, p = [], outcome.probe
        if p is not None:   # its share of the group's function-seconds, and its end on the clock
            probe_cost = cost * p.wall_s / max(p.wall_s + outcome.wall_s, 1e-9)
            started_rest = finished - outcome.wall_s
            tuned = sum(r.phase == "tuning" for r in history)
            recs.append(EpochRecord(job_id=self.run.job_id, phase="tuning", epoch=tuned + 1, workers=w, servers=1,
                                    train_loss=p.train_loss, val_loss=p.val_loss,
                                    duration_s=p.wall_s, samples=p.samples, samples_per_s=p.samples_per_s,
                                    cost=probe_cost, retries=outcome.retries, started_at=started,
                                    finished_at=started_rest, first_sample=first))
            cost, started, first = cost - probe_cost, started_rest, first + p.samples
        recs.append(EpochRecord(job_id=self.run.job_id, phase=phase, epoch=epoch, workers=w, servers=s,
                                train_loss=outcome.train_loss, val_loss=outcome.val_loss,
                                duration_s=outcome.wall_s, samples=outcome.samples,
                                samples_per_s=outcome.samples_per_s, cost=cost, retries=outcome.retries,
                                started_at=started, finished_at=finished, first_sample=first))
        # a training epoch's loss is stored with its ETA (`_update_eta`), a mini-epoch's here
        shown = dict(val_loss=outcome.val_loss, val_epoch=f"{phase} {epoch}") if phase == "tuning" else {}
        self.store.record_epoch(*recs, settles=Path(outcome.folder).name, checkpoint=outcome.checkpoint, **shown)
        self._forget_folders([outcome.folder])
        self._prune_checkpoints(outcome.checkpoint)
        return recs

    def _retry_within_budget(self, function_s: dict[str, float], attempts: int) -> str | None:
        """Why a failed epoch may not try again (None if it may): each attempt is paid in full,
        and without this check three retries of one epoch spent twice a job's budget. The next
        attempt is predicted at the mean of those that failed."""
        spent = measured_cost(function_s, self.spec.resources, self.spec.prices)
        left = self._budget_left() - spent
        if spent / attempts > left:
            return (f"its {attempts} attempts cost {spent:.4g}, and another would cost about "
                    f"{spent / attempts:.4g} with only {max(left, 0.0):.4g} of the budget left")
        return None

    def _forget_folders(self, folders: list[str]) -> None:
        """Remove attempt folders whose charge is recorded, then their `settled` marks."""
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
            self.store.unsettle(self.run.job_id, Path(folder).name)

    def _prune_checkpoints(self, keep: str | None = None) -> None:
        """Keep only `keep`, by default the recorded checkpoint: an epoch cut short by a stop left
        its own (never recorded, never resumed from) on disk for good."""
        folder = self.run.work_dir / "checkpoints"
        try:
            keep = keep if keep is not None else self.store.checkpoint(self.run.job_id)
            present = list(folder.iterdir()) if folder.is_dir() else []
        except (CoachError, OSError):   # only tidying: the job's status stands
            return
        # by name: the recorded path may spell the home another way (a symlink, the relative
        # COACH_HOME of an older run); if it names none of these, nothing is deleted
        kept = Path(keep).name if keep else None
        if kept is None or kept in {p.name for p in present}:
            for p in present:
                if p.name != kept:   # older checkpoints and temporaries of killed saves
                    shutil.rmtree(p, ignore_errors=True)

    # -- models ----------------------------------------------------------------------------
    def _convergence(self, history: list[EpochRecord], interval: bool = True):
        """The loss curve, fitted once per recorded epoch: the point fit for the plan, and with its
        bootstrap replicas (0.1 s) for the interval that `coach status` shows."""
        key = (len(history), interval)
        if key in (cache := self._fit_cache):
            return cache[key]
        fit = convergence_of(history, self.n_train, self._earlier, **({} if interval else {"bootstrap": 0}))
        self._fit_cache = {**{k: v for k, v in cache.items() if k[0] == len(history)}, key: fit}
        return fit

    def _speed(self, history: list[EpochRecord]):
        """The speed model, refitted once per recorded epoch (milliseconds)."""
        if (cache := self._speed_cache) is not None and cache[0] == len(history):
            return cache[1]
        speed = speed_of(history, self.spec.batch_size, self._before)
        self._speed_cache = (len(history), speed)
        return speed

    def _epoch_seconds(self, history: list[EpochRecord], speed, w: int, s: int,
                       samples: int | None = None) -> float | None:
        """Predicted wall time of a training epoch on (w, s), by default a whole one: training +
        measured overhead.
        A record's wall time starts once its functions are ready (since session 27): before, a
        first epoch's held every replica's `import mxnet`, which warm replicas do not repeat, and
        a static job's second epoch was predicted at 16 s (others waiting for its cores were told
        so) where it took 1 s."""
        measured = history or self._before   # before its first epoch, earlier jobs' overhead
        if speed is None or not measured:
            return None
        return speed.epoch_seconds(w, s, samples or self.n_train) + _median(_overheads(measured))

    def _charged_overhead(self, history: list[EpochRecord]) -> float:
        """An epoch's charged seconds beyond its training, what the budget is judged on. Before
        the job's first epoch, earlier jobs' wall-clock overhead: their charges are in their own
        prices, and since session 27 a record's wall time holds no `import mxnet`, so it is about
        what was charged (an older record's is not, and can inflate it)."""
        if history:
            return _median(_charged_overheads(history, self.spec))
        return _median(_overheads(self._before))

    def _streak(self, history: list[EpochRecord]) -> int:
        return streak_of(history, self.spec.target_loss)

    def _update_eta(self, history: list[EpochRecord], w: int, s: int, **job: Any):
        """Predict what is left, once per recorded epoch, and store it for `coach status` in one
        update with `job`'s other values (a new loss with its ETA: never one without the other)."""
        try:
            if self._eta is None or self._eta[0] != len(history):
                e, job["eta"] = self._predict(history, w, s)
                self._eta = (len(history), e, (w, s))
        finally:   # the loss is stored even if a prediction fails
            with self._eta_lock:
                if "eta" in job:
                    job["eta"] = self._with_wait(job["eta"])
                if job:
                    self.store.update_job(self.run.job_id, **job)
        return self._eta[1]

    def _predict(self, history: list[EpochRecord], w: int, s: int,
                 interval: bool = True) -> tuple[Eta | None, dict[str, Any]]:
        if self._streak(history) >= self.spec.consecutive:   # done: no ETA left to show
            return None, {}
        fit, speed = self._convergence(history, interval), self._speed(history)
        if fit is None:   # no ETA yet, but perhaps already a budget that ends the job first
            paid = self._budget_epochs(history, speed, w, s, self.spec.max_epochs - _trained(history))
            return None, ({} if paid is None else {"epochs_left": None, "budget_epochs": paid, "at": time.time()})
        between = between_epochs_s(history, self._started)
        seconds = (self._epoch_seconds(history, speed, w, s) or history[-1].duration_s) + between
        done = progress_of(history, self.n_train)[-1]
        e = eta(fit, self.spec.target_loss, self.spec.consecutive, done, seconds, self._streak(history),
                horizon=done + self.spec.max_epochs - _trained(history))   # past max_epochs it is unreachable
        info = {"epochs_left": e.epochs_left, "lo": e.lo, "hi": e.hi, "seconds": e.seconds,
                "seconds_lo": e.seconds_lo, "seconds_hi": e.seconds_hi, "reachable": e.reachable,
                "asymptote": e.asymptote, "at": time.time(), "between_epochs_s": round(between, 3),
                "earlier": e.earlier or None,
                "earlier_weight": round(e.earlier_weight, 3)}
        if (paid := self._budget_epochs(history, speed, w, s, self._epochs_left(e, history))) is not None:
            info["budget_epochs"] = paid
        return e, info

    def _budget_epochs(self, history: list[EpochRecord], speed, w: int, s: int, runs: int) -> int | None:
        """How many more epochs on (w, s) the budget pays for, when fewer than the `runs` the job
        has left: said beside the ETA (it read "ETA 9 epochs" two epochs before the job stopped on
        its budget), as what max_epochs leaves is, and before there is an ETA (a job tight on
        budget stopped after 2 epochs without a word)."""
        paid = epochs_paid(JobDemand(self.run.job_id, speed, None, float(self.n_train), resources=self.spec.resources,
                                     prices=self.spec.prices, overhead_s=self._charged_overhead(history)),
                           w, s, self._budget_left())
        return paid if paid is not None and paid < runs else None

    def _beside(self, history: list[EpochRecord], w: int, s: int, shown: dict[str, Any]) -> Callable[[], None]:
        """Show an epoch's loss with its ETA from a thread while the next epoch runs: the ETA's
        bootstrap delayed every epoch by 0.1 s. The threads share one interpreter, so it starts
        once the next epoch's events are on their way (`EpochRunner.run`'s `on_sent`): started
        beside the plan, it slowed the plan down as much, and started before the events, it held
        them back by 0.03–0.06 s. The returned function waits for it and raises its error."""
        errors: list[BaseException] = []

        def show() -> None:
            try:
                self._update_eta(history, w, s, **shown)
            except BaseException as e:   # noqa: BLE001 (handed to the loop's thread)
                errors.append(e)

        thread = threading.Thread(target=show, name=f"eta-{self.run.job_id}", daemon=True)
        thread.start()

        def wait() -> None:
            thread.join()
            if errors:
                raise errors[0]
        return wait

    def _runs_on(self, history: list[EpochRecord], w: int, s: int) -> None:
        """The last epoch's ETA is for the epochs to come: predicted on the allocation the next one
        runs on. On the one before, a job the planner had just moved from (2, 2) to (1, 1) read
        "~18s; the budget pays for ~4 more epochs" and ran 6 (review). Shown while the job waited
        for room, it was predicted before that allocation was known: it is predicted again, beside
        the epoch as usual, once that thread is done."""
        if self._unshown is not None:
            _, _, _, shown = self._unshown
            self._unshown = (history, w, s, shown)
            return
        self._shown()   # the thread of one shown during a wait (nothing to wait for otherwise)
        if self._eta is not None and self._eta[0] == len(history) and self._eta[2] != (w, s):
            self._eta, self._unshown = None, (history, w, s, {})

    def _show_beside(self) -> None:
        """Start showing the last epoch's loss and ETA from a thread (`_beside`)."""
        if self._unshown is not None:
            try:
                self._showing = self._beside(*self._unshown)
            except RuntimeError:   # no thread to be had: `_shown` shows them once the epoch is over
                return
            self._unshown = None

    def _shown(self) -> None:
        """Show the last epoch's loss and ETA now, or wait until `_beside` has. Their error (a failed
        store) is raised unless another is on its way (a failed epoch, a failing job): that one is
        what the job ends with."""
        busy = sys.exc_info()[1] is not None
        wait, unshown = self._showing, self._unshown
        self._showing = self._unshown = None
        try:
            if wait is not None:
                wait()
            if unshown is not None:
                self._update_eta(*unshown[:3], **unshown[3])
        except Exception:
            if not busy:
                raise

    def _epochs_left(self, e: Eta, history: list[EpochRecord]) -> int:
        """The ETA's epochs, or what max_epochs leaves when the target is predicted out of reach
        before it: the job runs that long. Before session 40 that counted as 1 epoch: the whole
        remaining budget was one epoch's share, and the planner weighed what a worker saves over
        one epoch."""
        return self.spec.max_epochs - _trained(history) if e.epochs_left is None else e.epochs_left

    def _demand(self, history: list[EpochRecord]) -> JobDemand:
        spent = self.store.job(self.run.job_id).spent
        remaining_epochs, e = None, None
        if history:
            w, s = history[-1].workers, history[-1].servers
            # between training epochs the point fit (`_beside` fits the interval); after tuning or on
            # resume the whole ETA, shown here
            e = (self._predict(history, w, s, interval=False)[0] if self._unshown or self._showing
                 else self._update_eta(history, w, s))
        if e is not None:
            remaining_epochs = float(max(1, self._epochs_left(e, history)))
        return JobDemand(
            job_id=self.run.job_id, speed=self._speed(history), remaining_epochs=remaining_epochs,
            samples_per_epoch=float(self.n_train), max_workers=self.spec.max_workers,
            max_servers=self.spec.max_servers,
            static=(self.spec.workers, self.spec.servers) if self.spec.allocation == "static" else None,
            resources=self.spec.resources,
            epoch_budget=epoch_budget(self.spec.budget - spent, remaining_epochs), prices=self.spec.prices,
            overhead_s=self._charged_overhead(history),
            current=next(((r.workers, r.servers) for r in reversed(history) if r.phase == "training"), None))

    # -- the loop --------------------------------------------------------------------------
    def run_job(self) -> str:
        jid = self.run.job_id
        try:
            return self._run()
        except EpochFailed as e:
            cost = measured_cost(e.function_s, self.spec.resources, self.spec.prices) if e.function_s else 0.0
            # attempts that failed still ran, and are paid for; no history row holds the charge,
            # so its event says it (`spent` = history + these events)
            if cost > 0:
                self.store.charge(jid, cost, "for attempts that ran but finished no epoch",
                                  settles=(Path(e.folder).name,) if e.folder else ())
            if e.folder:
                self._forget_folders([e.folder])
            if isinstance(e, OverBudget):
                self._event("over_budget", str(e))
                return self._budget_exhausted(self._budget_left())
            if isinstance(e, FailsAgain):   # failed even if a stop came at once: a retry would fail again
                kind = "diverged" if isinstance(e, Diverged) else "fails_until_fixed" if e.resumable else "fails_again"
                self._event(kind, str(e))
                return self._finish("failed", str(e))
            return self._finish("stopped" if self._stop_requested() else "failed", str(e))
        except CoachError as e:
            return self._finish("stopped" if self._stop_requested() else "failed", str(e))
        except Exception as e:  # a bug: keep the state, say what happened, never hide it
            self._event("internal_error", traceback.format_exc())
            return self._finish("failed", f"internal error: {type(e).__name__}: {e} (details: coach events {jid})")
        finally:
            try:
                self.run.backend.teardown(jid)
            except CoachError as e:   # the job's status stands: a leftover function is not its failure
                self._event("teardown_failed", f"its functions could not be removed ({e}); they are removed "
                                               "again when this run ends, or as stale by the next one")
            finally:   # the functions go first: their room is not handed out while they hold it
                self.run.coordinator.release(jid, done=True)
                # the functions are torn down; a role process notices within a second and could
                # still rename a save into place then: a resume's first recorded epoch prunes it
                self._prune_checkpoints()

    def _budget_left(self) -> float:
        return self.spec.budget - self.store.job(self.run.job_id).spent

    def _find_earlier(self) -> None:
        """Earlier runs of the same model and data: the ETA's second opinion. Chosen once, when
        the job first starts (a resumed job keeps them, and `coach plot` reads them). And the
        speeds that earlier jobs measured (`speeds_before`), found the same way each time."""
        job, spec = self.store.job(self.run.job_id), asdict(self.spec)
        found = find_earlier(self.store, job, spec, self.n_train)
        self._earlier = [e.run for e in found]
        self._before = speeds_before(self.store, job, spec)
        ids = ",".join(e.job.job_id for e in found) or NONE_FOUND
        if job.earlier_job != ids:
            self.store.update_job(self.run.job_id, earlier_job=ids)
            if found:
                self._event("earlier_run", f"the ETA also asks {'the closest of ' if len(found) > 1 else ''}"
                                           f"{describe(found)}")

    def _charge_abandoned(self) -> None:
        """Charge the epoch that a killed run of this job (`kill -9`, a crash) left unpaid."""
        cost, left = unpaid(self.run.work_dir, self.store, self.run.job_id, self.spec)
        if left is None:
            return
        if cost > 0:
            self.store.charge(self.run.job_id, cost, f"for {', '.join(left.epochs)}, which a killed run did not "
                              f"record ({sum(left.function_s.values()):.1f} function-seconds)",
                              settles=tuple(Path(f).name for f in left.folders))
        self._forget_folders(left.folders)

    def _run(self) -> str:
        spec, coord = self.spec, self.run.coordinator
        self._charge_abandoned()
        self._find_earlier()
        history = self._history()
        first = self._demand([])
        if (why := coord.never_fits(first)) is not None:
            whole = coord.capacity.whole
            return self._finish("failed", f"the job does not fit the backend's capacity "
                                f"({whole.cpu:g} cores, {whole.memory_gib:g} GiB): {why}")
        ended, measure, probe = self._tune(history)
        if ended is not None:
            return ended
        epoch = _trained(history)
        while True:
            if self._streak(history) >= spec.consecutive:
                last, n = history[-1], spec.consecutive
                return self._finish("succeeded", f"validation loss {last.val_loss:.4g} ≤ target "
                                    f"{spec.target_loss:g} for {n} epoch{'s' * (n != 1)} in a row")
            if epoch >= spec.max_epochs:
                return self._finish("max_epochs", f"reached max_epochs ({spec.max_epochs}) at validation "
                                    f"loss {history[-1].val_loss:.4g} (target {spec.target_loss:g})")
            if self._stop_requested():
                return self._finish("stopped", f"stopped by request after training epoch {epoch}")
            left = self._budget_left()
            if left <= 0:
                return self._budget_exhausted(left)
            demand = self._demand(history)
            if measure:   # the last configuration tuning measures trains the rest of epoch 1: held for it alone
                demand = replace(demand, static=measure, remaining_epochs=1.0)
            head = tuned_head(history) if epoch == 0 else 0   # epoch 1 trains what tuning left of it
            alloc = self._acquire(demand, epoch_s=lambda w, s: self._epoch_seconds(history, demand.speed, w, s,
                                                                                   self.n_train - head),
                                  timeout_s=TUNING_WAIT_S if measure and (demand.speed is not None or probe) else None)
            if alloc is None and measure and not self._stop_requested():
                self._event("tuning_skipped", f"{measure} did not fit the free capacity in time; "
                            + _instead(measure, probe))
                measure, probe = _fallback(measure, probe)
                continue
            if alloc is None:
                return self._finish("stopped", f"stopped by request while waiting for capacity (epoch {epoch})")
            try:
                predicted = predicted_epoch_cost(replace(demand, samples_per_epoch=float(self.n_train - head)),
                                                 alloc.workers, alloc.servers)
                share = min(left, demand.epoch_budget if demand.epoch_budget is not None else left)
                if predicted is not None and predicted > share and measure:   # the planner keeps within both
                    self._event("tuning_skipped", f"{measure}: training the rest of epoch 1 on it is predicted to "
                                f"cost {predicted:.3g}, above an epoch's share of the budget ({share:.3g}; {left:.3g} "
                                f"of the budget is left); " + _instead(measure, probe))
                    measure, probe = _fallback(measure, probe)
                    continue
                if predicted is not None and predicted > left:
                    return self._budget_exhausted(left, predicted)
                if measure and probe:
                    self._event("plan", f"epoch 1: {measure}: the last configuration tuning measures, on "
                                f"{'the rest of ' if head else ''}epoch 1, whose first {probe} samples measure "
                                f"({measure[0]}, 1) through one of its {measure[1]} servers (two start-ups fewer than "
                                "mini-epochs of their own)")
                elif measure and head:
                    self._event("plan", f"epoch 1: {measure}: the last configuration tuning measures, on the rest "
                                "of epoch 1 (a start-up fewer than a mini-epoch of its own)")
                elif measure:
                    self._event("plan", f"epoch 1: {measure}: the only configuration left to measure, measured on "
                                "a whole epoch")
                elif history or (demand.speed is not None and demand.static is None):   # on earlier jobs' speeds
                    self._event("plan", f"epoch {epoch + 1}: ({alloc.workers}, {alloc.servers}): {alloc.reason}")
                self._runs_on(history, alloc.workers, alloc.servers)
                epoch += 1
                history += self._execute("training", epoch, alloc.workers, alloc.servers, None, history,
                                         first=head if self.n_train - head >= alloc.workers else 0,
                                         on_sent=self._show_beside, probe=probe)
            finally:
                self._epoch_over()
            measure, probe = None, 0
            last = history[-1]
            pending = (list(history), alloc.workers, alloc.servers,
                       dict(val_loss=last.val_loss, val_epoch=f"training {last.epoch}"))
            try:
                self._shown()   # the epoch before's, shown beside this one (waited for once the room is free)
            finally:   # if that failed, the job's final status shows this one's
                self._unshown = pending

    def _tune(self, history: list[EpochRecord]) -> tuple[str | None, tuple[int, int] | None, int]:
        """Tuning mini-epochs on the configurations that neither the job nor earlier jobs of its
        speed (`speeds_before`) measured (appended to `history`), but the last, which the loop
        runs on the rest of epoch 1 (returned second): a start-up fewer, and a mini-epoch of its
        own was followed by another start-up anyway. When the one before it is (w, 1) and the last
        (w, s), (w, 1) is measured on the first samples of that rest, through one of its servers
        (`coach.training.keys`): another start-up fewer; third, how many samples (0: none).
        First the job's final status if it ended meanwhile (a stop), else None."""
        spec, coord = self.spec, self.run.coordinator
        # a job stopped during tuning resumes it where it stopped; once training, tuning is over
        if spec.allocation != "dynamic" or any(r.phase == "training" for r in history):
            return None, None, 0
        tuned = {(r.workers, r.servers) for r in history if r.phase == "tuning"}
        chunk = tuning_chunk(spec, self.n_train)
        if tuned_ahead(history):
            if rest := [c for c in tuning_configs(spec, usable=lambda c: c[0] <= chunk) if c not in tuned]:
                self._event("tuning_skipped", f"{', '.join(map(str, rest))}: this job's tuning began under an older "
                            "Coach, on samples of its own; training goes on from what it measured")
            return None, None, 0
        before = self._before
        measured = {(r.workers, r.servers) for r in before}

        def demand(w: int, s: int) -> JobDemand:
            return JobDemand(job_id=self.run.job_id, speed=None, remaining_epochs=None,
                             samples_per_epoch=float(self.n_train), static=(w, s),
                             resources=spec.resources, prices=spec.prices)

        never: dict[tuple[int, int], str] = {}   # on a cluster a configuration can fit the cores in sum but not the nodes

        known_speed = tuned | measured   # asked of the backend only for the others

        def usable(c: tuple[int, int]) -> bool:
            if c[0] > chunk:
                return False
            if c not in known_speed and (why := coord.never_fits(demand(*c))) is not None:
                never[c] = why
            return c not in never

        path = tuning_configs(spec, usable)
        if not (configs := [c for c in path if c not in tuned]):
            return None, None, 0
        if known := [c for c in configs if c in measured]:
            self._event("tuning_skipped", f"{', '.join(map(str, known))}: measured by {_jobs_of(before, known)}, "
                        "earlier job(s) of the same model, data, batch, resources and scheduler on this backend")
        for c, why in never.items():
            self._event("tuning_skipped", f"{c}: it never fits the backend: {why}")
        if not (configs := [c for c in configs if c not in known]):
            return None, None, 0
        if path == [(1, 1), (2, 1), (2, 2)] and configs[0] == (1, 1) and coord.alone(self.run.job_id) and (
                len(configs) <= 2 or chunk >= spec.batch_size):
            # alone, what else is left needs no start-up of its own: (2, 1) inside (2, 2)'s epoch 1, or
            # one configuration on epoch 1 (or nothing). (1, 1) is measured inside no group of two workers
            # (ps-lite's synchronous servers wait for every worker's push): a mini-epoch of its own was
            # the one start-up tuning cost a first submission beyond a static (2, 2) job, +0.9 s, 6% of
            # a 4-epoch `lenet-mnist` job (session 41). The planner measures it once the job is
            # predicted long enough to pay for it (`coach.plan.planner._explore`)
            configs = configs[1:]
            self._event("tuning_skipped", "(1, 1): left to the planner, which measures it by one epoch once the job "
                        "is predicted long enough to pay for it")
            if not configs:
                return None, None, 0
        if spec.retune and not tuned:   # said once something is left to measure
            self._event("retune", "retune: true: no speeds measured by earlier jobs; tuning measures its own, "
                                  "and later jobs start from them")
        # start every function tuning will use at once, so that they import MXNet side by side
        # instead of a cold replica delaying each later mini-epoch (scaled-down replicas stay warm)
        ahead: tuple[int, int] | None = (max(w for w, _ in configs), max(s for _, s in configs))
        if coord.never_fits(demand(*ahead), now=True) is not None:   # not all together, or not beside other work
            ahead = max((c for c in configs if coord.never_fits(demand(*c), now=True) is None), key=sum, default=None)
        # where scaled-down functions are gone (a cluster's pods), the head start is kept until tuning
        # ends and holds its room: leased from the start, so other jobs are not granted that room
        kept = coord.kept
        if ahead and kept and coord.acquire(demand(*ahead), timeout_s=0) is None:
            ahead = None   # other jobs hold that room now: each mini-epoch asks for what it needs
        group = {"scheduler": 1, "server": ahead[1], "worker": ahead[0]} if ahead else {}
        def no_wait(why: str) -> None:   # waiting for room that the first mini-epoch may not need
            if why:
                raise BackendError(why)

        try:
            placed = self.run.backend.deploy(self.run.job_id, group, self._placement(), on_wait=no_wait,
                                             should_stop=self._stop_requested) if group else None
            if placed:
                self._event("placed", f"ahead of tuning: {placed}")
        except BackendError as e:   # only a head start: each epoch deploys what it needs, with retries
            if not self._stop_requested():   # a Ctrl-C or `coach stop` ended it: the job says it stopped
                self._event("deploy_failed", f"starting {group['server']} server(s) and {group['worker']} "
                            f"worker(s) ahead of tuning: {e}; each mini-epoch starts what it needs")
            group = {}
        # kept: on a cluster a function scaled down is a pod deleted, and growing again a cold start
        # (about 2 s per mini-epoch for mlp-digits); each mini-epoch's lease counts the kept pods, or
        # they go when that lease is not free now. The local backend keeps replicas warm itself.
        keep = group if kept else {}
        for i, (w, s) in enumerate(configs):
            if self._stop_requested():
                return self._finish("stopped", "stopped by request during tuning"), None, 0
            left, last = self._budget_left(), i == len(configs) - 1
            predicted = None if last else _mini_epoch_cost(history, w, s, spec)   # the loop checks the last's
            if predicted is not None and predicted > left:   # said even when nothing is left: why tuning ended
                rest = f"{left:.3g} of the budget is left" if left > 0 else "the budget is spent"
                self._event("tuning_skipped", f"({w}, {s}) and the rest: a mini-epoch is predicted to cost "
                            f"{predicted:.3g}, {rest}")
                break
            if left <= 0:
                if last:   # said for the others above
                    self._event("tuning_skipped", f"({w}, {s}): the budget is spent")
                break
            if i > 0 and (why := coord.never_fits(demand(w, s), now=True)) is not None:   # not when Coach's jobs leave
                self._event("tuning_skipped", f"({w}, {s}): other work on the cluster holds the room it needs: {why}")
                continue
            if last and coord.alone(self.run.job_id):   # forced for most of an epoch: not on others' shares
                return None, (w, s), 0
            # measured inside the last, on whole steps that leave the rest some; with no rate yet
            # (a first submission) that epoch runs unchecked against the budget, as a static job's
            # first does: a mini-epoch first to give one was the start-up tuning no longer pays
            if i == len(configs) - 2 and _probes(configs[-1], (w, s)) and chunk >= spec.batch_size \
                    and coord.alone(self.run.job_id):
                return None, configs[-1], chunk
            # a mini-epoch lasts about as long as the previous one: others' expected wait
            last_s = lambda w, s: history[-1].duration_s if history else None
            held, alloc = (max(w, keep.get("worker", 0)), max(s, keep.get("server", 0))), None
            if held != (w, s) and (alloc := coord.acquire(demand(*held), timeout_s=0, epoch_s=last_s)) is None:
                keep = {}   # the kept functions do not fit beside other jobs' now: they go, those of (w, s) stay
            if alloc is None:
                alloc = self._acquire(demand(w, s), epoch_s=last_s, timeout_s=None if i == 0 else TUNING_WAIT_S)
            if alloc is None and self._stop_requested():
                return self._finish("stopped", "stopped by request during tuning"), None, 0
            if alloc is None:
                self._event("tuning_skipped", f"({w}, {s}) did not fit the free capacity in time")
                continue
            try:
                # numbered as run (a skipped configuration leaves no gap in `coach history`)
                history += self._execute("tuning", len(history) + 1, w, s, chunk, history,
                                         keep=keep, first=tuned_head(history))
            finally:
                self._epoch_over()
        return None, None, 0

    # -- capacity --------------------------------------------------------------------------
    def _acquire(self, demand: JobDemand, epoch_s: Callable[[int, int], float | None],
                 timeout_s: float | None = None) -> Allocation | None:
        """The coordinator's grant for an epoch (None: stopped, or `timeout_s` passed). Where
        functions hold their room between epochs (a cluster's pods: the coordinator's `kept`) the job
        keeps its lease as long as they stand: it first asks without waiting, and if it must
        wait, its functions go before its lease does. Given back at an epoch's end with the pods
        still bound, the lease let the coordinator grant their room to another job, whose pods
        then waited on the cluster while this job waited in the coordinator for that job's lease."""
        coord, job_id = self.run.coordinator, self.run.job_id
        if coord.holds(job_id):
            if (alloc := coord.acquire(demand, timeout_s=0, epoch_s=epoch_s)) is not None:
                return alloc
            self.run.backend.teardown(job_id)
            coord.release(job_id)
        last_reason = ""   # only the last: a long wait is told every second
        start = time.monotonic()

        def on_wait(why: str) -> None:
            nonlocal last_reason
            last_reason = why
            self._waiting_beside(why, coord.expected_wait_s.get(job_id))

        alloc = coord.acquire(demand, on_wait, timeout_s=timeout_s, epoch_s=epoch_s, should_stop=self._stop_requested)
        self._wait_over()
        if alloc is not None and last_reason:   # after the fact, `coach events` explains a slow job
            why = last_reason.removeprefix("waiting for capacity: ").rsplit("; expected wait", 1)[0]
            self._event("waited", f"{time.monotonic() - start:.1f} s for ({alloc.workers}, {alloc.servers}): {why}")
        return alloc

    def _epoch_over(self) -> None:
        """Replicas that stay warm on their own hold nothing once an epoch ends (local processes);
        a cluster's pods stay until the next epoch's deploy: their lease stays with them."""
        if not self.run.coordinator.kept:
            self.run.coordinator.release(self.run.job_id)

    def _budget_exhausted(self, left: float, predicted: float | None = None) -> str:
        self._shown()   # the message names the last epoch's loss
        job = self.store.job(self.run.job_id)
        why = (f"the next epoch would cost {predicted:.4g} but only {left:.4g} is left" if predicted
               else f"spent {job.spent:.4g} of {self.spec.budget:g}")
        # kept for `coach resume --budget`, which refuses a raise that cannot pay for that epoch
        eta = dict(job.eta, next_epoch_cost=predicted) if predicted else job.eta
        return self._finish("budget_exhausted", f"budget exhausted: {why}; checkpoint kept, "
                            f"validation loss {job.val_loss if job.val_loss is not None else float('nan'):.4g}",
                            eta=eta)

    def _waiting_beside(self, why: str, wait_s: float | None = None) -> None:
        """A wait for room, the coordinator's or a deploy's: the last epoch's loss and ETA are shown
        meanwhile, not once the next epoch's events are sent (`_beside`)."""
        self._show_beside()
        self._waiting(why, wait_s)

    def _waiting(self, why: str, wait_s: float | None = None) -> None:
        """Say why the job waits, and its expected wait in its ETA (None: unknown, or over), where
        `coach status` shows it in the ETA column and `--json` as `wait_s`: before, only the
        message's text said it."""
        with self._eta_lock:
            job = self.store.job(self.run.job_id)
            changes: dict[str, Any] = {"message": why} if job.message != why else {}
            wait = None if wait_s is None else round(wait_s)   # as the message's text says it
            if self._wait.get("wait_s") != wait:
                self._wait = {} if wait is None else {"wait_s": wait, "wait_at": time.time()}
                changes["eta"] = self._with_wait(job.eta)
            if changes:
                self.store.update_job(self.run.job_id, **changes)

    def _wait_over(self) -> None:
        """The job runs (or stops): its expected wait leaves its ETA."""
        if self._wait:
            with self._eta_lock:
                self._wait = {}
                self.store.update_job(self.run.job_id, eta=self._with_wait(self.store.job(self.run.job_id).eta))

    def _with_wait(self, eta: dict[str, Any]) -> dict[str, Any]:
        """`eta` with the wait the job is in now, if any, in place of the one stored with it."""
        return dict({k: v for k, v in eta.items() if k not in WAIT_KEYS}, **self._wait)
