"""Earlier runs of the same model and data as a second opinion on the stop epoch."""

from __future__ import annotations

import numpy as np
import pytest

from coach.errors import EstimateError
from coach.estimate import fit_convergence, prepare_earlier_run
from coach.estimate.earlier_run import passage
from coach.estimate.history import same_curve, same_model

TARGET = 0.2


def shape(k) -> np.ndarray:
    """A sigmoid-headed curve: its first epochs are not 1/k-shaped, as in real runs."""
    return 0.1 + 2.2 / (1 + 0.15 * np.asarray(k, dtype=float) ** 1.6)


def stop_epoch(losses: np.ndarray, target: float, consecutive: int = 3) -> int:
    run = 0
    for j, loss in enumerate(losses, start=1):
        run = run + 1 if loss <= target else 0
        if run >= consecutive:
            return j
    raise AssertionError("never met")


@pytest.fixture(scope="module")
def runs():
    rng = np.random.default_rng(3)
    k = np.arange(1, 61)
    earlier = prepare_earlier_run(k, shape(k) + rng.normal(0, 0.004, k.size), "earlier-job")
    pace = 1.3   # the new run (another seed) goes 30% faster
    new = shape(pace * k) + rng.normal(0, 0.004, k.size)
    return k, new, earlier, pace, stop_epoch(shape(pace * k), TARGET)


@pytest.mark.parametrize("share", [0.2, 0.5])
def test_a_matching_earlier_run_finds_the_pace_and_carries_the_prediction(runs, share):
    k, new, earlier, pace, n_true = runs
    seen = max(3, int(np.ceil(share * n_true)))
    fit = fit_convergence(k[:seen], new[:seen], earlier=[earlier])
    pred = fit.epochs_to_target(TARGET, consecutive=3)
    alone = fit_convergence(k[:seen], new[:seen]).epochs_to_target(TARGET, consecutive=3)
    assert pred.earlier.c == pytest.approx(pace, rel=0.03)
    assert pred.earlier_weight > 0.5
    assert abs(pred.epoch - n_true) <= 0.1 * n_true
    if share == 0.2:   # 4 epochs of a sigmoid head: the fit alone extrapolates the wrong shape
        assert abs(alone.epoch - n_true) > 0.2 * n_true
    assert pred.lo <= n_true <= pred.hi
    assert "from earlier run earlier-job" in pred.note


def test_an_earlier_run_that_does_not_match_is_ignored(runs):
    k, new, _, _, n_true = runs
    flat = prepare_earlier_run(k, np.full(k.size, 1.0) + np.random.default_rng(4).normal(0, 0.004, k.size), "stuck")
    seen = int(np.ceil(0.5 * n_true))
    with_flat = fit_convergence(k[:seen], new[:seen], earlier=[flat]).epochs_to_target(TARGET, consecutive=3)
    alone = fit_convergence(k[:seen], new[:seen]).epochs_to_target(TARGET, consecutive=3)
    assert with_flat.earlier_weight == 0.0
    assert (with_flat.epoch, with_flat.lo, with_flat.hi) == (alone.epoch, alone.lo, alone.hi)


def test_an_earlier_run_that_never_got_as_low_gets_no_weight(runs):
    k, new, earlier, _, n_true = runs
    seen = int(np.ceil(0.5 * n_true))
    pred = fit_convergence(k[:seen], new[:seen], earlier=[earlier]).epochs_to_target(0.05, consecutive=3)
    assert pred.earlier_weight == 0.0   # below its floor of 0.1: it says nothing about when


@pytest.mark.parametrize(
    ("progress", "losses", "message"),
    [
        pytest.param([1, 2, 3, 4], [1.0, 0.8, 0.7, 0.6], "5 epochs or more", id="too-short"),
        pytest.param([1, 2, 3, 4, 5], [1.0, 0.8, float("nan"), 0.6, 0.5], "finite", id="nan"),
    ],
)
def test_unusable_earlier_runs_say_why(progress, losses, message):
    with pytest.raises(EstimateError, match=message):
        prepare_earlier_run(progress, losses)


@pytest.mark.parametrize(
    ("levels", "start", "streak", "expected"),
    [
        pytest.param([1, 1, 0.1, 0.1, 0.1, 0.1], 0, 0, 5, id="three-in-a-row"),
        pytest.param([1, 1, 0.1, 0.1, 0.1, 0.1], 3, 1, 5, id="counts-the-streak-already-run"),
        pytest.param([1, 1, 0.1, 0.1, 0.1, 0.1], 4, 3, 4, id="already-met"),
        pytest.param([1, 1, 0.1, 1, 0.1, 0.1], 0, 0, None, id="broken-run-not-within-the-levels"),
    ],
)
def test_passage_follows_the_stop_rule(levels, start, streak, expected):
    assert passage(np.array(levels), 1e-6, 0.5, 3, start, streak) == expected


BASE = {"model": {"name": "lenet"}, "dataset": {"name": "mnist-5k"}, "batch_size": 64, "optimizer": "sgd",
        "learning_rate": 0.05, "momentum": 0.9, "weight_decay": 0.0, "seed": 0, "target_loss": 0.15,
        "budget": 0.05, "allocation": "dynamic"}


@pytest.mark.parametrize(
    ("change", "same"),
    [
        pytest.param({"seed": 3, "target_loss": 0.1, "budget": 1.0, "allocation": "static"}, True,
                     id="seed-target-budget-allocation-do-not-matter"),
        pytest.param({"learning_rate": 0.01}, False, id="learning-rate"),
        pytest.param({"batch_size": 32}, False, id="batch"),
        pytest.param({"dataset": {"name": "digits"}}, False, id="data"),
        pytest.param({"model": {"name": "mlp"}}, False, id="model"),
    ],
)
def test_which_jobs_train_the_same_curve(change, same):
    assert same_curve(BASE, {**BASE, **change}) is same


@pytest.mark.parametrize(
    ("change", "same"),
    [
        pytest.param({"seed": 3, "learning_rate": 0.01, "batch_size": 32, "optimizer": "adam", "momentum": 0.0,
                      "weight_decay": 1e-4}, True, id="batch-and-optimizer-settings-do-not-matter"),
        pytest.param({"dataset": {"name": "digits"}}, False, id="data"),
        pytest.param({"dataset": {"name": "mnist-5k", "path": "/other"}}, False, id="data-options"),
        pytest.param({"model": {"name": "mlp"}}, False, id="model"),
        # a row edited by hand: an AttributeError in `coach plot` of every job of that model and data
        pytest.param({"model": ["lenet"]}, False, id="model-not-a-mapping"),
    ],
)
def test_which_jobs_train_the_same_model_on_the_same_data(change, same):
    assert same_model(BASE, {**BASE, **change}) is same


def test_the_closest_of_several_earlier_runs_is_asked(runs):
    k, new, earlier, pace, n_true = runs
    flat = prepare_earlier_run(k, np.full(k.size, 1.0) + np.random.default_rng(4).normal(0, 0.004, k.size), "stuck")
    other = prepare_earlier_run(k, 0.8 * shape(k) + 0.06, "other-floor")
    seen = int(0.3 * n_true)
    for order in ([flat, other, earlier], [earlier, other, flat]):
        fit = fit_convergence(k[:seen], new[:seen], earlier=order)
        assert fit.earlier[0].run.label == "earlier-job"
        assert fit.epochs_to_target(TARGET, 3) == fit_convergence(k[:seen], new[:seen], earlier=[earlier]).epochs_to_target(TARGET, 3)


def test_a_closest_run_that_stalls_above_the_target_does_not_hide_one_that_gets_there(runs):
    k, new, earlier, pace, n_true = runs
    rng = np.random.default_rng(5)
    stalls = prepare_earlier_run(k, np.maximum(shape(k), 0.25) + rng.normal(0, 0.004, k.size), "stalls")
    reaches = prepare_earlier_run(k, 0.08 + 2.2 / (1 + 0.15 * k ** 1.5) + rng.normal(0, 0.004, k.size), "reaches")
    fit = fit_convergence(k[:8], new[:8], earlier=[reaches, stalls])
    assert [w.run.label for w in fit.earlier] == ["stalls", "reaches"]   # the head of this run, exactly
    pred = fit.epochs_to_target(TARGET, 3)
    assert pred.earlier.run.label == "reaches" and pred.earlier_weight > 0.5
    assert pred == fit_convergence(k[:8], new[:8], earlier=[reaches]).epochs_to_target(TARGET, 3)


def test_a_model_file_counts_by_its_text_not_its_path():
    a = {**BASE, "model": {"file": "/a/net.py", "source": "def build(): ..."}}
    assert same_curve(a, {**BASE, "model": {"file": "/b/net.py", "source": "def build(): ..."}})
    assert not same_curve(a, {**BASE, "model": {"file": "/a/net.py", "source": "def build(): 1"}})


def _records(losses: list[float]) -> list:
    from coach.state.records import EpochRecord

    return [EpochRecord(job_id="old", phase="training", epoch=i, workers=1, servers=1, train_loss=v, val_loss=v,
                        duration_s=1.0, samples=100, samples_per_s=100.0, cost=0.0, retries=0, started_at=0.0,
                        finished_at=0.0) for i, v in enumerate(losses, start=1)]


@pytest.mark.parametrize(
    ("losses", "usable"),
    [
        pytest.param([2.0, 1.2, 0.8, 0.6, 0.5, 0.45], True, id="finished"),
        pytest.param([2.0, 1.2, 0.8, 0.6], False, id="too-few-epochs"),
        pytest.param([2.0, 1.2, 0.8, 0.6, float("nan")], False, id="diverged"),
    ],
)
def test_a_job_that_cannot_serve_as_an_earlier_run_is_skipped_not_an_error(losses, usable):
    from coach.estimate.history import earlier_run_of

    run = earlier_run_of(_records(losses), 100.0, "old")
    assert (run is not None) is usable
    if usable:
        assert run.label == "old" and run.progress == tuple(float(i) for i in range(1, len(losses) + 1))


def test_an_earlier_run_cut_before_the_target_counts_less(runs):
    # a job that stopped at a higher target: past its last epoch its curve is its own fit's forecast
    k, new, earlier, _, n_true = runs
    cut = prepare_earlier_run(earlier.progress[:12], np.asarray(earlier.smooth[:12]), "cut")
    seen = max(3, int(np.ceil(0.2 * n_true)))
    full = fit_convergence(k[:seen], new[:seen], earlier=[earlier]).epochs_to_target(TARGET, consecutive=3)
    short = fit_convergence(k[:seen], new[:seen], earlier=[cut]).epochs_to_target(TARGET, consecutive=3)
    assert 0 < short.earlier_weight < full.earlier_weight


def test_a_different_floor_weighs_less_than_a_match(runs):
    k, new, earlier, pace, n_true = runs
    other = prepare_earlier_run(k, 0.8 * shape(k) + 0.06, "other-floor")   # same pace, 20% lower curve
    seen = int(np.ceil(0.5 * n_true))
    match = fit_convergence(k[:seen], new[:seen], earlier=[earlier]).epochs_to_target(TARGET, consecutive=3)
    differ = fit_convergence(k[:seen], new[:seen], earlier=[other]).epochs_to_target(TARGET, consecutive=3)
    assert differ.earlier_weight < match.earlier_weight


def test_when_this_run_alone_says_never_the_interval_stays_open(runs):
    k, _, earlier, pace, _ = runs
    high = 0.15 + shape(pace * k[:25]) + np.random.default_rng(5).normal(0, 0.004, 25)   # floor 0.25 > 0.2
    fit = fit_convergence(k[:25], high, earlier=[earlier])
    alone = fit_convergence(k[:25], high).epochs_to_target(TARGET, consecutive=3)
    pred = fit.epochs_to_target(TARGET, consecutive=3)
    assert alone.epoch is None and pred.earlier_weight > 0
    assert pred.epoch is not None and pred.hi is None   # an epoch from the earlier run, but "maybe never"


def test_a_met_stop_rule_needs_no_second_opinion(runs):
    k, new, earlier, _, _ = runs
    fit = fit_convergence(k[:30], new[:30], earlier=[earlier])
    for start in (0, 30):   # start 0 once took log(0)
        pred = fit.epochs_to_target(0.9, consecutive=3, start=start, streak=3)
        assert (pred.epoch, pred.earlier_weight) == (start, 0.0)


def test_an_earlier_job_s_tuning_mini_epochs_count_at_their_progress():
    from coach.estimate.history import earlier_run_of
    from coach.state.records import EpochRecord

    tuning = [EpochRecord("old", "tuning", i, 1, 1, 2.2, v, 1.0, 25, 25.0, 0.0)
              for i, v in enumerate([2.2, 2.0], start=1)]
    run = earlier_run_of(tuning + _records([1.5, 1.2, 0.8, 0.6, 0.5]), 100.0, "old")
    assert run.progress == (0.25, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5)
    assert earlier_run_of(tuning + _records([1.5, 1.2, 0.8, 0.6]), 100.0, "old") is None   # 4 training epochs
