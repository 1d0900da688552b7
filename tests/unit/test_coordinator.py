"""The Coordinator shares a backend's capacity between the jobs of one run."""

from __future__ import annotations

import threading
import time

from coach.backends.base import Capacity
from coach.job.coordinator import Coordinator
from coach.plan import JobDemand
from coach.spec import DEFAULT_RESOURCES


def demand(job_id: str, static: tuple[int, int] | None = None) -> JobDemand:
    return JobDemand(job_id=job_id, speed=None, remaining_epochs=None, samples_per_epoch=1000.0,
                     static=static, resources=DEFAULT_RESOURCES)


def test_second_job_waits_with_a_reason_and_expected_wait_then_runs() -> None:
    coord = Coordinator(Capacity(cpu=1.0, memory_gib=8))
    a = coord.acquire(demand("a"), epoch_s=lambda w, s: 30.0)
    assert (a.workers, a.servers) == (1, 1)
    reasons: list[str] = []
    assert coord.acquire(demand("b"), reasons.append, timeout_s=0.3) is None
    assert reasons and "waiting for capacity" in reasons[0] and "expected wait ~30s" in reasons[0]
    got = []
    t = threading.Thread(target=lambda: got.append(coord.acquire(demand("b"))))
    t.start()
    time.sleep(0.2)
    assert not got, "b must wait while a holds the capacity"
    coord.release("a")
    t.join(5)
    assert got and (got[0].workers, got[0].servers) == (1, 1)


def test_static_allocation_is_exact_or_waits() -> None:
    coord = Coordinator(Capacity(cpu=2.0, memory_gib=8))
    g = coord.acquire(demand("s", static=(2, 2)))
    assert (g.workers, g.servers) == (2, 2)
    assert coord.acquire(demand("t", static=(2, 1)), timeout_s=0.2) is None   # 1.6 + 1.35 > 2 cores


def test_a_minimum_larger_than_the_capacity_is_detected() -> None:
    coord = Coordinator(Capacity(cpu=0.5, memory_gib=8))
    assert not coord.fits_alone(demand("big"))
