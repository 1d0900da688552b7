"""Which earlier jobs a job learns from: their curves, a second opinion on when it will stop,
and their measured speeds, which spare a resubmitted job its tuning. The one place that
decides, so the job loop and `coach plot` use the same jobs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from coach.errors import StateError
from coach.estimate.earlier_run import EarlierRun
from coach.estimate.history import earlier_run_of, same_curve, same_model, same_speed
from coach.state.records import FINAL_STATUSES, NONE_FOUND, EpochRecord, JobRecord
from coach.state.store import Store

MAX_EARLIER = 8
"""Other configurations asked at most (the newest), besides the job's own: each costs a time
warp at every fit, ~12 ms."""


SPEED_JOBS = 3
"""Earlier jobs per configuration whose measured speeds a job starts from (the newest): a few
measurements each, and a machine that changed is forgotten after a few jobs."""


@dataclass(frozen=True)
class Earlier:
    job: JobRecord
    run: EarlierRun
    trained: int   # its training epochs
    same: bool     # the same configuration (see `same_curve`), not only the same model and data


def find_earlier(store: Store, job: JobRecord, spec: Mapping[str, Any],
                 samples_per_epoch: float | None) -> list[Earlier]:
    """The job's earlier runs: those recorded for it (`job.earlier_job`, chosen when it first
    started), else of every configuration of the same model and data (see `same_model`) the
    newest job submitted before it, finished and with enough training epochs: of its own
    configuration, and of at most MAX_EARLIER others, newest first. Which one lies closest is
    decided at every fit."""
    if job.earlier_job == NONE_FOUND:
        return []
    if job.earlier_job:
        found = []
        for job_id in job.earlier_job.split(","):
            try:
                other = store.job(job_id)
            except StateError:   # deleted from the store since, or its row damaged: ask the others
                continue
            other_spec = _spec(store, job_id)
            if other_spec is not None and (e := _earlier(store, other, same_curve(other_spec, spec),
                                                         samples_per_epoch)):
                found.append(e)
        return found
    found, specs = [], []
    for other in reversed(store.jobs()):   # newest first
        if other.created_at >= job.created_at or other.job_id == job.job_id or other.status not in FINAL_STATUSES:
            continue
        other_spec = _spec(store, other.job_id)
        if other_spec is None or not same_model(other_spec, spec) or any(same_curve(other_spec, s) for s in specs):
            continue   # another model or data, or a configuration already asked (a newer run of it)
        same = same_curve(other_spec, spec)
        others = sum(not e.same for e in found)
        if not same and others == MAX_EARLIER:
            continue   # enough other configurations; the job's own may still come
        if e := _earlier(store, other, same, samples_per_epoch):
            found.append(e)
            specs.append(other_spec)
            if others + (not same) == MAX_EARLIER and any(f.same for f in found):
                break   # the job's own and enough others: nothing older can be asked
    return found


def speeds_before(store: Store, job: JobRecord, spec: Mapping[str, Any]) -> list[EpochRecord]:
    """The measured epochs of earlier jobs on `job`'s backend that train at its speed
    (`same_speed`: model, data, batch, resources, scheduler): for each (w, s), the epochs of the
    newest SPEED_JOBS jobs that measured it, recorded before `job` was submitted, newest job
    first. A data scientist resubmits the same job with another seed, target or learning rate:
    tuning it again measured what the store already knew, about 5 s of a 30 s lenet-mnist job.

    Per configuration, not per job: a resubmitted job trains on the one (w, s) it was planned
    on, so three resubmissions would otherwise push the one job that tuned out of the window,
    and the next tuned again. Only what was recorded before the submission counts, so the job
    loop, its resumption and `coach plot` find the same epochs without storing their ids.
    None for a job with `retune: true` (the machine changed, or was busy when they ran): it
    tunes, and the jobs after it count what it and newer jobs measured, not what older ones did
    (blended with those, its mini-epochs were outweighed by their whole epochs)."""
    if spec.get("retune"):
        return []
    epochs: list[EpochRecord] = []
    jobs_of: dict[tuple[int, int], set[str]] = {}
    for other in reversed(store.jobs()):   # newest first
        if other.created_at >= job.created_at or other.job_id == job.job_id or other.backend != job.backend:
            continue
        other_spec = _spec(store, other.job_id)
        if other_spec is None or not same_speed(other_spec, spec):
            continue
        try:
            measured = [e for e in store.epochs(other.job_id) if e.samples_per_s > 0
                        and e.finished_at <= job.created_at]
        except StateError:   # its epochs edited or damaged: it says nothing
            continue
        for e in measured:
            seen = jobs_of.setdefault((e.workers, e.servers), set())   # jobs that measured (w, s), newer first
            if other.job_id in seen or len(seen) < SPEED_JOBS:
                seen.add(other.job_id)
                epochs.append(e)
        if other_spec.get("retune"):   # it measured anew: older jobs measured another machine, or time
            break
    return epochs


def describe(found: list[Earlier]) -> str:
    """The runs asked, in words, for the job's `earlier_run` event."""
    return ", ".join(f"{e.job.job_id} ({e.trained} training epochs, {e.job.status}; "
                     f"{'same configuration' if e.same else 'other batch or optimizer settings'})" for e in found)


def _spec(store: Store, job_id: str) -> dict[str, Any] | None:
    """An earlier job's spec; None if its row was edited or damaged (one job's problem, not
    every new job's)."""
    try:
        return store.spec(job_id)
    except StateError:
        return None


def _earlier(store: Store, other: JobRecord, same: bool, samples_per_epoch: float | None) -> Earlier | None:
    try:
        epochs = store.epochs(other.job_id)
    except StateError:   # its epochs edited or damaged: it says nothing
        return None
    run = earlier_run_of(epochs, samples_per_epoch, other.job_id)
    return None if run is None else Earlier(other, run, sum(e.phase == "training" for e in epochs), same)
