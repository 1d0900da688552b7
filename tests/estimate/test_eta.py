"""The ETA combines the epochs left from the convergence fit with seconds per epoch."""

from __future__ import annotations

import numpy as np
import pytest

from coach.estimate import eta, fit_convergence
from coach.estimate.convergence import ConvergenceFit, EpochsPrediction
from coach.estimate.eta import epochs_left


def fit_exact(n=20, b=(0.5, 1.0, 0.1)):
    k = np.arange(1, n + 1)
    return fit_convergence(k, 1.0 / (b[0] * k + b[1]) + b[2])


def test_eta_counts_epochs_left_after_those_done():
    e = eta(fit_exact(), target=1.0 / (0.5 * 17.5 + 1.0) + 0.1, consecutive=3, epochs_done=10,
            epoch_seconds=30.0)
    # crossing at k = 17.5: epoch 18 is the first below, stop rule met at 20 → 10 epochs left
    assert e.reachable and e.epochs_left == 10
    assert e.seconds == pytest.approx(300.0)
    assert e.seconds_lo <= e.seconds <= e.seconds_hi


@pytest.mark.parametrize(("streak", "left"), [(0, 3), (2, 1), (3, 0)], ids=["none", "two", "done"])
def test_curve_already_below_target_still_needs_the_streak(streak, left):
    e = eta(fit_exact(), target=0.5, consecutive=3, epochs_done=20, epoch_seconds=10.0, streak=streak)
    assert e.epochs_left == left


def test_unreachable_eta_has_no_time():
    e = eta(fit_exact(), target=0.05, consecutive=3, epochs_done=20, epoch_seconds=10.0)
    assert not e.reachable and e.epochs_left is None and e.seconds is None
    assert e.asymptote == pytest.approx(0.1, abs=1e-3)


def test_epochs_already_run_without_meeting_the_rule_are_not_counted_again():
    # a curve sitting just above the target with noise: each future epoch is under it with
    # p ≈ 0.42, so three in a row take several more epochs, wherever the job stands now
    fit = ConvergenceFit(b0=0.002, b1=2.0, b2=0.3, last_progress=10.0, noise=0.05)
    for done in (10, 30, 60):
        e = eta(fit, target=0.79, consecutive=3, epochs_done=done, epoch_seconds=1.0, horizon=done + 500)
        assert e.reachable and e.epochs_left > 3, (done, e)


@pytest.mark.parametrize(("done", "left"), [
    (0.768, (5, 4, 6)),   # after tuning, which trained 0.768 of epoch 1: epoch 1 is still to run
    (2.0, (3, 2, 4)),     # after training epoch 2
    (1.024, (4, 3, 5)),   # after an older Coach's tuning, before epoch 1 (at 1.024 + k)
])
def test_epochs_left_count_from_the_last_whole_epoch(done: float, left: tuple[int, int, int]) -> None:
    """Rounded, 0.768 epochs done made a stop at epoch 5 four epochs away, one short."""
    pred = EpochsPrediction(epoch=5, lo=4, hi=6, reachable=True, asymptote=0.0)
    assert epochs_left(pred, done, consecutive=1) == left
