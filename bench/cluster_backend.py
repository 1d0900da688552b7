"""Real training jobs on the local backend and on the cluster backend under each scheduler.

The same jobs (one alone, then `--concurrent` at once with seeds 0, 1, …) run with
`coach submit` on the embedded local backend, and with `--backend cluster` on a control plane
this benchmark starts in a directory of its own (`--nodes` × `--cpu`), once with the job files'
`scheduler: default` (default-scheduler) and once with `scheduler: gang` (coach-gang). The
order rotates per round to spread machine noise. Printed per run: wall time of `coach submit`
(all jobs), training epochs, retries, and the ratio to the local backend; the placement cost is
what the cluster backend adds (pods created, bound, marked Running, deleted). A third scenario
has `--teams` users, each with a COACH_HOME of their own, submit at once a static job that
takes most of the cluster: nothing but the cluster's scheduler arbitrates between them. A fourth
has the same `coach submit`s share one COACH_HOME: their coordinators take turns through the
state store's leases (before session 20 they deadlocked: one job's pods, kept between its epochs,
held the room the other's lease was granted).

    .venv/bin/python bench/cluster_backend.py [--job jobs/mlp-digits.yaml] [--rounds 2] [--concurrent 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from coach_job import COACH, ROOT, coach, submitted

sys.path.insert(0, str(ROOT))
from coach import cluster  # noqa: E402

SETUPS = (("local", "default", ()), ("cluster default-scheduler", "default", ("--backend", "cluster")),
          ("cluster coach-gang", "gang", ("--backend", "cluster")))


def submit(jobs: list[dict], args: tuple[str, ...]) -> dict:
    """Wall time of one `coach submit` of all jobs, their statuses, training epochs and retries."""
    with tempfile.TemporaryDirectory() as home:
        paths = []
        for job in jobs:
            paths.append(Path(home) / f"{job['name']}.yaml")
            paths[-1].write_text(yaml.safe_dump(job))
        t0 = time.monotonic()
        proc = coach(home, "submit", *map(str, paths), "--json", *args)
        wall = time.monotonic() - t0
        records = submitted(proc.returncode, proc.stdout, proc.stderr)
        epochs = retries = 0
        for rec in records:
            hist = json.loads(coach(home, "history", rec["job_id"], "--json").stdout)
            epochs += sum(1 for h in hist if h["phase"] == "training")
            retries += sum(int(h.get("retries") or 0) for h in hist)
        return {"wall_s": wall, "statuses": sorted(r["status"] for r in records), "epochs": epochs,
                "retries": retries}


def teams(base: dict, scheduler: str, n: int, one_home: bool = False) -> dict:
    """`n` users with their own COACH_HOME (or all one, `one_home`) submit at the same moment a
    static job that takes most of the cluster (3 workers of 1 CPU): with homes of their own their
    coordinators do not know of each other, so only the cluster's scheduler stands between their
    groups. Wall time until the last one ends."""
    job = dict(base, allocation="static", workers=3, servers=1, max_workers=3, scheduler=scheduler,
               resources={"worker": {"cpu": 1, "memory": "1Gi"}})
    with tempfile.TemporaryDirectory() as tmp:
        procs, homes = [], []
        for i in range(n):
            home = Path(tmp) / ("shared" if one_home else f"team{i}")
            home.mkdir(exist_ok=True)
            path = home / "job.yaml"
            path.write_text(yaml.safe_dump(dict(job, name=f"team{i}", seed=i)))
            homes.append(home)
            procs.append(subprocess.Popen([*COACH, "submit", str(path), "--json", "--backend", "cluster"], cwd=ROOT,
                                          text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          env=dict(os.environ, COACH_HOME=str(home))))
        t0 = time.monotonic()
        outputs = [p.communicate() for p in procs]
        wall = time.monotonic() - t0
        statuses, retries = [], 0
        for home, proc, (out, err) in zip(homes, procs, outputs):
            for rec in submitted(proc.returncode, out, err):
                statuses.append(rec["status"])
                events = json.loads(coach(home, "events", rec["job_id"], "--json").stdout)
                retries += sum(1 for e in events if e["kind"] == "retry")
        return {"wall_s": wall, "statuses": sorted(statuses), "retries": retries}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", default=str(ROOT / "jobs" / "mlp-digits.yaml"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--concurrent", type=int, default=3, help="jobs submitted at once in the second scenario")
    ap.add_argument("--teams", type=int, default=2, help="users with their own COACH_HOME in the third scenario")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--cpu", default="2", help="CPU of each simulated node")
    ap.add_argument("--memory", default="4Gi")
    args = ap.parse_args()
    base = yaml.safe_load(Path(args.job).read_text())
    base["budget"] = max(float(base["budget"]), 1.0)   # measure time, not the budget rule
    os.environ["COACH_CLUSTER_DIR"] = tempfile.mkdtemp(prefix="coach-bench-cluster-")
    cluster.up(nodes=args.nodes, cpu=args.cpu, memory=args.memory)
    results: dict[tuple[str, int], list[float]] = {}
    try:
        for r in range(args.rounds):
            setups = SETUPS[r % len(SETUPS):] + SETUPS[:r % len(SETUPS)]
            for n in (1, args.concurrent):
                for label, scheduler, extra in setups:
                    jobs = [dict(base, name=f"j{i}", seed=i, scheduler=scheduler) for i in range(n)]
                    x = submit(jobs, extra)
                    results.setdefault((label, n), []).append(x["wall_s"])
                    print(f"round {r + 1}  {n} job(s)  {label:<26} {x['wall_s']:6.1f} s  {', '.join(x['statuses'])}  "
                          f"{x['epochs']} training epochs, {x['retries']} retries", flush=True)
            for label, scheduler, extra in setups:
                if not extra:   # the local backend has no scheduler to compare
                    continue
                for scenario in ("teams", "one home"):
                    x = teams(base, scheduler, args.teams, one_home=scenario == "one home")
                    results.setdefault((label, scenario), []).append(x["wall_s"])
                    print(f"round {r + 1}  {args.teams} submits, {scenario:<8}  {label:<24} {x['wall_s']:6.1f} s  "
                          f"{', '.join(x['statuses'])}  {x['retries']} retries", flush=True)
    finally:
        cluster.down()
        shutil.rmtree(os.environ["COACH_CLUSTER_DIR"], ignore_errors=True)   # as bench/simulator.py does
    summary = {}
    for n in (1, args.concurrent):
        local = sum(results[("local", n)])
        for label, _, _ in SETUPS:
            total = sum(results[(label, n)])
            summary[f"{label}, {n} job(s)"] = {"summed_s": round(total, 1), "vs_local": round(total / local, 3)}
            print(f"{n} job(s)  {label:<26} summed over {args.rounds} rounds {total:6.1f} s, "
                  f"ratio to local {total / local:.3f}")
    for scenario in ("teams", "one home"):
        for label, _, _ in SETUPS[1:]:
            total = sum(results[(label, scenario)])
            summary[f"{label}, {args.teams} submits, {scenario}"] = {"summed_s": round(total, 1)}
            print(f"{args.teams} submits, {scenario:<8}  {label:<26} summed over {args.rounds} rounds {total:6.1f} s")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
