"""Which earlier job's curve a job asks for a second opinion on when it will stop: the one
place that decides, so the job loop's ETA and `coach plot` use the same run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from coach.errors import StateError
from coach.estimate.earlier_run import EarlierRun
from coach.estimate.history import earlier_run_of, same_curve
from coach.state.records import FINAL_STATUSES, JobRecord
from coach.state.store import Store


@dataclass(frozen=True)
class Earlier:
    job: JobRecord
    run: EarlierRun
    trained: int   # its training epochs


def find_earlier(store: Store, job: JobRecord, spec: Mapping[str, Any],
                 samples_per_epoch: float | None) -> Earlier | None:
    """The job's earlier run: the one recorded for it (`job.earlier_job`, chosen when it first
    started), else the newest job submitted before it, finished, of the same configuration
    (see `same_curve`) and with enough training epochs; None if there is none."""
    if job.earlier_job:
        try:
            return _earlier(store, store.job(job.earlier_job), samples_per_epoch)
        except StateError:   # deleted from the store since
            return None
    for other in reversed(store.jobs()):   # newest first
        if other.created_at >= job.created_at or other.job_id == job.job_id or other.status not in FINAL_STATUSES:
            continue
        if same_curve(store.spec(other.job_id), spec) and (found := _earlier(store, other, samples_per_epoch)):
            return found
    return None


def _earlier(store: Store, other: JobRecord, samples_per_epoch: float | None) -> Earlier | None:
    epochs = store.epochs(other.job_id)
    run = earlier_run_of(epochs, samples_per_epoch, other.job_id)
    return None if run is None else Earlier(other, run, sum(e.phase == "training" for e in epochs))
