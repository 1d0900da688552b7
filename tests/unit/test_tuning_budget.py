"""What the job loop predicts a tuning mini-epoch costs before it starts one (the budget guard)."""

from __future__ import annotations

from pathlib import Path

import pytest

from coach.estimate.cost import epoch_cost
from coach.job.loop import _mini_epoch_cost
from coach.spec import load_spec
from coach.state.records import EpochRecord
from tests.conftest import FAST_JOB, write_job


def mini(spec, w: int, s: int, charged_s: float, wall_s: float, rate: float = 6000.0) -> EpochRecord:
    """A tuning record of 256 samples that ran `wall_s` and was charged `charged_s` of each function."""
    return EpochRecord(job_id="j", phase="tuning", epoch=1, workers=w, servers=s, train_loss=2.0, val_loss=1.9,
                       duration_s=wall_s, samples=256, samples_per_s=rate,
                       cost=epoch_cost(w, s, spec.resources, charged_s, spec.prices))


@pytest.mark.parametrize(
    ("history", "seconds"),
    [
        pytest.param([], None, id="nothing-measured"),
        # the first mini-epoch: 9 s of wall time, most of it every replica's `import mxnet`, which
        # is not charged; its charged start-up is what the next one is judged by (it once was 9 s)
        pytest.param([(1, 1, 1.5, 9.0, 6000.0)], 1.5, id="after-the-cold-one"),
        # a warm start-up charged: the smallest so far, with the last rate (it once counted 256/6000 s only)
        pytest.param([(1, 1, 1.5, 9.0, 6000.0), (2, 1, 1.2, 1.3, 4000.0)], 256 / 4000 + (1.2 - 256 / 4000),
                     id="after-a-warm-one"),
        pytest.param([(1, 1, 1.5, 9.0, 0.0)], None, id="no-rate"),
    ],
)
def test_a_mini_epoch_is_predicted_with_its_charged_start_up(tmp_path: Path, history: list[tuple],
                                                             seconds: float | None) -> None:
    spec = load_spec(write_job(tmp_path / "j.yaml", name="j", **FAST_JOB))
    got = _mini_epoch_cost([mini(spec, *h) for h in history], 2, 2, spec)
    if seconds is None:
        assert got is None
    else:
        assert got == pytest.approx(epoch_cost(2, 2, spec.resources, seconds, spec.prices))
