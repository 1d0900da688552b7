"""`coach plot JOB_ID -o job.png`: the job's loss curve with its fit, (w, s) and speed surface."""

from __future__ import annotations

from pathlib import Path

import typer

from coach.errors import CoachError
from coach.state.store import Store


def plot(job_id: str = typer.Argument(...),
         output: Path = typer.Option(Path("job.png"), "-o", "--output", help="PNG file to write.")) -> None:
    """Draw validation loss per epoch with the fitted curve and target crossing, (w, s) per
    epoch, and the fitted speed surface."""
    from coach.estimate.history import fit_history
    from coach.report.plots import plot_job

    store = Store()
    job = store.job(job_id)
    epochs = store.epochs(job.job_id)
    if not epochs:
        raise CoachError(f"{job.job_id} has no recorded epochs yet; nothing to plot")
    spec = store.spec(job.job_id)
    fit, speed = fit_history(epochs, int(spec.get("batch_size", 64)), None)
    path = plot_job(output, epochs, job.target_loss, fit, speed, consecutive=int(spec.get("consecutive", 3)),
                    title=f"{job.job_id} ({job.status})")
    print(path)
