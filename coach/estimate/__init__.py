"""Models fitted to a job's measurements: convergence (loss per epoch), speed (samples/s per
(w, s)), cost (function-seconds × prices) and the ETA that combines them.

Dependencies point one way: the job loop and the planner import these models; the models
import nothing of Coach but its errors and the epoch records they read. They import scipy
where they use it, and `preload` imports it when the caller chooses: `coach submit` reads a job
file with `cost`, and scipy loaded with it (0.3 s) held back the start of the functions.
"""

from coach.estimate.convergence import (
    EXTRAPOLATION_SPREAD,
    ConvergenceFit,
    EpochsPrediction,
    prepare_earlier_run,
    extrapolation_interval,
    fit_convergence,
    rising,
)
from coach.estimate.earlier_run import EarlierRun
from coach.estimate.cost import (
    DEFAULT_CPU_CORE_SECOND_PRICE,
    DEFAULT_GIB_SECOND_PRICE,
    DEFAULT_PRICES,
    ROLES,
    Prices,
    RoleResources,
    epoch_budget,
    epoch_cost,
    function_cost,
    measured_cost,
)
from coach.estimate.eta import Eta, eta
from coach.estimate.progress import progress_of
from coach.estimate.speed import SpeedModel, SpeedSample, fit_speed


def preload() -> None:
    """Import what the fits use (scipy, 0.3 s) now: `run_jobs` calls it while the functions
    import MXNet (`Backend.prewarm`), where it costs nothing, and before the jobs' threads, which
    would import it side by side; left to the first fit, it held up the plan after a job's first
    (mini-)epoch."""
    import scipy.optimize  # noqa: F401
    import scipy.signal  # noqa: F401
    import scipy.special  # noqa: F401


__all__ = [
    "DEFAULT_CPU_CORE_SECOND_PRICE",
    "DEFAULT_GIB_SECOND_PRICE",
    "DEFAULT_PRICES",
    "EXTRAPOLATION_SPREAD",
    "ROLES",
    "ConvergenceFit",
    "EarlierRun",
    "EpochsPrediction",
    "Eta",
    "Prices",
    "RoleResources",
    "SpeedModel",
    "SpeedSample",
    "prepare_earlier_run",
    "epoch_budget",
    "epoch_cost",
    "eta",
    "extrapolation_interval",
    "fit_convergence",
    "fit_speed",
    "function_cost",
    "measured_cost",
    "preload",
    "progress_of",
    "rising",
]
