"""The Coordinator shares a backend's capacity between the jobs of one run."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from coach.backends.base import Capacity
from coach.job.coordinator import GONE_AFTER_S, Coordinator
from coach.plan import JobDemand, plan, predicted_epoch_cost
from coach.spec import DEFAULT_RESOURCES
from coach.identity import process_identity
from coach.state.store import Store
from tests.conftest import ROOT
from tests.unit.lease_process import SHARED_CAPACITY, scaling_demand


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
    assert coord.expected_wait_s["b"] == pytest.approx(30, abs=1)   # for the job's ETA, as its message says
    got = []
    t = threading.Thread(target=lambda: got.append(coord.acquire(demand("b"))))
    t.start()
    time.sleep(0.2)
    assert not got, "b must wait while a holds the capacity"
    coord.release("a")
    t.join(5)
    assert got and (got[0].workers, got[0].servers) == (1, 1)


def test_a_job_holding_a_lease_keeps_it_when_refused_and_may_not_wait() -> None:
    """A cluster job keeps its lease between epochs: its pods still hold the room. Asking again,
    a grant replaces the lease; refused, it still holds what it had (its pods are there until it
    deletes them), and it may not wait while holding: it would wait for room it holds itself."""
    coord = Coordinator(Capacity(cpu=2.0, memory_gib=8))
    assert coord.acquire(demand("a", static=(1, 1))) is not None
    assert coord.acquire(demand("b", static=(1, 1))) is not None   # 0.85 + 0.85 of 2 cores
    assert coord.acquire(demand("a", static=(2, 1)), timeout_s=0) is None   # 1.35 beside b's 0.85: no
    assert coord.holds("a")
    assert coord.acquire(demand("c", static=(1, 1)), timeout_s=0) is None, "a's 0.85 cores are still held"
    with pytest.raises(ValueError, match="holds a lease"):
        coord.acquire(demand("a", static=(2, 1)), timeout_s=1)
    coord.release("b")
    assert coord.acquire(demand("a", static=(2, 1)), timeout_s=0) is not None   # the grant replaces the lease
    assert coord.acquire(demand("c", static=(1, 1)), timeout_s=0) is None       # 1.35 + 0.85 > 2
    coord.release("a")
    assert coord.acquire(demand("c", static=(1, 1)), timeout_s=0) is not None


@pytest.mark.parametrize("kept, static, wait", [
    (False, (1, 1), "~30s"),     # local: the lease goes at the epoch's end
    (True, None, "~30s"),        # cluster, dynamic: it may shrink for the waiting job next epoch
    (True, (1, 1), "~150s"),     # cluster, static: kept for its 5 remaining epochs
])
def test_expected_wait_behind_a_lease_kept_between_epochs(kept: bool, static: tuple[int, int] | None,
                                                          wait: str) -> None:
    """A waiting job is told when the lease in its way frees up. On a cluster a static job keeps
    its lease, pods and all, to its end: that is its remaining epochs away, not this epoch's end
    (before: "expected wait ~0s" once its epoch's predicted end had passed)."""
    coord = Coordinator(Capacity(cpu=1.0, memory_gib=8), kept=kept)
    holder = replace(demand("a", static=static), remaining_epochs=5.0)
    assert coord.acquire(holder, epoch_s=lambda w, s: 30.0) is not None
    reasons: list[str] = []
    assert coord.acquire(demand("b"), reasons.append, timeout_s=0.2) is None
    assert reasons and f"expected wait {wait}" in reasons[0], reasons


@pytest.mark.parametrize("paid, wait", [
    (None, "~150s"),     # no budget limit: its 5 remaining epochs
    (7.5, "~150s"),      # the budget pays for more than those
    (2.5, "~60s"),       # for 2 of them, then the job stops `budget_exhausted`
    (0.5, "~30s"),       # not even one: the epoch under way is its last
])
def test_a_kept_static_lease_ends_when_the_budget_does(paid: float | None, wait: str) -> None:
    """Before, a static job whose target was out of reach told waiting jobs of every epoch up
    to its `max_epochs`, whatever its budget paid for."""
    coord = Coordinator(Capacity(cpu=1.0, memory_gib=8), kept=True)
    holder = replace(scaling_demand("a"), static=(1, 1), remaining_epochs=5.0)
    if paid is not None:   # `epoch_budget` is the budget left shared over the 5 epochs
        holder = replace(holder, epoch_budget=paid * predicted_epoch_cost(holder, 1, 1) / 5.0)
    assert coord.acquire(holder, epoch_s=lambda w, s: 30.0) is not None
    reasons: list[str] = []
    assert coord.acquire(demand("b"), reasons.append, timeout_s=0.2) is None
    assert reasons and f"expected wait {wait}" in reasons[0], reasons


def test_static_allocation_is_exact_or_waits() -> None:
    coord = Coordinator(Capacity(cpu=2.0, memory_gib=8))
    g = coord.acquire(demand("s", static=(2, 2)))
    assert (g.workers, g.servers) == (2, 2)
    assert coord.acquire(demand("t", static=(2, 1)), timeout_s=0.2) is None   # 1.6 + 1.35 > 2 cores


def test_a_minimum_larger_than_the_capacity_is_detected() -> None:
    coord = Coordinator(Capacity(cpu=0.5, memory_gib=8))
    assert "its minimum (1 worker, 1 server) needs" in coord.never_fits(demand("big"))
    assert Coordinator(Capacity(cpu=2.0, memory_gib=8)).never_fits(demand("big")) is None


def test_room_other_work_holds_is_waited_for_not_refused() -> None:
    """A cluster's room less what other namespaces hold: a minimum that fits only once that work
    leaves waits, saying what the other work holds; one that never fits the whole is refused."""
    busy = Capacity(cpu=0.5, memory_gib=6, total=Capacity(cpu=2.0, memory_gib=8))
    coord = Coordinator(busy)
    assert coord.never_fits(demand("a")) is None
    told: list[str] = []
    assert coord.acquire(demand("a"), told.append, timeout_s=0.2) is None
    assert told and "other work on the cluster holds 1.5 cores / 2 GiB; expected wait unknown" in told[-1], told
    assert coord.expected_wait_s["a"] is None
    assert Coordinator(Capacity(cpu=0.5, memory_gib=6, total=Capacity(cpu=0.5, memory_gib=8))).never_fits(demand("a"))


def test_a_job_waiting_for_room_that_no_longer_exists_is_told_not_left_waiting() -> None:
    """`coach cluster up --force` reshaped the nodes under a waiting job to ones its minimum never
    fits: it waited with "expected wait unknown" for good (a reviewer gave it 3 minutes)."""
    from coach.errors import BackendError

    sizes = [Capacity(cpu=2.0, memory_gib=8)]
    coord = Coordinator(lambda: sizes[-1])
    assert coord.acquire(demand("a", static=(2, 1))) is not None   # 1.35 of 2 cores
    waited: list[float] = []
    errors: list[Exception] = []

    def wait_for_b() -> None:
        start = time.monotonic()
        try:
            coord.acquire(demand("b", static=(2, 1)))
        except BackendError as e:
            errors.append(e)
        waited.append(time.monotonic() - start)

    t = threading.Thread(target=wait_for_b, daemon=True)
    t.start()
    time.sleep(0.3)
    assert t.is_alive(), "b waits while a holds the room"
    sizes.append(Capacity(cpu=1.0, memory_gib=8))   # reshaped: (2, 1) needs 1.35 cores
    t.join(GONE_AFTER_S + 10)
    assert not t.is_alive() and GONE_AFTER_S <= waited[0] < GONE_AFTER_S + 10
    assert errors and "no longer fits the backend's capacity (1 cores, 8 GiB)" in str(errors[0]), errors


def test_a_job_waiting_through_a_reshape_is_granted_the_room_it_leaves() -> None:
    """`coach cluster up --force` from 4 × 1 CPU to 2 × 2 CPU deletes nodes first: one reading of
    1 CPU in between failed the waiting job, although the new shape fits it."""
    sizes = [Capacity(cpu=2.0, memory_gib=8)]
    coord = Coordinator(lambda: sizes[-1])
    assert coord.acquire(demand("a", static=(2, 1))) is not None   # 1.35 of 2 cores
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(coord.acquire(demand("b", static=(2, 1)))), daemon=True)
    t.start()
    time.sleep(0.3)
    sizes.append(Capacity(cpu=1.0, memory_gib=8))   # mid-reshape: too small for b's (2, 1) alone
    time.sleep(2.5)   # read twice or three times
    assert t.is_alive(), "a reading mid-reshape does not end the wait"
    sizes.append(Capacity(cpu=4.0, memory_gib=8))   # the new shape: room for both
    t.join(10)
    assert not t.is_alive() and got and got[0] is not None, got


# -- leases: jobs of other `coach submit` processes on the same state store ------------------
# The other process is real: tests/unit/lease_process.py takes and drops leases through the
# same Store API as a `coach submit` would, on commands over its stdin.

class OtherProcess:
    def __init__(self, db: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.unit.lease_process", str(db)], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def __call__(self, *command: object) -> str:
        self.proc.stdin.write(" ".join(map(str, command)) + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "coach.db")


@pytest.fixture
def other(store: Store):
    proc = OtherProcess(store.path)
    yield proc
    proc.kill()


@pytest.mark.parametrize("kept", [True, False])
def test_a_younger_job_keeping_its_lease_gives_way_to_an_older_one_that_then_fits(kept: bool) -> None:
    """b was backfilled beside a while the older c did not fit. Once a is done c would fit
    where b is: where leases are kept between epochs (a cluster's pods) b is refused at its next
    epoch, so it lets its pods go and c goes first; before, b kept the room for all its epochs
    and c waited for b's end. On the local backend jobs take turns at every epoch's end anyway."""
    coord = Coordinator(Capacity(cpu=2.0, memory_gib=8), kept=kept)
    assert coord.acquire(demand("a", static=(1, 1))) is not None              # 0.85 of 2 cores
    assert coord.acquire(demand("c", static=(2, 2)), timeout_s=0) is None     # 1.6: waits
    assert coord.acquire(demand("b", static=(1, 1)), timeout_s=0) is not None # backfilled
    coord.release("a", done=True)
    again = coord.acquire(demand("b", static=(1, 1)), timeout_s=0)
    assert (again is None) is kept and coord.holds("b")
    coord.release("b")
    reasons: list[str] = []
    waited = coord.acquire(demand("b", static=(1, 1)), reasons.append, timeout_s=0.1)
    if kept:
        assert waited is None and "c, waiting since before this job, takes it first" in reasons[0], reasons
        assert "expected wait unknown" in reasons[0]
        got = coord.acquire(demand("c", static=(2, 2)), timeout_s=0)
        assert got is not None and (got.workers, got.servers) == (2, 2)
    else:
        assert waited is not None


def test_a_job_is_alone_while_no_other_job_asks_or_holds(store: Store, other: OtherProcess) -> None:
    """Tuning's last configuration trains the rest of epoch 1 only on a job alone: forced for most
    of an epoch, it would take what other jobs' shares are."""
    coord = Coordinator(Capacity(cpu=4.0, memory_gib=8), store)
    assert coord.alone("a")
    assert coord.acquire(demand("a"), timeout_s=0) is not None
    assert coord.alone("a")                                    # its own lease is no other's
    assert coord.acquire(demand("b"), timeout_s=0) is not None
    assert not coord.alone("a") and not coord.alone("b")       # a job of this run
    coord.release("b", done=True)
    assert coord.alone("a")
    assert other("queue", "elsewhere") == "ok"                  # another process's job asks
    assert not coord.alone("a")
    assert other("done", "elsewhere") == "ok"
    assert coord.alone("a")
    coord.release("a")                                          # between its epochs
    assert other("take", "elsewhere", 0.85, 20) == "ok"         # ... or holds a lease
    assert not coord.alone("a")


def test_a_job_of_this_run_that_has_not_asked_yet_counts(store: Store) -> None:
    """The first of three jobs submitted together found itself alone before the others had asked."""
    coord = Coordinator(Capacity(cpu=4.0, memory_gib=8), store)
    coord.expect(["a", "b"])
    assert not coord.alone("a") and not coord.alone("b")
    coord.release("b", done=True)                               # ended (or could not start)
    assert coord.alone("a")


def test_cores_leased_by_another_process_are_not_handed_out(store: Store, other: OtherProcess) -> None:
    assert other("take", "elsewhere", 0.85, 20) == "ok"   # its epoch ends in ~20 s
    coord = Coordinator(Capacity(cpu=1.0, memory_gib=8), store)
    reasons: list[str] = []
    assert coord.acquire(demand("b"), reasons.append, timeout_s=0.3) is None
    wait = re.search(r"expected wait ~(\d+)s", reasons[0])
    # the lease's 20 s run from its grant: on a loaded machine a few of them pass before the ask
    assert "0.15 cores" in reasons[0] and wait and 10 <= int(wait.group(1)) <= 20, reasons[0]
    assert other("drop", "elsewhere") == "ok"
    got = coord.acquire(demand("b"), timeout_s=3)
    assert got is not None and (got.workers, got.servers) == (1, 1)
    assert [(l.job_id, l.pid) for l in store.leases()] == [("b", os.getpid())]
    coord.release("b", done=True)
    assert store.leases() == []


def test_a_job_of_another_process_that_asked_first_is_named_with_the_epoch_it_takes(
        store: Store, other: OtherProcess) -> None:
    """Two `coach submit` runs taking turns: the room was free, the other's job asked first, and
    the wait read "expected wait ~0s" where it was that job's epoch (about 8 s for LeNet)."""
    from coach.plan import epoch_hold_s

    assert other("queue", "first") == "ok"
    assert other("queue", "second") == "ok"
    coord = Coordinator(Capacity(cpu=1.0, memory_gib=64), store)
    reasons: list[str] = []
    later = threading.Timer(0.1, lambda: other("queue", "later"))   # asks after b: not ahead of it
    later.start()
    assert coord.acquire(demand("b"), reasons.append, timeout_s=0.5) is None
    later.join()
    held = epoch_hold_s(scaling_demand("first"))   # 4000 samples at 1420 samples/s on (1, 1)
    assert held == pytest.approx(4000 / 1420)
    assert "1 cores / 64 GiB free; first, second of another `coach submit` asked first" in reasons[-1], reasons
    # each takes the core for an epoch, one after the other: b's turn comes after both
    assert f"expected wait ~{2 * held:.0f}s" in reasons[-1], reasons


def test_the_jobs_holding_the_room_are_named() -> None:
    coord = Coordinator(Capacity(cpu=1.0, memory_gib=8))
    assert coord.acquire(demand("holder"), epoch_s=lambda w, s: 30.0) is not None
    reasons: list[str] = []
    assert coord.acquire(demand("b"), reasons.append, timeout_s=0.1) is None
    assert "0.15 cores / 6.25 GiB free (held by holder); expected wait ~30s" in reasons[0], reasons


def _queued(store: Store, job_id: str) -> bool:
    with sqlite3.connect(store.path) as c:
        return c.execute("SELECT 1 FROM lease_waits WHERE job_id = ?", (job_id,)).fetchone() is not None


def test_a_job_that_asked_first_is_not_overtaken_by_a_process_taking_its_cores_back(
        store: Store, other: OtherProcess) -> None:
    assert other("take", "holder", 0.85, 5) == "ok"
    coord = Coordinator(Capacity(cpu=1.0, memory_gib=8), store)
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(coord.acquire(demand("b"), timeout_s=10)))
    waiter.start()
    deadline = time.time() + 30                       # until b is queued in the store
    while not _queued(store, "b") and time.time() < deadline:
        time.sleep(0.02)
    assert other("drop", "holder") == "ok"            # the holder's epoch ends ...
    assert other("take", "holder", 0.85, 5) == "no", "... and it may not take the cores straight back"
    waiter.join(5)
    assert got and got[0] is not None
    coord.release("b", done=True)
    assert other("take", "holder", 0.85, 5) == "ok"


def test_a_job_keeping_its_lease_is_not_queued_but_growing_is(store: Store, other: OtherProcess) -> None:
    """A job that kept its lease between epochs (a cluster's pods) keeps it while a job of another
    process waits: giving way would mean deleting its pods and waiting for new ones at every
    epoch. Taking more than it holds waits its turn; refused, it keeps the lease it had, in the
    store too (its pods stand until it deletes them). Released, the room goes to the waiting job."""
    coord = Coordinator(Capacity(cpu=2.0, memory_gib=8), store)
    assert coord.acquire(demand("a", static=(1, 1))) is not None           # 0.85 of 2 cores
    assert other("wait", "queued", 0.85) == "ok"
    assert coord.acquire(demand("a", static=(2, 1)), timeout_s=0) is None   # 1.35 + 0.85 waiting > 2
    assert coord.holds("a") and [(l.job_id, l.cpu) for l in store.leases()] == [("a", 0.85)]
    assert coord.acquire(demand("a", static=(1, 1)), timeout_s=0) is not None   # what it holds: kept
    coord.release("a")
    assert store.leases() == [] and other("take", "queued", 0.85, 5) == "ok"


def test_a_dynamic_job_refused_growth_keeps_the_size_it_holds(store: Store, other: OtherProcess) -> None:
    """Refused the room to grow because a job of another process asked first, a dynamic job runs
    its next epoch at the size it holds: before, the refusal made it delete all its pods (a cluster's
    cold start) and queue behind the waiting job for room it had held all along."""
    coord = Coordinator(Capacity(cpu=2.0, memory_gib=8), store)
    assert coord.acquire(demand("a", static=(1, 1))) is not None            # 0.85 of 2 cores
    assert other("wait", "queued", 0.85) == "ok"
    grows = replace(scaling_demand("a"), resources=DEFAULT_RESOURCES)
    alone = plan([grows], 2.0, 8)["a"]
    assert (alone.workers, alone.servers) > (1, 1), "alone, the job would grow"
    got = coord.acquire(grows, timeout_s=0)
    assert got is not None and (got.workers, got.servers) == (1, 1), got
    assert "another `coach submit` asked first" in got.reason
    assert [(l.job_id, l.cpu) for l in store.leases()] == [("a", 0.85)]
    coord.release("a", done=True)
    assert other("take", "queued", 0.85, 5) == "ok"


def test_lease_of_a_process_that_died_is_dropped(store: Store, other: OtherProcess) -> None:
    assert other("take", "crashed", 1.0, 5) == "ok"
    other.kill()
    assert store.leases() == []
    assert Coordinator(Capacity(cpu=1.0, memory_gib=8), store).acquire(demand("b"), timeout_s=1) is not None


def test_process_identity_tells_a_reused_pid_and_a_zombie_from_the_owner() -> None:
    me = process_identity(os.getpid())
    assert me is not None and me == process_identity(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child.pid}/stat").read_text().split(") ")[1][0] != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_identity(child.pid) is None, "an exited, unreaped child holds nothing"
    child.wait()
    assert process_identity(child.pid) is None


def test_a_lease_left_under_a_reused_pid_is_not_held(store: Store) -> None:
    # e.g. a killed run's lease after a reboot, its pid now this process's: other start time
    assert store.take_lease("stale", 1.0, 1.0, 1.0, 8, time.time())
    with sqlite3.connect(store.path) as c:
        c.execute("UPDATE leases SET owner = owner || '0' WHERE job_id = 'stale'")
    assert store.leases() == []
    assert store.take_lease("b", 1.0, 1.0, 1.0, 8, time.time())


@pytest.mark.parametrize(
    ("held_cpu", "held_mem", "fits"),
    [(0.1, 1.0, True), (0.2, 1.0, False), (0.1, 7.0, False), (0.0, 0.0, True)],
)
def test_take_lease_checks_capacity_next_to_live_leases(store: Store, held_cpu, held_mem, fits) -> None:
    assert store.take_lease("a", held_cpu, held_mem, 10, 10, time.time())
    assert store.take_lease("b", 0.9, 1.5, 1.0, 8, time.time()) is fits
    assert {l.job_id for l in store.leases()} == ({"a", "b"} if fits else {"a"})


def test_two_processes_never_hold_the_last_cores_at_once(store: Store) -> None:
    racers = [OtherProcess(store.path) for _ in range(2)]
    try:
        for i, r in enumerate(racers):   # both start before either answers
            r.proc.stdin.write(f"race job{i} 0.85 300\n")
            r.proc.stdin.flush()
        answers = [r.proc.stdout.readline().strip() for r in racers]
    finally:
        for r in racers:
            r.kill()
    counts = [tuple(map(int, a.split())) for a in answers]
    # on a loaded machine one process can win every round (CI once: 300 and 0); never both at once
    assert sum(g for g, _ in counts) > 0 and all(d == 0 for _, d in counts), answers



def test_jobs_of_two_processes_share_the_capacity_by_marginal_utility(store: Store, other: OtherProcess) -> None:
    coord = Coordinator(SHARED_CAPACITY, store)
    alone = coord.acquire(scaling_demand("a"), timeout_s=3)
    coord.release("a")                                # between epochs: holds nothing, still running
    assert alone.workers > 4, "alone, the job should grow over most of the 4 cores"
    both = plan([scaling_demand("a"), scaling_demand("b")], SHARED_CAPACITY.cpu, SHARED_CAPACITY.memory_gib,
                backfill=True)                        # a asked first: it is first in the order
    assert other("ask", "b") == f"{both['b'].workers} {both['b'].servers}", "the other process plans over a too"
    shared = coord.acquire(scaling_demand("a"), timeout_s=3)
    coord.release("a")
    assert (shared.workers, shared.servers) == (both["a"].workers, both["a"].servers)
    assert shared.workers < alone.workers
    assert other("done", "b") == "ok"                 # b ended: a may grow again
    again = coord.acquire(scaling_demand("a"), timeout_s=3)
    assert (again.workers, again.servers) == (alone.workers, alone.servers)
    coord.release("a")
    assert other("ask", "c") != "none"
    other.kill()                                      # a process that dies takes its demand with it
    after = coord.acquire(scaling_demand("a"), timeout_s=3)
    assert (after.workers, after.servers) == (alone.workers, alone.servers)
    coord.release("a", done=True)
    assert store.demands() == []


def test_a_job_is_run_by_one_live_process_and_shows_interrupted_when_it_dies(store: Store,
                                                                              other: OtherProcess) -> None:
    store.create_job("j", "j", "j.yaml", {}, 0.1, 1.0)
    assert other("claim", "j") == "ok"
    assert store.job("j").status == "queued", "run by the other process"
    assert store.claim_job("j") == other.proc.pid, "a second process may not run it too"
    other.kill()
    job = store.job("j")
    assert job.status == "interrupted" and f"pid {other.proc.pid}" in job.message and "coach resume j" in job.message
    assert store.claim_job("j") is None and store.job("j").status == "queued"
    store.update_job("j", status="stopped")
    store.release_job("j")
    assert store.job("j").status == "stopped", "a job that ended is not 'interrupted'"
