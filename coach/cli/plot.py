"""`coach plot JOB_ID [-o job.png]`: the job's loss curve with its fit, (w, s) and speed surface."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from coach.cli.format import plot_file
from coach.data import train_size
from coach.errors import CoachError, SpecError, StateError
from coach.state.store import Store


def plot(job_id: str = typer.Argument(..., metavar="JOB"),
         output: Optional[Path] = typer.Option(None, "-o", "--output", help=(
             "File to write: .png, .pdf or .svg (default: JOB.png, named by the job's full id)."))) -> None:
    """Draw the loss curve with its fit, (w, s) per epoch, and the speed surface.

    The validation loss per epoch with the fitted curve and where it crosses the target, the
    workers and servers of each epoch, and the fitted speed model f(w, s) over the
    configurations the job may use."""
    from coach.estimate.history import fit_history
    from coach.job.earlier import find_earlier, speeds_before
    from coach.report.plots import plot_job

    store = Store()
    job = store.job(job_id)
    # one job's plot does not overwrite another's
    output = plot_file(Path(f"{job.job_id}.png") if output is None else output, "-o", "job.png")
    epochs = store.epochs(job.job_id)
    if not epochs:
        raise CoachError(f"{job.job_id} has no recorded epochs yet; nothing to plot")
    spec = store.spec(job.job_id)
    try:   # written by Coach at submit; a hand edit failed here as AttributeError, KeyError or ValueError
        n_train = _epoch_size(spec)
        batch, consecutive = int(spec.get("batch_size", 64)), int(spec.get("consecutive", 3))
        limits = (int(spec["max_workers"]), int(spec["max_servers"])) if "max_servers" in spec else None
        max_epochs = int(spec["max_epochs"]) if "max_epochs" in spec else None
    except (AttributeError, KeyError, TypeError, ValueError, SpecError) as e:
        raise StateError(f"{store.path}: job {job.job_id}: spec_json: cannot be read back ({type(e).__name__}: "
                         f"{e}); the row was edited or damaged") from None
    earlier = [e.run for e in find_earlier(store, job, spec, n_train)]   # the runs the job's ETA asked
    before = speeds_before(store, job, spec)   # the speeds that its planner counted beside its own
    fit, speed = fit_history(epochs, batch, n_train, earlier=earlier, measured_before=before)
    try:
        path = plot_job(output, epochs, job.target_loss, fit, speed, consecutive=consecutive,
                        title=f"{job.job_id} ({job.status})", samples_per_epoch=n_train, limits=limits,
                        max_epochs=max_epochs, measured_before=before)
    except OSError as e:
        raise CoachError(f"{output}: cannot write the plot: {e.strerror or e}") from None
    print(path)


def _epoch_size(spec: dict) -> float | None:
    """The training split's size, as the job loop counts an epoch, so that tuning mini-epochs
    sit where its fit put them. None (the training epochs' size decides) for a CIFAR-10 folder,
    which may hold less than the full set."""
    dataset = spec.get("dataset") or {}
    if dataset.get("name") in (None, "cifar10"):
        return None
    return float(train_size(dataset["name"], dataset))
