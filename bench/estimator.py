"""Estimator benchmark: how well Coach predicts epochs-to-target and speed, on real data.

Convergence: for every curve in bench/curves/*.csv (`epoch,loss[,...]`, provenance in
bench/curves/README.md) and a few targets per curve, the *true* stop epoch N is where the
recorded validation loss is first at or below the target `--consecutive` epochs in a
row (Coach's stop rule, 3). Targets are chosen from the data, not from a formula: for
each fraction f in TARGET_FRACTIONS, the target is the worst loss of the 3 epochs that
end at epoch round(f × curve length), so its stop rule is met there or earlier (N is then
recomputed from the data). Only targets with N ≥ MIN_TRUE_EPOCHS are kept. The estimator
then sees only the first 20% (and 50%) of N epochs — never fewer than 3 — and predicts
N (it is given the validation losses and, as in the job loop, the training losses of the
same epochs where the file has a `train_loss` column); the relative error is
|predicted − N| / N, and an "unreachable" prediction counts as an infinite error (it is a
miss). Printed: median and 90th percentile per horizon, over
all curves and separately for the curves recorded here and the published ones (ext_*).

Speed: bench/speed/*.csv (`workers,servers,samples_per_s,global_batch`, one file per
job/machine) — each configuration is held out in turn, the model is fitted on the rest
and predicts it; printed: the mean absolute percentage error, per file and overall.

Run: `nice .venv/bin/python bench/estimator.py [--json]`.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))

from coach.cli.estimate import read_curve  # noqa: E402
from coach.errors import EstimateError  # noqa: E402
from coach.estimate import (  # noqa: E402
    EXTRAPOLATION_SPREAD,
    SpeedSample,
    extrapolation_interval,
    fit_convergence,
    fit_speed,
)

TARGET_FRACTIONS = (0.5, 0.75, 1.0)
HORIZONS = (0.2, 0.5)
MIN_TRUE_EPOCHS = 10
MIN_SEEN = 3
INTERVAL_COVERAGE = 0.8   # what an 80% interval should do


def stop_epoch(epochs: np.ndarray, losses: np.ndarray, target: float, consecutive: int) -> int | None:
    """First epoch at which the last `consecutive` losses are all ≤ target (the stop rule)."""
    run = 0
    for e, loss in zip(epochs, losses):
        run = run + 1 if loss <= target else 0
        if run >= consecutive:
            return int(e)
    return None


def targets_for(epochs: np.ndarray, losses: np.ndarray, consecutive: int) -> list[tuple[float, int]]:
    out: dict[int, float] = {}
    for f in TARGET_FRACTIONS:
        end = int(round(f * len(losses)))
        if end < consecutive:
            continue
        target = float(losses[end - consecutive:end].max())
        n = stop_epoch(epochs, losses, target, consecutive)
        if n is not None and n >= MIN_TRUE_EPOCHS and n not in out:
            out[n] = target
    return [(t, n) for n, t in sorted(out.items())]


def convergence_benchmark(consecutive: int) -> tuple[list[dict], dict]:
    cases = []
    for path in sorted((ROOT / "curves").glob("*.csv")):
        curve = read_curve(path)   # the reader of `coach estimate`: checked, with its train_loss column
        epochs, losses = np.array(curve.epochs), np.array(curve.losses)
        train = None if curve.train_losses is None else np.array(curve.train_losses)
        for target, n_true in targets_for(epochs, losses, consecutive):
            case = {"curve": path.stem, "target": round(target, 6), "true_epoch": n_true}
            for h in HORIZONS:
                seen = max(MIN_SEEN, int(math.ceil(h * n_true)))
                try:
                    # the training losses of the same epochs, as the job loop passes them
                    fit = fit_convergence(epochs[:seen], losses[:seen],
                                          train_losses=None if train is None else train[:seen])
                    p = fit.epochs_to_target(target, consecutive)
                    pred, lo, hi = p.epoch, p.lo, p.hi
                except EstimateError:
                    pred = lo = hi = None
                err = math.inf if pred is None else abs(pred - n_true) / n_true
                case[f"pred@{h:.0%}"] = pred
                case[f"err@{h:.0%}"] = err
                case[f"covered@{h:.0%}"] = pred is not None and lo <= n_true <= (math.inf if hi is None else hi)
                case[f"seen@{h:.0%}"] = seen
                case[f"score@{h:.0%}"] = spread_score(pred, seen, n_true)
            cases.append(case)
    groups = {"all": cases, "recorded here": [c for c in cases if not c["curve"].startswith("ext_")],
              "published (ext_*)": [c for c in cases if c["curve"].startswith("ext_")]}
    summary = {f"{h:.0%}": {name: _errors(group, h) for name, group in groups.items() if group}
               for h in HORIZONS}
    return cases, summary


def _errors(cases: list[dict], h: float) -> dict:
    errs = np.array([c[f"err@{h:.0%}"] for c in cases], dtype=float)
    return {"cases": int(errs.size), "median": float(np.median(errs)),
            "p90": float(np.percentile(errs, 90, method="higher")), "unreachable": int(np.isinf(errs).sum()),
            # of the predictions that name an epoch: an unreachable one has no interval to judge
            "interval_coverage": float(np.mean([c[f"covered@{h:.0%}"] for c in cases
                                                if c[f"pred@{h:.0%}"] is not None] or [math.nan]))}


def spread_score(pred: int | None, seen: int, n_true: int) -> float:
    """The smallest EXTRAPOLATION_SPREAD whose interval around `pred` holds `n_true`:
    |log(ahead predicted / ahead true)| / log(1 + ahead predicted / seen); inf for a miss
    that no spread can cover (unreachable, or predicted inside the data but wrong)."""
    if pred is None:
        return math.inf
    ahead, ahead_true = pred - seen, n_true - seen
    if ahead <= 0 or ahead_true <= 0:
        return 0.0 if pred == n_true else math.inf
    return abs(math.log(ahead / ahead_true)) / math.log(1.0 + ahead / seen)


def conformal_spread(scores: list[float]) -> float:
    """Split-conformal quantile: the ⌈(n+1)·coverage⌉-th smallest score (Vovk; Lei et al.
    2018), so that a new case is covered with probability ≥ coverage if cases are exchangeable."""
    ranked = sorted(scores)
    k = math.ceil((len(ranked) + 1) * INTERVAL_COVERAGE)
    return ranked[min(k, len(ranked)) - 1]


def spread_calibration(cases: list[dict]) -> dict:
    """EXTRAPOLATION_SPREAD recalibrated on these cases, and how well such a calibration
    carries to a curve it has not seen: each curve's cases are covered (or not) by the
    spread calibrated on all the other curves. Only predictions that name an epoch count
    (the interval is conditional on one: "unreachable" is judged by the error figures)."""
    keys = [(f"pred@{h:.0%}", f"score@{h:.0%}") for h in HORIZONS]

    def scores(among: list[dict]) -> list[float]:
        return [c[score] for c in among for pred, score in keys if c[pred] is not None]

    out: dict = {"spread": conformal_spread(scores(cases)), "shipped": EXTRAPOLATION_SPREAD}
    for h in HORIZONS:
        held_out = []
        for c in cases:
            pred, seen = c[f"pred@{h:.0%}"], c[f"seen@{h:.0%}"]
            if pred is None:
                continue
            spread = conformal_spread(scores([o for o in cases if o["curve"] != c["curve"]]))
            lo, hi = extrapolation_interval(pred, seen, spread)
            held_out.append(lo <= c["true_epoch"] <= hi)
        out[f"{h:.0%}"] = float(np.mean(held_out))
    return out


def speed_benchmark() -> tuple[dict[str, dict], float | None]:
    per_file: dict[str, dict] = {}
    all_errors: list[float] = []
    for path in sorted((ROOT / "speed").glob("*.csv")):
        with path.open() as fh:
            samples = [SpeedSample(int(r["workers"]), int(r["servers"]), float(r["samples_per_s"]),
                                   int(float(r["global_batch"])))
                       for r in csv.DictReader(line for line in fh if not line.startswith("#"))]
        model = fit_speed(samples)
        # the model's own held-out error: each configuration predicted by a fit without it
        if model.mape is None:
            continue
        per_file[path.stem] = {"configs": model.n_configs, "form": model.form, "mape": model.mape,
                               "candidates": model.candidates}
        all_errors.extend([model.mape] * model.n_configs)
    return per_file, (float(np.mean(all_errors)) if all_errors else None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--consecutive", type=int, default=3, help="stop rule: epochs in a row ≤ target")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--cases", action="store_true", help="print every case")
    args = ap.parse_args()
    cases, summary = convergence_benchmark(args.consecutive)
    calibration = spread_calibration(cases)
    speed, speed_mape = speed_benchmark()
    if args.json:
        print(json.dumps({"convergence": summary, "interval_spread": calibration,
                          "speed": speed, "speed_mape": speed_mape,
                          "cases": cases if args.cases else len(cases)}, default=str))
        return
    if args.cases:
        for c in cases:
            print("  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in c.items()))
    n_curves = len({c["curve"] for c in cases})
    print(f"convergence: {len(cases)} (curve, target) cases from {n_curves} curves, stop rule "
          f"{args.consecutive} in a row")
    for h, by_group in summary.items():
        for name, s in by_group.items():
            print(f"  after {h:>3} of the epochs, {name:<17}: median relative error {s['median']:.1%}, "
                  f"p90 {s['p90']:.1%}, predicted unreachable {s['unreachable']}/{s['cases']}, "
                  f"80% interval holds the true epoch in {s['interval_coverage']:.0%}")
    print(f"  interval spread: shipped {calibration['shipped']:g}, recalibrated on these cases "
          f"{calibration['spread']:.3f}; calibrated without the curve, the extrapolation interval "
          "holds its true epoch in " + ", ".join(f"{calibration[f'{h:.0%}']:.0%} after {h:.0%}"
                                                for h in HORIZONS))
    if speed_mape is None:
        print("speed: no data in bench/speed/*.csv (columns workers,servers,samples_per_s,global_batch)")
    else:
        for name, s in speed.items():
            print(f"  speed {name}: {s['configs']} configurations, {s['form']} form, held-out MAPE {s['mape']:.1%}")
        print(f"speed: held-out MAPE over all configurations {speed_mape:.1%}")


if __name__ == "__main__":
    main()
