"""The Coordinator shares a backend's capacity between the jobs of one run."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from coach.backends.base import Capacity
from coach.job.coordinator import Coordinator
from coach.plan import JobDemand
from coach.spec import DEFAULT_RESOURCES
from coach.state.records import Lease
from coach.state.store import Store


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


# -- leases: jobs of other `coach submit` processes on the same state store ------------------

def _other_process() -> subprocess.Popen:
    """A live process standing in for another `coach submit` (only its pid is read)."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_cores_leased_by_another_process_are_not_handed_out(tmp_path) -> None:
    store = Store(tmp_path / "coach.db")
    other = _other_process()
    try:
        assert store.take_lease(Lease("elsewhere", other.pid, 0.85, 1.75, time.time(), 20.0), 1.0, 8)
        coord = Coordinator(Capacity(cpu=1.0, memory_gib=8), store)
        reasons: list[str] = []
        assert coord.acquire(demand("b"), reasons.append, timeout_s=0.3) is None
        assert "0.15 cores" in reasons[0] and "expected wait ~2" in reasons[0]   # its epoch ends in ~20 s
        store.drop_lease("elsewhere")   # the other process's epoch ended
        got = coord.acquire(demand("b"), timeout_s=3)
        assert got is not None and (got.workers, got.servers) == (1, 1)
        assert [(l.job_id, l.pid) for l in store.leases()] == [("b", os.getpid())]
        coord.release("b", done=True)
        assert store.leases() == []
    finally:
        other.kill()
        other.wait()


def test_lease_of_a_process_that_died_is_dropped(tmp_path) -> None:
    store = Store(tmp_path / "coach.db")
    gone = _other_process()
    gone.kill()
    gone.wait()
    assert store.take_lease(Lease("crashed", gone.pid, 1.0, 2.0, time.time()), 1.0, 8)
    assert store.leases() == []
    got = Coordinator(Capacity(cpu=1.0, memory_gib=8), store).acquire(demand("b"), timeout_s=1)
    assert got is not None


@pytest.mark.parametrize(
    ("held_cpu", "held_mem", "fits"),
    [(0.1, 1.0, True), (0.2, 1.0, False), (0.1, 7.0, False), (0.0, 0.0, True)],
)
def test_take_lease_checks_capacity_next_to_live_leases(tmp_path, held_cpu, held_mem, fits) -> None:
    store = Store(tmp_path / "coach.db")
    store.take_lease(Lease("a", os.getpid(), held_cpu, held_mem, time.time()), 10, 10)
    assert store.take_lease(Lease("b", os.getpid(), 0.9, 1.5, time.time()), 1.0, 8) is fits
    assert {l.job_id for l in store.leases()} == ({"a", "b"} if fits else {"a"})
