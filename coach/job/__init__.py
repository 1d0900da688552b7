"""The job loop: tune, plan, run an epoch on a backend, record, until the stop rule is met.

submit.py       several jobs at once on one backend, a thread each
loop.py         one job from submission to a final status
epoch.py        one epoch (all roles at once) on a backend, with deadline, abort and retries
coordinator.py  the capacity every job on the machine shares (in the store), granted through the planner
earlier.py      earlier runs of the same model and data in the store, the ETA's second opinion

The jobs' folders are named here, where reading them loads nothing of the loop.
"""

from pathlib import Path

from coach.state.store import coach_home


def jobs_dir() -> Path:
    """Every job's work folder."""
    return coach_home() / "jobs"


def work_dir(job_id: str) -> Path:
    """The job's checkpoints and attempt folders."""
    return jobs_dir() / job_id
