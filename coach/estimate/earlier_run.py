"""Earlier runs of the same model and data as a second opinion on when a job will stop.

A curve fitted to a job's first epochs says little about where its tail flattens (after 20%
of the epochs, 37% median error on bench/curves). A job resubmitted with the same model and
data — another seed, target or budget, or another learning rate or optimizer, as in a
hyperparameter search — has a close answer in the store: an earlier run's validation curve.
Runs of one model on one dataset differ mostly in pace, so each earlier curve is time-warped
onto the new points — l_new(k) ≈ L(c·k), c fitted on the same recent points the convergence
fit weighs — and the one that lies closest (least relative misfit, `closest_first`) gives a
second prediction: the stop rule's passage on the warped curve. Both are combined in log
epochs, each weighted by its precision:

* the fit's own spread (`EXTRAPOLATION_SPREAD` read as a log standard deviation), which
  grows with how far it extrapolates;
* the earlier run's: a base spread `SEED_SPREAD` between runs, plus how far the passage
  moves if the warped curve is off by its misfit δ, plus the same extrapolation spread as
  the fit's when the passage lies past the earlier run's last epoch (there its curve is its
  own fit's forecast, not data).

So an earlier run that matches gets most of the weight, one that does not (a different
floor) little or none, and one that needs c at an end of `TIME_SCALES` none at all. A MAP
fit of (b0, b1, b2) pulled toward the earlier run's coefficients was measured and is worse:
a head fit and a tail fit of that family are different curves, so the prior fights the data.
Runs of other models or other data were measured too and match worse than the fit alone.
Figures in docs/estimation.md ("Earlier runs of the same model and data").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from coach.errors import EstimateError
from coach.estimate.stop_rule import first_passage

SMOOTH_WINDOW, SMOOTH_ORDER = 5, 2
"""Savitzky-Golay over the earlier run's losses: its noise is not its shape. By index, not by
progress: a job's tuning mini-epochs sit a fraction of an epoch apart, and a quadratic in
progress through them and the first epochs cannot follow the bend of the head (a real
lenet-mnist run: 1.42, 0.63, 0.30 at 0.26, 0.51, 0.77 epochs smoothed to 1.17, 0.82, 0.53, and
the next job's warp misfit rose from 0.29 to 0.48); by index the head is stretched out."""

MIN_EPOCHS = SMOOTH_WINDOW
"""An earlier run needs at least the smoother's window of epochs."""

MIN_WEIGHT = 0.01
"""Below this share the earlier run does not replace the fit's own prediction and interval."""

TIME_SCALES = np.exp(np.linspace(math.log(0.25), math.log(4.0), 241))
"""Candidate paces c (new run at epoch k ≈ earlier run at c·k); at either end: no match."""

MIN_MISFIT = 0.01
SEED_SPREAD = 0.2
"""Least relative level error of the warped curve, and the log-sd of a matching earlier run's
prediction (seed-to-seed spread). Chosen on bench/curves/repeats (seeds 1 and 2) from
{0.01, 0.02, 0.05} × {0.05, 0.1, 0.2}; chosen leaving each configuration out, the figures
barely move. Runs of other configurations use the same values (measured, not chosen on them:
a run of another learning rate that matches this one's points predicts about as well)."""

Z80 = 1.2816
"""Standard normal 90th percentile: an 80% central interval is ±Z80 standard deviations."""


@dataclass(frozen=True)
class EarlierRun:
    """An earlier run's validation curve, smoothed, with where it heads after its last epoch."""

    label: str                 # e.g. the job id, for messages
    progress: tuple[float, ...]
    smooth: tuple[float, ...]  # Savitzky-Golay smoothed losses
    tail: tuple[float, float, float]   # (b0, b1, b2) of its own convergence fit, for beyond its end
    noise: float               # its epoch-to-epoch noise

    def level(self, x: np.ndarray) -> np.ndarray:
        """Smoothed loss at progress x: interpolated inside the run, a straight line before
        its first epoch, its fitted curve (joined continuously) after its last."""
        k, s = np.asarray(self.progress), np.asarray(self.smooth)
        x = np.asarray(x, dtype=float)
        out = np.interp(x, k, s)
        before, after = x < k[0], x > k[-1]
        out[before] = s[0] + (s[1] - s[0]) / (k[1] - k[0]) * (x[before] - k[0])
        b0, b1, b2 = self.tail
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):   # epochs near 1e308: the warning leaked
            shift = s[-1] - (1.0 / (b0 * k[-1] + b1) + b2)
            out[after] = 1.0 / (b0 * x[after] + b1) + b2 + shift
        return np.maximum(out, 0.0)


def smooth_run(label: str, k: np.ndarray, y: np.ndarray, tail: tuple[float, float, float]) -> EarlierRun:
    """Prepare an earlier run once: its progress `k` (sorted, at least MIN_EPOCHS), validation
    losses `y` and its own fitted curve `tail` (`prepare_earlier_run` fits it)."""
    from scipy.signal import savgol_filter   # on first use: see `coach.estimate`

    if k.size < MIN_EPOCHS:
        raise EstimateError(f"an earlier run needs {MIN_EPOCHS} epochs or more, got {k.size}")
    s = savgol_filter(y, SMOOTH_WINDOW, SMOOTH_ORDER, mode="interp")
    r = (y - s)[len(y) // 4:]   # away from the steep head
    mad = 1.4826 * float(np.median(np.abs(r - np.median(r))))
    noise = max(mad / math.sqrt(18 / 35), 1e-4)   # y − smooth(y) keeps 18/35 of the noise's variance
    return EarlierRun(label, tuple(map(float, k)), tuple(map(float, s)), tuple(map(float, tail)), noise)


@dataclass(frozen=True)
class Warp:
    """An earlier run laid over a new one: pace `c` and RMS relative misfit of the recent points."""

    run: EarlierRun
    c: float
    misfit: float

    @property
    def delta(self) -> float:
        """The relative level error the prediction allows for: the misfit, at least MIN_MISFIT."""
        return max(MIN_MISFIT, self.misfit)


def warp(run: EarlierRun, k: np.ndarray, y: np.ndarray, weights: np.ndarray) -> Warp | None:
    """The pace c that lays `run` over the points (k, y) best by the fit's weights; None when
    no pace inside TIME_SCALES does (the best is at an end)."""
    sse = [float(np.sum(weights * (y - run.level(c * k)) ** 2)) for c in TIME_SCALES]
    i = int(np.argmin(sse))
    if i in (0, len(TIME_SCALES) - 1):
        return None
    c = float(TIME_SCALES[i])
    recent = weights >= 0.5
    ratio = np.maximum(y[recent], 1e-12) / np.maximum(run.level(c * k[recent]), 1e-12)
    return Warp(run, c, float(np.sqrt(np.mean(np.log(ratio) ** 2))))


def closest_first(runs: Sequence[EarlierRun], k: np.ndarray, y: np.ndarray, weights: np.ndarray) -> tuple[Warp, ...]:
    """The runs that some pace lays over the points, warped, least misfit first (the first of
    equals). Sorted anew at every fit: which of several runs of the same model matches can
    change as a run's curve unfolds. The prediction asks the first that says something about
    its target (see `mix`): the closest run may stall above it."""
    return tuple(sorted((w for run in runs if (w := warp(run, k, y, weights)) is not None), key=lambda w: w.misfit))


def passage(levels: np.ndarray, sigma: float, target: float, consecutive: int, start: int = 0,
            streak: int = 0) -> int | None:
    """Median epoch at which `consecutive` losses in a row, levels[j − 1] + N(0, σ²), are ≤ target
    (`stop_rule.first_passage`), counting from epoch start + 1 with `streak` already under it;
    None within len(levels)."""
    near = np.flatnonzero(levels < target + 8.0 * sigma)
    p = first_passage(lambda j: levels[j - 1:j], 1, sigma, target, consecutive, start, len(levels), streak,
                      near[near >= start][0] + 1 if np.any(near >= start) else math.inf)[0]
    return int(p) if math.isfinite(p) else None


@dataclass(frozen=True)
class Mixed:
    """The combined prediction, its 80% interval and the earlier run's part in it."""

    warp: Warp
    epoch: int
    lo: int
    hi: int
    earlier_epoch: int          # the warped earlier run's own passage
    weight: float               # of the earlier run in the mix, 0–1


def mix(w: Warp, fitted: int | None, spread: float, seen: float, target: float, consecutive: int,
        limit: float, start: int = 0, streak: int = 0) -> Mixed | None:
    """Combine the fit's predicted stop epoch (`fitted`, None: unreachable; its interval's
    `spread`, see convergence.EXTRAPOLATION_SPREAD) with the warped earlier run's, in log
    epochs by precision. None: the earlier run says nothing here (no passage within `limit`)."""
    levels = w.run.level(w.c * np.arange(1, int(limit) + 1, dtype=float))
    own, early, late = (passage(levels, w.run.noise, t, consecutive, start, streak)
                        for t in (target, target * (1 + w.delta), target * (1 - w.delta)))
    if own is None or late is None or early is None:
        return None

    def extrapolated(point: float, data_end: float) -> float:   # the log-sd of a forecast past its data
        return spread * math.log(1 + max(point - data_end, 0) / max(data_end, 1.0)) / Z80

    end = w.run.progress[-1] / w.c   # the earlier run's last epoch, on the new run's clock
    sd_run = math.sqrt(SEED_SPREAD ** 2 + (math.log(late / early) / 2) ** 2 + extrapolated(own, end) ** 2)
    if fitted is None:
        point, sd, weight = own, sd_run, 1.0
    else:
        sd_fit = max(extrapolated(max(fitted, seen + 1), seen), 1e-3)
        a, b = sd_run ** -2, sd_fit ** -2
        point = int(round(math.exp((a * math.log(own) + b * math.log(fitted)) / (a + b))))
        sd, weight = (a + b) ** -0.5, a / (a + b)
    lo, hi = max(1, math.floor(point * math.exp(-Z80 * sd))), math.ceil(point * math.exp(Z80 * sd))
    return Mixed(w, point, lo, hi, own, weight)
