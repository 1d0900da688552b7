"""Scheduling throughput of default-scheduler vs coach-gang on one apiserver.

Starts a local control plane (its own state directory, stopped at the end)
with M simulated nodes, then for each round and each scheduler: creates N pods
while both schedulers are frozen (SIGSTOP), wakes the scheduler under test
(SIGCONT) and times the span from its wake-up to the last bound pod: the
scheduler meets all N pods at once, and client speed does not count. Pods come in
jobs of 4 (scheduler, server, 2 workers; minimum group 4), the same pods for
both schedulers apart from schedulerName. Prints pods/s for each and the ratio, and
from each scheduler's own metrics (at the shipped --v=1) the mean time per attempt in its
scheduling algorithm (filters and scores, which hold its loop; `coach cluster simulate`
models that) and from pop to bound (binding runs beside the loop).

    .venv/bin/python bench/scheduler_throughput.py --pods 1000 --nodes 100
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coach import cluster  # noqa: E402
from coach.cluster import Kube  # noqa: E402
from coach.cluster.control_plane import ClusterState, scheduler_metrics  # noqa: E402

NAMESPACE = "bench"
ROLES = ["scheduler", "server", "worker", "worker"]


def pods_for(scheduler: str, n: int, run: str) -> list[dict]:
    out = []
    for i in range(n):
        job, k = divmod(i, len(ROLES))
        out.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{run}-{i}", "namespace": NAMESPACE,
                         "labels": {"bench": run, "coach.io/job": f"{run}-j{job}", "coach.io/role": ROLES[k]},
                         "annotations": {"coach.io/min-group": str(len(ROLES))}},
            "spec": {"schedulerName": scheduler,
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "fn", "image": "coach/function:bench",
                                     "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]},
        })
    return out


def bound_count(kube: Kube, run: str) -> int:
    items = kube.call("GET", f"/api/v1/namespaces/{NAMESPACE}/pods",
                      params={"labelSelector": f"bench={run}", "fieldSelector": "spec.nodeName!="})["items"]
    return len(items)


def scheduler_pids() -> dict[str, int]:
    state = ClusterState.load(cluster.state_dir())
    assert state is not None
    return {{"kube-scheduler": "default-scheduler", "coach-scheduler": "coach-gang"}[p.name]: p.pid
            for p in state.processes if p.name in ("kube-scheduler", "coach-scheduler")}


def attempt_totals(scheduler: str) -> tuple[float, float, int]:
    """(seconds in the scheduling algorithm, seconds from pop to bound, attempts) so far. The
    algorithm (filters and scores) holds the scheduling loop; binding runs beside it."""
    process = "coach-scheduler" if scheduler == "coach-gang" else "kube-scheduler"
    text = scheduler_metrics(process)
    def total(metric: str, labels: str = "") -> float:
        return sum(float(v) for v in re.findall(rf"^scheduler_{metric}(?:\{{{labels}[^}}]*\}})? (\S+)$", text, re.M))
    # one profile runs in the bench per process: the algorithm's metric has no profile label
    return (total("scheduling_algorithm_duration_seconds_sum"),
            total("scheduling_attempt_duration_seconds_sum", f'profile="{scheduler}"'),
            int(total("scheduling_attempt_duration_seconds_count", f'profile="{scheduler}"')))


def one_run(kube: Kube, pool: ThreadPoolExecutor, scheduler: str, n: int, run: str,
            timeout: float) -> tuple[float, float]:
    """(pods/s, mean ms of the scheduling algorithm per attempt) of one run."""
    before = attempt_totals(scheduler)
    pids = scheduler_pids()
    for pid in pids.values():
        os.kill(pid, signal.SIGSTOP)
    try:
        t = time.monotonic()
        list(pool.map(kube.create_pod, pods_for(scheduler, n, run)))
        created = time.monotonic() - t
    finally:
        start = time.monotonic()
        os.kill(pids[scheduler], signal.SIGCONT)
        for s, pid in pids.items():
            if s != scheduler:
                os.kill(pid, signal.SIGCONT)
    while True:
        done = bound_count(kube, run)
        now = time.monotonic() - start
        if done == n:
            break
        if now > timeout:
            raise SystemExit(f"{scheduler}: only {done}/{n} pods bound after {timeout:.0f}s")
        time.sleep(0.05)
    kube.delete_pods(NAMESPACE, selector=f"bench={run}")
    while kube.pods(NAMESPACE, selector=f"bench={run}"):
        time.sleep(0.2)
    rate = n / now
    algorithm_s, attempt_s, attempts = (a - b for a, b in zip(attempt_totals(scheduler), before))
    algorithm_ms, bound_ms = (1000 * t / max(attempts, 1) for t in (algorithm_s, attempt_s))
    print(f"  {scheduler:18} {n} pods in {now:6.2f}s = {rate:7.1f} pods/s; {attempts} attempts, algorithm "
          f"{algorithm_ms:.2f} ms, pop to bound {bound_ms:.1f} ms (means)   "
          f"(created while frozen in {created:.1f}s)", flush=True)
    return rate, algorithm_ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=1000, help="pods per run (a multiple of 4)")
    ap.add_argument("--nodes", type=int, default=100, help="simulated nodes")
    ap.add_argument("--rounds", type=int, default=3, help="runs per scheduler, alternating")
    ap.add_argument("--threads", type=int, default=16, help="client threads for creating and ungating")
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args()
    n = args.pods - args.pods % len(ROLES)
    own_dir = "COACH_CLUSTER_DIR" not in os.environ
    if own_dir:
        os.environ["COACH_CLUSTER_DIR"] = tempfile.mkdtemp(prefix="coach-bench-")
    t0 = time.monotonic()
    kubeconfig = cluster.up(nodes=args.nodes, cpu="32", memory="128Gi")
    print(f"control plane with {args.nodes} nodes up in {time.monotonic() - t0:.1f}s; {n} pods per run", flush=True)
    kube = Kube(kubeconfig, timeout=60)
    rates: dict[str, list[float]] = {"default-scheduler": [], "coach-gang": []}
    attempt_ms: dict[str, list[float]] = {s: [] for s in rates}
    try:
        kube.ensure_namespace(NAMESPACE)
        with ThreadPoolExecutor(args.threads) as pool:
            one_run(kube, pool, "default-scheduler", 40, "warmup-d", args.timeout)
            one_run(kube, pool, "coach-gang", 40, "warmup-c", args.timeout)
            for r in range(args.rounds):
                for s in rates:
                    rate, ms = one_run(kube, pool, s, n, f"r{r}-{s[:5]}", args.timeout)
                    rates[s].append(rate)
                    attempt_ms[s].append(ms)
    finally:
        kube.close()
        cluster.down()
        if own_dir:
            shutil.rmtree(os.environ["COACH_CLUSTER_DIR"], ignore_errors=True)
    d, c = statistics.median(rates["default-scheduler"]), statistics.median(rates["coach-gang"])
    print(f"median default-scheduler {d:.1f} pods/s, coach-gang {c:.1f} pods/s, "
          f"ratio {c / d:.2f} (goal >= 0.90: {'met' if c / d >= 0.9 else 'MISSED'})")
    print("median time in the scheduling algorithm per attempt: " + ", ".join(
        f"{s} {statistics.median(ms):.2f} ms" for s, ms in attempt_ms.items()))


if __name__ == "__main__":
    main()
