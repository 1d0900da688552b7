"""Cost model: what functions cost, measured in function-seconds, and the per-epoch budget.

Serverless platforms bill each invocation for its duration times what the function
reserved (CPU cores and memory). Coach does the same, with prices the user configures:

    cost(function) = seconds · (cpu · price_cpu_core_second + memory_gib · price_gib_second)
    cost(epoch)    = cost(scheduler) + s · cost(server) + w · cost(worker)

The seconds are *measured* — each invocation's handler time, from the event's arrival (or
from when its replica was ready, if later: a replica's `import mxnet` is not the event's, as on
Nuclio) to its answer (`function_s`) — never assumed; a warm replica idle between epochs is not charged.
A call that comes back without that count (its function was killed, e.g. by a Ctrl-C) is charged
from its role process's start to the call's end, and nothing if no role process had started.
The budget is enforced one epoch at a time:

    epoch budget = remaining budget / predicted remaining epochs

so a job that is predicted to need many more epochs spends less on each, and a job can
overspend its whole budget by at most the cost of the epoch that was running when the
money ran out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from coach.recorded import check_types

ROLES = ("scheduler", "server", "worker")
"""Every epoch runs one MXNet scheduler, `s` servers and `w` workers."""

DEFAULT_CPU_CORE_SECOND_PRICE = 0.000024
"""Per vCPU-second, in the budget's currency (an on-demand serverless list price, ~2024)."""

DEFAULT_GIB_SECOND_PRICE = 0.0000025
"""Per GiB-second of reserved memory (same source as the CPU price)."""


@dataclass(frozen=True)
class Prices:
    """Configured prices; the budget is in the same currency."""

    cpu_core_second: float = DEFAULT_CPU_CORE_SECOND_PRICE   # price of 1 core for 1 s
    gib_second: float = DEFAULT_GIB_SECOND_PRICE             # price of 1 GiB for 1 s

    def __post_init__(self) -> None:
        check_types(self)   # a text value in a recorded spec failed the comparison as "'<' not supported"
        if self.cpu_core_second < 0 or self.gib_second < 0:
            raise ValueError(f"prices must be ≥ 0, got {self}")


DEFAULT_PRICES = Prices()


@dataclass(frozen=True)
class RoleResources:
    """What one function of a role reserves (its Kubernetes requests)."""

    cpu: float                 # cores
    memory_gib: float          # GiB

    def __post_init__(self) -> None:
        check_types(self)
        if self.cpu < 0 or self.memory_gib < 0:
            raise ValueError(f"resources must be ≥ 0, got {self}")


DEFAULT_RESOURCES: Mapping[str, RoleResources] = {
    "scheduler": RoleResources(cpu=0.1, memory_gib=0.25),
    "server": RoleResources(cpu=0.25, memory_gib=0.5),
    "worker": RoleResources(cpu=0.5, memory_gib=1.0),
}
"""Per-function requests when a job file does not say: small enough that two jobs' minimum
groups (0.85 cores each) share a 2-core machine."""


def function_cost(resources: RoleResources, seconds: float, prices: Prices = DEFAULT_PRICES) -> float:
    """Cost of one function that reserved `resources` for `seconds` (measured)."""
    if seconds < 0 or not math.isfinite(seconds):
        raise ValueError(f"seconds must be a finite number ≥ 0, got {seconds!r}")
    return seconds * (resources.cpu * prices.cpu_core_second + resources.memory_gib * prices.gib_second)


def epoch_cost(workers: int, servers: int, resources_by_role: Mapping[str, RoleResources],
               seconds: float, prices: Prices = DEFAULT_PRICES) -> float:
    """Cost of one epoch: one scheduler, `servers` servers and `workers` workers alive `seconds`.

    Use it to *predict* an epoch's cost; to *charge* one, use `measured_cost` with each
    role's measured function-seconds.
    """
    counts = {"scheduler": 1, "server": servers, "worker": workers}
    return sum(n * function_cost(_role(resources_by_role, role), seconds, prices)
               for role, n in counts.items())


def measured_cost(function_seconds_by_role: Mapping[str, float],
                  resources_by_role: Mapping[str, RoleResources],
                  prices: Prices = DEFAULT_PRICES) -> float:
    """Cost of an epoch from measured function-seconds, summed over the functions of each role.

    E.g. `{"scheduler": 31.0, "server": 2 × 30.2, "worker": 3 × 29.8}`: every function
    is charged for the time it served the epoch's events, retries included.
    """
    return sum(function_cost(_role(resources_by_role, role), secs, prices)
               for role, secs in function_seconds_by_role.items())


def epoch_budget(remaining_budget: float, predicted_remaining_epochs: float | None) -> float:
    """How much the next epoch may cost: the remaining budget spread over the epochs left.

    Unknown (None) or fewer than one predicted epoch → the whole remaining budget, so a
    job is never stopped by a prediction alone; it stops when the money is gone.
    """
    remaining = max(0.0, float(remaining_budget))
    if predicted_remaining_epochs is None or not math.isfinite(predicted_remaining_epochs):
        return remaining
    return remaining / max(1.0, float(predicted_remaining_epochs))


def _role(resources_by_role: Mapping[str, RoleResources], role: str) -> RoleResources:
    try:
        return resources_by_role[role]
    except KeyError:
        raise ValueError(f"no resources given for role {role!r} (need {', '.join(ROLES)})") from None
