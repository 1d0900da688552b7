"""What the job loop may ask of a backend: deploy, invoke and tear down role functions.

The job loop never knows which backend it drives. A backend knows where functions run, how
to reach them and how much capacity it has; it knows nothing about epochs, losses or budgets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Capacity:
    """Resources the backend may hand to role functions at once."""

    cpu: float          # cores
    memory_gib: float


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
    capacity: Capacity

    def deploy(self, job_id: str, role: str, replicas: int) -> None:
        """Make exactly `replicas` replicas of the job's `role` function ready to take events."""

    def invoke(self, job_id: str, role: str, replica: int, payload: dict[str, Any], timeout_s: float) -> Invocation:
        """Send one event to one replica and wait for its answer (never raises for HTTP errors)."""

    def ps_root(self, job_id: str) -> tuple[str, int, str]:
        """(root_uri, root_port, node_host) for a new attempt's ps-lite group."""

    def teardown(self, job_id: str) -> None:
        """Remove every function of the job; nothing of it keeps running."""

    def close(self) -> None:
        """Tear down everything this backend started."""
