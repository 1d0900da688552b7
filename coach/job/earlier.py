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


def find_earlier(store: Store, job: JobRecord, spec: Mapping[str, Any],
                 samples_per_epoch: float | None) -> Earlier | None:
    """The job's earlier run: the one recorded for it (`job.earlier_job`, chosen when it first
    started), else the newest job submitted before it, finished, of the same configuration
    (see `same_curve`) and with enough training epochs; None if there is none."""
    if job.earlier_job:
        try:
            other = store.job(job.earlier_job)
        except StateError:   # deleted from the store since
            return None
        run = earlier_run_of(store.epochs(other.job_id), samples_per_epoch, other.job_id)
        return Earlier(other, run) if run is not None else None
    for other in reversed(store.jobs()):   # newest first
        if other.created_at >= job.created_at or other.job_id == job.job_id or other.status not in FINAL_STATUSES:
            continue
        if same_curve(store.spec(other.job_id), spec):
            run = earlier_run_of(store.epochs(other.job_id), samples_per_epoch, other.job_id)
            if run is not None:
                return Earlier(other, run)
    return None
