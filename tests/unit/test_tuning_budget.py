"""What the job loop predicts a tuning mini-epoch costs before it starts one (the budget guard)."""

from __future__ import annotations

from pathlib import Path

import pytest

from coach.estimate.cost import epoch_cost
from coach.job.loop import _mini_epoch_cost
from coach.spec import load_spec
from coach.state.records import EpochRecord
from tests.conftest import FAST_JOB, write_job


def mini(w: int, s: int, duration_s: float, samples: int = 256, rate: float = 6000.0) -> EpochRecord:
    return EpochRecord(job_id="j", phase="tuning", epoch=1, workers=w, servers=s, train_loss=2.0, val_loss=1.9,
                       duration_s=duration_s, samples=samples, samples_per_s=rate, cost=0.0)


@pytest.mark.parametrize(
    ("history", "seconds"),
    [
        pytest.param([], None, id="nothing-measured"),
        # the first mini-epoch's start-up (every replica's import) is all there is to go by
        pytest.param([mini(1, 1, 9.0)], 9.0, id="after-the-cold-one"),
        # a warm start-up measured: that is what the next one costs (it once counted 256/6000 s only)
        pytest.param([mini(1, 1, 9.0), mini(2, 1, 1.2, rate=4000.0)], 256 / 4000 + (1.2 - 256 / 4000),
                     id="after-a-warm-one"),
        pytest.param([mini(1, 1, 9.0, rate=0.0)], None, id="no-rate"),
    ],
)
def test_a_mini_epoch_is_predicted_with_its_start_up(tmp_path: Path, history: list[EpochRecord],
                                                     seconds: float | None) -> None:
    spec = load_spec(write_job(tmp_path / "j.yaml", name="j", **FAST_JOB))
    got = _mini_epoch_cost(history, 2, 2, spec)
    if seconds is None:
        assert got is None
    else:
        assert got == pytest.approx(epoch_cost(2, 2, spec.resources, seconds, spec.prices))
