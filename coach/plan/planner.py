"""Planner: how many workers and servers each running job gets, by marginal utility.

Optimus' greedy (EuroSys'18, §4.1) over the capacity the jobs share:

1. Every job in order (the order given is the priority: first come, first served)
   gets its minimum — one scheduler, one server, one worker, or exactly its `static`
   (w, s). A job whose minimum does not fit the capacity left waits (None), and so do
   the jobs after it unless `backfill=True` (no small job overtakes a big one waiting).
   On a cluster "fits" also means that every function granted so far can be laid out on
   the nodes (`coach.plan.packing`): cores summed over nodes hide their fragments.
2. Then, repeatedly, for every job and for each of "one more worker" and "one more
   server" that fits the free capacity, the job's `max_workers`/`max_servers` and its
   epoch budget, compute the marginal utility

       U = (T(w, s) − T(w', s')) / cpu(role)          T = remaining epochs · samples per epoch / f(w, s)

   — the predicted reduction of the job's remaining time per core the step costs —
   and grant the best one, as long as it saves at least `gain_floor(speed)` of T: 2%,
   or the speed model's held-out MAPE if larger (a gain inside the model's error is no
   gain). A step between two configurations the job measured is judged on what they
   measured instead, against their noise alone (`measured_floor`): the model only guesses
   there, and with its 10% error after tuning a job stayed on (1, 1) while (2, 1) measured
   9.5% and (2, 2) 22% faster. A step back up to the (w, s) the job is training on
   (`current`) only has to save something, and between measured ones not lose more than
   their noise: a gain inside the error is no reason to change, in either direction
   (without this a job fell from (2, 1) to its minimum whenever noisy epochs raised the
   model's error, and trained slower). Stop when no step qualifies.
3. Then, job by job, leap to a configuration the job measured beyond where the steps
   stopped if it measured faster by their noise for every function it adds, and fits
   the room left, the limits and the budget (`_leap`): one step at a time cannot pass a
   configuration measured slower than the one before it.
4. Then, job by job, where it stays on what it trains on: measure again a configuration one
   function away that reads within the noise of it, or up to 10% slower, from far fewer
   measurements (`_again`): a job never measures what it does not train on, so one reading
   taken in a burst of load would otherwise decide for the rest of the job. A configuration a
   job trains on that has fewer measurements than another keeps it only if it reads as fast
   (`_less_measured`). Else measure (1, 1), which tuning leaves out, once the job is predicted
   long enough that even at its slowest one epoch there costs under 2% of the time left
   (`_explore`).

A job alone on a 2-core machine whose measured speed does not improve with a second
worker therefore stays at one worker: U ≤ 0 for the worker step, once (1, 1) is measured
(by tuning beside other jobs, else by `_explore` on a long job). Deterministic: ties go
to the earlier job, then to the worker step.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from coach.estimate.cost import DEFAULT_PRICES, DEFAULT_RESOURCES, Prices, RoleResources, epoch_cost
from coach.estimate.speed import SpeedModel
from coach.plan.packing import Size, describe, packs

MIN_RELATIVE_GAIN = 0.02
"""A step must cut the predicted remaining time by ≥ 2%: smaller gains are within noise."""

MEASURED_GAIN = 0.05
"""A configuration measured once must be this much faster than another measured once to count
as faster: two mini-epochs of one configuration in one job read up to about 5% apart. Medians
of more measurements need less (`measured_floor`)."""


AGAIN_READINGS = 3.0
"""`_again` measures a configuration again once the one a job trains on has this many times
its measurements: a third of them or fewer is a stale reading beside a fresh median."""

AGAIN_BELOW = 3.0
"""... and only while fewer than this many measurements stand behind it: two configurations that
read alike would otherwise take turns for good (one epoch in four in a simulation). Not 2: one
epoch read in a burst and one measured again make a median halfway between them, which then
decided for the rest of the job (a simulation, below `AGAIN_SLOWER`)."""

AGAIN_EPOCHS = 5.0
"""... and only with this many epochs predicted left: an epoch there costs at most its noise
for one epoch, and finding it faster by as much gains that on every epoch left."""

AGAIN_SLOWER = 0.10
"""... and only if it reads at most this much slower: one epoch there then costs at most 2% of
the AGAIN_EPOCHS or more left (MIN_RELATIVE_GAIN: less is noise). Beyond the noise of a median,
as one epoch in a burst of load reads; (1, 1), 20–25% slower than (2, 1) here, is left alone."""


def measured_floor(speed: SpeedModel, a: tuple[int, int], b: tuple[int, int]) -> float:
    """How much faster measured configuration `b` must read than `a` to count as faster: their
    noise. MEASURED_GAIN for one measurement of each, shrinking as 1/√n with the measurements
    behind each median (`SpeedModel.readings`), down to MIN_RELATIVE_GAIN.

    A fixed 5% kept a job on whichever of (2, 1) and (2, 2) it trained on first: a resubmitted
    10-epoch `lenet-mnist` job trained (2, 1)×10 and took 4.7% longer than static (2, 2)×10,
    though the store held about 27 epochs of (2, 2) by three earlier jobs. Against their medians'
    noise the resubmissions trained one epoch on (2, 1), then (2, 2) (`bench/dynamic_vs_static.py
    --epochs 10`)."""
    spread = (1 / speed.readings(*a) + 1 / speed.readings(*b)) / 2
    return max(MIN_RELATIVE_GAIN, MEASURED_GAIN * math.sqrt(spread))



@dataclass(frozen=True)
class JobDemand:
    """What the planner needs to know about one running (or waiting) job."""

    job_id: str
    speed: SpeedModel | None            # f(w, s) in samples/s; None before any measurement
    remaining_epochs: float | None      # predicted epochs left, or what max_epochs leaves; None: unknown, as 1
    samples_per_epoch: float            # samples in one training epoch
    max_workers: int = 8                # w ≤ max_workers
    max_servers: int = 4                # s ≤ max_servers
    static: tuple[int, int] | None = None    # fixed (w, s): no planning, exactly this or wait
    resources: Mapping[str, RoleResources] = field(default_factory=lambda: dict(DEFAULT_RESOURCES))
    epoch_budget: float | None = None   # predicted epoch cost must stay ≤ this; None = no limit
    overhead_s: float = 0.0             # charged seconds an epoch costs beyond its training (start-up, checkpoint)
    prices: Prices = DEFAULT_PRICES
    current: tuple[int, int] | None = None   # (w, s) of its last training epoch; None before


def demand_to_json(d: JobDemand) -> str:
    """A demand as JSON, so that jobs of other `coach submit` processes can plan with it."""
    return json.dumps(asdict(d))


def demand_from_json(text: str) -> JobDemand:
    """The inverse of `demand_to_json`; ValueError (or KeyError/TypeError) if `text` is not one."""
    o = json.loads(text)
    speed = o["speed"]
    if speed is not None:
        speed = SpeedModel(**{**speed, "coef": tuple(speed["coef"]), "counts": tuple(speed.get("counts", ())),
                              "points": tuple(tuple(p) for p in speed["points"])})
    return JobDemand(**{**o, "speed": speed, "static": None if o["static"] is None else tuple(o["static"]),
                        "current": None if o.get("current") is None else tuple(o["current"]),
                        "resources": {r: RoleResources(**v) for r, v in o["resources"].items()},
                        "prices": Prices(**o["prices"])})


@dataclass(frozen=True)
class Allocation:
    """The planner's answer for one job, with the reason in words."""

    workers: int
    servers: int
    reason: str


@dataclass(frozen=True)
class RunningJob:
    """A running job as seen by `expected_wait`: when it ends and what it frees then."""

    eta_seconds: float                  # predicted seconds until it frees what it holds (its epoch's end)
    cpu: float                          # cores it holds
    memory_gib: float                   # memory it holds
    job_id: str = ""                    # who holds it: a waiting job's message names it


def epoch_hold_s(demand: JobDemand) -> float:
    """How long a job will hold the room of its next epoch, as its speed model and its charged
    overhead predict it at its last training (w, s), else its static or smallest; inf before it
    was measured (tuning)."""
    if demand.speed is None:
        return math.inf
    return _epoch_s(demand, *(demand.static or demand.current or (1, 1)))


def min_resources(demand: JobDemand) -> tuple[float, float]:
    """(cores, GiB) of the smallest allocation the job can run with."""
    w, s = demand.static or (1, 1)
    return footprint(demand.resources, w, s)


def gain_floor(speed: SpeedModel) -> float:
    """Smallest relative saving a step into an unmeasured configuration must promise:
    MIN_RELATIVE_GAIN, or the speed model's own held-out error if larger — a gain the model
    cannot tell from its error is no gain."""
    return max(MIN_RELATIVE_GAIN, speed.mape or 0.0)


def plan(demands: Sequence[JobDemand], capacity_cpu: float, capacity_memory_gib: float,
         backfill: bool = False, nodes: Sequence[Size] = ()) -> dict[str, Allocation | None]:
    """Allocate (w, s) to each job within the shared capacity; None = wait for capacity.
    With `nodes` (each node's room, a cluster's), every job's functions must also be laid out
    on them together (`coach.plan.packing`), not only fit their sum."""
    return plan_with_waits(demands, capacity_cpu, capacity_memory_gib, backfill, nodes)[0]


def plan_with_waits(demands: Sequence[JobDemand], capacity_cpu: float, capacity_memory_gib: float,
                    backfill: bool = False, nodes: Sequence[Size] = ()
                    ) -> tuple[dict[str, Allocation | None], dict[str, str]]:
    """`plan`, plus for every waiting job the reason in words (for `coach status`)."""
    ids = [d.job_id for d in demands]
    if len(set(ids)) != len(ids):
        raise ValueError(f"job ids must be unique, got {ids}")
    room = _Room(float(capacity_cpu), float(capacity_memory_gib), tuple(nodes))
    alloc: dict[str, tuple[int, int] | None] = {}
    notes: dict[str, list[str]] = {d.job_id: [] for d in demands}
    blocked = False
    for d in demands:
        w, s = d.static or (1, 1)
        group = functions(d.resources, w, s)
        lacking = None if blocked else room.lacks(group)
        if blocked or lacking is not None:
            alloc[d.job_id] = None
            if not blocked:
                cpu, mem = footprint(d.resources, w, s)
                notes[d.job_id].append(f"its minimum ({_ws(w, s)}) needs {_cores(cpu)} and {mem:g} GiB; {lacking}")
            else:
                notes[d.job_id].append("an earlier job is waiting for capacity")
            blocked = blocked or not backfill
            continue
        alloc[d.job_id] = (w, s)
        room.take(group)

    while True:
        best: tuple[float, int, int, str] | None = None   # (-utility, job index, role order, role)
        for i, d in enumerate(demands):
            if alloc[d.job_id] is None or d.static is not None or d.speed is None:
                continue
            for order, role in enumerate(("worker", "server")):
                step = _step(d, alloc[d.job_id], role, room)  # type: ignore[arg-type]
                if step.ok and (best is None or (-step.utility, i, order) < best[:3]):
                    best = (-step.utility, i, order, role)
        if best is None:
            break
        d = demands[best[1]]
        w, s = alloc[d.job_id]  # type: ignore[misc]
        w, s = (w + 1, s) if best[3] == "worker" else (w, s + 1)
        alloc[d.job_id] = (w, s)
        role_res = d.resources[best[3]]
        room.take([(role_res.cpu, role_res.memory_gib)])

    moved: dict[str, str] = {}   # why a job leapt, or measures a configuration again
    for d in demands:
        if (ws := alloc[d.job_id]) is not None and (leap := _leap(d, ws, room)) is not None:
            (lw, ls), gain = leap
            than = f"{_ws(*ws)}" if d.speed.measured(*ws) else f"{_ws(*ws)} is predicted to run"  # type: ignore[union-attr]
            moved[d.job_id] = (f"{_ws(lw, ls)}: measured {gain:.0%} faster than {than}, where granting one "
                               f"function at a time stopped because {_stopped_because(d, ws, room)}")
            room.take(_added(d, ws, (lw, ls)))
            alloc[d.job_id] = (lw, ls)
    for d in demands:   # after every job's leap: room another job would leap into is not measuring room
        if d.job_id not in moved and (ws := alloc[d.job_id]) is not None and \
                (again := _again(d, ws, room) or _explore(d, ws, room)):
            (aw, as_), moved[d.job_id] = again
            room.take(_added(d, ws, (aw, as_)))
            alloc[d.job_id] = (aw, as_)

    result: dict[str, Allocation | None] = {}
    for d in demands:
        ws = alloc[d.job_id]
        if ws is None:
            result[d.job_id] = None
            continue
        result[d.job_id] = Allocation(ws[0], ws[1], moved.get(d.job_id) or _reason(d, ws, room))
    waits = {job_id: "; ".join(n) for job_id, n in notes.items() if result[job_id] is None}
    return result, waits


def expected_wait(need_cpu: float, need_memory_gib: float, free_cpu: float, free_memory_gib: float,
                  running: Sequence[RunningJob]) -> float | None:
    """Seconds until enough capacity is free for a waiting job, from running jobs' ETAs.

    Running jobs free what they hold when they finish, earliest first; the wait is the
    ETA of the job whose end first makes the need fit. 0 if it fits now; None if it never
    fits even when every running job has finished, or a needed job's ETA is unknown (inf).
    """
    cpu, mem = free_cpu, free_memory_gib
    if need_cpu <= cpu + 1e-9 and need_memory_gib <= mem + 1e-9:
        return 0.0
    for job in sorted(running, key=lambda r: r.eta_seconds):
        if not math.isfinite(job.eta_seconds):
            return None
        cpu, mem = cpu + job.cpu, mem + job.memory_gib
        if need_cpu <= cpu + 1e-9 and need_memory_gib <= mem + 1e-9:
            return max(0.0, float(job.eta_seconds))
    return None


@dataclass(frozen=True)
class _Step:
    ok: bool
    utility: float
    why_not: str


@dataclass
class _Room:
    """What is left of the capacity as the planner grants functions."""

    cpu: float
    mem: float
    nodes: tuple[Size, ...] = ()                          # each node's room; () = one pool
    granted: list[Size] = field(default_factory=list)     # every function granted so far

    def lacks(self, group: list[Size]) -> str | None:
        """Why `group` does not fit beside what is granted (None if it fits)."""
        cpu, mem = sum(c for c, _ in group), sum(m for _, m in group)
        if cpu > self.cpu + 1e-9 or mem > self.mem + 1e-9:
            return f"{_cores(max(self.cpu, 0))} and {max(self.mem, 0):.3g} GiB are free"
        if self.nodes and not packs(self.granted + group, self.nodes):
            beside = f" beside the {len(self.granted)} functions granted" if self.granted else ""
            return f"{_cores(self.cpu)} are free in sum, but no layout of it{beside} fits on the {describe(self.nodes)}"
        return None

    def take(self, group: list[Size]) -> None:
        self.cpu -= sum(c for c, _ in group)
        self.mem -= sum(m for _, m in group)
        self.granted.extend(group)


def footprint(resources: Mapping[str, RoleResources], w: int, s: int) -> tuple[float, float]:
    """(cores, GiB) that one scheduler, `s` servers and `w` workers hold."""
    group = functions(resources, w, s)
    return sum(c for c, _ in group), sum(m for _, m in group)


def functions(resources: Mapping[str, RoleResources], w: int, s: int, scheduler: bool = True) -> list[Size]:
    """(cores, GiB) of each function of one scheduler, `s` servers and `w` workers."""
    counts = {"scheduler": int(scheduler), "server": s, "worker": w}
    return [(resources[r].cpu, resources[r].memory_gib) for r, n in counts.items() for _ in range(n)]


def _remaining_seconds(d: JobDemand, rate: float) -> float:
    epochs = 1.0 if d.remaining_epochs is None else max(float(d.remaining_epochs), 0.0)
    return epochs * d.samples_per_epoch / rate


def _rates(speed: SpeedModel, ws: tuple[int, int], then: tuple[int, int]) -> tuple[float, float, bool]:
    """The samples/s before and after a step: what both measured if both were measured (True),
    else the model's."""
    measured = speed.measured(*ws), speed.measured(*then)
    if None not in measured:
        return measured[0], measured[1], True   # type: ignore[return-value]
    return speed.predict(*ws), speed.predict(*then), False


def _step(d: JobDemand, ws: tuple[int, int], role: str, room: _Room) -> _Step:
    """Can the job take one more `role` function, and what is it worth per core?"""
    w, s = ws
    nw, ns = (w + 1, s) if role == "worker" else (w, s + 1)
    nth = _ordinal(nw if role == "worker" else ns)
    limit = d.max_workers if role == "worker" else d.max_servers
    if (nw if role == "worker" else ns) > limit:
        return _Step(False, 0.0, f"max_{role}s={limit} reached")
    res = d.resources[role]
    if (lacking := room.lacks([(res.cpu, res.memory_gib)])) is not None:
        return _Step(False, 0.0, f"a {nth} {role} needs {_cores(res.cpu)} and {res.memory_gib:g} GiB, {lacking}")
    if d.speed is None:
        return _Step(False, 0.0, "no speed model yet")
    rate_now, rate_then, measured = _rates(d.speed, ws, (nw, ns))
    now, then = _remaining_seconds(d, rate_now), _remaining_seconds(d, rate_then)
    per_core = (now - then) / max(res.cpu, 1e-9)
    horizon = "per epoch" if d.remaining_epochs is None else "of the remaining time"
    if d.epoch_budget is not None:
        cost = predicted_epoch_cost(d, nw, ns)
        if cost > d.epoch_budget:
            return _Step(False, per_core, f"a {nth} {role} would make an epoch cost {cost:.4g}, "
                                          f"above the epoch budget {d.epoch_budget:.4g}")
    if measured and _less_measured(d, ws, (nw, ns)):
        # what it trains on has fewer measurements than the other (it is measured again, `_again`,
        # or an earlier job measured the other more): it keeps its place only on what they measured
        floor = 0.0
    elif d.current is not None and nw <= d.current[0] and ns <= d.current[1]:   # back to what it runs on
        # a gain within the error is no reason to leave it; measured, nor a loss within their noise
        # (a (1, 1) mini-epoch read 800 samples/s, as fast as (2, 1)'s epochs; its own epochs, 620-780)
        floor = -measured_floor(d.speed, ws, (nw, ns)) if measured else 0.0
    else:
        floor = measured_floor(d.speed, ws, (nw, ns)) if measured else gain_floor(d.speed)
    if (now - then <= 0 and floor >= 0) or now - then < floor * now:
        if math.isclose(now, then, rel_tol=1e-9):   # a speed model that sees no effect of this role ("slow it down by 0 s")
            return _Step(False, per_core, f"a {nth} {role} would not change its speed")
        if now - then < 0:   # "would save -0.185 s" read as a typo
            return _Step(False, per_core, f"a {nth} {role} would slow it down by {then - now:.3g} s {horizon}")
        return _Step(False, per_core, f"a {nth} {role} would save {now - then:.3g} s {horizon} "
                                      f"({per_core:.3g} s per core), under {floor:.0%} of {now:.3g} s")
    return _Step(True, per_core, f"a {nth} {role} would save {per_core:.3g} s {horizon} per core")


def _less_measured(d: JobDemand, a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether the (w, s) the job trains on is `a` or `b` and has fewer measurements than the
    other. Then their medians decide alone: with their noise as its margin, a configuration
    measured again (`_again`), 2% slower, kept a job for 37 of its 40 epochs in one of three
    simulated runs (±1% noise per epoch)."""
    if d.current not in (a, b) or d.speed is None:
        return False
    other = b if d.current == a else a
    return d.speed.readings(*d.current) < d.speed.readings(*other)


def _leap(d: JobDemand, ws: tuple[int, int], room: _Room) -> tuple[tuple[int, int], float] | None:
    """A measured configuration beyond `ws`, where granting one function at a time stopped,
    that beats it by their noise (`measured_floor`) for every function it adds, and its gain; None if none fits
    the room left, the job's limits and its epoch budget. Of several, the one with the largest
    gain per function added: (4, 2) measured 1% above (2, 2) is not worth two more workers.

    One step at a time cannot pass a configuration measured slower: a (2, 1) mini-epoch run
    during a burst of load read slower than (1, 1), and the job, then every resubmission of it,
    trained on (1, 1) at 1,050 samples/s though its (2, 2) epoch had run at 1,300–1,400."""
    if d.static is not None or d.speed is None:
        return None
    w, s = ws
    measured_here = (rate := d.speed.measured(w, s)) is not None
    if rate is None:
        rate = d.speed.predict(w, s)
    best: tuple[tuple[int, int], float, float] | None = None   # (configuration, gain per function, gain)
    for lw, ls in sorted({(p[0], p[1]) for p in d.speed.points}):
        if (lw, ls) == ws or not (w <= lw <= d.max_workers and s <= ls <= d.max_servers):
            continue
        measured = d.speed.measured(lw, ls)   # None if measured at another global batch
        # against a prediction: the model's error, and one measurement's noise at least
        floor = measured_floor(d.speed, ws, (lw, ls)) if measured_here else max(MEASURED_GAIN, gain_floor(d.speed))
        if measured is None or measured < rate * (1 + floor) ** (lw - w + ls - s):
            continue
        if not _fits(d, ws, (lw, ls), room):
            continue
        per_function = (measured / rate) ** (1 / (lw - w + ls - s))
        if best is None or per_function > best[1]:
            best = ((lw, ls), per_function, measured / rate - 1)
    return None if best is None else (best[0], best[2])


def _again(d: JobDemand, ws: tuple[int, int], room: _Room) -> tuple[tuple[int, int], str] | None:
    """A configuration one function from `ws`, the one the job trains on and stays on, that the
    job measured from at most 1/AGAIN_READINGS of `ws`'s measurements and fewer than AGAIN_BELOW,
    not faster beyond their noise (the steps judged that) and at most AGAIN_SLOWER slower, and
    why; None if none, or if it does not fit the room left, the limits or the epoch budget, or
    fewer than AGAIN_EPOCHS epochs are predicted left (an unknown number may be many). Of several,
    the one measured fastest. Measured again, it keeps the job only if its median reads as fast
    as the other's (`_less_measured`).

    A job measures only what it trains on: on `lenet-mnist`, 10 epochs (`bench/dynamic_vs_static.py
    --epochs 10`), one left (2, 2) for (2, 1) after two epochs and trained the other 8 there, 10.7%
    longer than static (2, 2)×10 in the same round. In a simulation, before AGAIN_SLOWER, one epoch
    of (2, 2) read 10% slow (a burst of load) sent a job to (2, 1) for the other 39 epochs, 2–4%
    slower throughout.

    An unknown number counts as many. Not measuring again before a curve is fitted (session 42)
    spared resubmissions of a 4-epoch job their (2, 1) epoch (1.028 → 0.992 of static), until
    an earlier run had switched to (2, 1) on a noisy reading: every resubmission then trained
    (2, 1)×4, 4.5% slower, and none could find it out."""
    if d.static is not None or d.speed is None or ws != d.current or \
            (d.remaining_epochs is not None and d.remaining_epochs < AGAIN_EPOCHS):
        return None
    rate = d.speed.measured(*ws)
    if rate is None:
        return None
    w, s, best = ws[0], ws[1], None
    for other in ((w + 1, s), (w, s + 1), (w - 1, s), (w, s - 1)):
        ow, os_ = other
        measured = d.speed.measured(*other) if 1 <= ow <= d.max_workers and 1 <= os_ <= d.max_servers else None
        if measured is None or (n := d.speed.readings(*other)) >= AGAIN_BELOW \
                or d.speed.readings(*ws) < AGAIN_READINGS * n:
            continue
        if not -AGAIN_SLOWER <= (gap := measured / rate - 1) < (floor := measured_floor(d.speed, ws, other)):
            continue   # faster beyond the noise: the steps left it; or too slow to be a burst of load
        if not _fits(d, ws, other, room):
            continue
        if best is None or gap > best[1]:
            best = (other, gap, floor)
    if best is None:
        return None
    other, gap, floor = best
    why = (f"within their noise ({floor:.1%})" if gap > -floor else
           f"beyond their noise ({floor:.1%}) but within a burst of load ({AGAIN_SLOWER:.0%})")
    return other, (f"{_ws(*other)}: measured again; {d.speed.readings(*other):.3g} measurement(s) read it "
                   f"{gap:+.1%} against {_ws(*ws)}, which {d.speed.readings(*ws):.3g} did, {why}; it stays only "
                   "if it reads as fast")


def _explore(d: JobDemand, ws: tuple[int, int], room: _Room) -> tuple[tuple[int, int], str] | None:
    """(1, 1), which a job alone leaves out of tuning beside (2, 1) and (2, 2) (`JobLoop._tune`),
    and why: measured by one epoch once the job is predicted long enough that the epoch costs less
    than MIN_RELATIVE_GAIN of the time left even at the least the model allows (a nearest model
    scales the fewest workers measured down: `coach.estimate.speed`); the gain a planner acts on
    pays for it where it is found. None if it was measured, or the job is not on (and staying
    on) what it trains on, or no ETA says how long it runs, or it does not fit the epoch budget.
    Measured, the steps judge it on what was measured: the job goes back up only where that
    reads faster by their noise."""
    if d.static is not None or d.speed is None or ws != d.current or d.remaining_epochs is None \
            or d.speed.measured(1, 1) is not None or (rate := d.speed.measured(*ws)) is None:
        return None
    left, predicted = _remaining_seconds(d, rate), d.speed.predict(1, 1)
    extra = d.samples_per_epoch / predicted - d.samples_per_epoch / rate
    if extra > MIN_RELATIVE_GAIN * left or not _fits(d, ws, (1, 1), room):
        return None
    least = ", the least it could run" if d.speed.form == "nearest" else ""
    return (1, 1), (f"{_ws(1, 1)}: measured once, which tuning left out; at {predicted:.4g} "
                    f"samples/s predicted{least}, an epoch there costs {max(extra, 0.0):.3g} s more, "
                    f"under {MIN_RELATIVE_GAIN:.0%} of the {left:.3g} s predicted left; it stays unless more reads faster")


def _added(d: JobDemand, ws: tuple[int, int], to: tuple[int, int]) -> list[Size]:
    """The functions a move from `ws` to `to` starts (none for a role it shrinks)."""
    return functions(d.resources, max(0, to[0] - ws[0]), max(0, to[1] - ws[1]), scheduler=False)


def _fits(d: JobDemand, ws: tuple[int, int], to: tuple[int, int], room: _Room) -> bool:
    """Whether a leap or a measurement again from `ws` to `to` fits the room left and the epoch budget."""
    if room.lacks(_added(d, ws, to)) is not None:
        return False
    return d.epoch_budget is None or predicted_epoch_cost(d, *to) <= d.epoch_budget   # type: ignore[operator]


def _epoch_s(d: JobDemand, w: int, s: int) -> float:
    """A training epoch's seconds on (w, s) as charged: training at the modelled rate, as priced
    (`SpeedModel.predict`), + overhead."""
    return d.speed.epoch_seconds(w, s, d.samples_per_epoch, priced=True) + d.overhead_s   # type: ignore[union-attr]


def predicted_epoch_cost(d: JobDemand, w: int, s: int) -> float | None:
    """A training epoch's cost on (w, s): training at the speed model's rate plus the job's
    overhead, as charged (None: no speed model yet). The planner and the job loop's budget
    check use this one prediction: judged on the training alone, the planner granted a (w, s)
    that the loop's check, which counts the overhead, could then refuse."""
    if d.speed is None:
        return None
    seconds = _epoch_s(d, w, s)
    return epoch_cost(w, s, d.resources, seconds, d.prices)


def epochs_paid(d: JobDemand, w: int, s: int, budget_left: float) -> int | None:
    """How many training epochs on (w, s) `budget_left` pays for (None: no speed model prices one
    yet): the job loop says it beside the ETA, and a kept static lease ends after them."""
    cost = predicted_epoch_cost(d, w, s)
    return max(0, int(budget_left // cost)) if cost else None


def _reason(d: JobDemand, ws: tuple[int, int], room: _Room) -> str:
    w, s = ws
    if d.static is not None:
        return f"static allocation {_ws(w, s)}"
    if d.speed is None:
        return f"{_ws(w, s)}: the minimum, no speed model yet"
    grown = "" if (w, s) == (1, 1) else " (each step granted by marginal utility)"
    reason = f"{_ws(w, s)}{grown}; stopped because {_stopped_because(d, ws, room)}"
    if d.epoch_budget is not None and (w, s) == (1, 1):
        cost = predicted_epoch_cost(d, 1, 1)
        if cost > d.epoch_budget:
            over = f" over {d.remaining_epochs:.3g} epochs predicted left" if d.remaining_epochs else ""
            reason += (f"; even the minimum's predicted epoch cost {cost:.4g} is above the epoch budget "
                       f"{d.epoch_budget:.4g} (the budget left{over}): it trains on the minimum while the "
                       "budget lasts")
    return reason


def _stopped_because(d: JobDemand, ws: tuple[int, int], room: _Room) -> str:
    """Why neither one more worker nor one more server was granted at `ws`."""
    return "; ".join(_step(d, ws, role, room).why_not for role in ("worker", "server"))


def _ws(w: int, s: int) -> str:
    return f"{w} worker{'s' * (w != 1)}, {s} server{'s' * (s != 1)}"


def _cores(x: float) -> str:
    return f"{x:.3g} core{'s' * (abs(x - 1.0) > 1e-9)}"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
