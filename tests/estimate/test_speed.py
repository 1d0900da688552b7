"""The speed model fits both forms, keeps the one that predicts held-out configurations better."""

from __future__ import annotations

import pytest

from coach.errors import EstimateError
from coach.estimate import SpeedModel, SpeedSample, fit_speed

GRID = [(1, 1), (2, 1), (1, 2), (2, 2), (3, 1), (3, 2), (4, 2), (4, 1)]


def optimus_rate(w, s, m, t=(0.002, 0.05, 0.02, 0.005, 0.01)):
    return m / (t[0] * m / w + t[1] + t[2] * w / s + t[3] * w + t[4] * s)


def quadratic_rate(w, s, b=(40.0, 3.0, 60.0, 2.0, 1000.0)):
    return -b[0] * (w - b[1]) ** 2 - b[2] * (s - b[3]) ** 2 + b[4]


def test_recovers_optimus_coefficients_with_a_fixed_global_batch():
    t = (0.002, 0.05, 0.02, 0.005, 0.01)
    model = fit_speed([SpeedSample(w, s, optimus_rate(w, s, 256, t), 256) for w, s in GRID])
    assert model.form == "optimus"
    assert model.mape is not None and model.mape < 1e-6
    assert model.coef == pytest.approx(t, rel=1e-4, abs=1e-8)
    assert model.batch_per_worker is None
    assert model.predict(6, 3) == pytest.approx(optimus_rate(6, 3, 256, t), rel=1e-6)


def test_fixed_batch_per_worker_scales_the_global_batch_with_workers():
    # with M = 64·w, t0·M/w and t1 are the same column: only predictions are identifiable
    model = fit_speed([SpeedSample(w, s, optimus_rate(w, s, 64 * w), 64 * w) for w, s in GRID])
    assert model.form == "optimus" and model.batch_per_worker == 64
    assert model.predict(6, 3) == pytest.approx(optimus_rate(6, 3, 64 * 6), rel=1e-6)


def test_chooses_quadratic_when_the_data_are_a_bowl():
    data = [(w, s) for w in range(1, 6) for s in range(1, 4)]
    model = fit_speed([SpeedSample(w, s, quadratic_rate(w, s), 128) for w, s in data])
    assert model.form == "quadratic"
    assert set(model.candidates) == {"optimus", "quadratic", "nearest"}
    assert model.candidates["quadratic"] <= model.candidates["optimus"]
    assert model.coef == pytest.approx((40.0, 3.0, 60.0, 2.0, 1000.0), rel=1e-3)
    assert model.predict(3, 2) == pytest.approx(1000.0, rel=1e-3)


@pytest.mark.parametrize(
    ("configs", "form"),
    [
        pytest.param([(1, 1)], "nearest", id="one-config"),
        pytest.param([(1, 1), (2, 1)], "nearest", id="two-configs"),
        pytest.param([(1, 1), (2, 1), (1, 2)], "optimus", id="three-configs-optimus-only"),
    ],
)
def test_few_configurations_fall_back(configs, form):
    model = fit_speed([SpeedSample(w, s, optimus_rate(w, s, 64 * w), 64 * w) for w, s in configs])
    assert model.form in (form, "nearest")
    assert model.n_configs == len(configs)
    if len(configs) < 3:
        assert model.mape is None
        # never promises a gain that was not measured
        best = max(optimus_rate(w, s, 64 * w) for w, s in configs)
        assert model.predict(8, 4) <= best + 1e-9


@pytest.mark.parametrize(("w", "s", "expected"), [
    pytest.param(1, 1, 700.0, id="fewer-workers-scaled-down"),   # half of (2, 1)'s: all of it the workers' compute
    pytest.param(1, 2, 750.0, id="fewer-workers-beside-a-second-server"),   # half of (2, 2)'s, its nearest
    pytest.param(2, 1, 1400.0, id="measured"),
    pytest.param(3, 2, 1500.0, id="more-workers-no-gain"),
])
def test_the_nearest_model_neither_grows_nor_shrinks_a_job_past_what_it_measured(w, s, expected):
    # tuning's (2, 1) and (2, 2), at one global batch (Coach's: M whatever w)
    model = fit_speed([SpeedSample(2, 1, 1400.0, 64), SpeedSample(2, 2, 1500.0, 64)])
    assert model.form == "nearest"
    assert model.predict(w, s) == pytest.approx(expected)


def test_repeated_measurements_count_by_their_median():
    # one epoch slowed to a third by a burst of load does not move the configuration's speed
    model = fit_speed([SpeedSample(1, 1, 90.0, 32), SpeedSample(1, 1, 110.0, 32), SpeedSample(1, 1, 30.0, 32),
                       SpeedSample(1, 1, 100.0, 32)])
    assert model.predict(1, 1) == pytest.approx(95.0)


@pytest.mark.parametrize(("measured", "expected"), [
    # a mini-epoch of 768 samples read fast; two epochs of 4,000 (and the rest of epoch 1) did not
    ([(912.0, 768), (773.0, 928), (780.0, 4000)], 780.0),
    ([(912.0, 768), (780.0, 4000)], 780.0),
    ([(912.0, 768), (780.0, 768)], 846.0),            # equal weights: the plain median
    # one whole epoch slowed by a burst of load among three does not move it
    ([(990.0, 4000), (500.0, 4000), (1010.0, 4000), (1000.0, 768)], 990.0),
])
def test_a_whole_epoch_outweighs_a_mini_epoch(measured: list[tuple[float, int]], expected: float) -> None:
    model = fit_speed([SpeedSample(1, 1, rate, 64, weight=n) for rate, n in measured])
    assert model.predict(1, 1) == pytest.approx(expected)


@pytest.mark.parametrize(("measured", "expected"), [
    ([4000], 1.0),
    ([4000, 4000, 4000], 3.0),
    ([1024, 4000], 5024 ** 2 / (1024 ** 2 + 4000 ** 2)),   # a probe beside an epoch: about 1.5
    ([768] * 4, 4.0),
])
def test_a_median_counts_the_measurements_behind_it(measured: list[int], expected: float) -> None:
    model = fit_speed([SpeedSample(2, 1, 1000.0 + i, 64, weight=n) for i, n in enumerate(measured)]
                      + [SpeedSample(1, 1, 800.0, 64, weight=768)])
    assert model.readings(2, 1) == pytest.approx(expected)
    assert model.readings(1, 1) == 1.0
    assert model.readings(2, 2) == 1.0   # not measured


def test_no_speedup_on_two_cores_is_learned():
    # measured on a 2-core machine: a 2nd worker competes with the server for the cores
    measured = [SpeedSample(1, 1, 1000, 64), SpeedSample(2, 1, 930, 128), SpeedSample(1, 2, 990, 64),
                SpeedSample(2, 2, 900, 128), SpeedSample(3, 1, 850, 192)]
    model = fit_speed(measured)
    assert model.predict(2, 1) < model.predict(1, 1) * 1.02
    assert model.predict(3, 1) < model.predict(1, 1) * 1.02


def test_noisy_optimus_data_held_out_error_is_small():
    import numpy as np

    rng = np.random.default_rng(0)
    grid = [(w, s) for w in range(1, 7) for s in range(1, 4)]
    samples = [SpeedSample(w, s, optimus_rate(w, s, 64 * w) * (1 + rng.normal(0, 0.03)), 64 * w)
               for w, s in grid]
    model = fit_speed(samples)
    assert model.mape is not None and model.mape < 0.06


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param([], id="empty"),
        pytest.param([SpeedSample(0, 1, 10.0, 32)], id="zero-workers"),
        pytest.param([SpeedSample(1, 1, 0.0, 32)], id="zero-throughput"),
        pytest.param([SpeedSample(1, 1, float("nan"), 32)], id="nan-throughput"),
        pytest.param([SpeedSample(1, 1, 10.0, 32, weight=0)], id="zero-weight"),
    ],
)
def test_invalid_samples_raise(bad):
    with pytest.raises(EstimateError):
        fit_speed(bad)


def test_predict_rejects_empty_configuration():
    model = fit_speed([SpeedSample(1, 1, 100.0, 32)])
    with pytest.raises(EstimateError):
        model.predict(0, 1)
    assert isinstance(model, SpeedModel) and model.form == "nearest"
