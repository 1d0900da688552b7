"""Models fitted to a job's measurements: convergence (loss per epoch), speed (samples/s per
(w, s)), cost (function-seconds × prices) and the ETA that combines them.

Dependencies point one way: the job loop and the planner import these models; the models
import nothing of Coach but its errors and the epoch records they read. They import scipy
where they use it: `coach submit` reads a job file with `cost`, and scipy loaded with it
(0.3 s) held back the start of the functions, which import MXNet meanwhile (`LocalBackend.prewarm`).
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
    "progress_of",
    "rising",
]
