"""The same job run with `allocation: dynamic` and with `static` (w=2, s=2), side by side.

Job completion time is the wall time of `coach submit` (tuning included for dynamic), the
ratio dynamic/static is printed per round, rotating the order to spread machine noise.
Round r runs the jobs with `seed: r`. Tuning trains the head of training epoch 1 and a step
trains the same samples on every allocation, so a seed's dynamic and static runs train the same
steps; they differ by tuning's start-ups, by the allocation's speed, and by float rounding, which
near the loss floor can move when the stop rule is met (at target 0.15, seed 2 once took 20
epochs dynamic and 7 static). Static runs a second time each round: its runs are the same to the
last digit, so static/static is the machine's noise, which "dynamic never loses by more than
noise" is judged against. The summary is the ratio of the summed times.

    .venv/bin/python bench/dynamic_vs_static.py [--job jobs/lenet-mnist.yaml] [--rounds 3] [--target 0.2]
"""

from __future__ import annotations

import argparse
import json
from itertools import groupby
from pathlib import Path

import yaml

from coach_job import ROOT, submit_job


def run(job: dict) -> dict:
    wall, rec, hist = submit_job(job)
    training = [h for h in hist if h["phase"] == "training"]
    return {"wall_s": wall, "status": rec["status"], "spent": rec["spent"], "epochs": len(training),
            "ws": _runs([(h["workers"], h["servers"]) for h in training])}


def _runs(allocations: list[tuple[int, int]]) -> str:
    """The training epochs' (w, s) in order, repeats counted: "(2, 1)×3 → (3, 1) → (2, 1)×2"."""
    counted = ((ws, len(list(same))) for ws, same in groupby(allocations))
    return " → ".join(f"{ws}×{n}" if n > 1 else f"{ws}" for ws, n in counted)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", default=str(ROOT / "jobs" / "lenet-mnist.yaml"))
    ap.add_argument("--rounds", type=int, default=3, help="one seed per round")
    ap.add_argument("--target", type=float, help="override the job's target_loss")
    args = ap.parse_args()
    base = yaml.safe_load(Path(args.job).read_text())
    if args.target is not None:
        base["target_loss"] = args.target
    base["budget"] = max(float(base["budget"]), 1.0)   # measure time, not the budget rule
    base["max_workers"], base["max_servers"] = max(base.get("max_workers", 2), 2), max(base.get("max_servers", 2), 2)
    dynamic = dict(base, name="dyn", allocation="dynamic")
    static = dict(base, name="static", allocation="static", workers=2, servers=2)
    ratios, noise, short, totals = [], [], [], {"dynamic": 0.0, "static": 0.0}
    for r in range(args.rounds):
        runs = [("dynamic", dict(dynamic, seed=r)), ("static", dict(static, seed=r)),
                ("static again", dict(static, seed=r))]
        order = runs[r % 3:] + runs[:r % 3]
        results = {label: run(job) for label, job in order}
        if any(x["status"] not in ("succeeded", "max_epochs") for x in results.values()):
            raise SystemExit(f"round {r + 1}: a job failed ({results}); no ratio")
        ratio = results["dynamic"]["wall_s"] / results["static"]["wall_s"]
        ratios.append(ratio)
        noise.append(results["static again"]["wall_s"] / results["static"]["wall_s"])
        for label in totals:
            totals[label] += results[label]["wall_s"]
        short += [f"seed {r} {label}" for label, x in results.items() if x["status"] != "succeeded"]
        for label, _ in runs:
            x = results[label]
            print(f"round {r + 1} {label:<12}: {x['wall_s']:6.1f} s  {x['status']}  {x['epochs']} training epochs "
                  f"on {x['ws']}  spent {x['spent']:.4g}")
        print(f"round {r + 1} (seed {r}) ratio dynamic/static: {ratio:.3f}; static again/static: {noise[-1]:.3f}")
    overall = totals["dynamic"] / totals["static"]
    spread = max(abs(n - 1) for n in noise)
    print(f"summed over {args.rounds} seeds: dynamic {totals['dynamic']:.1f} s, static {totals['static']:.1f} s, "
          f"ratio {overall:.3f}; noise (static again/static) within ±{spread:.1%}; "
          f"dynamic lost by more than that in {sum(x > 1 + spread for x in ratios)} of {args.rounds} seeds")
    print(f"did not meet the target within max_epochs: {short or 'none'}")
    print(json.dumps({"ratios": ratios, "overall": overall, "noise": noise}))

if __name__ == "__main__":
    main()
