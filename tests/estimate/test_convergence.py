"""The convergence fit recovers known curves, resists spikes and says when a target is out of reach."""

from __future__ import annotations

import numpy as np
import pytest

from coach.errors import EstimateError
from coach.estimate import extrapolation_interval, fit_convergence


def curve(k, b0, b1, b2):
    return 1.0 / (b0 * np.asarray(k, dtype=float) + b1) + b2


KNOWN = [
    pytest.param((0.5, 1.0, 0.1), 40, id="fast-to-0.1"),
    pytest.param((0.05, 0.4, 0.3), 60, id="slow-high-asymptote"),
    pytest.param((2.0, 0.5, 0.0), 30, id="zero-asymptote"),
    pytest.param((0.2, 2.0, 1.5), 50, id="large-asymptote"),
]


@pytest.mark.parametrize(("b", "n"), KNOWN)
def test_recovers_known_parameters_from_exact_curve(b, n):
    k = np.arange(1, n + 1)
    fit = fit_convergence(k, curve(k, *b))
    assert fit.b0 == pytest.approx(b[0], rel=1e-3, abs=1e-6)
    assert fit.b1 == pytest.approx(b[1], rel=1e-3, abs=1e-6)
    assert fit.b2 == pytest.approx(b[2], rel=1e-3, abs=1e-6)


@pytest.mark.parametrize(("b", "n"), KNOWN)
def test_epochs_to_target_matches_closed_form(b, n):
    k = np.arange(1, n + 1)
    fit = fit_convergence(k, curve(k, *b))
    # crossed half-way through epoch 0.8 n (exactly on an epoch, a noisy loss is 50/50 either side)
    target = curve(n * 0.8 - 0.5, *b)
    expected = int(n * 0.8)
    pred = fit.epochs_to_target(target)
    assert pred.reachable and pred.epoch == pytest.approx(expected, abs=1)
    assert pred.lo <= pred.epoch <= pred.hi
    assert fit.epochs_to_target(target, consecutive=3).epoch == pred.epoch + 2


def test_fractional_progress_of_tuning_mini_epochs_is_accepted():
    k = [0.1, 0.2, 0.3, 0.4, 1, 2, 3, 4, 5, 6]
    fit = fit_convergence(k, curve(k, 0.8, 0.5, 0.2))
    assert fit.b2 == pytest.approx(0.2, abs=1e-4)


@pytest.mark.parametrize("seed", [0, 1, 2], ids=["seed0", "seed1", "seed2"])
def test_noisy_curve_with_spikes_predicts_close_to_truth(seed):
    rng = np.random.default_rng(seed)
    b = (0.3, 1.0, 0.2)
    k = np.arange(1, 41)
    y = curve(k, *b) + rng.normal(0, 0.01, k.size)
    y[[7, 19, 30]] += [0.8, 0.5, 0.6]          # three bad epochs
    target = 0.3                               # truth: 1/(0.3k+1) = 0.1 → k = 30
    pred = fit_convergence(k, y).epochs_to_target(target)
    assert pred.reachable
    assert abs(pred.epoch - 30) <= 3
    assert pred.lo <= 30 + 3 and pred.hi >= 30 - 3


def test_spike_does_not_drag_the_asymptote():
    k = np.arange(1, 31)
    y = curve(k, 0.5, 1.0, 0.1)
    y[-2] += 1.0                               # a spike near the end, where weights are largest
    fit = fit_convergence(k, y)
    assert fit.b2 == pytest.approx(0.1, abs=0.01)


@pytest.mark.parametrize("target", [0.05, 0.1, 0.099], ids=["well-below", "at-asymptote", "just-below"])
def test_target_at_or_below_asymptote_is_unreachable(target):
    k = np.arange(1, 31)
    fit = fit_convergence(k, curve(k, 0.5, 1.0, 0.1))
    pred = fit.epochs_to_target(target)
    assert not pred.reachable and pred.epoch is None
    assert pred.asymptote == pytest.approx(0.1, abs=1e-3)


def test_non_converging_noisy_curve_is_unreachable():
    rng = np.random.default_rng(3)
    k = np.arange(1, 31)
    y = 2.30 + rng.normal(0, 0.02, k.size)     # stuck at chance level for 10 classes
    pred = fit_convergence(k, y).epochs_to_target(1.0)
    assert not pred.reachable and pred.epoch is None
    assert pred.asymptote > 2.0


def test_loss_rising_after_overfitting_does_not_predict_a_crossing_below_the_minimum():
    k = np.arange(1, 41)
    y = np.concatenate([curve(k[:20], 0.5, 1.0, 0.3), curve(20, 0.5, 1.0, 0.3) + 0.01 * np.arange(1, 21)])
    pred = fit_convergence(k, y).epochs_to_target(0.2)
    assert not pred.reachable


def test_target_already_below_start_of_curve_gives_early_epoch():
    k = np.arange(1, 21)
    fit = fit_convergence(k, curve(k, 0.5, 1.0, 0.1))
    assert fit.epochs_to_target(5.0).epoch == 1
    assert fit.epochs_to_target(5.0, consecutive=3).epoch == 3


@pytest.mark.parametrize(("target", "streak", "certain"), [(100.0, 5, True), (0.5, 3, True), (0.2, 0, False)])
def test_a_target_far_above_the_curve_leaves_only_the_run_in_a_row(target, streak, certain):
    """From the last epoch seen on, the curve (which only falls) is under the target by 3 noise
    levels or not: if it is, the rule's run in a row is all that is left, with no interval around
    it (it read "10 (10–14)" for a target 300× above every loss); if not, the interval stays."""
    rng = np.random.default_rng(3)
    k = np.arange(1, 6)
    fit = fit_convergence(k, curve(k, 1.0, 0.2, 0.14) + rng.normal(0, 0.01, k.size))
    p = fit.epochs_to_target(target, consecutive=10, start=5, streak=streak)
    if certain:
        assert (p.epoch, p.lo, p.hi) == (15 - streak,) * 3
    else:
        assert p.lo < p.epoch < p.hi


def test_a_last_loss_above_the_target_keeps_the_interval():
    """The demo job's first 4 epochs and its tuning mini-epoch: 5 points, 3 coefficients, and the
    robust fit puts the last loss (0.157) down as a spike, its curve at 0.117 and the noise at
    0.006. From there 3 epochs in a row under 0.15 were "certain" ("ETA 3 epochs (3–3)"); the
    losses went 0.161, 0.126, 0.127, 0.130, so it stopped at epoch 8, not 7."""
    k = np.array([0.256, 1.0, 2.0, 3.0, 4.0])
    fit = fit_convergence(k, np.array([1.1764, 0.2526, 0.1892, 0.1396, 0.1569]))
    p = fit.epochs_to_target(0.15, consecutive=3, start=4, streak=0)
    assert fit.predict(4.0) + 3.0 * fit.noise <= 0.15   # what the single-epoch interval was read from
    assert p.epoch == 7 and p.lo == 7 and p.hi >= 8, p


def test_tuning_losses_far_under_the_target_leave_only_the_run_in_a_row():
    """Before any training epoch the stop rule's streak is 0 whatever the losses: the last loss
    fitted, not the streak, says whether the noise was read too small (a review's finding)."""
    fit = fit_convergence(np.array([0.0625, 0.125, 0.1875]), np.array([0.9, 0.8, 0.75]))
    p = fit.epochs_to_target(5.0, consecutive=3, start=0, streak=0)
    assert (p.epoch, p.lo, p.hi) == (3, 3, 3), p


def test_same_data_gives_same_interval():
    rng = np.random.default_rng(5)
    k = np.arange(1, 26)
    y = curve(k, 0.3, 1.0, 0.2) + rng.normal(0, 0.02, k.size)
    a = fit_convergence(k, y).epochs_to_target(0.35)
    b = fit_convergence(k, y).epochs_to_target(0.35)
    assert a == b


def test_interval_widens_with_noise():
    # the target is met inside the data (epoch 15), so nothing is extrapolated: the
    # width is the bootstrap's, i.e. the noise's
    k = np.arange(1, 31)
    clean = curve(k, 0.2, 1.0, 0.2)
    noisy = clean + np.random.default_rng(7).normal(0, 0.05, k.size)
    p_clean = fit_convergence(k, clean).epochs_to_target(0.46)
    p_noisy = fit_convergence(k, noisy).epochs_to_target(0.46)
    width = (lambda p: (p.hi if p.hi is not None else 10**9) - p.lo)
    assert p_clean.epoch == 15 and width(p_clean) <= 1
    assert width(p_noisy) > width(p_clean)


@pytest.mark.parametrize(
    ("point", "seen", "spread", "expected"),
    [
        pytest.param(8, 10, 0.75, (8, 8), id="met-inside-the-data"),
        pytest.param(10, 10, 0.75, (10, 10), id="met-at-the-last-epoch"),
        pytest.param(20, 10, 0.0, (20, 20), id="no-spread"),
        # ahead 10 of seen 10: f = 2**0.75 = 1.68 -> 10 + 10/1.68 .. 10 + 10*1.68
        pytest.param(20, 10, 0.75, (15, 27), id="as-far-ahead-as-seen"),
        # ahead 90 of seen 10: f = 10**0.75 = 5.62 -> 10 + 16.0 .. 10 + 506
        pytest.param(100, 10, 0.75, (26, 517), id="far-ahead"),
        pytest.param(100, 10, 1.0, (19, 910), id="wider-spread"),
    ],
)
def test_extrapolation_interval(point, seen, spread, expected):
    assert extrapolation_interval(point, seen, spread) == expected


def test_extrapolated_prediction_interval_covers_the_shape_error():
    # 5 clean epochs of a curve that meets 0.3 at epoch ~47: the bootstrap alone sees no
    # noise and gives a point interval; the reported one still spans the extrapolation error
    k = np.arange(1, 6)
    fit = fit_convergence(k, curve(k, 0.2, 1.0, 0.2))
    pred = fit.epochs_to_target(0.3, horizon=1000)
    early, late = extrapolation_interval(pred.epoch, 5)
    assert pred.lo <= early < pred.epoch < late <= pred.hi
    # a job's horizon is what max_epochs leaves: an upper end past it reads "maybe not" (it read 213
    # for a job that would stop at 60)
    within = fit.epochs_to_target(0.3, horizon=60)
    assert (within.epoch, within.lo, within.hi) == (pred.epoch, pred.lo, None)


def test_predict_is_the_curve():
    k = np.arange(1, 21)
    fit = fit_convergence(k, curve(k, 0.5, 1.0, 0.1))
    assert fit.predict(10) == pytest.approx(curve(10, 0.5, 1.0, 0.1), rel=1e-6)
    assert np.allclose(fit.predict(np.array([1.0, 2.0])), curve([1, 2], 0.5, 1.0, 0.1), rtol=1e-6)


@pytest.mark.parametrize(
    ("progress", "losses", "message"),
    [
        pytest.param([1, 2], [1.0, 0.5], "3 or more", id="two-points"),
        pytest.param([1, 1, 1, 2], [1.0, 0.9, 0.8, 0.5], "3 or more", id="two-distinct"),
        pytest.param([1, 2, 3], [1.0, float("nan"), 0.5], "finite", id="nan"),
        pytest.param([1, 2, 3], [1.0, -0.5, 0.5], "≥ 0", id="negative-loss"),
        pytest.param([0, 1, 2], [1.0, 0.8, 0.5], "> 0", id="zero-progress"),
        pytest.param([1, 2, 3], [1.0, 0.5], "progress values but", id="length-mismatch"),
        pytest.param([1, 2, 3], ["a", 0.5, 0.4], "numbers", id="not-a-number"),
    ],
)
def test_invalid_input_raises_estimate_error(progress, losses, message):
    with pytest.raises(EstimateError, match=message):
        fit_convergence(progress, losses)


def test_invalid_target_or_consecutive():
    k = np.arange(1, 11)
    fit = fit_convergence(k, curve(k, 0.5, 1.0, 0.1))
    with pytest.raises(EstimateError):
        fit.epochs_to_target(float("nan"))
    with pytest.raises(EstimateError):
        fit.epochs_to_target(0.2, consecutive=0)


# The first 8 epochs of bench/curves/ext_dlwp_catsdogs_convnet_aug.csv (Dogs vs Cats convnet,
# fchollet/deep-learning-with-python-notebooks): the validation loss scatters (0.57, 0.68, 0.57),
# the training loss falls; the run met 0.5422 three epochs in a row at epoch 16.
CATSDOGS_VAL = [0.662, 0.6606, 0.6663, 0.62, 0.628, 0.6841, 0.5717, 0.5858]
CATSDOGS_TRAIN = [0.6857, 0.671, 0.6609, 0.6446, 0.6267, 0.608, 0.5992, 0.5908]


def test_noisy_validation_over_a_falling_training_loss_is_not_a_plateau():
    k = np.arange(1, 9)
    alone = fit_convergence(k, CATSDOGS_VAL).epochs_to_target(0.5422, consecutive=3)
    assert not alone.reachable                      # the validation loss alone looks flat
    fit = fit_convergence(k, CATSDOGS_VAL, train_losses=CATSDOGS_TRAIN)
    assert fit.b0 > 0                               # not stored as a plateau
    pred = fit.epochs_to_target(0.5422, consecutive=3)
    assert pred.reachable and 8 < pred.epoch < 32
    assert pred.lo <= pred.epoch and (pred.hi is None or pred.hi >= pred.epoch)


@pytest.mark.parametrize(("k", "losses", "train", "target"), [
    # a real lenet-mnist job's 3 tuning mini-epochs (a quarter epoch each), the first a spike;
    # it went on to meet 0.15 three times in a row at training epoch 6 (before: "target below
    # the asymptote 0.703", while the last loss was 0.42)
    pytest.param([0.256, 0.512, 0.768], [6.4784, 0.7030, 0.4249], [1.9457, 1.9988, 0.5969], 0.15, id="spike"),
    # bench/curves/repeats/seed2/mnist5k_lenet_momentum_lr0.001.csv, the end of a slow head
    pytest.param([1, 2, 3, 4], [2.284, 2.222, 1.995, 1.266], None, 0.5, id="sigmoid-head"),
    # bench/curves/ext_handsonml2_fashion_mlp_sgd.csv (met 0.3252 three in a row at epoch 20)
    pytest.param([1, 2, 3, 4], [0.5207, 0.4345, 0.5334, 0.3916], None, 0.3252, id="scatter"),
])
def test_too_few_points_for_a_plateau_verdict(k, losses, train, target):
    # with under TAIL_MIN_POINTS points a fall the family cannot follow inflates the residual
    # scale until the fall looks like noise: no "never" from that
    fit = fit_convergence(k, losses, train_losses=train)
    assert fit.b0 > 0
    pred = fit.epochs_to_target(target, consecutive=3)
    assert pred.reachable and pred.epoch > max(k)


def test_stuck_in_both_losses_is_still_a_plateau():
    rng = np.random.default_rng(3)
    k = np.arange(1, 31)
    val = 2.30 + rng.normal(0, 0.02, k.size)        # chance level for 10 classes
    train = 2.31 + rng.normal(0, 0.005, k.size)
    fit = fit_convergence(k, val, train_losses=train)
    assert fit.b0 == 0.0
    assert not fit.epochs_to_target(1.0).reachable


def test_training_losses_do_not_move_a_falling_curve():
    k = np.arange(1, 21)
    alone = fit_convergence(k, curve(k, 0.5, 1.0, 0.1))
    both = fit_convergence(k, curve(k, 0.5, 1.0, 0.1), train_losses=curve(k, 0.6, 1.0, 0.05))
    assert both == alone


def test_training_losses_are_sorted_with_their_progress():
    k = np.array([4, 1, 8, 3, 6, 2, 7, 5])   # the training loss decides here (see above)
    shuffled = fit_convergence(k, list(np.array(CATSDOGS_VAL)[k - 1]), train_losses=list(np.array(CATSDOGS_TRAIN)[k - 1]))
    assert shuffled == fit_convergence(np.arange(1, 9), CATSDOGS_VAL, train_losses=CATSDOGS_TRAIN)
    assert shuffled.b0 > 0


@pytest.mark.parametrize(
    ("train", "message"),
    [
        pytest.param([1.0, 0.9], "training losses", id="length-mismatch"),
        pytest.param([1.0, float("nan"), 0.8, 0.7], "finite", id="nan"),
        pytest.param([1.0, -0.9, 0.8, 0.7], "≥ 0", id="negative"),
        pytest.param(["a", 0.9, 0.8, 0.7], "numbers", id="not-a-number"),
    ],
)
def test_invalid_training_losses_raise_estimate_error(train, message):
    with pytest.raises(EstimateError, match=message):
        fit_convergence([1, 2, 3, 4], CATSDOGS_VAL[:4], train_losses=train)


def test_overfitting_with_a_falling_training_loss_still_does_not_cross_below_the_minimum():
    # the validation loss turns up after epoch 20 while the training loss keeps falling
    k = np.arange(1, 41)
    val = np.concatenate([curve(k[:20], 0.5, 1.0, 0.3), curve(20, 0.5, 1.0, 0.3) + 0.01 * np.arange(1, 21)])
    pred = fit_convergence(k, val, train_losses=curve(k, 0.5, 1.0, 0.05)).epochs_to_target(0.2)
    assert not pred.reachable


def test_a_recent_half_that_bends_faster_than_the_family_asks_the_recent_quarter():
    """An exponential decay: the family's average rate over the recent half is slower than the
    current one, and its residuals there are smooth misfit, not noise."""
    import dataclasses

    def decay(k):
        return 0.1 + 2.0 * np.exp(-np.asarray(k, dtype=float) / 15.0)

    k = np.arange(1, 31)
    y = decay(k) + np.random.default_rng(0).normal(0, 0.002, k.size)
    target = float(decay(60.5))                # truth: first under it at epoch 61
    fit = fit_convergence(k, y)
    plain = dataclasses.replace(fit, local_weight=0.0).epochs_to_target(target).epoch
    pred = fit.epochs_to_target(target).epoch
    assert fit.local_weight > 0.9
    assert abs(pred - 61) < abs(plain - 61), (pred, plain)


def test_a_curve_the_family_follows_within_its_noise_keeps_its_fit():
    k = np.arange(1, 41)
    y = curve(k, 0.3, 1.0, 0.2) + np.random.default_rng(1).normal(0, 0.01, k.size)
    assert fit_convergence(k, y).local_weight < 0.1


@pytest.mark.parametrize("b", [(0.5, 1.0, 0.1), (0.02, 3.0, 0.0), (4.0, 1e-3, 1.2), (1e-9, 0.7, 0.3)])
def test_the_closed_form_jacobian_is_the_curve_s_derivative(b: tuple[float, float, float]) -> None:
    from coach.estimate.convergence import _curve, _jacobian

    k = np.array([0.25, 1.0, 2.0, 7.5, 30.0])
    jac = _jacobian(k, b)
    for i in range(3):
        h = 1e-6 * max(abs(b[i]), 1e-3)
        up, down = list(b), list(b)
        if i < 2:   # b2 only shifts the curve: left out, it cannot drown the difference in rounding
            up[2] = down[2] = 0.0
        up[i] += h
        down[i] -= h
        numeric = (_curve(k, *up) - _curve(k, *down)) / (2 * h)
        assert np.allclose(jac[:, i], numeric, rtol=1e-5, atol=1e-9), i


def _with_spikes(k: np.ndarray) -> np.ndarray:
    y = curve(k, 0.3, 1.0, 0.2) + np.random.default_rng(0).normal(0, 0.01, k.size)
    y[[7, 19]] += [0.8, 0.5]
    return y


@pytest.mark.parametrize(("k", "losses", "target", "streak"), [
    pytest.param(np.array([0.256, 0.512, 1.0]), np.array([0.62, 0.41, 0.25]), 0.2, 0, id="after-tuning"),
    pytest.param(np.arange(1, 41), _with_spikes(np.arange(1, 41)), 0.3, 0, id="noisy-with-spikes"),
    pytest.param(np.arange(1, 31), 0.1 + 2.0 * np.exp(-np.arange(1, 31) / 15.0), 0.15, 0, id="current-rate"),
    pytest.param(np.arange(1, 21), np.full(20, 0.8) + np.random.default_rng(2).normal(0, 0.01, 20), 0.5, 0,
                 id="plateau-unreachable"),
    pytest.param(np.arange(1, 11), curve(np.arange(1, 11), 0.5, 1.0, 0.1), 0.3, 2, id="streak-begun"),
])
def test_the_predicted_epoch_does_not_depend_on_the_bootstrap(k, losses, target, streak):
    """The job loop plans on the point fit (no bootstrap) and fits the replicas beside the next
    epoch, for the interval alone: that is only right if the epoch itself is the same."""
    full = fit_convergence(k, losses).epochs_to_target(target, consecutive=3, start=int(k.max()), streak=streak)
    point = fit_convergence(k, losses, bootstrap=0).epochs_to_target(target, consecutive=3, start=int(k.max()),
                                                                    streak=streak)
    assert (point.epoch, point.reachable, point.asymptote) == (full.epoch, full.reachable, full.asymptote)
