"""One scheduler's run of a workload on the control plane.

Simulated nodes have no kubelet, so a bound pod counts as running. A job starts when its
minimum group is bound with a pod of every role (what Coach's job loop waits for before an
epoch), runs for its `run` seconds, and then its pods are deleted, which frees their room.
A job whose pods are partly bound and never complete their group holds that room for good:
the run ends when nothing has changed for `stall_s` seconds after the last arrival while no
job runs, and the jobs left are reported as deadlocked (some pods bound) or waiting (none
bound).
"""

from __future__ import annotations

import secrets
import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from coach.cluster import ClusterError, Kube
from coach.experiment.workload import JobArrival, pod_objects

POLL_S = 0.25
CREATORS = 8   # threads creating pods at once: jobs due together arrive side by side


@dataclass
class JobOutcome:
    job: JobArrival
    submitted: float | None = None  # seconds after the run began: its pods created
    started: float | None = None    # minimum group bound
    finished: float | None = None   # its pods deleted after `run` seconds
    bound: int = 0                  # pods bound when the run ended (0 once finished)
    nodes: int | None = None        # nodes its pods were on when it started

    @property
    def wait_s(self) -> float | None:
        """Pods created → minimum group bound (None if it never started): what the table, the JSON
        and the plot call the wait."""
        return None if self.started is None or self.submitted is None else self.started - self.submitted

    @property
    def state(self) -> str:
        if self.finished is not None:
            return "finished"
        if self.started is not None:
            return "running"
        return "deadlocked" if self.bound else "waiting"


@dataclass
class Sample:
    t: float
    busy_cpu: float   # bound to jobs that started
    held_cpu: float   # bound to jobs that have not: room a half-placed group holds


@dataclass
class Run:
    scheduler: str
    capacity_cpu: float
    outcomes: list[JobOutcome]
    samples: list[Sample] = field(default_factory=list)
    duration: float = 0.0
    moved_at: float = 0.0   # when a pod was last created or bound or a job started or ended (s after the start)
    ended: str = ""   # finished (every job), stalled (nothing moved), timed out


def replay(kube: Kube, workload: list[JobArrival], scheduler: str, namespace: str, capacity_cpu: float,
           stall_s: float = 45.0, timeout_s: float | None = None,
           progress: Callable[[Run, float], None] | None = None) -> Run:
    label = f"{scheduler[:12]}-{secrets.token_hex(3)}"
    run = Run(scheduler, capacity_cpu, [JobOutcome(j) for j in sorted(workload, key=lambda j: j.at)])
    by_name = {o.job.name: o for o in run.outcomes}
    if timeout_s is None:   # the jobs one after another, with room for slow scheduling: a livelock ends too
        timeout_s = max(j.at for j in workload) + 2 * sum(j.run for j in workload) + stall_s + 300
    t0 = time.monotonic()
    last_change, last_bound = 0.0, {}
    submitted = 0
    try:
        with ThreadPoolExecutor(CREATORS) as pool:
            while True:
                now = time.monotonic() - t0
                due = [o for o in run.outcomes[submitted:] if o.job.at <= now]
                if due:   # jobs due together are created side by side, as concurrent submissions are
                    list(pool.map(kube.create_pod, _interleave([pod_objects(o.job, scheduler, namespace, label)
                                                                for o in due])))
                    for o in due:
                        o.submitted = now
                    submitted += len(due)
                    last_change = now
                bound = {p["metadata"]["name"]: p["spec"]["nodeName"]
                         for p in kube.pods(namespace, f"coach.experiment={label}") if p["spec"].get("nodeName")}
                if bound != last_bound:
                    last_bound, last_change = bound, now
                if _advance(kube, namespace, label, by_name, bound, now):   # room was taken or freed
                    last_change = now
                run.samples.append(usage(run.outcomes, now))
                run.moved_at = last_change
                if progress is not None:
                    progress(run, now)
                if all(o.finished is not None for o in run.outcomes):
                    run.ended = "finished"
                    break
                running = any(o.state == "running" for o in run.outcomes)   # will end and free room
                if submitted == len(run.outcomes) and not running and now - last_change > stall_s:
                    run.ended = "stalled"
                    break
                if now > timeout_s:
                    run.ended = "timed out"
                    break
                time.sleep(POLL_S)
    finally:
        run.duration = time.monotonic() - t0
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C must not leave pods behind
        try:
            clear(kube, namespace, f"coach.experiment={label}")
        finally:
            signal.signal(signal.SIGINT, previous)
    return run


def clear(kube: Kube, namespace: str, selector: str, timeout_s: float = 60.0) -> None:
    """Delete the pods and wait until they are gone: the next run needs all the room."""
    kube.delete_pods(namespace, selector=selector)
    deadline = time.monotonic() + timeout_s
    while left := kube.pods(namespace, selector):
        if time.monotonic() > deadline:
            raise ClusterError(f"{len(left)} pods of {namespace} ({selector}) are still there after "
                               f"{timeout_s:.0f} s; delete them before the next run")
        time.sleep(0.2)


def _interleave(groups: list[list[dict]]) -> list[dict]:
    return [g[i] for i in range(max(map(len, groups))) for g in groups if i < len(g)]


def _advance(kube: Kube, namespace: str, label: str, by_name: dict[str, JobOutcome], bound: dict[str, str],
             now: float) -> bool:
    """Start the jobs whose minimum group is bound, finish those whose run time is over; true
    if any did. `bound` maps pod names to their nodes."""
    moved = False
    roles: dict[str, set[str]] = {}
    nodes: dict[str, set[str]] = {}
    counts: Counter = Counter()
    for name, node in bound.items():
        job, role, _ = name.rsplit("-", 2)
        roles.setdefault(job, set()).add(role)
        nodes.setdefault(job, set()).add(node)
        counts[job] += 1
    for name, o in by_name.items():
        if o.finished is not None:
            continue
        o.bound = counts[name]
        if o.started is None and o.bound >= o.job.min_group and len(roles.get(name, ())) == 3:
            o.started, o.nodes, moved = now, len(nodes[name]), True
        if o.started is not None and now >= o.started + o.job.run:
            kube.delete_pods(namespace, selector=f"coach.experiment={label},coach.io/job={name}")
            o.finished, o.bound, moved = now, 0, True
    return moved


def usage(outcomes: list[JobOutcome], now: float) -> Sample:
    """CPU bound to started jobs and to jobs not started, now."""
    busy = sum(o.bound * o.job.cpu for o in outcomes if o.started is not None and o.finished is None)
    held = sum(o.bound * o.job.cpu for o in outcomes if o.started is None)
    return Sample(now, busy, held)
