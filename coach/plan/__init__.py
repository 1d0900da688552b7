"""Planning: how many workers and servers each job gets within the shared capacity."""

from coach.plan.planner import (
    DEFAULT_RESOURCES,
    MIN_RELATIVE_GAIN,
    Allocation,
    JobDemand,
    RunningJob,
    demand_from_json,
    demand_to_json,
    expected_wait,
    footprint,
    gain_floor,
    min_resources,
    plan,
    plan_with_waits,
)

__all__ = [
    "DEFAULT_RESOURCES",
    "MIN_RELATIVE_GAIN",
    "Allocation",
    "JobDemand",
    "RunningJob",
    "demand_from_json",
    "demand_to_json",
    "expected_wait",
    "footprint",
    "gain_floor",
    "min_resources",
    "plan",
    "plan_with_waits",
]
