"""Planning: how many workers and servers each job gets within the shared capacity."""

from coach.plan.packing import describe as describe_nodes
from coach.plan.packing import packs
from coach.plan.planner import (
    DEFAULT_RESOURCES,
    MIN_RELATIVE_GAIN,
    Allocation,
    JobDemand,
    RunningJob,
    demand_from_json,
    demand_to_json,
    epoch_hold_s,
    epochs_paid,
    expected_wait,
    footprint,
    functions,
    gain_floor,
    min_resources,
    plan,
    plan_with_waits,
    predicted_epoch_cost,
)

__all__ = [
    "describe_nodes",
    "packs",
    "DEFAULT_RESOURCES",
    "MIN_RELATIVE_GAIN",
    "Allocation",
    "JobDemand",
    "RunningJob",
    "demand_from_json",
    "demand_to_json",
    "epoch_hold_s",
    "epochs_paid",
    "expected_wait",
    "footprint",
    "functions",
    "gain_floor",
    "min_resources",
    "plan",
    "plan_with_waits",
    "predicted_epoch_cost",
]
