"""The figures of one run: how many jobs finished or deadlocked, how long jobs waited for
their minimum group, how long they took in all, how much room was held by groups that
had not started (what a gang scheduler exists to avoid), and how many jobs were split
across nodes (what co-location and bin packing avoid)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from coach.experiment.replay import Run


@dataclass
class Summary:
    scheduler: str
    jobs: int
    finished: int
    deadlocked: int          # some pods bound, minimum group never complete
    waiting: int             # no pod bound when the run ended
    wait_median_s: float | None   # pods created → minimum group bound, over the jobs that started
    wait_p90_s: float | None
    wait_max_s: float | None      # the longest: what coach-gang's starvation bound limits
    completion_median_s: float | None   # pods created → finished
    makespan_s: float | None      # first pods created → last finish; None unless every job finished
    held_cpu_s: float        # CPU-seconds bound to pods of jobs that had not started, until the run
    #                          ended (a deadlock holds its room for good: this grows with --stall)
    busy_share: float        # CPU-seconds of started jobs / (capacity × run time)
    split_jobs: int          # jobs that started with their pods on more than one node: their
    #                          workers and servers talk over the network, not loopback

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(run: Run) -> Summary:
    waits = [o.wait_s for o in run.outcomes if o.wait_s is not None]
    done = [o.finished - o.submitted for o in run.outcomes if o.finished is not None and o.submitted is not None]
    states = [o.state for o in run.outcomes]
    t = np.array([s.t for s in run.samples] + [run.duration])
    dt = np.diff(t) if len(t) > 1 else np.zeros(0)   # each sample holds until the next one
    held = float(np.dot(dt, [s.held_cpu for s in run.samples])) if len(dt) else 0.0
    busy = float(np.dot(dt, [s.busy_cpu for s in run.samples])) if len(dt) else 0.0
    everyone = len(done) == len(run.outcomes)
    return Summary(
        scheduler=run.scheduler, jobs=len(run.outcomes), finished=states.count("finished"),
        deadlocked=states.count("deadlocked"), waiting=states.count("waiting"),
        wait_median_s=_round(np.median(waits)) if waits else None,
        wait_p90_s=_round(np.percentile(waits, 90)) if waits else None,
        wait_max_s=_round(max(waits)) if waits else None,
        completion_median_s=_round(np.median(done)) if done else None,
        makespan_s=_round(max(o.finished for o in run.outcomes) - min(o.submitted for o in run.outcomes))
        if everyone else None,
        held_cpu_s=round(held, 1),
        busy_share=round(busy / (run.capacity_cpu * run.duration), 3) if run.duration > 0 else 0.0,
        split_jobs=sum(1 for o in run.outcomes if o.nodes is not None and o.nodes > 1))


def _round(x: float) -> float:
    return round(float(x), 2)
