"""What the job loop may ask of a backend: deploy, invoke and tear down role functions.

The job loop never knows which backend it drives. A backend knows where functions run, how
to reach them and how much capacity it has; it knows nothing about epochs, losses or budgets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol


@dataclass(frozen=True)
class Capacity:
    """Resources the backend may hand to role functions at once."""

    cpu: float          # cores
    memory_gib: float
    nodes: tuple[tuple[float, float], ...] = ()   # a cluster's room on each node (cores, GiB); () = one machine
    total: Capacity | None = None   # the same with no other work (a cluster's allocatable); None: this

    @property
    def whole(self) -> Capacity:
        """What a job could have once other work leaves: a job that fits only this waits, it does not fail."""
        return self.total or self


@dataclass(frozen=True)
class Placement:
    """How a job's functions ask a cluster for room (the local backend has no use for it):
    each replica of a role requests `cpu[role]` cores and `memory_gib[role]` GiB."""

    cpu: Mapping[str, float] = field(default_factory=dict)
    memory_gib: Mapping[str, float] = field(default_factory=dict)
    scheduler: str = "default"     # the job file's `scheduler`: default | gang


NO_ANSWER = 599   # an Invocation's status when no answer came (unreachable, killed, a backend error)


@dataclass(frozen=True)
class Invocation:
    """A function's answer: HTTP status and JSON body (an {"error": ...} body when status != 200)."""

    status: int
    body: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def error(self) -> str:
        return str(self.body.get("error", f"HTTP {self.status}"))


class Backend(Protocol):
    name: str
    capacity: Capacity   # may change while jobs run (a cluster's room as other work comes and goes): read it again
    keep_warm: bool      # replicas scaled away stay ready on their own, holding no capacity (local processes);
                         # False: one is gone when scaled away, and one kept holds its room (a pod)

    def deploy(self, job_id: str, group: Mapping[str, int], placement: Placement = Placement(),
               on_wait: Callable[[str], None] | None = None,
               should_stop: Callable[[], bool] = lambda: False) -> str | None:
        """Make exactly `group[role]` replicas of each role's function ready to take events.
        One call per group: a gang scheduler must see the whole group at once. While the group
        waits for room, `on_wait` hears why (and "" once it is placed), and a True from
        `should_stop` (`coach stop`) ends the wait with a BackendError. Returns what the job's
        events should say about where new replicas were placed, if anything."""

    def invoke(self, job_id: str, role: str, replica: int, payload: dict[str, Any], timeout_s: float) -> Invocation:
        """Send one event to one replica and wait for its answer (never raises for HTTP errors)."""

    def ps_root(self, job_id: str) -> tuple[str, int, str]:
        """(root_uri, root_port, node_host) for a new attempt's ps-lite group."""

    def prewarm(self) -> None:
        """Start what every first deploy waits for, while the caller does other work."""

    def teardown(self, job_id: str) -> None:
        """Remove every function of the job; nothing of it keeps running."""

    def close(self) -> None:
        """Tear down everything this backend started."""
