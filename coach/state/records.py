"""Plain records that flow from the job loop into the state store and out to the CLI and plots."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Phase = Literal["tuning", "training"]


@dataclass(frozen=True)
class EpochRecord:
    """One finished epoch (or mini-epoch, phase "tuning") of one job, recorded once.

    `epoch` counts training epochs from 1; tuning mini-epochs are numbered from 1 in
    their own phase. `cost` is measured: function-seconds of every role × price.
    `first_sample`: tuning mini-epochs train the head of training epoch 1, one after the other
    (0, then where the previous one ended), and training epoch 1 the rest; -1 on a mini-epoch
    means it drew a permutation of its own, as a Coach before 2026-11-26 did, and training
    epoch 1 then came after the tuning (`coach.estimate.progress`).
    """

    job_id: str
    phase: Phase
    epoch: int
    workers: int
    servers: int
    train_loss: float
    val_loss: float
    duration_s: float
    samples: int
    samples_per_s: float
    cost: float
    retries: int = 0
    started_at: float = 0.0
    finished_at: float = 0.0
    first_sample: int = -1   # where its samples began in training epoch 1's permutation (below)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class JobRecord:
    """A job as the store knows it: queued, tuning, training (run by a live process), or one of
    FINAL_STATUSES."""

    job_id: str
    name: str
    spec_path: str
    status: str
    target_loss: float
    budget: float
    spent: float = 0.0
    workers: int = 0
    servers: int = 0
    epoch: int = 0
    val_loss: float | None = None
    val_epoch: str = ""   # which finished (mini-)epoch val_loss is from, e.g. "tuning 3", "training 2"
    earlier_job: str = ""   # ids of the earlier runs of the same model and data its ETA asks, comma-separated
    backend: str = "local"   # where its role functions run (local or cluster): `coach resume` keeps it
    message: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0
    eta: dict[str, Any] = field(default_factory=dict)   # the last prediction; WAIT_KEYS while it waits for room

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Lease:
    """Capacity held by one job's running epoch, as every `coach submit` process sees it."""

    job_id: str
    pid: int                    # the `coach submit` process that holds it
    owner: str                  # that process's identity (boot, pid, start time): pids are reused
    cpu: float                  # cores
    memory_gib: float
    since: float                # wall time of the grant
    epoch_s: float | None = None    # predicted length of the epoch it runs; None: unknown


@dataclass(frozen=True)
class SharedDemand:
    """A running job's latest planner demand, published for the jobs of other processes."""

    job_id: str
    owner: str                  # identity of the `coach submit` process running the job
    since: float                # wall time the job first asked for capacity: its priority
    demand: str                 # JSON of coach.plan.JobDemand


NONE_FOUND = "-"
"""Stored as `earlier_job` when a job found no earlier run as it first started, so neither its
resumption nor `coach plot` asks runs that finished after that."""

FINAL_STATUSES = frozenset({"succeeded", "failed", "budget_exhausted", "max_epochs", "stopped", "interrupted"})
"""Statuses of a job that no process runs. "interrupted" is never stored: the store reports it
for a job left queued, tuning or training by a `coach submit` that is gone."""

WAIT_KEYS = ("wait_s", "wait_at")
"""A job's stored ETA while it waits for room: the expected wait, and when it was said."""
