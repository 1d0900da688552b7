"""Reports of a job: plots of its convergence, its (w, s) per epoch and its speed model."""

from coach.report.plots import plot_job

__all__ = ["plot_job"]
