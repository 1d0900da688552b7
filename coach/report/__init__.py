"""Reports of a job: plots of its convergence, its (w, s) per epoch and its speed model."""

from coach.report.plots import plot_job, progress_of

__all__ = ["plot_job", "progress_of"]
