"""Scheduling throughput of default-scheduler vs coach-gang on one apiserver.

Starts a local control plane (its own state directory, stopped at the end)
with M simulated nodes, then for each round and each scheduler: creates N pods
while both schedulers are frozen (SIGSTOP), wakes the scheduler under test
(SIGCONT) and times the span from its wake-up to the last bound pod: the
scheduler meets all N pods at once, and client speed does not count. Pods come in
jobs of 4 (scheduler, server, 2 workers; minimum group 4), the same pods for
both schedulers apart from schedulerName. Prints pods/s for each and the ratio.

    .venv/bin/python bench/scheduler_throughput.py --pods 1000 --nodes 100
"""

from __future__ import annotations

import argparse
import os
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
from coach.cluster.control_plane import ClusterState  # noqa: E402

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


def one_run(kube: Kube, pool: ThreadPoolExecutor, scheduler: str, n: int, run: str, timeout: float) -> float:
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
    print(f"  {scheduler:18} {n} pods in {now:6.2f}s = {rate:7.1f} pods/s   (created while frozen in {created:.1f}s)",
          flush=True)
    return rate


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
    try:
        kube.ensure_namespace(NAMESPACE)
        with ThreadPoolExecutor(args.threads) as pool:
            one_run(kube, pool, "default-scheduler", 40, "warmup-d", args.timeout)
            one_run(kube, pool, "coach-gang", 40, "warmup-c", args.timeout)
            for r in range(args.rounds):
                for s in rates:
                    rates[s].append(one_run(kube, pool, s, n, f"r{r}-{s[:5]}", args.timeout))
    finally:
        kube.close()
        cluster.down()
        if own_dir:
            shutil.rmtree(os.environ["COACH_CLUSTER_DIR"], ignore_errors=True)
    d, c = statistics.median(rates["default-scheduler"]), statistics.median(rates["coach-gang"])
    print(f"median default-scheduler {d:.1f} pods/s, coach-gang {c:.1f} pods/s, "
          f"ratio {c / d:.2f} (goal >= 0.90: {'met' if c / d >= 0.9 else 'MISSED'})")


if __name__ == "__main__":
    main()
