"""A discrete-event simulation of one scheduler placing a workload: the decisions that
default-scheduler, bin-pack and coach-gang make on the control plane, without the control
plane, so that a thousand jobs take seconds instead of hours and a run does not depend on
the machine's load. It returns the same `Run` as a real replay, so the figures, table and plot
are the same.

Modelled, from kube-scheduler v1.35.4 and `scheduler_plugins/`:
- **Pods arrive as the replay creates them**: the pods of the jobs due together, one of each
  job in turn, by 8 threads at once, each creation taking about CREATE_S (13 ms with
  8 at once, measured here), so pods of one round can come after some of the next, and
  the scheduler starts on the first while the last are still being made.
- **Time runs in the scheduler too**: one coach-gang attempt takes ATTEMPT_S (about 300 pods/s
  on this machine, `bench/scheduler_throughput.py`); one default-scheduler cycle PLACE_S or, for
  a refused pod, REFUSE_S (a tenth of a millisecond: every pod a deletion wakes is tried before
  the next deletion comes, so each deletion of a burst costs every waiting pod one more
  failure), and the pods of a finished job are deleted one after another, DELETE_S apart (a
  delete-collection, about 4.5 ms a pod here; of jobs that end at the same poll, one job after
  the other). Each deletion frees room and wakes every pod that failed, while the scheduler may be half-way
  through the pods the last one woke: room comes free piecemeal, and it goes to whichever
  pod is next, as on the control plane. Nothing else wakes a failed pod (a new pod frees no
  room).
- **default-scheduler** takes pods one at a time: those whose backoff is over by the time
  each last entered the queue, and when there are none (it pops its backoff queue when idle,
  as v1.35 does), the others by backoff expiry (1 s after the first failure, doubling to
  10 s, truncated to the second; over once the clock is past that second), ties by time
  queued. So a pod that failed often comes after younger ones. A pod goes to the node with
  room that scores best on least-allocated + balanced allocation, ties picked at random
  (seeded), as kube-scheduler picks.
- **bin-pack** is the same scheduler with most-allocated instead of least-allocated scoring.
- **coach-gang** uses the same queue and backoff, in FIFO order of jobs (arrival, then the
  workload's order) where kube-scheduler orders by time queued; a job's minimum group (a
  scheduler, a server, the rest workers) is placed whole or not at all — the Permit barrier,
  one attempt per pod. A group behind older unplaced ones yields if it would take the room
  they need (CoachGang's PreFilter sets that room aside, older first, each group that fits),
  and those that fit are activated, skipping their backoff; a group that does not fit is
  overtaken by one behind it that does (backfill); extras queue one by one once the group is
  placed, and a placed group activates the groups that yielded. Room freed pod by pod goes to
  whichever group is tried first: often a small younger one, while an older one waits out
  its backoff (before session 22 the simulated queue had no backoff, the oldest group took
  every freed slot, and seed 4's makespan was simulated 18% short).
  Nodes score co-location × 10 plus the default scores. A job that has waited STARVATION_S
  (its `starvationSeconds`) and still does not fit holds the room as it frees: the groups and
  extras behind it wait until it is placed (they are tried again then).
- **Jobs start, run and end as in `replay.py`**, which looks at the cluster after each 0.25 s
  sleep and its API calls: polls 0.255 s apart at the median, 0.259 s on average, up to 0.33 s
  (measured here), drawn per run from the seed. A job's pods are created at the first poll
  after it is due, it counts as started at the first poll after its group is bound, and its
  pods are deleted at the first poll after its run time. Whether two jobs end at one poll (and
  their room comes free together) turns on these few milliseconds, so the polls are not a fixed
  grid: on one, every seed of a run made the same call (seed 4 of `bench/simulator.py`: two
  jobs always ended at one 0.3 s poll, the next job was split over both nodes in 19 of 20
  seeds, and the real runs, whose jobs ended at separate polls, never split it). When nothing
  can move any more the run ends `stall_s` later, as a real run waits out its stall.

Not modelled: the API server's and the watches' latency beyond the attempt and deletion times,
the barrier's timeout (a simulated group never waits at it), and filters other than CPU,
memory and pod slots.
`bench/simulator.py` runs workloads both ways side by side.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import random
from dataclasses import dataclass
from typing import Callable

from coach.cluster.nodes import MAX_PODS   # per node, as `coach cluster up` makes them
from coach.experiment.replay import CREATORS, JobOutcome, Run, Sample
from coach.experiment.replay import POLL_S as REPLAY_POLL_S
from coach.experiment.schedulers import SCHEDULERS
from coach.experiment.workload import JobArrival, roles

# the replay sleeps replay.POLL_S (0.25 s) between polls, then makes its API calls: POLL_API_S at the median,
# log-normal with spread 1 (gaps measured here: median 0.255 s, mean 0.259 s, up to 0.33 s)
POLL_API_S = 0.005
POLL_S = REPLAY_POLL_S + POLL_API_S * math.exp(0.5)   # the mean gap between polls
ATTEMPT_S = 0.003          # one scheduling attempt (coach-gang): a pod's share of its throughput, binding included
                           # (its filters and scores alone: 0.4 ms on 2 nodes, bench/scheduler_throughput.py)
# default-scheduler and bin-pack: one scheduling cycle, log-normal (kube-scheduler --v=3 on the stream workload,
# pop to next pop with no event between: refused median 0.09 ms, log-spread 1.15; placed 0.16 ms, 0.9; the bind
# is asynchronous). A refused pod does not hold the loop for 3 ms: the pods an event wakes are all tried before
# the next deletion of a delete-collection (about 5 ms apart) comes, as on the control plane.
REFUSE_S, REFUSE_SPREAD = 0.00009, 1.15
PLACE_S, PLACE_SPREAD = 0.00016, 0.9
CREATE_S = 0.013           # one pod's creation, 8 at once
JITTER = 0.46              # the spread of those times: log(p90 / median) / 1.28 of the creations
DELETE_S = 0.0045          # between the deletions of a finished job's pods
INITIAL_BACKOFF_S = 1.0    # kube-scheduler's podInitialBackoffSeconds
MAX_BACKOFF_S = 10.0       # and podMaxBackoffSeconds
COLOCATION_WEIGHT = 10     # deploy/scheduler/config.yaml
STARVATION_S = 30.0        # and its starvationSeconds
ROLES = {"scheduler", "server", "worker"}
MAX_POD_NODES = 30_000_000   # the largest random workload (1,000 jobs of at most 6 pods) on 5,000 nodes
"""Pods × nodes a simulation takes: it weighs every node for every pod, about 400,000 pairs a
second here (20,000 pods on 1,000 nodes took 46 s a scheduler; 1,000 jobs of 1,000 pods on
5,000 nodes, within each option's own limit, would have run for hours behind a spinner)."""
# at one instant: jobs due, pods created, then deleted, then the scheduler's next attempt
_ARRIVE, _CREATE, _DELETE, _FINISH, _ATTEMPT = range(5)


@dataclass
class _Pod:
    job: int
    name: str
    role: str
    node: int | None = None


@dataclass
class _Item:
    """What the scheduler tries in one go: a pod (default-scheduler, bin-pack), or a job's
    minimum group or one extra (coach-gang)."""
    pods: list[_Pod]
    queued: tuple[float, int] = (0.0, 0)   # when it last entered the queue (ties: in order)
    failures: int = 0
    fifo: tuple[int, int] = (0, 0)          # coach-gang: job, then pod
    active: bool = False                    # coach-gang: activated by the plugin, its backoff skipped

    def backoff_expiry(self) -> float:
        if self.failures == 0:
            return 0.0
        # backoffQueue.isPodBackingoff: backing off while the truncated expiry is not before the truncated now,
        # i.e. until the whole second after it
        return math.floor(self.queued[0] + min(INITIAL_BACKOFF_S * 2 ** (self.failures - 1), MAX_BACKOFF_S)) + 1


class _Queue:
    """kube-scheduler's scheduling queue: the active queue (backoff over, or activated) first,
    by time queued or, for coach-gang, in job FIFO order; else (idle) the backoff queue by
    expiry. Two heaps, not a list searched at every attempt: a thousand coach-gang jobs on two
    nodes took 16.5 s with the list (items wait by the hundreds and are tried after every pod
    deleted)."""

    def __init__(self, gang: bool) -> None:
        self.gang = gang
        self.active: list[tuple] = []    # (order, tick, item)
        self.backoff: list[tuple] = []   # (expiry, order, tick, item)
        self.failed: list[_Item] = []    # until a pod goes away
        self.tick = itertools.count()

    def __bool__(self) -> bool:
        return bool(self.active or self.backoff)

    def add(self, item: _Item, t: float) -> None:
        order = item.fifo if self.gang else item.queued
        expiry = item.backoff_expiry()
        if item.active or expiry <= t:
            heapq.heappush(self.active, (order, next(self.tick), item))
        else:
            heapq.heappush(self.backoff, (expiry, order, next(self.tick), item))

    def pop(self, t: float) -> _Item:
        while self.backoff and self.backoff[0][0] <= t:
            _, order, tick, item = heapq.heappop(self.backoff)
            heapq.heappush(self.active, (order, tick, item))
        item = heapq.heappop(self.active if self.active else self.backoff)[-1]
        item.active = False
        return item

    def retry_failed(self, t: float) -> None:
        """A pod went away: everything that failed is queued again."""
        for item in self.failed:
            self.add(item, t)
        self.failed = []

    def drop(self, job: int) -> None:
        self._keep(lambda item: item.pods[0].job != job)

    def activate(self, jobs: set[int], t: float) -> None:
        """handle.Activate: the unplaced groups of these jobs go to the active queue."""
        def wanted(item: _Item) -> bool:
            return item.fifo[1] == 0 and item.pods[0].job in jobs
        chosen = [e[-1] for e in self.active + self.backoff if wanted(e[-1])] + [i for i in self.failed if wanted(i)]
        if chosen:
            self._keep(lambda item: not wanted(item))
            for item in chosen:
                item.active = True
                self.add(item, t)

    def _keep(self, keep: Callable[[_Item], bool]) -> None:
        self.active = [e for e in self.active if keep(e[-1])]
        self.backoff = [e for e in self.backoff if keep(e[-1])]
        heapq.heapify(self.active)
        heapq.heapify(self.backoff)
        self.failed = [i for i in self.failed if keep(i)]


def simulate(workload: list[JobArrival], nodes: list[tuple[float, float]], scheduler: str,
             stall_s: float = 45.0, seed: int = 0) -> Run:
    """One scheduler's run of `workload` on nodes of (CPU, GiB). The same inputs give the
    same run; `seed` drives the pods' creation order and the ties between equal nodes."""
    if scheduler not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {scheduler!r}; known: {', '.join(SCHEDULERS)}")
    return _Simulation(workload, nodes, scheduler, seed).run(stall_s)


class _Simulation:
    def __init__(self, workload: list[JobArrival], nodes: list[tuple[float, float]], scheduler: str, seed: int):
        self.scheduler = scheduler
        self.gang, self.pack = scheduler == "coach-gang", scheduler == "bin-pack"
        self.rng = random.Random(seed)
        self.outcomes = [JobOutcome(j) for j in sorted(workload, key=lambda j: j.at)]   # stable: file order
        # millicores and MiB, as the pods request them: whole numbers, no rounding drift
        self.size = [(round(o.job.cpu * 1000), round(o.job.memory_gib * 1024)) for o in self.outcomes]
        self.capacity = [(round(c * 1000), round(m * 1024)) for c, m in nodes]
        self.free = [[c, m, MAX_PODS] for c, m in self.capacity]
        # coach-gang holds room only for a group that the empty nodes could hold
        self.could_fit = [self._fits(j, o.job.min_group) for j, o in enumerate(self.outcomes)]
        self.jobs_on: list[dict[int, int]] = [{} for _ in nodes]
        self.pods: list[list[_Pod]] = [[] for _ in self.outcomes]
        self.extras: list[list[_Item]] = [[] for _ in self.outcomes]   # coach-gang: queued once the group is placed
        self.created = [0] * len(self.outcomes)
        self.unplaced: set[int] = set()   # coach-gang: jobs whose groups are queued, not placed
        self.held: list[_Item] = []       # coach-gang: waiting for a starved job ahead to be placed
        self.yielded: set[int] = set()    # coach-gang: jobs whose groups left the room to older ones that fit
        self.queue = _Queue(self.gang)
        self.busy = False
        self.deleting = 0.0   # the replay's deletions are under way until then
        self.events: list[tuple[float, int, int, object]] = []
        self.tick = itertools.count()
        self.last_change = 0.0
        self.busy_m = self.held_m = 0   # millicores bound to started jobs, and to jobs not started
        # the jobs due at one poll come together (outcomes are in arrival order)
        # the replay's polls, drawn as they are needed from a stream of their own (from `self.rng`'s, a
        # slow poll came with a slow pod creation every time)
        self.polls, self.poll_rng = [0.0], random.Random(f"polls-{seed}")
        for at, due in itertools.groupby(range(len(self.outcomes)), key=lambda j: self._poll(self.outcomes[j].job.at)):
            self._push(at, _ARRIVE, list(due))

    def run(self, stall_s: float) -> Run:
        run = Run(self.scheduler, sum(c for c, _ in self.capacity) / 1000, self.outcomes, [self._usage(0.0)])
        t = 0.0
        while self.events:
            t, kind, _, what = heapq.heappop(self.events)
            if kind == _ARRIVE:
                self._arrive(what, t)
            elif kind == _CREATE:
                self._create(what, t)
            elif kind == _FINISH:
                self._finish(what, t)
            elif kind == _DELETE:
                self._delete(what, t)
            else:
                self._attempt(t)
            if not self.busy and self.queue:
                self.busy = True
                self._push(t, _ATTEMPT, None)
            if run.samples[-1].t == t:   # the state after everything at this instant
                run.samples[-1] = self._usage(t)
            else:
                run.samples.append(self._usage(t))
        if all(o.finished is not None for o in self.outcomes):
            run.ended, run.duration = "finished", max(o.finished for o in self.outcomes)
        else:   # the last change, then the stall a real run waits out
            run.ended, run.duration = "stalled", self.last_change + stall_s
        run.samples = [s for s in run.samples if s.t <= run.duration]
        return run

    def _push(self, t: float, kind: int, what: object) -> None:
        heapq.heappush(self.events, (t, kind, next(self.tick), what))

    def _arrive(self, due: list[int], t: float) -> None:
        """The pods of jobs due together are created side by side, one of each job in turn,
        by CREATORS threads at once."""
        for k in due:
            o = self.outcomes[k]
            o.submitted, self.last_change = t, t
            self.pods[k] = [_Pod(k, f"{o.job.name}-{role}-{i}", role) for i, role in enumerate(roles(o.job.pods))]
        threads = [t] * CREATORS
        for p in (p for pods in itertools.zip_longest(*(self.pods[k] for k in due)) for p in pods if p is not None):
            done = heapq.heappop(threads) + self._jitter(CREATE_S)
            heapq.heappush(threads, done)
            self._push(done, _CREATE, p)

    def _create(self, p: _Pod, t: float) -> None:
        """A pod exists: kube-scheduler queues it; coach-gang queues a job's minimum group
        once all its pods exist (PreEnqueue), and its extras once the group is placed."""
        j = p.job
        if self.outcomes[j].finished is not None:
            return
        if not self.gang:
            self._enqueue(_Item([p]), t)
            return
        self.created[j] += 1
        if self.created[j] == len(self.pods[j]):
            m = self.outcomes[j].job.min_group
            self.unplaced.add(j)
            self._enqueue(_Item(self.pods[j][:m], fifo=(j, 0)), t)
            self.extras[j] = [_Item([x], fifo=(j, i + 1)) for i, x in enumerate(self.pods[j][m:])]

    def _enqueue(self, item: _Item, t: float) -> None:
        item.queued = (t, next(self.tick))
        self.queue.add(item, t)

    def _finish(self, j: int, t: float) -> None:
        """The job's pods are deleted one after another, in name order (a delete-collection),
        after those of jobs that finished at the same poll: the replay deletes job after job."""
        o = self.outcomes[j]
        o.finished, self.last_change = t, t
        self.busy_m -= o.bound * self.size[j][0]
        self.queue.drop(j)
        self.extras[j] = []
        self.unplaced.discard(j)
        self.held = [i for i in self.held if i.pods[0].job != j]
        self.yielded.discard(j)
        t = max(t, self.deleting)
        for p in sorted((p for p in self.pods[j] if p.node is not None), key=lambda p: p.name):
            t += self._jitter(DELETE_S)
            self._push(t, _DELETE, p)
        self.pods[j], self.deleting = [], t

    def _delete(self, p: _Pod, t: float) -> None:
        """A pod goes away: its room is free, and everything that failed is tried again."""
        self._unbind(p)
        self.outcomes[p.job].bound -= 1
        self.queue.retry_failed(t)

    def _attempt(self, t: float) -> None:
        if not self.queue:   # the job whose pods were queued finished while this attempt was due
            self.busy = False
            return
        item = self.queue.pop(t)
        j = item.pods[0].job
        took, fits = 1, self._fits(j, len(item.pods))
        if self.gang and self._held_for(j, t):
            self.held.append(item)
        elif fits and self.gang and item.fifo[1] == 0 and self._yields(j, t):
            self.yielded.add(j)
            self._refuse(item, t)
        elif fits:
            for p in item.pods:
                self._bind(p, self._best_node(j), t)
            took = len(item.pods)
            if self.gang and item.fifo[1] == 0:   # the group is placed: its extras may come, and what it held back
                for extra in self.extras[j] + self.held:
                    self._enqueue(extra, t)
                self.extras[j], self.held = [], []
                self.unplaced.discard(j)
                self.queue.activate(self.yielded, t)   # PreFilter's yield: woken at Permit
                self.yielded = set()
            self._start(j, t)
        else:
            self._refuse(item, t)
        if self.queue:
            if self.gang:
                cost = self._jitter(took * ATTEMPT_S)
            elif item.pods[0].node is not None:
                cost = PLACE_S * self.rng.lognormvariate(0.0, PLACE_SPREAD)
            else:
                cost = REFUSE_S * self.rng.lognormvariate(0.0, REFUSE_SPREAD)
            self._push(t + cost, _ATTEMPT, None)
        else:
            self.busy = False

    def _refuse(self, item: _Item, t: float) -> None:
        """Unschedulable: it backs off longer and waits for a pod to go away."""
        item.failures += 1
        item.queued = (t, next(self.tick))
        self.queue.failed.append(item)

    def _yields(self, j: int, t: float) -> bool:
        """CoachGang's PreFilter (`ahead`): the room the minimum groups of older unplaced jobs
        need is set aside, in queue order, each that fits what is left; if j's group no longer
        fits, j yields, and the jobs ahead that fit are activated (their backoff skipped)."""
        free = [list(f) for f in self.free]
        fitting = []
        for k in sorted(k for k in self.unplaced if k < j):
            if self._take(free, k, self.outcomes[k].job.min_group):
                fitting.append(k)
        if not fitting or self._take(free, j, self.outcomes[j].job.min_group):
            return False
        self.queue.activate(set(fitting), t)
        return True

    def _take(self, free: list[list[int]], j: int, pods: int) -> bool:
        """Packs pods of job j into free (changed only if they all fit)."""
        cpu, memory = self.size[j]
        trial = [list(f) for f in free]
        for _ in range(pods):
            n = next((n for n, (c, m, s) in enumerate(trial) if c >= cpu and m >= memory and s >= 1), None)
            if n is None:
                return False
            trial[n][0] -= cpu
            trial[n][1] -= memory
            trial[n][2] -= 1
        free[:] = trial
        return True

    def _held_for(self, j: int, t: float) -> bool:
        """A job ahead of j that has waited longer than STARVATION_S, does not fit, and would
        fit the empty nodes holds the room as it frees."""
        for k in self.unplaced:
            o = self.outcomes[k]
            if k < j and t - o.submitted > STARVATION_S and self.could_fit[k] and not self._fits(k, o.job.min_group):
                return True
        return False

    def _jitter(self, seconds: float) -> float:
        """API calls and attempts vary with the load (a pod's creation here: median 13 ms, p90
        24 ms), and which pod gets room varies with them: log-normal around the median."""
        return seconds * self.rng.lognormvariate(0.0, JITTER)

    def _fits(self, j: int, pods: int) -> bool:
        """Equal pods: each node holds as many as fit by CPU, memory and slots, and placing one
        on a node lowers that count by exactly one, so placing them one by one never gets stuck."""
        cpu, memory = self.size[j]
        return sum(min(c // cpu, m // memory, slots) for c, m, slots in self.free) >= pods

    def _best_node(self, j: int) -> int:
        cpu, memory = self.size[j]
        best, best_score = [], -1
        for n, (c, m, slots) in enumerate(self.free):
            if c < cpu or m < memory or slots < 1:
                continue
            score = self._score(n, cpu, memory) + (COLOCATION_WEIGHT * self._colocation(n, j) if self.gang else 0)
            if score > best_score:
                best, best_score = [n], score
            elif score == best_score:
                best.append(n)
        return self.rng.choice(best)

    def _score(self, n: int, cpu: int, memory: int) -> int:
        """NodeResourcesFit (least allocated, or most allocated for bin-pack) +
        NodeResourcesBalancedAllocation, with the pod on the node, in kube-scheduler's integer
        arithmetic."""
        (cap_cpu, cap_memory), (free_cpu, free_memory, _) = self.capacity[n], self.free[n]
        used_cpu, used_memory = cap_cpu - free_cpu + cpu, cap_memory - free_memory + memory
        if self.pack:
            fit = (used_cpu * 100 // cap_cpu + used_memory * 100 // cap_memory) // 2
        else:
            fit = ((cap_cpu - used_cpu) * 100 // cap_cpu + (cap_memory - used_memory) * 100 // cap_memory) // 2
        spread = abs(min(1.0, used_cpu / cap_cpu) - min(1.0, used_memory / cap_memory)) / 2
        return fit + int((1 - spread) * 100)

    def _colocation(self, n: int, j: int) -> int:
        """CoachColocation: 100 on a node with this job's pods only, 50 on one without Coach
        pods, 0 on one with another job's."""
        if any(k != j for k in self.jobs_on[n]):
            return 0
        return 100 if j in self.jobs_on[n] else 50

    def _bind(self, p: _Pod, node: int, t: float) -> None:
        cpu, memory = self.size[p.job]
        r = self.free[node]
        r[0], r[1], r[2] = r[0] - cpu, r[1] - memory, r[2] - 1
        p.node = node
        self.jobs_on[node][p.job] = self.jobs_on[node].get(p.job, 0) + 1
        o = self.outcomes[p.job]
        o.bound += 1
        if o.started is None:
            self.held_m += cpu
        else:
            self.busy_m += cpu
        self.last_change = t

    def _unbind(self, p: _Pod) -> None:
        cpu, memory = self.size[p.job]
        r = self.free[p.node]
        r[0], r[1], r[2] = r[0] + cpu, r[1] + memory, r[2] + 1
        self.jobs_on[p.node][p.job] -= 1
        if not self.jobs_on[p.node][p.job]:
            del self.jobs_on[p.node][p.job]
        p.node = None

    def _start(self, j: int, t: float) -> None:
        """A job starts when its minimum group is bound with a pod of every role (seen at the
        next poll), and ends at the first poll after its run time."""
        o = self.outcomes[j]
        if o.started is None and o.bound >= o.job.min_group and \
                {p.role for p in self.pods[j] if p.node is not None} == ROLES:
            o.started, o.nodes = self._poll(t), len({p.node for p in self.pods[j] if p.node is not None})
            self.held_m -= o.bound * self.size[j][0]
            self.busy_m += o.bound * self.size[j][0]
            self._push(self._poll(o.started + o.job.run), _FINISH, j)

    def _usage(self, t: float) -> Sample:
        """`replay.usage`, kept up to date as pods are bound and jobs start and end: summed over
        every job after every event, it was most of a long run's time."""
        return Sample(t, self.busy_m / 1000, self.held_m / 1000)

    def _poll(self, t: float) -> float:
        """The first poll of the replay at or after t."""
        while self.polls[-1] < t - 1e-9:
            self.polls.append(self.polls[-1] + REPLAY_POLL_S + POLL_API_S * self.poll_rng.lognormvariate(0.0, 1.0))
        return self.polls[bisect.bisect_left(self.polls, t - 1e-9)]
