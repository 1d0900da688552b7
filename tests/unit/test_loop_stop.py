"""A stop that lands between two epochs: the job is not shown on an epoch that never ran (it
once read "training epoch 7: stopped by request" with 6 epochs run and nothing charged for a
seventh). The job loop runs on a real store; no epoch runs, so no backend is needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from coach.errors import EpochFailed
from coach.spec import load_spec
from tests.conftest import FAST_JOB, write_job


def test_a_stop_before_an_epoch_starts_leaves_the_job_on_its_last_epoch(tmp_path: Path, coach_home: Path) -> None:
    from coach.job.loop import JobLoop, JobRun
    from coach.state.store import Store

    spec = load_spec(write_job(tmp_path / "j.yaml", name="j", **FAST_JOB))
    store = Store()
    store.create_job("j-000000", "j", "j.yaml", {}, spec.target_loss, spec.budget)
    store.update_job("j-000000", status="training", workers=2, servers=1, epoch=6, message="training epoch 6")
    loop = JobLoop(JobRun(spec, "j-000000", store, backend=None, coordinator=None, work_dir=tmp_path))  # type: ignore[arg-type]
    loop.run.stop.set()
    with pytest.raises(EpochFailed, match="^stopped by request before training epoch 7 started$"):
        loop._execute("training", 7, 1, 1, None, [])
    job = store.job("j-000000")
    assert (job.epoch, job.workers, job.servers) == (6, 2, 1)
