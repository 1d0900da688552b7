"""Speed model: training throughput (samples/s) as a function of workers `w` and servers `s`.

Two candidate forms are fitted to every measured configuration, and the one that
predicts *held-out* configurations better (leave-one-configuration-out MAPE) is used:

* ``optimus`` — Optimus' synchronous parameter-server model (EuroSys'18, §3.2). The
  time of one step of global batch M is

      t(w, s) = t0·M/w + t1 + t2·w/s + t3·w + t4·s        t_i ≥ 0
      (compute      fixed  push/pull   per-worker per-server overhead)

  and throughput is M / t(w, s). It is linear in t_i, so it is fitted with non-negative
  least squares on relative errors (each row divided by its measured t).
* ``quadratic`` — the thesis' §4.2 form, a concave bowl with a best (w, s):

      f(w, s) = −b1·(w − b2)² − b3·(s − b4)² + b5        b_i ≥ 0

  fitted with bounded non-linear least squares. It needs ≥ 6 distinct configurations
  (5 coefficients plus one to hold out).

With fewer than 3 distinct configurations neither form is trustworthy, so the model is
``nearest``: the throughput of the nearest measured configuration (ties → the smaller
one). It never promises a gain that was not measured, so a planner using it will not
grow a job past what its tuning tried. With fewer workers than any it measured, it predicts
the least Optimus' form allows (`_nearest`'s `scale_fewer`), so that the planner does not take a job
below what it measured for speed; an epoch's cost is priced at the nearest's own rate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from coach.errors import EstimateError

MIN_CONFIGS_PARAMETRIC = 3
"""Below this many distinct (w, s, M) configurations the model is nearest-neighbour."""

MIN_CONFIGS_QUADRATIC = 6
"""The thesis' form has 5 coefficients; it competes only with one configuration to spare."""

MIN_THROUGHPUT = 1e-9
"""Predictions are floored here: the quadratic form can go negative far from its peak."""


@dataclass(frozen=True)
class SpeedSample:
    """One measured epoch (or mini-epoch): its configuration and its throughput."""

    workers: int               # w ≥ 1
    servers: int               # s ≥ 1
    samples_per_s: float       # measured: samples processed by all workers / wall seconds
    global_batch: int          # M, samples per synchronous step (a Coach job's batch_size, whatever w)
    weight: float = 1.0        # how much it measured (its samples): a whole epoch outweighs a mini-epoch


@dataclass(frozen=True)
class SpeedModel:
    """A fitted throughput model; `predict(w, s)` gives samples/s."""

    form: str                  # "optimus" | "quadratic" | "nearest"
    coef: tuple[float, ...]    # optimus: (t0..t4); quadratic: (b1..b5); nearest: ()
    global_batch: float        # M used by predict() unless one is given (the latest sample's)...
    mape: float | None         # leave-one-configuration-out MAPE of this form, None if < 3 configs
    n_configs: int             # distinct configurations behind the fit
    batch_per_worker: float | None = None   # ...or M = batch_per_worker·w, when every sample had one M/w
    candidates: dict[str, float] = field(default_factory=dict)   # held-out MAPE of every form tried
    points: tuple[tuple[int, int, float, float], ...] = ()       # (w, s, M, samples/s) medians
    counts: tuple[float, ...] = ()   # per point, how many measurements its median stands for (`readings`)

    def predict(self, workers: int, servers: int, global_batch: float | None = None,
                priced: bool = False) -> float:
        """Predicted samples/s with `workers` workers and `servers` servers. `priced`: for what an
        epoch costs, a nearest model gives the nearest measured rate as it is (not scaled down
        for fewer workers, `_nearest`): scaled down, (1, 1) was the dearest configuration of all, and a job on a
        tight budget stopped with money left for an epoch of it (review, session 42)."""
        m = self._batch(workers, servers, global_batch)
        if self.form == "optimus":
            return max(_optimus(np.array(self.coef), workers, servers, m), MIN_THROUGHPUT)
        if self.form == "quadratic":
            return max(_quadratic(np.array(self.coef), workers, servers), MIN_THROUGHPUT)
        return _nearest(self.points, workers, servers, m, scale_fewer=not priced)

    def epoch_seconds(self, workers: int, servers: int, samples_per_epoch: float, priced: bool = False) -> float:
        """Predicted wall seconds of one epoch of `samples_per_epoch` samples (`priced`: as `predict`)."""
        return samples_per_epoch / self.predict(workers, servers, priced=priced)

    def measured(self, workers: int, servers: int) -> float | None:
        """The samples/s (w, s) measured (the weighted median of its measurements, at the batch
        `predict` would use), or None if it was not measured. The planner compares two measured
        configurations on this: a fit of 5 coefficients to 4 tuning points, 10% off held out,
        put (2, 1) 8.7% above (1, 1) where it measured 9.5%, and (2, 2), measured 22% above
        (1, 1), was never reached."""
        i = self._measured_at(workers, servers)
        return None if i is None else self.points[i][3]

    def readings(self, workers: int, servers: int) -> float:
        """How many measurements `measured(w, s)` stands for, counted by what each measured: a
        mini-epoch of a quarter of an epoch beside one whole epoch is 1.5 (Kish's effective
        number of its weights), so a median of many epochs is trusted more than one mini-epoch's
        rate. 1 for a configuration not measured, or measured by a Coach that did not count."""
        i = self._measured_at(workers, servers)
        return self.counts[i] if i is not None and i < len(self.counts) else 1.0

    def _measured_at(self, workers: int, servers: int) -> int | None:
        """The index of (w, s)'s point at the batch `predict` would use, None if not measured."""
        m = self._batch(workers, servers, None)
        return next((i for i, (w, s, pm, _) in enumerate(self.points)
                     if (w, s) == (workers, servers) and math.isclose(pm, m)), None)

    def _batch(self, workers: int, servers: int, global_batch: float | None) -> float:
        if workers < 1 or servers < 1:
            raise EstimateError(f"need at least 1 worker and 1 server, got w={workers}, s={servers}")
        if global_batch is not None:
            return float(global_batch)
        return self.batch_per_worker * workers if self.batch_per_worker is not None else self.global_batch


def fit_speed(samples: Sequence[SpeedSample]) -> SpeedModel:
    """Fit both forms to the measured samples and keep the better one on held-out configurations.

    Repeated measurements of one configuration are reduced to their median first, weighted by
    what each measured, so a configuration run for many epochs does not outvote the others, one
    epoch slowed by a burst of load on a shared machine does not move it, and a whole epoch
    outweighs a mini-epoch of 10 steady steps (on `lenet-mnist` one read (1, 1) at 912 samples/s
    against 773–780 for its epochs, and the planner kept the job on (1, 1)). If every sample has the same batch
    per worker (M/w), predictions scale M with w; otherwise M is the latest sample's. Raises EstimateError when there is
    no usable sample (empty, or a non-positive/non-finite throughput or configuration).
    """
    points, counts = _aggregate(samples)
    m_latest = float(samples[-1].global_batch)
    per_worker = {p[2] / p[0] for p in points}
    b = per_worker.pop() if len(per_worker) == 1 else None
    n = len(points)
    if n < MIN_CONFIGS_PARAMETRIC:
        return SpeedModel(form="nearest", coef=(), global_batch=m_latest, batch_per_worker=b, mape=None,
                          n_configs=n, points=tuple(points), counts=counts)
    fitters = {"optimus": _fit_optimus}
    if n >= MIN_CONFIGS_QUADRATIC:
        fitters["quadratic"] = _fit_quadratic
    fitters["nearest"] = None  # type: ignore[assignment]
    scores = {name: _holdout_mape(name, fitter, points) for name, fitter in fitters.items()}
    # the first of equal scores wins: optimus, then quadratic, then nearest
    best = min(scores, key=lambda name: (scores[name], list(scores).index(name)))
    coef: tuple[float, ...] = ()
    if best != "nearest":
        coef = tuple(float(c) for c in fitters[best](points))  # type: ignore[misc]
    return SpeedModel(form=best, coef=coef, global_batch=m_latest, batch_per_worker=b, mape=scores[best],
                      n_configs=n, candidates=scores, points=tuple(points), counts=counts)


Point = tuple[int, int, float, float]


def _aggregate(samples: Sequence[SpeedSample]) -> tuple[list[Point], tuple[float, ...]]:
    """Per (w, s, M), sorted: the weighted median of its measurements (repeated ones reduced), and
    how many equal measurements that median is worth, (Σ weight)² / Σ weight² (Kish)."""
    if not samples:
        raise EstimateError("no speed samples: run at least one (mini-)epoch first")
    for smp in samples:
        if smp.workers < 1 or smp.servers < 1 or smp.global_batch <= 0:
            raise EstimateError(f"invalid configuration in speed sample {smp}")
        if not (math.isfinite(smp.samples_per_s) and smp.samples_per_s > 0):
            raise EstimateError(f"throughput must be a positive number, got {smp.samples_per_s!r}")
        if not (math.isfinite(smp.weight) and smp.weight > 0):
            raise EstimateError(f"a speed sample's weight must be a positive number, got {smp.weight!r}")
    groups: dict[tuple[int, int, float], list[tuple[float, float]]] = {}
    for smp in samples:
        key = (int(smp.workers), int(smp.servers), float(smp.global_batch))
        groups.setdefault(key, []).append((float(smp.samples_per_s), float(smp.weight)))
    ordered = sorted(groups.items())
    points = [(w, s, m, _weighted_median(values)) for (w, s, m), values in ordered]
    counts = tuple(sum(wt for _, wt in values) ** 2 / sum(wt * wt for _, wt in values) for _, values in ordered)
    return points, counts


def _weighted_median(values: list[tuple[float, float]]) -> float:
    """The value at half the total weight; midway between two values when half falls between
    them, so with equal weights it is the plain median."""
    ordered = sorted(values)
    half, seen = sum(wt for _, wt in ordered) / 2, 0.0
    for i, (v, wt) in enumerate(ordered):
        seen += wt
        if math.isclose(seen, half, rel_tol=1e-12) and i + 1 < len(ordered):
            return (v + ordered[i + 1][0]) / 2
        if seen > half:
            return v
    return ordered[-1][0]


def _optimus(t: np.ndarray, w: float, s: float, m: float) -> float:
    step = t[0] * m / w + t[1] + t[2] * w / s + t[3] * w + t[4] * s
    return m / step if step > 0 else math.inf


def _quadratic(b: np.ndarray, w: float, s: float) -> float:
    return float(-b[0] * (w - b[1]) ** 2 - b[2] * (s - b[3]) ** 2 + b[4])


def _nearest(points: Sequence[Point], w: int, s: int, m: float, scale_fewer: bool = False) -> float:
    """The nearest measured configuration's rate. `scale_fewer`: scaled down by the workers where
    `w` is fewer than any measured, as if all of a step's time were the workers' compute (Optimus'
    t0·M/w), the least it can be. Read as its neighbour's, (1, 1), which tuning leaves out beside
    (2, 1) and (2, 2), was as fast as (2, 1), and the planner took a job from the (2, 2) it
    measured down to (1, 1), which nothing had measured. The held-out scores (`_holdout_mape`)
    compare the forms on the neighbour's rate alone, as before."""
    def distance(p: Point) -> tuple[float, int, int]:
        return (abs(p[0] - w) + abs(p[1] - s) + abs(math.log(p[2] / m)), p[0], p[1])

    nearest = min(points, key=distance)
    return nearest[3] * w / nearest[0] if scale_fewer and w < min(p[0] for p in points) else nearest[3]


def _fit_optimus(points: Sequence[Point]) -> np.ndarray:
    """NNLS on step time; rows divided by the measured step time so errors are relative."""
    from scipy.optimize import nnls   # on first use: see `coach.estimate`

    a = np.array([[m / w, 1.0, w / s, w, s] for w, s, m, _ in points])
    t_step = np.array([m / v for _, _, m, v in points])
    coef, _ = nnls(a / t_step[:, None], np.ones_like(t_step))
    return coef


def _fit_quadratic(points: Sequence[Point]) -> np.ndarray:
    from scipy.optimize import least_squares   # on first use: see `coach.estimate`

    w = np.array([p[0] for p in points], dtype=float)
    s = np.array([p[1] for p in points], dtype=float)
    v = np.array([p[3] for p in points], dtype=float)

    def residuals(b: np.ndarray) -> np.ndarray:
        return (-b[0] * (w - b[1]) ** 2 - b[2] * (s - b[3]) ** 2 + b[4] - v) / v

    best_w, best_s = w[np.argmax(v)], s[np.argmax(v)]
    x0 = np.array([0.05 * v.max(), best_w, 0.05 * v.max(), best_s, v.max()])
    return least_squares(residuals, x0, bounds=(0.0, np.inf), method="trf", x_scale="jac").x


def _holdout_mape(name: str, fitter, points: Sequence[Point]) -> float:
    """Mean |predicted − measured| / measured over configurations left out one at a time."""
    errors = []
    for i, (w, s, m, v) in enumerate(points):
        rest = [p for j, p in enumerate(points) if j != i]
        if name == "nearest":
            pred = _nearest(rest, w, s, m)
        elif name == "optimus":
            pred = _optimus(_fit_optimus(rest), w, s, m)
        else:
            pred = _quadratic(fitter(rest), w, s)
        pred = max(pred, MIN_THROUGHPUT) if math.isfinite(pred) else 10 * v
        errors.append(abs(pred - v) / v)
    return float(np.mean(errors))
