"""The capacity that jobs share, handed out through the planner.

Each job asks before every epoch. The planner is run over every running job's latest
demand on the whole capacity (so they share it by marginal utility, oldest job first for
the minimums), and the asking job gets the smaller of its share and what it can use of the
capacity that is free right now. A job whose minimum does not fit waits here until
another job releases its functions.

With a state store, the jobs of other `coach submit` processes on the same machine (same
COACH_HOME) take part: every job publishes its demand (speed model, epochs left, limits)
in the store, so each process plans over all jobs and they agree on the shares; every
grant is a lease in the store, so two submits in two terminals do not oversubscribe the
machine; and a job waiting for cores is queued in the store so that a job of another
process which releases its cores between epochs cannot take them straight back. A job whose
functions hold room between epochs (a cluster's pods) keeps its lease meanwhile and asks again
without waiting (refused growth, a dynamic job keeps the size it holds; backfilled where an
older job now fits, it gives way); the coordinator never sees the pods.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, replace
from typing import Callable

from coach.backends.base import Capacity
from coach.errors import BackendError
from coach.plan import (Allocation, JobDemand, RunningJob, demand_from_json, demand_to_json, epoch_hold_s,
                        expected_wait, footprint, min_resources, epochs_paid, plan, plan_with_waits)
from coach.state.store import Store, own_identity

RECHECK_S = 1.0
GONE_AFTER_S = 5.0
"""How long capacity must read too small for a waiting job before it fails: `coach cluster up
--force` deletes nodes before it resizes the others, so one reading mid-reshape may be smaller
than the cluster it leaves."""


def epochs_to_end(d: JobDemand, grant: Allocation) -> float | None:
    """How many epochs a static job keeps its lease for: those it has left, or fewer when its
    budget pays for fewer (it stops `budget_exhausted` once the next epoch costs more than is
    left). Counted without the budget, an out-of-reach target told waiting jobs of all the
    epochs up to `max_epochs`."""
    if not d.remaining_epochs:
        return None
    left = None if d.epoch_budget is None else d.epoch_budget * max(1.0, d.remaining_epochs)   # it shares that
    if left is None or (paid := epochs_paid(d, grant.workers, grant.servers, left)) is None:
        return d.remaining_epochs
    return max(1.0, min(d.remaining_epochs, paid))


@dataclass
class _Held:
    workers: int
    servers: int
    cpu: float
    memory_gib: float
    since: float                    # monotonic time of the grant
    epoch_s: float | None           # predicted length of the epoch it runs (None: unknown)


@dataclass
class _Elsewhere:
    """The jobs of other `coach submit` processes, as read from the state store."""

    running: list[RunningJob]                   # their leases: capacity held, and until when
    demands: list[tuple[float, JobDemand]]      # (first asked, demand) of each of their jobs
    holding: set[str]                           # their jobs that hold a lease


class Coordinator:
    def __init__(self, capacity: Capacity | Callable[[], Capacity], store: Store | None = None,
                 kept: bool = False) -> None:
        """`capacity` may be a function, read again whenever a job asks: a cluster's room changes
        as work of other namespaces comes and goes. `kept`: jobs keep their leases between
        epochs (the backend's functions hold their room: a cluster's pods)."""
        self._read_capacity = capacity if callable(capacity) else lambda: capacity
        self.capacity = self._read_capacity()
        self._store = store             # None: this run's jobs are alone on the capacity
        self.kept = kept
        self._cond = threading.Condition()
        self._demands: dict[str, JobDemand] = {}
        self._held: dict[str, _Held] = {}
        self._since: dict[str, float] = {}      # wall time each job first asked: its priority
        self.expected_wait_s: dict[str, float | None] = {}   # what each job's last reason to wait said
        self._starting: set[str] = set()   # this run's jobs that have not asked yet (`expect`)

    def never_fits(self, demand: JobDemand, now: bool = False) -> str | None:
        """Why the job's minimum does not fit even the whole capacity (on a cluster: laid out on
        its nodes with no other work; `now`: beside the other work there now), or None if it does."""
        room = self.capacity if now else self.capacity.whole
        _, waits = plan_with_waits([demand], room.cpu, room.memory_gib, nodes=room.nodes)
        return waits.get(demand.job_id)

    def _plan(self, demands: list[JobDemand], cpu: float, memory_gib: float, backfill: bool = False
              ) -> dict[str, Allocation | None]:
        return plan(demands, cpu, memory_gib, backfill, nodes=self.capacity.nodes)

    def expect(self, job_ids: list[str]) -> None:
        """This run's jobs, counted by `alone` before they first ask: the first of three jobs
        submitted together found itself alone, left (1, 1) out of its tuning and trained epoch 1
        on (2, 2) while the others waited for its cores."""
        with self._cond:
            self._starting |= set(job_ids)

    def alone(self, job_id: str) -> bool:
        """Whether no other job, of this run or of another `coach submit`, asks for or holds
        capacity, or is about to (`expect`): a configuration forced on a job for most of an epoch
        (tuning's last, on the rest of epoch 1) would take what their shares are."""
        others = self._others()
        with self._cond:
            mine = (set(self._demands) | set(self._held) | self._starting) - {job_id}
        return not mine and all(d.job_id == job_id for _, d in others.demands) and others.holding <= {job_id}

    def holds(self, job_id: str) -> bool:
        """Whether the job holds a lease: from a grant until it is released."""
        with self._cond:
            return job_id in self._held

    def acquire(self, demand: JobDemand, on_wait: Callable[[str], None] = lambda _: None,
                timeout_s: float | None = None,
                epoch_s: Callable[[int, int], float | None] = lambda w, s: None,
                should_stop: Callable[[], bool] = lambda: False) -> Allocation | None:
        """Block until the job can run; None when `timeout_s` passes or `should_stop()` first.

        A grant replaces what the job held. A job that holds a lease may only ask without waiting
        (`timeout_s=0`), and keeps what it holds if it is refused: that room may still be taken
        by its functions (a cluster's pods), so the caller lets them go before the lease.
        `epoch_s(w, s)` predicts how long the granted epoch will hold its capacity, so that jobs
        waiting meanwhile can be told when it frees up (with `kept`, a static job's lease is
        held for all its remaining epochs). `on_wait`, `should_stop` and the state
        store are called without the lock held.
        """
        job_id = demand.job_id
        start, asked_at = time.monotonic(), time.time()
        with self._cond:
            since = self._since.setdefault(job_id, asked_at)
            before = self._held.get(job_id)
        if before is not None and timeout_s != 0:
            raise ValueError(f"{job_id} holds a lease: release it before waiting for another")
        if self._store is not None:
            self._store.publish_demand(job_id, since, demand_to_json(demand))
        too_small_since: float | None = None
        while True:
            self.capacity = self._read_capacity()
            others = self._others()
            with self._cond:
                self._demands[job_id] = demand
                grant = self._grant(demand, others)
                if grant is not None:   # held here at once: this run's other jobs see it taken
                    self._hold(job_id, demand, grant)
            if grant is not None and self._lease(job_id, asked_at, before):
                break
            if grant is not None and before is not None and demand.static is None:
                # growing waits its turn behind another process's job that asked first; the pods
                # it has stay (a dynamic job may run at any size up to its share)
                kept = replace(grant, workers=min(grant.workers, before.workers),
                               servers=min(grant.servers, before.servers),
                               reason=f"{grant.reason}; kept at most its ({before.workers}, {before.servers}): "
                                      f"a job of another `coach submit` asked first for the room to grow")
                if kept != grant:
                    with self._cond:   # no more than it holds: nothing for this run's other jobs to see
                        self._hold(job_id, demand, kept)
                    if self._lease(job_id, asked_at, before):
                        grant = kept
                        break
            gone = self.never_fits(demand)   # the nodes were reshaped under it (`coach cluster up --force`)
            too_small_since = None if gone is None else too_small_since or time.monotonic()
            if too_small_since is not None and time.monotonic() - too_small_since < GONE_AFTER_S:
                gone = None   # perhaps a reading in the middle of the reshape
            timed_out = timeout_s is not None and time.monotonic() - start >= timeout_s
            if gone is not None or timed_out or should_stop():
                if before is None and self._store is not None:
                    self._store.drop_lease(job_id)   # leave the queue
                if gone is not None:   # it waited for room that no longer exists, with no end
                    whole = self.capacity.whole
                    raise BackendError(f"the job no longer fits the backend's capacity ({whole.cpu:g} cores, "
                                       f"{whole.memory_gib:g} GiB): {gone}")
                return None
            why, self.expected_wait_s[job_id] = self._why_waiting(demand, others, queued=grant is not None,
                                                                  asked_at=asked_at)
            if self._store is not None:
                self._store.wait_for_lease(job_id, *min_resources(demand), since=asked_at)
            on_wait(why)
            with self._cond:
                self._cond.wait(RECHECK_S)
        predicted = epoch_s(grant.workers, grant.servers)   # may fit models: outside the lock
        if self.kept and demand.static is not None and predicted is not None:
            # kept to its end: a static job never shrinks for others (a dynamic one may, next epoch)
            predicted = predicted * epochs if (epochs := epochs_to_end(demand, grant)) else None
        with self._cond:
            if job_id in self._held:
                self._held[job_id].epoch_s = predicted
        if self._store is not None:
            self._store.set_lease_epoch_s(job_id, predicted)
        return grant

    def _hold(self, job_id: str, demand: JobDemand, grant: Allocation) -> None:
        cpu, mem = footprint(demand.resources, grant.workers, grant.servers)
        self._held[job_id] = _Held(grant.workers, grant.servers, cpu, mem, time.monotonic(), None)

    def _lease(self, job_id: str, asked_at: float, before: _Held | None) -> bool:
        """Lease what the job holds here (just granted) in the store too; refused (another process
        took the cores first, or asked before), this process holds again what it held `before`."""
        held = self._held[job_id]
        ok = self._store is None or self._store.take_lease(job_id, held.cpu, held.memory_gib, self.capacity.cpu,
                                                           self.capacity.memory_gib, asked_at)
        with self._cond:
            if not ok and before is None:
                self._held.pop(job_id, None)
            elif not ok:   # the store still holds the lease it had: so does this process
                self._held[job_id] = before
            self._cond.notify_all()   # a grant smaller than before frees room; so does a refusal
        return ok

    def _others(self) -> _Elsewhere:
        """What the jobs of other `coach submit` processes hold and want."""
        if self._store is None:
            return _Elsewhere([], [], set())
        me, now = own_identity(), time.time()
        leases = [l for l in self._store.leases() if l.owner != me]
        running = [RunningJob(math.inf if l.epoch_s is None else max(0.0, l.since + l.epoch_s - now),
                              l.cpu, l.memory_gib, l.job_id) for l in leases]
        demands = []
        for d in self._store.demands():
            if d.owner == me:
                continue
            try:
                demands.append((d.since, demand_from_json(d.demand)))
            except (ValueError, KeyError, TypeError):
                continue   # written by another version of Coach: its leases still count
        return _Elsewhere(running, demands, {l.job_id for l in leases})

    def _running(self, job_id: str, others: _Elsewhere) -> list[RunningJob]:
        """Everything holding capacity except `job_id`: this run's other jobs and other processes'."""
        now = time.monotonic()
        return [RunningJob(math.inf if h.epoch_s is None else max(0.0, h.since + h.epoch_s - now),
                           h.cpu, h.memory_gib, j) for j, h in self._held.items() if j != job_id] + others.running

    def _everyone(self, others: _Elsewhere) -> list[JobDemand]:
        """Every running job's demand, this run's and other processes', oldest first."""
        mine = [(self._since[j], d) for j, d in self._demands.items()]
        theirs = [(t, d) for t, d in others.demands if d.job_id not in self._demands]
        return [d for _, d in sorted(mine + theirs, key=lambda x: (x[0], x[1].job_id))]

    def _free(self, job_id: str, others: _Elsewhere) -> tuple[float, float]:
        held = self._running(job_id, others)
        return (self.capacity.cpu - sum(h.cpu for h in held),
                self.capacity.memory_gib - sum(h.memory_gib for h in held))

    def _grant(self, demand: JobDemand, others: _Elsewhere) -> Allocation | None:
        free_cpu, free_mem = self._free(demand.job_id, others)
        # what fits beside the other jobs now: in sum, and its own group alone on the nodes (where
        # their pods are is the scheduler's business); the share below lays every job out together
        now = self._plan([demand], free_cpu, free_mem).get(demand.job_id)
        if now is None:
            return None
        share = self._plan(self._everyone(others), self.capacity.cpu, self.capacity.memory_gib,
                           backfill=True).get(demand.job_id)
        if share is None and self._first_in_line(demand, others, free_cpu, free_mem) is not None:
            return None
        if share is None or demand.static is not None:
            return now
        w, s = min(now.workers, share.workers), min(now.servers, share.servers)
        if (w, s) == (now.workers, now.servers):
            return now
        return replace(share, workers=w, servers=s,
                       reason=f"{share.reason}; limited to ({w}, {s}) by the capacity free now")

    def _first_in_line(self, demand: JobDemand, others: _Elsewhere, free_cpu: float, free_mem: float
                       ) -> JobDemand | None:
        """An older job that waits and whose minimum fits the room free beside every lease but
        this job's: it goes first. Only where jobs keep their leases between epochs (`kept`):
        there a job that holds none waits, and a younger job backfilled into room that the older
        one could not use then would keep that room for all its epochs (on the local backend jobs
        take turns at every epoch's end)."""
        if not self.kept:
            return None
        holding = set(self._held) | others.holding
        for d in self._everyone(others):
            if d.job_id == demand.job_id:
                return None
            if d.job_id not in holding and self._plan([d], free_cpu, free_mem).get(d.job_id) is not None:
                return d
        return None

    def _why_waiting(self, demand: JobDemand, others: _Elsewhere, queued: bool,
                     asked_at: float) -> tuple[str, float | None]:
        with self._cond:
            running = self._running(demand.job_id, others)
            free_cpu = self.capacity.cpu - sum(h.cpu for h in running)
            free_mem = self.capacity.memory_gib - sum(h.memory_gib for h in running)
            first = self._first_in_line(demand, others, free_cpu, free_mem)
        cpu, mem = min_resources(demand)
        # jobs that take the room first: the older waiting job holds it for as long as it runs (its
        # end unknown here); jobs of other processes that asked first, an epoch each, in turn
        asked_first: list[RunningJob] = []
        if queued and self._store is not None:   # read only then: the queue of other processes' jobs
            theirs, turn, me = {d.job_id: d for _, d in others.demands}, 0.0, own_identity()
            waits = [w for w in self._store.waits() if w.owner != me and w.since < asked_at]
            for w in sorted(waits, key=lambda w: w.since):
                turn += epoch_hold_s(theirs[w.job_id]) if w.job_id in theirs else math.inf
                asked_first.append(RunningJob(turn, w.cpu, w.memory_gib, w.job_id))
        ahead = ([RunningJob(math.inf, *min_resources(first), first.job_id)] if first else []) + asked_first
        wait = expected_wait(cpu, mem, free_cpu - sum(a.cpu for a in ahead), free_mem - sum(a.memory_gib for a in ahead),
                             running + ahead)
        holders = sorted({r.job_id for r in running if r.job_id})
        whole = self.capacity.whole
        elsewhere = (whole.cpu - self.capacity.cpu, whole.memory_gib - self.capacity.memory_gib)
        return (f"waiting for capacity: needs {cpu:g} cores / {mem:g} GiB, "
                f"{max(free_cpu, 0):g} cores / {max(free_mem, 0):g} GiB free"
                + (f" (held by {', '.join(holders)})" if holders else "")
                + (f"; other work on the cluster holds {elsewhere[0]:g} cores / {elsewhere[1]:g} GiB"
                   if max(elsewhere) > 1e-9 else "")
                + (f"; {', '.join(a.job_id for a in asked_first) or 'a job'} of another `coach submit` asked first"
                   if queued else "")
                + (f"; {first.job_id}, waiting since before this job, takes it first" if first else "") + "; "
                + ("expected wait unknown" if wait is None else f"expected wait ~{wait:.0f}s")), wait

    def release(self, job_id: str, done: bool = False) -> None:
        # the store first: a job woken here must find the lease gone there too, or the store
        # refuses it and it sleeps RECHECK_S (a second's gap at every hand-over between jobs)
        if self._store is not None:
            self._store.drop_lease(job_id)   # best effort: a store error must not keep the cores here
            if done:
                self._store.drop_demand(job_id)
        with self._cond:
            self._held.pop(job_id, None)
            if done:
                self._demands.pop(job_id, None)
                self._starting.discard(job_id)
                self._since.pop(job_id, None)
                self.expected_wait_s.pop(job_id, None)
            self._cond.notify_all()
