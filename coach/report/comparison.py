"""`coach cluster compare --plot`: the runs of one workload side by side — CPU in use by
started jobs and CPU held by groups that have not started, over time; and each job's wait
for its minimum group."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from coach.experiment.replay import Run  # noqa: E402

NAMED_JOBS = 40   # past this many jobs, words and names per job only smear: marks and every k-th index


def plot_comparison(out: Path, runs: Sequence[Run]) -> Path:
    fig, axes = plt.subplots(len(runs) + 1, 1, figsize=(9, 3 + 2.2 * len(runs)), squeeze=False)
    *timelines, waits = axes[:, 0]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    end = max((r.duration for r in runs), default=0.0)
    for run, ax, color in zip(runs, timelines, colors):   # one panel each: the lines would hide each other
        t = [s.t for s in run.samples] + [run.duration]
        busy = [s.busy_cpu for s in run.samples]
        held = [s.held_cpu for s in run.samples]
        ax.stairs(busy, t, fill=True, color=color, alpha=0.6, label="started jobs")
        ax.stairs([b + h for b, h in zip(busy, held)], t, baseline=busy, fill=True, color="tab:red", alpha=0.35,
                  hatch="//", label="held by groups not started")
        ax.axhline(run.capacity_cpu, color="grey", linewidth=0.8, label="capacity")
        ax.set_xlim(0, end)
        ax.set_ylabel("CPU bound")
        ax.set_title(f"{run.scheduler}" + (" (stalled: nothing moved)" if run.ended == "stalled" else ""), fontsize=10)
        ax.legend(fontsize=7, loc="upper right")
    if timelines:
        timelines[-1].set_xlabel("seconds")
    width = 0.8 / max(1, len(runs))
    jobs = len(runs[0].outcomes) if runs else 0
    for k, (run, color) in enumerate(zip(runs, colors)):
        xs = [i + k * width for i in range(len(run.outcomes))]
        waits.bar(xs, [o.wait_s or 0 for o in run.outcomes], width=width, color=color, label=run.scheduler)
        for state, mark in (("deadlocked", "x"), ("never", "v")):
            at = [x for x, o in zip(xs, run.outcomes)
                  if o.started is None and (o.state == "deadlocked") == (state == "deadlocked")]
            if not at:
                continue
            if jobs > NAMED_JOBS:
                waits.plot(at, [0] * len(at), mark, color=color, ms=4, label=f"{run.scheduler}: {state}")
            else:
                for x in at:
                    waits.annotate(state, (x, 0), rotation=90, ha="center", va="bottom", fontsize=7, color=color)
    if jobs > NAMED_JOBS:
        step = math.ceil(jobs / 20)
        waits.set_xticks(range(0, jobs, step))
        waits.set_xlabel("job (in order of arrival)")
    elif runs:
        waits.set_xticks([i + width * (len(runs) - 1) / 2 for i in range(jobs)],
                         [o.job.name for o in runs[0].outcomes], rotation=45, ha="right", fontsize=7)
    waits.set_ylabel("wait for minimum group (s)")
    waits.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
