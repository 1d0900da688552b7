"""When the stop rule is first met: `consecutive` noisy losses in a row at or below the target.

The validation loss of epoch j is taken as a predicted level plus noise, ε ~ N(0, σ²)
independent, so epoch j is under the target with probability p_j = Φ((target − level_j) / σ),
and "`consecutive` in a row" is a small run-length Markov chain. Why not the plain crossing of
a curve: near a loss floor it crosses the target long before three noisy epochs in a row get
under it (on bench/curves the crossing came early in most cases). Both predictions of a stop
epoch use this chain: the fitted curve and its bootstrap replicas (`convergence`), and a warped
earlier run (`earlier_run`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np


def first_passage(level_at: Callable[[int], np.ndarray], n: int, sigma: float, target: float,
                  consecutive: int, start: int, end: int, streak: int, near: float) -> np.ndarray:
    """Median epoch at which the rule is met, for each of `n` curves whose levels at epoch j
    are `level_at(j)` (shape (n,)), counting from epoch start + 1 with `streak` epochs already
    under the target; +inf where that is not by `end`.

    `near` is the first epoch at which any curve comes within 8σ of the target: before it
    p ≈ 0 and the run length stays 0, so the chain starts there (a curve logged per step would
    otherwise take millions of steps).
    """
    from scipy.special import ndtr   # on first use: see `coach.estimate`

    if streak >= consecutive:   # met already
        return np.full(n, float(start))
    result = np.full(n, math.inf)
    begin = max(start, 0) + 1
    if n == 0 or not math.isfinite(near) or near > end:
        return result
    if near > begin:
        begin, streak = int(near), 0
    run = np.zeros((n, consecutive))     # probability of each current run length (0..c−1)
    run[:, min(max(streak, 0), consecutive - 1)] = 1.0
    done = np.zeros(n)                   # probability that the rule has been met
    for j in range(begin, end + 1):
        level = level_at(j)
        p = ndtr((target - level) / sigma) if sigma > 0 else (level <= target).astype(float)
        done += run[:, -1] * p
        run = np.concatenate([(run.sum(axis=1) * (1.0 - p))[:, None], run[:, :-1] * p[:, None]], axis=1)
        result[(done >= 0.5) & ~np.isfinite(result)] = j
        if np.all(np.isfinite(result)):
            break
    return result


def met_in(losses: Sequence[float], target: float, consecutive: int) -> tuple[int | None, int]:
    """The rule on recorded losses: the index of the loss that first completes `consecutive` in
    a row at or below the target (None if none does), and how many of the last losses are at or
    below it (the streak a prediction goes on from). NaN never reaches the target."""
    streak = 0
    for i, loss in enumerate(losses):
        streak = streak + 1 if loss <= target else 0
        if streak >= consecutive:
            return i, streak
    return None, streak
