"""Fit a job's models from its recorded epochs: the one place that turns history into fits,
shared by the job loop (planning, ETA) and `coach plot`; and which earlier jobs' curves can
stand in as a second opinion (same model and data)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from coach.errors import EstimateError
from coach.estimate.convergence import ConvergenceFit, fit_convergence, prepare_earlier_run
from coach.estimate.earlier_run import MIN_EPOCHS, EarlierRun
from coach.estimate.progress import progress_of
from coach.estimate.speed import SpeedModel, SpeedSample, fit_speed
from coach.state.records import EpochRecord


LOOP_BOOTSTRAP = 30
"""Bootstrap replicas for a running job's interval: each costs a curve fit, and the fit runs
between two epochs (beside the next, since session 32); 30 give a usable 10–90% interval at a
third of the default's cost."""


SAME_CURVE_FIELDS = ("batch_size", "optimizer", "learning_rate", "momentum", "weight_decay")
"""With the model and data, what decides a job's loss per epoch up to its seed: not the target,
budget, allocation or (w, s) — the batch is global, split across the workers."""


def same_model(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two jobs (their specs as stored) train the same model on the same data, so one's
    curve is the other's at another pace; a model file counts by its text, not its path."""
    def model(spec: Mapping[str, Any]) -> Any:
        m = spec.get("model") or {}
        return m.get("source", m.get("name")) if isinstance(m, dict) else m   # not a dict: a row edited by hand
    return model(a) == model(b) and a.get("dataset") == b.get("dataset")


def same_curve(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two jobs train the same loss curve up to the seed: the same model and data, and
    the same batch and optimizer settings."""
    return same_model(a, b) and all(a.get(f) == b.get(f) for f in SAME_CURVE_FIELDS)


SAME_SPEED_FIELDS = ("batch_size", "resources", "scheduler")
"""With the model and data, what decides a step's speed on one backend up to the machine's noise:
the global batch and each role's cores and memory (and, on a cluster, who places the pods); not
the optimizer's settings, the seed or the target."""


def same_speed(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two jobs (their specs as stored) train at the same samples/s on a (w, s): the same
    model and data, batch, resources and scheduler. Compared as JSON, as the store keeps them."""
    return same_model(a, b) and all(json.dumps(a.get(f), sort_keys=True) == json.dumps(b.get(f), sort_keys=True)
                                    for f in SAME_SPEED_FIELDS)


def earlier_run_of(epochs: Sequence[EpochRecord], samples_per_epoch: float | None,
                   label: str) -> EarlierRun | None:
    """A finished job's epochs as an earlier run, None if it has too few training epochs.

    Its tuning mini-epochs count too, at their progress, as in the new job's own fit: a job
    whose tuning looked the same is then laid over it at pace ≈ 1 from its first epochs (with
    its training epochs alone, a resubmission of the same job matched at paces of 0.4–1.3).
    """
    if sum(e.phase == "training" for e in epochs) < MIN_EPOCHS:
        return None
    try:
        return prepare_earlier_run(progress_of(epochs, samples_per_epoch), [e.val_loss for e in epochs], label)
    except EstimateError:   # e.g. a diverged job's losses
        return None   # a second opinion only: never a reason for this job to fail


def fit_history(epochs: Sequence[EpochRecord], global_batch: int, samples_per_epoch: float | None,
                earlier: Sequence[EarlierRun] = (), measured_before: Sequence[EpochRecord] = (),
                ) -> tuple[ConvergenceFit | None, SpeedModel | None]:
    """(convergence fit, speed model), each None while there is too little to fit.

    `samples_per_epoch` None: taken from the recorded training epochs (see progress_of).
    `earlier`: earlier runs of the same model and data, for the fit's second opinion.
    `measured_before`: epochs of earlier jobs that train at the same speed (`same_speed`): the
    speed model counts them beside the job's own.
    """
    return (convergence_of(epochs, samples_per_epoch, earlier),
            speed_of(epochs, global_batch, measured_before))


def convergence_of(epochs: Sequence[EpochRecord], samples_per_epoch: float | None,
                   earlier: Sequence[EarlierRun] = (), bootstrap: int = LOOP_BOOTSTRAP) -> ConvergenceFit | None:
    """The loss curve fitted to the recorded epochs (`fit_history`), None while too few.
    `bootstrap` 0: the point fit alone, a quarter of the time; the replicas only give the
    interval (`ConvergenceFit.epochs_to_target`'s epoch does not depend on them)."""
    try:
        return fit_convergence(progress_of(epochs, samples_per_epoch), [e.val_loss for e in epochs],
                               bootstrap=bootstrap, train_losses=[e.train_loss for e in epochs],
                               earlier=earlier)
    except EstimateError:
        return None


def speed_of(epochs: Sequence[EpochRecord], global_batch: int,
             measured_before: Sequence[EpochRecord] = ()) -> SpeedModel | None:
    """The speed model fitted to the recorded epochs (`fit_history`), None before any rate.
    Milliseconds: the planner needs the epoch just measured before it plans the next."""
    samples = [SpeedSample(e.workers, e.servers, e.samples_per_s, global_batch, weight=max(e.samples, 1))
               for e in (*measured_before, *epochs) if e.samples_per_s > 0]
    try:
        return fit_speed(samples) if samples else None
    except EstimateError:
        return None
