"""Convergence model: how the validation loss falls with training progress.

Optimus' model (EuroSys'18, §3.1) of a loss curve trained with SGD:

    l(k) = 1 / (b0·k + b1) + b2        b0, b1, b2 ≥ 0

where `k` is training progress in epochs (fractional for tuning mini-epochs) and `b2`
is the asymptote — the loss the job approaches but never goes below. The fit is a
non-linear weighted, robust least-squares fit (scipy `least_squares`, `soft_l1` loss):

* recent epochs weigh most: the recent half of the progress seen (at least 5 points)
  has weight 1, earlier points 1e-3 — the head of a real curve (warm-up, a sigmoid
  start) is rarely 1/k-shaped, and the tail says where the curve is heading (measured
  on bench/curves, see TAIL_FRACTION);
* the soft-L1 loss, scaled by the residuals' median absolute deviation, stops a single
  spike (a bad epoch, a learning-rate bump) from dragging the whole curve;
* losses are never clipped or moved toward any target: the target only enters when
  we ask when the fitted curve crosses it;
* a plateau (the fitted fall over the recent points is inside the noise) is stored as
  flat at its level, and a crossing beyond the horizon counts as unreachable — so a
  job stuck at chance level is "unreachable", not "10⁹ epochs". Given the training
  losses of the same epochs, the plateau must show in them too: a job stuck at chance
  level is stuck in both, while a validation loss that scatters over a few epochs above a
  falling training loss is noise, not a plateau (see `fit_convergence`).

The stop rule is met when `consecutive` noisy epochs in a row are at or below the target,
which near the loss floor happens well after the fitted curve crosses it. So the predicted
epoch is the median first passage of that rule for losses l(j) + ε, ε ~ N(0, σ²) with σ
the fit's robust residual scale, corrected for the three fitted coefficients (see
`stop_rule.first_passage`); on bench/curves this cut the median error after 20% of the epochs from 40%
to 37% and after 50% from 12.5% to 11.7%.

Uncertainty is a residual bootstrap (Efron): the fitted curve plus residuals drawn with
replacement, refitted `BOOTSTRAP_REPLICAS` times with a fixed seed (so the same data
always gives the same interval). The interval of the epochs-to-target is the
[10th, 90th] percentile of the replicas' passages, counting a replica that never
gets there as +infinity (then `hi` is None: "may never get there"), widened by how far
the prediction extrapolates (EXTRAPOLATION_SPREAD): the replicas share the fitted
curve's shape, and the shape is what an early extrapolation gets most wrong.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from coach.errors import EstimateError
from coach.estimate.earlier_run import MIN_WEIGHT, EarlierRun, Warp, closest_first, mix, smooth_run
from coach.estimate.stop_rule import first_passage

MIN_POINTS = 3
"""Fewest (progress, loss) points with distinct progress that can fit three coefficients."""

BOOTSTRAP_REPLICAS = 100
"""Refits used for the interval; ~0.2 s for 50 points on one core."""

INTERVAL_PERCENTILES = (10.0, 90.0)
"""The reported interval is an 80% central interval."""

EXTRAPOLATION_SPREAD = 0.75
"""How far a prediction of epochs still to come may be off, as a power of how far ahead it
looks: with `seen` epochs of data and a prediction `ahead` epochs later, the interval holds
seen + ahead / f … seen + ahead · f, f = (1 + ahead / seen) ** EXTRAPOLATION_SPREAD. The
bootstrap alone sees only the noise of the points, not that the curve's shape is
extrapolated: its 80% intervals held the true stop epoch in 27% (after 20% of the
epochs) and 37% (after 50%) of the cases of bench/curves. 0.75 is the split-conformal 80%
quantile of |log(ahead predicted / ahead true)| / log(1 + ahead predicted / seen) over those cases (`bench/estimator.py` prints it,
and the coverage with the spread recalibrated without each curve in turn)."""

HORIZON_FACTOR = 10.0
MIN_HORIZON = 100.0
"""Default horizon: max(MIN_HORIZON, HORIZON_FACTOR × epochs seen). A crossing predicted
beyond it is reported as unreachable: a curve that barely falls (a plateau, a job stuck at
chance level) fits as 1/(b0·k + b1) with a tiny b0, and "10⁹ epochs" is nonsense."""

TAIL_FRACTION = 0.5
TAIL_MIN_POINTS = 5
EARLY_WEIGHT = 1e-3
"""The fit uses the recent half of the progress seen (never fewer than 5 points); earlier
points keep a weight of 1e-3, enough to pin the curve where the tail alone cannot. Why:
real curves start slower or faster than 1/k (warm-up, a sigmoid head), and on the
recorded curves in bench/curves even a weight of 0.05 on the head pulled the tail fit
off — the median error after 50% of the epochs went from 10% (tail) to 21% (all points)."""

FLAT_Z = 2.0
FLAT_B1 = 1e12
"""A plateau is stored as b0 = 0, b1 = FLAT_B1 (1/b1 ≈ 0), b2 = its level."""

LOCAL_FRACTION = 0.25
"""The local rate: (b0, b1) refitted with b2 kept on the recent quarter of the progress seen
(never fewer than TAIL_MIN_POINTS points). The asymptote needs the long window; how fast the
gap to it closes *now* is a local property, and a curve whose recent half still bends (the end
of a sigmoid head, a slow second component) is fitted there by an average rate that is not the
current one. How much the local rate counts is the share of the residual variance of the
recent half that is misfit rather than noise (see `_misfit_share`)."""

_SEED = 20260101
TIE = 1e-3
"""Fits whose robust costs differ by less than this fraction count as equally good."""


@dataclass(frozen=True)
class EpochsPrediction:
    """When the fitted loss curve meets the stop rule, counted in absolute epochs.

    `epoch` counts as the data did (the epoch that ends at progress 1.0 is epoch 1). It
    is the median epoch at which the stop rule is first met by losses scattered around
    the fitted curve as much as the data were; on a noise-free curve, the first epoch
    with predicted loss ≤ target, plus `consecutive − 1`. None when the target is not
    reachable.
    """

    epoch: int | float | None  # median first epoch meeting the stop rule (met in a file: its own); None if unreachable
    lo: int | None             # 80% interval: bootstrap replicas' 10th percentile, widened by extrapolation
    hi: int | None             # ... their 90th percentile, widened; None = some replicas never reach it
    reachable: bool            # target > b2 and the crossing within the horizon, or an earlier run says when
    asymptote: float           # b2
    note: str = ""             # in words, why it is unreachable (or how sure we are)
    earlier_weight: float = 0.0   # share of an earlier run of the same model and data in `epoch`
    earlier: Warp | None = None   # that run, laid over this one (None when none counted)


@dataclass(frozen=True)
class ConvergenceFit:
    """A fitted curve l(k) = 1/(b0·k + b1) + b2 with its bootstrap replicas."""

    b0: float                  # speed of convergence: 1/(l − b2) grows by b0 per epoch
    b1: float                  # 1/(l(0) − b2): offset of the start
    b2: float                  # asymptote: l(k) → b2 as k → ∞, never below
    last_progress: float       # largest progress seen (epochs)
    noise: float               # epoch-to-epoch noise of the loss: the residuals' robust (MAD) scale corrected for the 3 fitted b
    replicas: tuple[tuple[float, float, float], ...] = ()   # bootstrap (b0, b1, b2)
    earlier: tuple[Warp, ...] = ()   # earlier runs of the same model and data laid over this one, closest first
    local: tuple[float, float] | None = None   # (b0, b1) refitted on the recent quarter with b2 kept
    local_weight: float = 0.0   # its share, in log epochs, of the predicted passage (misfit share)
    fitted_from: float = 0.0   # the first progress weighed fully (the recent half): before it the curve is not the data's
    last_loss: float = -math.inf   # the loss at the largest progress seen (tuning mini-epochs included)

    def predict(self, k: float | np.ndarray) -> float | np.ndarray:
        """Predicted loss after `k` epochs of progress."""
        values = _curve(np.atleast_1d(np.asarray(k, dtype=float)), self.b0, self.b1, self.b2)
        return values if np.ndim(k) else float(values[0])

    def horizon(self) -> float:
        """The default horizon in epochs: max(MIN_HORIZON, HORIZON_FACTOR × epochs seen)."""
        return max(MIN_HORIZON, HORIZON_FACTOR * self.last_progress)

    def epochs_to_target(self, target: float, consecutive: int = 1, horizon: float | None = None,
                         start: int = 0, streak: int = 0, offset: float = 0.0) -> EpochsPrediction:
        """Epoch at which the predicted loss first meets `target` for `consecutive` epochs.

        Unreachable when the target is at or below the asymptote b2 (the model says the
        loss never gets there), or when the crossing lies beyond `horizon` epochs (default
        `self.horizon()` plus the rule's run in a row; pass e.g. the job's max_epochs): we
        say so rather than extrapolate to a huge number. Epochs in the answer and in its note
        are counted from `offset` (a curve file numbered from 0 is fitted from epoch 1).
        """
        def shown(e):   # an epoch of the fit, in the caller's numbering
            return e if e is None or not offset else int(round(e - offset))

        if not math.isfinite(target):
            raise EstimateError(f"target must be a finite number, got {target!r}")
        if consecutive < 1:
            raise EstimateError(f"consecutive must be at least 1, got {consecutive}")
        # the default horizon guards against nonsense; the rule's run in a row comes on top of it
        # (with --consecutive 100, a curve at the target by epoch 5 was "never")
        limit = self.horizon() + consecutive - 1 if horizon is None else float(horizon)
        raw = _crossing(self.b0, self.b1, self.b2, target, consecutive)
        chain = (self.noise, target, consecutive, limit, start, streak)
        point = _passage(np.array([(self.b0, self.b1, self.b2)]), *chain)[0]
        point = int(point) if math.isfinite(point) else None
        if self.local is not None and self.local_weight > 0.0 and streak < consecutive:
            # the current rate of the recent quarter, as far as the recent half's residuals are misfit
            local = _passage(np.array([(*self.local, self.b2)]), *chain)[0]
            local = int(local) if math.isfinite(local) else None
            w = self.local_weight
            if point is None or local is None:
                point = local if w >= 0.5 else point
            else:
                point = int(round(math.exp((1.0 - w) * math.log(max(point, 1)) + w * math.log(max(local, 1)))))
        least = max(start, 0) + max(consecutive - max(streak, 0), 0)   # epochs the rule needs at least
        # before the bootstrap: when an earlier run counts, its interval replaces the replicas'
        asked = self.earlier if streak < consecutive else ()   # once the rule is met, nothing to ask
        m = next((m for w in asked if (m := mix(w, point, EXTRAPOLATION_SPREAD, self.last_progress, target,
                                                   consecutive, min(limit, MAX_PASSAGE_STEPS), start, streak))
                  is not None and m.weight >= MIN_WEIGHT), None)
        if m is not None:
            lo = max(m.lo, min(least, m.epoch))
            # this run's own curve says "maybe never" (target at or below its asymptote, or past
            # the horizon): the earlier run gives the epoch, but the interval stays open
            hi = None if point is None or (horizon is not None and m.hi > limit) else m.hi
            lo, hi = shown(lo), shown(hi)
            return EpochsPrediction(
                epoch=shown(m.epoch), lo=lo, hi=hi, reachable=True, asymptote=self.b2, earlier_weight=m.weight,
                earlier=m.warp,
                note=f"80% interval [{lo}, {'never' if hi is None else hi}]; {m.weight:.0%} from earlier "
                     f"run {m.warp.run.label} (it alone: epoch {shown(m.earlier_epoch)}, this run's curve "
                     f"alone: {'never' if point is None else shown(point)})")
        passages = _passage(np.array(self.replicas).reshape(-1, 3), *chain)
        lo = hi = None
        if passages.size:
            # "lower" picks an actual replica, so +inf never gets interpolated into NaN
            p_lo, p_hi = np.percentile(passages, INTERVAL_PERCENTILES, method="lower")
            lo = int(p_lo) if math.isfinite(p_lo) else None
            hi = int(p_hi) if math.isfinite(p_hi) else None
        if point == least and self.last_loss <= target and self.predict(start) + 3.0 * self.noise <= target:
            # the curve (which only falls) is under the target by 3 noise levels from here on, and
            # the last loss is under it too: the rule's run in a row is all that is left, and
            # nothing is extrapolated ("10 (10–14)" for a target 300× above every loss). A last loss
            # above the target says the noise is larger than 5 points' residuals made it (the demo
            # job read "ETA 3 epochs (3–3)" at 0.157 against 0.15, its fit at 0.117, and took 4)
            lo = hi = point
        elif point is not None:
            # the interval always contains the point estimate, and the extrapolation's error
            early, late = extrapolation_interval(point, self.last_progress)
            lo = max(min(point if lo is None else lo, point, early), min(least, point))
            # past a given horizon (a job's: what max_epochs leaves) the job does not run: "maybe
            # not"; the default horizon is only a guard against nonsense and cuts nothing here
            hi = None if hi is None or (horizon is not None and late > limit) else max(hi, point, late)
        crossing = None if raw is None else raw - consecutive + 1   # the fitted curve's first epoch under it
        point, lo, hi, raw, crossing = map(shown, (point, lo, hi, raw, crossing))
        limit -= offset
        if target <= self.b2:
            note = (f"target {target:g} is at or below the fitted asymptote {self.b2:.4g}: "
                    "the loss is not expected to get there")
        elif point is not None:
            note = f"80% interval [{lo}, {'never' if hi is None else hi}]"
        elif raw is not None and raw <= limit:
            note = (f"the fitted curve crosses {target:g} at epoch {crossing}, but with the observed noise "
                    f"{consecutive} epochs in a row under it are not expected within the horizon of {limit:g}")
        elif raw is None or raw >= MAX_EPOCH:
            note = (f"the fitted curve falls too slowly: it would reach {target:g} only after more than "
                    f"{MAX_EPOCH:g} epochs, beyond the horizon of {limit:g}")
        elif crossing <= limit:
            note = (f"the fitted curve crosses {target:g} at epoch {crossing}, but {consecutive} epochs in a "
                    f"row under it would end at epoch {raw}, beyond the horizon of {limit:g}")
        else:
            note = (f"the fitted curve falls too slowly: it would reach {target:g} only at epoch {crossing}, "
                    f"beyond the horizon of {limit:g}")
        return EpochsPrediction(epoch=point, lo=lo, hi=hi, reachable=point is not None,
                                asymptote=self.b2, note=note)


RISING_POINTS = 5   # the fewest recent losses `rising` judges a trend on


def extrapolation_interval(point: int, seen: float, spread: float = EXTRAPOLATION_SPREAD) -> tuple[int, int]:
    """The epochs [lo, hi] around a predicted stop epoch `point` that its extrapolation from
    `seen` epochs of data may be off by (see EXTRAPOLATION_SPREAD)."""
    seen = max(float(seen), 1.0)
    ahead = point - seen
    if ahead <= 0:   # met within the epochs seen: nothing extrapolated
        return point, point
    factor = (1.0 + ahead / seen) ** spread
    return max(1, math.floor(seen + ahead / factor)), math.ceil(seen + ahead * factor)


def rising(progress: Sequence[float], losses: Sequence[float]) -> int | None:
    """Where the recent half of the losses (5 at least) starts, as an index, if it trends upward
    beyond its noise (a straight line's slope above 4 of its standard errors: with 5 points, a
    flat noisy curve passes about once in 70): overfitting, or a run diverging. The convergence
    model's curve only falls, so its fit is flat there and says the target is out of reach, not
    why."""
    start = len(progress) - max(RISING_POINTS, len(progress) // 2)
    if start < 0:
        return None
    x, y = np.asarray(progress[start:], dtype=float), np.asarray(losses[start:], dtype=float)
    if np.ptp(x) == 0.0 or np.ptp(y) == 0.0:   # a constant: a slope of rounding noise is no rise
        return None
    x = (x - x[0]) / np.ptp(x)
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    se = math.sqrt(float(resid @ resid) / (len(x) - 2) / float(((x - x.mean()) ** 2).sum()))
    up = slope > 1e-9 * float(np.abs(y).max()) and slope > 4.0 * se
    return start if up else None


def prepare_earlier_run(progress: Sequence[float], losses: Sequence[float], label: str = "") -> EarlierRun:
    """An earlier run of the same model and data (its epochs' progress and validation losses),
    prepared once, for `fit_convergence(..., earlier=)`; see coach.estimate.earlier_run.

    Raises EstimateError for bad values (also values too large to fit) or fewer than
    earlier_run.MIN_EPOCHS epochs.
    """
    k, y, _ = _validate(progress, losses)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            b, _ = _fit(k, y, _weights(k), start=None)
        return smooth_run(label, k, y, (float(b[0]), float(b[1]), float(b[2])))
    except (ValueError, OverflowError, FloatingPointError):   # e.g. losses near 1e308: "(34, 'Numerical ...')"
        raise EstimateError(f"the earlier run's losses are too large to fit a curve to (the largest is "
                            f"{float(np.max(y)):.3g})") from None


def fit_convergence(progress: Sequence[float], losses: Sequence[float],
                    bootstrap: int = BOOTSTRAP_REPLICAS,
                    train_losses: Sequence[float] | None = None,
                    earlier: Sequence[EarlierRun] = ()) -> ConvergenceFit:
    """Fit l(k) = 1/(b0·k + b1) + b2 to validation losses observed at `progress` epochs.

    `train_losses` (optional): the training losses of the same epochs (Coach records the
    mean training loss of every epoch). They are not fitted into the curve; they only
    decide whether a validation curve whose recent fall is inside its noise is a plateau:
    it is stored flat only if the training loss is flat over the same points too. A job
    stuck at chance level is stuck in both; a validation loss scattering over a few epochs
    while the training loss keeps falling is still falling. On bench/curves this turned 4
    of 15 "unreachable" answers into predictions (2 published cases after 20% of the
    epochs, 1 published and 1 recorded after 50%; errors 0–40%) and changed no other.

    `earlier` (optional, each from `prepare_earlier_run`): earlier runs of the same model and
    data. Those that some pace lays over these points are kept, closest first (`fit.earlier`),
    and `epochs_to_target` combines this fit's prediction with the first that says something
    about the target, by how well each is expected to predict.

    Raises EstimateError when there are fewer than MIN_POINTS distinct progress values,
    or a progress/loss is negative, NaN or infinite (the model has b2 ≥ 0, so a negative
    loss cannot be fitted), or `train_losses` is not one such loss per progress value.
    """
    k, y, train = _validate(progress, losses, train_losses)
    with warnings.catch_warnings():   # scipy's overflow warnings on extreme data: the result says it
        warnings.simplefilter("ignore", RuntimeWarning)
        fit = _fit_convergence(k, y, bootstrap, train)
    if earlier:
        fit = dataclasses.replace(fit, earlier=closest_first(earlier, k, y, _weights(k)))
    return fit


def _flat(k: np.ndarray, b: np.ndarray, scale: float, tail: np.ndarray) -> bool:
    """Whether the fitted curve's fall over the recent points is within FLAT_Z standard
    errors of a linear trend's fall (σ·√(12/n)): then the curve is flat there. Never from
    under TAIL_MIN_POINTS points: there a fall the family cannot follow (a spike, the end of
    a slow head) inflates the residual scale until the fall itself looks like noise."""
    n = int(tail.sum())
    return n >= TAIL_MIN_POINTS and bool(_curve(k[tail].min(), *b) - _curve(k.max(), *b)
                                         < FLAT_Z * scale * math.sqrt(12.0 / n))


def _train_falls(k: np.ndarray, train: np.ndarray | None, weights: np.ndarray, tail: np.ndarray) -> bool:
    """Whether the training loss falls over the recent points (False without training losses)."""
    if train is None:
        return False
    try:
        b_train, scale_train = _fit(k, train, weights, start=None)
    except (EstimateError, ValueError, OverflowError, FloatingPointError):   # e.g. losses near 1e308
        return False   # no evidence that it falls: the validation curve decides alone
    return not _flat(k, b_train, scale_train, tail)


def _fit_convergence(k: np.ndarray, y: np.ndarray, bootstrap: int,
                     train: np.ndarray | None = None) -> ConvergenceFit:
    weights = _weights(k)
    b, scale = _fit(k, y, weights, start=None)
    tail = weights >= 0.5
    if _flat(k, b, scale, tail) and not _train_falls(k, train, weights, tail):
        # a plateau: any split of the level into 1/b1 + b2 fits; say what the data say — it
        # is flat here (unless the training loss, far less noisy, still falls over the same
        # epochs: then the validation scatter is noise)
        b = np.array([0.0, FLAT_B1, float(np.median(y[tail]))])
    resid = y - _curve(k, *b)
    replicas: list[tuple[float, float, float]] = []
    if bootstrap > 0:
        rng = np.random.default_rng(_SEED)
        # residuals of the fully weighted (recent) points only: the head's misfit is not noise
        pool = resid[tail]
        centred = pool - np.median(pool)
        fitted = _curve(k, *b)
        for _ in range(bootstrap):
            y_star = fitted + rng.choice(centred, size=k.size, replace=True)
            y_star = np.maximum(y_star, 0.0)
            b_star, _ = _fit(k, y_star, weights, start=b, scale=scale)
            replicas.append((float(b_star[0]), float(b_star[1]), float(b_star[2])))
    # residuals of a 3-coefficient fit to n points understate the noise by √((n − 3)/n)
    n_tail = int(tail.sum())
    noise = scale * (math.sqrt(n_tail / (n_tail - 3)) if n_tail > 3 else 1.0)
    share = _misfit_share(y[tail], noise) if b[0] > 0.0 else 0.0
    local = _local_rate(k, y, b, scale) if share > 0.0 else None
    return ConvergenceFit(b0=float(b[0]), b1=float(b[1]), b2=float(b[2]), last_progress=float(k.max()),
                          noise=float(noise),
                          replicas=tuple(replicas), local=local, local_weight=share if local else 0.0,
                          fitted_from=float(k[tail].min()), last_loss=float(y[np.argmax(k)]))


def _misfit_share(y_tail: np.ndarray, noise: float) -> float:
    """The share of the recent half's residual variance that is misfit, not noise:
    1 − (σ_noise / σ_fit)², with σ_noise from the second differences of the losses (for
    independent noise their variance is 6σ², and a smooth trend barely enters them). A curve
    the fit follows within its noise gives 0; a smooth curve the fit cannot follow, near 1.
    Needs 3 second differences (TAIL_MIN_POINTS = 5 points)."""
    if y_tail.size < TAIL_MIN_POINTS or noise <= 0.0:
        return 0.0
    pure = _robust_scale(np.diff(y_tail, 2), y_tail) / math.sqrt(6.0)
    return max(0.0, 1.0 - (pure / noise) ** 2)


def _local_rate(k: np.ndarray, y: np.ndarray, b: np.ndarray, scale: float) -> tuple[float, float] | None:
    """(b0, b1) refitted, robustly, on the recent LOCAL_FRACTION of the progress (at least
    TAIL_MIN_POINTS points) with the asymptote b2 kept; None if that fails."""
    from scipy.optimize import least_squares   # on first use: see `coach.estimate`
    near = _recent(k, LOCAL_FRACTION)
    b2 = float(b[2])

    def residuals(x: np.ndarray) -> np.ndarray:
        return _curve(k[near], x[0], x[1], b2) - y[near]

    def jac(x: np.ndarray) -> np.ndarray:
        return _jacobian(k[near], (x[0], x[1], b2))[:, :2]

    try:
        r = least_squares(residuals, np.clip(b[:2], 1e-12, None), jac=jac, bounds=(0.0, np.inf), method="trf",
                          x_scale="jac", loss="soft_l1", f_scale=scale, max_nfev=200)
    except (ValueError, OverflowError, FloatingPointError):
        return None
    if not np.all(np.isfinite(r.x)):
        return None
    return float(max(r.x[0], 0.0)), float(max(r.x[1], 0.0))


def _validate(progress: Sequence[float], losses: Sequence[float],
              train_losses: Sequence[float] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    try:
        k = np.asarray(progress, dtype=float).ravel()
        y = np.asarray(losses, dtype=float).ravel()
        t = None if train_losses is None else np.asarray(train_losses, dtype=float).ravel()
    except (TypeError, ValueError) as exc:
        raise EstimateError(f"progress and losses must be numbers: {exc}") from exc
    if k.size != y.size:
        raise EstimateError(f"{k.size} progress values but {y.size} losses")
    if t is not None:
        if t.size != k.size:
            raise EstimateError(f"{k.size} progress values but {t.size} training losses")
        if not np.all(np.isfinite(t)):
            raise EstimateError("training losses must be finite numbers (found NaN or infinity)")
        if np.any(t < 0):
            raise EstimateError("training losses must be ≥ 0")
    if not (np.all(np.isfinite(k)) and np.all(np.isfinite(y))):
        raise EstimateError("progress and losses must be finite numbers (found NaN or infinity)")
    if np.any(k <= 0):
        raise EstimateError("progress must be > 0 epochs (a loss is measured after some training)")
    if np.any(y < 0):
        raise EstimateError("losses must be ≥ 0: the model l(k) = 1/(b0·k + b1) + b2 has b2 ≥ 0")
    if np.unique(k).size < MIN_POINTS:
        raise EstimateError(f"need losses at {MIN_POINTS} or more distinct progress values to fit "
                            f"three coefficients, got {np.unique(k).size}")
    order = np.argsort(k, kind="stable")
    return k[order], y[order], (None if t is None else t[order])


def _weights(k: np.ndarray) -> np.ndarray:
    """Full weight for the recent half of the progress (at least TAIL_MIN_POINTS points), ~0 before."""
    return np.where(_recent(k, TAIL_FRACTION), 1.0, EARLY_WEIGHT)


def _recent(k: np.ndarray, fraction: float) -> np.ndarray:
    """The points in the recent `fraction` of the progress seen, never fewer than TAIL_MIN_POINTS."""
    return k >= min((1.0 - fraction) * k.max(), np.sort(k)[-min(TAIL_MIN_POINTS, k.size)])


def _curve(k: np.ndarray, b0: float, b1: float, b2: float) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return 1.0 / (b0 * k + b1) + b2


def _jacobian(k: np.ndarray, b: Sequence[float]) -> np.ndarray:
    """∂l/∂(b0, b1, b2) at each k, in closed form: finite differences cost 4 evaluations per
    iteration, 40% of a fit that runs between every two epochs of a job."""
    with np.errstate(divide="ignore", over="ignore"):
        d = -1.0 / (b[0] * k + b[1]) ** 2
    return np.column_stack([d * k, d, np.ones_like(k)])


def _robust_scale(resid: np.ndarray, y: np.ndarray) -> float:
    mad = 1.4826 * float(np.median(np.abs(resid - np.median(resid))))
    floor = 1e-3 * max(float(np.ptp(y)), 1e-3 * max(float(np.abs(y).max()), 1e-12))
    return max(mad, floor)


def _starts(k: np.ndarray, y: np.ndarray, weights: np.ndarray) -> list[np.ndarray]:
    """Initial guesses: for a grid of asymptotes b2 < min(loss), 1/(l − b2) is linear in k."""
    starts = []
    y_min = float(y.min())
    for q in (0.0, 0.5, 0.8, 0.9, 0.97, 0.995):
        b2 = q * y_min
        z = 1.0 / np.maximum(y - b2, 1e-12)
        a = np.vstack([k, np.ones_like(k)]).T * weights[:, None]
        (b0, b1), *_ = np.linalg.lstsq(a, z * weights, rcond=None)
        starts.append(np.array([max(b0, 1e-9), max(b1, 1e-9), b2]))
    return starts


def _fit(k: np.ndarray, y: np.ndarray, weights: np.ndarray, start: np.ndarray | None,
         scale: float | None = None) -> tuple[np.ndarray, float]:
    """Robust fit and the residual scale it used.

    From scratch (`start` None): plain least squares from several starts, a residual
    scale (MAD over the fully weighted points) from the best, robust fits from every
    start with that scale, then the scale re-estimated from the best robust fit's own
    residuals (a spike inflates the least-squares residuals, not the robust ones) and
    one last robust refit. With `start` and `scale` (bootstrap replicas): one robust fit.
    """
    from scipy.optimize import least_squares   # on first use: see `coach.estimate`

    sw = np.sqrt(weights)
    tail = weights >= 0.5

    def residuals(b: np.ndarray) -> np.ndarray:
        return (_curve(k, *b) - y) * sw

    def jac(b: np.ndarray) -> np.ndarray:
        return _jacobian(k, b) * sw[:, None]

    def robust(x0: np.ndarray, f_scale: float):
        return least_squares(residuals, x0, jac=jac, bounds=(0.0, np.inf), method="trf", x_scale="jac",
                             loss="soft_l1", f_scale=f_scale, max_nfev=200)

    if start is not None and scale is not None:
        return np.maximum(robust(np.clip(start, 1e-12, None), scale).x, 0.0), scale
    starts = [start] if start is not None else _starts(k, y, weights)
    plain = [least_squares(residuals, np.clip(np.asarray(x0, dtype=float), 1e-12, None), jac=jac,
                           bounds=(0.0, np.inf), method="trf", x_scale="jac", max_nfev=200) for x0 in starts]
    first = min(plain, key=lambda r: r.cost)
    scale = _robust_scale(residuals(first.x)[tail], y)
    best = _best([robust(r.x, scale) for r in plain])
    scale = _robust_scale(residuals(best)[tail], y)
    best = _best([robust(best, scale)])
    return np.maximum(best, 0.0), scale


def _best(results) -> np.ndarray:
    """Lowest robust cost; near-equal costs (a flat curve fits any split of 1/b1 + b2)
    keep the higher asymptote, the conservative reading "it will not fall much further"."""
    best, best_cost = None, math.inf
    for r in results:
        if not np.all(np.isfinite(r.x)):
            continue
        if best is None or r.cost < best_cost * (1 - TIE) or (r.cost <= best_cost * (1 + TIE) and r.x[2] > best[2]):
            best, best_cost = r.x, min(r.cost, best_cost)
    if best is None:
        raise EstimateError("the loss curve could not be fitted (no finite solution)")
    return best


def _passage(params: np.ndarray, sigma: float, target: float, consecutive: int, limit: float,
             start: int = 0, streak: int = 0) -> np.ndarray:
    """Median epoch at which the stop rule is first met (`stop_rule.first_passage`), for each
    fitted curve (b0, b1, b2) with noise σ (the fit's `noise`), after `start` epochs run with
    `streak` of them under the target. +inf when the target is at or below the asymptote or
    the median passage lies beyond `limit`.
    """
    if streak >= consecutive:   # met already, whatever the curves say
        return np.full(len(params), float(start))
    result = np.full(len(params), math.inf)
    live = params[:, 2] < target
    b0, b1, b2 = params[live].T
    near = float(np.min(_reaches(target + 8.0 * sigma, b0, b1, b2), initial=math.inf))
    end = int(min(limit, MAX_EPOCH))
    if end - max(start + 1, near) > MAX_PASSAGE_STEPS:
        # too many epochs to follow one by one; at this scale one epoch's noise is negligible
        crossings = [_crossing(*abc, target, consecutive) for abc in zip(b0, b1, b2)]
        least = start + consecutive - streak
        result[live] = [max(c, least) if c is not None and c <= end else math.inf for c in crossings]
        return result

    def level_at(j: int) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return 1.0 / (b0 * j + b1) + b2

    result[live] = first_passage(level_at, int(np.sum(live)), sigma, target, consecutive, start, end, streak, near)
    return result


def _crossing(b0: float, b1: float, b2: float, target: float, consecutive: int) -> int | None:
    """First integer epoch from which the curve stays ≤ target for `consecutive` epochs."""
    k_star = float(_reaches(target, b0, b1, b2))
    if not math.isfinite(k_star):
        return None
    if k_star > MAX_EPOCH:
        return MAX_EPOCH
    return max(1, math.ceil(k_star - 1e-9)) + consecutive - 1


def _reaches(level: float, b0: float | np.ndarray, b1: float | np.ndarray,
             b2: float | np.ndarray) -> np.ndarray:
    """Progress at which each curve 1/(b0·k + b1) + b2 gets down to `level` (≤ 0: it starts
    there), +inf if it never does (level at or below b2, or a flat curve above it)."""
    b0, b1, b2 = (np.asarray(b, dtype=float) for b in (b0, b1, b2))
    with np.errstate(divide="ignore", invalid="ignore"):
        room = level - b2
        flat = np.where(1.0 / b1 <= room, 0.0, np.inf)
        return np.where(room > 0, np.where(b0 > 0, (1.0 / room - b1) / b0, flat), np.inf)


MAX_PASSAGE_STEPS = 100_000
"""Epochs the stop-rule chain follows one by one (~1 s for 100 replicas); a longer span (a
curve logged per step, say) uses the plain crossing of each fitted curve instead."""

MAX_EPOCH = 10**12
"""Crossings are computed up to here; any horizon is far below it."""
