"""The same job run with `allocation: dynamic` and with `static` (w=2, s=2), side by side.

Job completion time is the wall time of `coach submit` (tuning included for dynamic), the
ratio dynamic/static is printed per round, alternating the order to spread machine noise.
Round r runs both jobs with `seed: r`: one seed fixes one training trajectory, and near the
loss floor when the stop rule is met depends on the trajectory as much as on the allocation,
so a comparison on one seed measures luck. The summary is the ratio of the summed times.

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
    ratios, totals = [], {"dynamic": 0.0, "static": 0.0}
    for r in range(args.rounds):
        order = [("dynamic", dict(dynamic, seed=r)), ("static", dict(static, seed=r))]
        if r % 2:
            order.reverse()
        results = {}
        for label, job in order:
            results[label] = run(job)
        failed = [label for label, x in results.items() if x["status"] != "succeeded"]
        if failed:
            raise SystemExit(f"round {r + 1}: {', '.join(failed)} did not succeed ({results}); no ratio")
        ratio = results["dynamic"]["wall_s"] / results["static"]["wall_s"]
        ratios.append(ratio)
        for label in totals:
            totals[label] += results[label]["wall_s"]
        for label in ("dynamic", "static"):
            x = results[label]
            print(f"round {r + 1} {label:<7}: {x['wall_s']:6.1f} s  {x['status']}  {x['epochs']} training epochs "
                  f"on {x['ws']}  spent {x['spent']:.4g}")
        print(f"round {r + 1} (seed {r}) ratio dynamic/static: {ratio:.3f}")
    overall = totals["dynamic"] / totals["static"]
    print(f"summed over {args.rounds} seeds: dynamic {totals['dynamic']:.1f} s, static {totals['static']:.1f} s, "
          f"ratio {overall:.3f}")
    print(json.dumps({"ratios": ratios, "overall": overall}))


if __name__ == "__main__":
    main()
