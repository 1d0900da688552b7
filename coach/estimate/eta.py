"""ETA: the convergence prediction (epochs left) times the speed model (seconds per epoch).

    epochs_left = max(predicted stop epoch − epochs done, consecutive − streak)
    seconds     = epochs_left · epoch_seconds

The interval is the convergence fit's interval of the stop epoch (bootstrap, widened by how
far it extrapolates); the epoch time is taken as known (its error is small next to that of
the epoch count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from coach.estimate.convergence import ConvergenceFit, EpochsPrediction


@dataclass(frozen=True)
class Eta:
    """Predicted rest of a job; None fields mean "unknown / maybe never"."""

    epochs_left: int | None    # stop epoch − epochs done; None if unreachable
    lo: int | None             # from the 80% interval of the stop epoch
    hi: int | None             # None = maybe never, or not within the horizon (max_epochs)
    seconds: float | None      # epochs_left · epoch_seconds
    seconds_lo: float | None
    seconds_hi: float | None
    reachable: bool            # target above the fitted asymptote, or an earlier run says when
    asymptote: float           # b2
    earlier_weight: float = 0.0   # share of an earlier run of the same model and data in the epochs
    earlier: str = ""             # that run's label (its job id)


def eta(fit: ConvergenceFit, target: float, consecutive: int, epochs_done: float,
        epoch_seconds: float, streak: int = 0, horizon: float | None = None) -> Eta:
    """Epochs and seconds left until the stop rule (`consecutive` epochs ≤ target) is met.

    `streak` is how many of the latest epochs are already at or below the target: even if
    the fitted curve is already below it, at least `consecutive − streak` epochs remain.
    `horizon` (e.g. the job's max_epochs) bounds what counts as reachable.
    """
    pred = fit.epochs_to_target(target, consecutive, horizon=horizon, start=math.floor(epochs_done + 1e-9),
                                streak=streak)

    def secs(n: int | None) -> float | None:
        return None if n is None else n * epoch_seconds

    n, lo, hi = epochs_left(pred, epochs_done, consecutive, streak)
    return Eta(epochs_left=n, lo=lo, hi=hi, seconds=secs(n), seconds_lo=secs(lo), seconds_hi=secs(hi),
               reachable=pred.reachable, asymptote=pred.asymptote, earlier_weight=pred.earlier_weight,
               earlier=pred.earlier.run.label if pred.earlier is not None else "")


def epochs_left(pred: EpochsPrediction, epochs_done: float, consecutive: int,
                streak: int = 0) -> tuple[int | None, int | None, int | None]:
    """Whole epochs from `epochs_done` to the predicted stop and to its interval's ends, each at
    least the `consecutive − streak` epochs the rule still needs: what `coach status` and `coach
    plot` both say (the plot once named an epoch the rule could not stop at). Counted from the
    last whole epoch: after tuning, 0.77 of epoch 1 is trained and epoch 1 is still to run
    (rounded, a stop at epoch 5 was 4 epochs away)."""
    floor = max(consecutive - streak, 0)
    whole = math.floor(epochs_done + 1e-9)

    def left(epoch: int | None) -> int | None:
        return None if epoch is None else max(math.ceil(epoch - 1e-9) - whole, floor)

    return left(pred.epoch), left(pred.lo), left(pred.hi)
