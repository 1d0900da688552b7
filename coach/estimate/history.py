"""Fit a job's models from its recorded epochs: the one place that turns history into fits,
shared by the job loop (planning, ETA) and `coach plot`."""

from __future__ import annotations

from collections.abc import Sequence

from coach.errors import EstimateError
from coach.estimate.convergence import ConvergenceFit, fit_convergence
from coach.estimate.progress import progress_of
from coach.estimate.speed import SpeedModel, SpeedSample, fit_speed
from coach.state.records import EpochRecord


LOOP_BOOTSTRAP = 30
"""Bootstrap replicas for a running job's interval: each costs a curve fit, and the fit sits
between two epochs; 30 give a usable 10–90% interval at a third of the default's cost."""


def fit_history(epochs: Sequence[EpochRecord], global_batch: int, samples_per_epoch: float | None,
                bootstrap: int = LOOP_BOOTSTRAP) -> tuple[ConvergenceFit | None, SpeedModel | None]:
    """(convergence fit, speed model), each None while there is too little to fit.

    `samples_per_epoch` None: taken from the recorded training epochs (see progress_of).
    """
    try:
        fit = fit_convergence(progress_of(epochs, samples_per_epoch), [e.val_loss for e in epochs],
                              bootstrap=bootstrap, train_losses=[e.train_loss for e in epochs])
    except EstimateError:
        fit = None
    samples = [SpeedSample(e.workers, e.servers, e.samples_per_s, global_batch)
               for e in epochs if e.samples_per_s > 0]
    try:
        speed = fit_speed(samples) if samples else None
    except EstimateError:
        speed = None
    return fit, speed
