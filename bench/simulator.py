"""How close `coach cluster simulate` comes to `coach cluster compare`, and how much faster.

Starts a local control plane (its own state directory, stopped at the end) of 2 nodes × 4
CPU, 8 GiB, and for each workload — the slides' 4 jobs × 4 pods at once, then random
workloads of 12 jobs 0.5 s apart (seeds 1..N), and with --stream a job of 8 pods behind a
stream of 3-pod jobs — runs it through every scheduler
(default-scheduler, bin-pack, coach-gang) for real (`coach.experiment.compare`, the
workload's real time) and simulates it with 20 seeds of the simulation's own random choices.
Prints, per workload and scheduler, jobs finished / deadlocked / never placed, the median
and longest wait for the minimum group, the makespan and the jobs split across nodes, real beside
simulated (the simulated ones as median [min–max] over the 20 seeds), and the time each took.

    .venv/bin/python bench/simulator.py --workloads 3 [--stream]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coach import cluster  # noqa: E402
from coach.experiment import JobArrival, load_workload, random_workload, summarize  # noqa: E402
from coach.experiment.compare import compare  # noqa: E402
from coach.experiment.schedulers import SCHEDULERS  # noqa: E402
from coach.experiment.simulate import simulate  # noqa: E402

NODES = [(4.0, 8.0)] * 2
SIM_SEEDS = 20
FIGURES = ("finished", "deadlocked", "waiting", "wait_median_s", "wait_max_s", "makespan_s", "split_jobs")
STREAM = Path(__file__).parent / "workloads" / "stream.yaml"


def spread(values: list) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "—"
    lo, mid, hi = min(known), statistics.median(known), max(known)
    missing = f", {len(values) - len(known)}×—" if len(known) < len(values) else ""
    return f"{mid:g}" if lo == hi and not missing else f"{mid:g} [{lo:g}–{hi:g}{missing}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", type=int, default=3, help="random workloads (seeds 1..N) after the slides'")
    ap.add_argument("--stream", action="store_true", help="also bench/workloads/stream.yaml, a job of 8 pods "
                    "behind 40 jobs of 3")
    ap.add_argument("--stall", type=float, default=20.0)
    args = ap.parse_args()
    workloads = [("slides", [JobArrival(n, 0, 4, 4, 1.0, 1.0, 3.0) for n in "abcd"])] + \
                [(f"random seed {s}", random_workload(12, s, mean_gap_s=0.5)) for s in range(1, args.workloads + 1)]
    if args.stream:
        workloads.append(("stream", load_workload(STREAM)))
    own_dir = "COACH_CLUSTER_DIR" not in os.environ
    if own_dir:
        os.environ["COACH_CLUSTER_DIR"] = tempfile.mkdtemp(prefix="coach-bench-")
    kube = cluster.Kube(cluster.up(nodes=len(NODES), cpu="4", memory="8Gi"), timeout=60)
    real_s = sim_s = 0.0
    try:
        for name, workload in workloads:
            t0 = time.monotonic()
            real = {r.scheduler: summarize(r) for r in compare(kube, workload, name, args.stall, tuple(SCHEDULERS))}
            real_s += time.monotonic() - t0
            t0 = time.monotonic()
            sims = {s: [summarize(simulate(workload, NODES, s, stall_s=args.stall, seed=k)) for k in range(SIM_SEEDS)]
                    for s in SCHEDULERS}
            sim_s += time.monotonic() - t0
            print(f"\n{name}: {len(workload)} jobs", flush=True)
            print(f"  {'':18} " + " ".join(f"{f:>24}" for f in FIGURES))
            for s in SCHEDULERS:
                print(f"  {s:18} " + " ".join(f"{str(getattr(real[s], f)):>24}" for f in FIGURES) + "  real")
                print(f"  {'':18} " + " ".join(f"{spread([getattr(x, f) for x in sims[s]]):>24}" for f in FIGURES)
                      + f"  simulated ({SIM_SEEDS} seeds)", flush=True)
    finally:
        kube.close()
        cluster.down()
        if own_dir:
            shutil.rmtree(os.environ["COACH_CLUSTER_DIR"], ignore_errors=True)
    runs = len(SCHEDULERS) * len(workloads)
    print(f"\nreal: {real_s:.0f} s for {runs} runs ({real_s / runs:.1f} s each); simulated: {sim_s:.2f} s for "
          f"{runs * SIM_SEEDS} runs ({1000 * sim_s / (runs * SIM_SEEDS):.1f} ms each): "
          f"{(real_s / runs) / (sim_s / (runs * SIM_SEEDS)):.0f}× faster")
    t0 = time.monotonic()
    big = simulate(random_workload(1000, 1, mean_gap_s=0.1), [(4.0, 8.0)] * 50, "default-scheduler")
    print(f"1000 jobs on 50 nodes, default-scheduler: simulated in {time.monotonic() - t0:.2f} s "
          f"({big.duration:.0f} s of workload time)")


if __name__ == "__main__":
    main()
