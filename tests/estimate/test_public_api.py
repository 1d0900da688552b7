"""The packages export what docs/estimation.md promises."""

import coach.estimate
import coach.plan


def test_estimate_exports():
    for name in ("fit_convergence", "ConvergenceFit", "EpochsPrediction", "fit_speed", "SpeedModel", "SpeedSample",
                 "Prices", "RoleResources", "function_cost", "epoch_cost", "measured_cost", "epoch_budget", "eta",
                 "Eta"):
        assert name in coach.estimate.__all__ and hasattr(coach.estimate, name)


def test_plan_exports():
    for name in ("plan", "JobDemand", "Allocation", "RunningJob", "expected_wait", "min_resources"):
        assert name in coach.plan.__all__ and hasattr(coach.plan, name)
