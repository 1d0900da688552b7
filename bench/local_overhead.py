"""Coach's embedded local backend against plain MXNet parameter-server processes, side by side.

The same epochs (same data, shards, batches, (w, s), learning rate) run once as a Coach job
(static allocation, every epoch a fresh ps-lite group forked from warm function replicas,
checkpointed and resumed) and once through bench/plain_ps.py (processes started once). The
ratio of wall times is Coach's overhead; the validation losses must agree.

    .venv/bin/python bench/local_overhead.py --epochs 3 --workers 1 --servers 1 [--rounds 2] \
        [--dataset '{"name": "synthetic", "samples": 20000, "shape": [1, 28, 28]}']
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from coach_job import ROOT, submit_job
from plain_ps import add_workload_args, dataset_spec


def run_coach(args: argparse.Namespace) -> dict:
    wall, rec, hist = submit_job(dict(
        name="bench", model=args.model, dataset=dataset_spec(args.dataset), target_loss=1e-9, budget=1e9,
        batch_size=args.batch_size, learning_rate=args.lr, allocation="static", workers=args.workers,
        servers=args.servers, max_workers=max(args.workers, 1), max_servers=max(args.servers, 1),
        max_epochs=args.epochs))
    return {"wall_s": wall, "status": rec["status"],
            "epochs": [{"epoch": r["epoch"], "val_loss": r["val_loss"], "seconds": r["duration_s"]} for r in hist]}


def run_plain(args: argparse.Namespace) -> dict:
    cmd = [sys.executable, str(ROOT / "bench" / "plain_ps.py"), "--workers", str(args.workers),
           "--servers", str(args.servers), "--epochs", str(args.epochs), "--dataset", args.dataset,
           "--model", args.model, "--batch-size", str(args.batch_size), "--lr", str(args.lr)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_args(ap)
    ap.add_argument("--rounds", type=int, default=1, help="alternate coach/plain this many times")
    args = ap.parse_args()
    ratios = []
    for r in range(args.rounds):
        plain, coach = run_plain(args), run_coach(args)
        ratio = coach["wall_s"] / plain["wall_s"]
        ratios.append(ratio)
        print(f"round {r + 1}: ({args.workers}, {args.servers}) {args.model}/{args.dataset} {args.epochs} epochs")
        print(f"  plain MXNet PS : {plain['wall_s']:7.1f} s  epochs " +
              " ".join(f"{e['seconds']:.1f}s/val {e['val_loss']:.4f}" for e in plain["epochs"]))
        print(f"  coach (local)  : {coach['wall_s']:7.1f} s  epochs " +
              " ".join(f"{e['seconds']:.1f}s/val {e['val_loss']:.4f}" for e in coach["epochs"]))
        same = all(abs(a["val_loss"] - b["val_loss"]) < 1e-3 for a, b in zip(plain["epochs"], coach["epochs"]))
        print(f"  ratio coach/plain: {ratio:.3f}   validation losses agree: {same}")
    print(json.dumps({"ratios": ratios, "median_ratio": statistics.median(ratios)}))


if __name__ == "__main__":
    main()
