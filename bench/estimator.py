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
all curves and separately for the curves recorded here and the published ones (ext_*); each
alone, and with the runs of the other configurations of the curve's model and data as
earlier runs ("others": whole, or cut where each met its highest target; never its own).
Earlier runs of the same configuration and of others on other seeds: bench/curves/repeats,
see `earlier_run_benchmark`.

Speed: bench/speed/*.csv (`workers,servers,samples_per_s,global_batch`, one file per
job/machine) — each configuration is held out in turn, the model is fitted on the rest
and predicts it; printed: the mean absolute percentage error, per file and overall.

Run: `nice .venv/bin/python bench/estimator.py [--json]`.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
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
from coach.estimate.earlier_run import MIN_EPOCHS  # noqa: E402
from coach.estimate.stop_rule import met_in  # noqa: E402

TARGET_FRACTIONS = (0.5, 0.75, 1.0)
HORIZONS = (0.2, 0.5)
MIN_TRUE_EPOCHS = 10
MIN_SEEN = 3
INTERVAL_COVERAGE = 0.8   # what an 80% interval should do


def stop_epoch(epochs: np.ndarray, losses: np.ndarray, target: float, consecutive: int) -> int | None:
    """First epoch at which the last `consecutive` losses are all ≤ target (the stop rule)."""
    at = met_in(losses, target, consecutive)[0]
    return None if at is None else int(epochs[at])


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
    """Every case predicted three ways: from its own epochs alone (a configuration, model and
    data never run before), and with the runs of the other configurations of the same model
    and data (other learning rates and optimizers: a hyperparameter search) in the store —
    whole, or each cut where it met its highest target (as a job stops there). The curve's
    own configuration is never among them."""
    from coach.estimate.convergence import prepare_earlier_run

    curves = {path.stem: read_curve(path) for path in sorted((ROOT / "curves").glob("*.csv"))}
    whole = {name: prepare_earlier_run(c.epochs, c.losses, name) for name, c in curves.items()}
    ends = {name: _highest_target_end(c, consecutive) or len(c.epochs) for name, c in curves.items()}
    cut = {name: prepare_earlier_run(c.epochs[:ends[name]], c.losses[:ends[name]], name)
           for name, c in curves.items() if ends[name] >= MIN_EPOCHS}
    cases = []
    for name, curve in curves.items():   # the reader of `coach estimate`: checked, with its train_loss column
        epochs, losses = np.array(curve.epochs), np.array(curve.losses)
        train = None if curve.train_losses is None else np.array(curve.train_losses)
        others = [m for m in curves if m != name and _model_and_data(m) == _model_and_data(name)]
        for target, n_true in targets_for(epochs, losses, consecutive):
            case = {"curve": name, "target": round(target, 6), "true_epoch": n_true}
            for h in HORIZONS:
                seen = max(MIN_SEEN, int(math.ceil(h * n_true)))
                # the training losses of the same epochs, as the job loop passes them
                args = (epochs[:seen], losses[:seen])
                kwargs = {"train_losses": None if train is None else train[:seen]}
                try:
                    fit = fit_convergence(*args, **kwargs, earlier=[whole[m] for m in others])
                    fit_cut = fit_convergence(*args, **kwargs, bootstrap=0, earlier=[cut[m] for m in others if m in cut])
                except EstimateError:
                    fit = fit_cut = None
                for suffix, f in (("", fit and dataclasses.replace(fit, earlier=())), (" others", fit),
                                  (" others cut", fit and dataclasses.replace(fit, earlier=fit_cut.earlier))):
                    p = None if f is None else _ask(f, epochs, losses, seen, target, consecutive)
                    case[f"pred@{h:.0%}{suffix}"] = None if p is None else p.epoch
                    case[f"err@{h:.0%}{suffix}"], case[f"covered@{h:.0%}{suffix}"] = _judge(p, n_true)
                case[f"seen@{h:.0%}"] = seen
                case[f"score@{h:.0%}"] = spread_score(case[f"pred@{h:.0%}"], seen, n_true)
            cases.append(case)
    groups = {"all": cases, "recorded here": [c for c in cases if not c["curve"].startswith("ext_")],
              "published (ext_*)": [c for c in cases if c["curve"].startswith("ext_")]}
    summary = {f"{h:.0%}{suffix}": {name: _errors(group, f"{h:.0%}{suffix}") for name, group in groups.items() if group}
               for suffix in ("", " others", " others cut") for h in HORIZONS}
    return cases, summary


def _ask(fit, epochs: np.ndarray, losses: np.ndarray, seen: int, target: float, consecutive: int):
    """The stop epoch as the job loop asks for it after `seen` epochs (`coach.estimate.eta`):
    from the last epoch seen on, with the losses already at or below the target counted."""
    return fit.epochs_to_target(target, consecutive, start=int(epochs[seen - 1]),
                                streak=met_in(losses[:seen], target, consecutive)[1])


def _judge(p, n_true: int) -> tuple[float, bool]:
    """A prediction's relative error (inf: unreachable, or no fit) and whether its interval holds N."""
    if p is None or p.epoch is None:
        return math.inf, False
    return abs(p.epoch - n_true) / n_true, p.lo <= n_true and (p.hi is None or n_true <= p.hi)


def _model_and_data(name: str) -> str:
    """bench/curves/DATA_MODEL_optimizer_lr.csv; no two published ext_* curves share both."""
    return name if name.startswith("ext_") else "_".join(name.split("_")[:2])


def _highest_target_end(curve, consecutive: int) -> int | None:
    """Where a recorded run would have stopped at its highest benchmark target (None: no target)."""
    targets = targets_for(np.array(curve.epochs), np.array(curve.losses), consecutive)
    return max(targets, key=lambda t: t[0])[1] if targets else None


def _seeds(name: str) -> dict[int, Path]:
    """Recorded runs of one configuration by seed: bench/curves/NAME.csv is seed 1."""
    runs = {1: ROOT / "curves" / f"{name}.csv"}
    for path in sorted((ROOT / "curves" / "repeats").glob(f"seed*/{name}.csv")):
        runs[int(path.parent.name.removeprefix("seed"))] = path
    return runs


def earlier_run_benchmark(consecutive: int) -> dict:
    """Epochs-to-target for a run whose model and data ran before (bench/curves/repeats):

    - "another seed, seeds 1 and 2": each predicted with the other's run of the same
      configuration (the mix's two constants were chosen on these cases);
    - "another seed, seed 3 (held out)": seed-3 runs with the seed-1 and the seed-2 run;
    - "earlier run stopped at a higher target": seed-2 runs with the seed-1 run cut where it
      met its highest benchmark target (a job that stopped early: beyond that, its curve is
      its own fit's forecast);
    - "another learning rate or optimizer": seed-2 runs with the seed-1 run of every other
      configuration on the same data and model, one at a time (a mismatch the mix must survive);
    - "first run of a configuration, seeds 2 and 3": with the seed-1 runs of all the other
      configurations on the same data and model at once, the closest one asked (as
      `convergence_benchmark`'s "others", on other seeds); and the same with those runs cut
      where each met its highest target (as `convergence_benchmark`'s "others cut").

    Targets, N and horizons as in `convergence_benchmark`; "alone" is the same prediction
    without the earlier run (`earlier=()`), on the same cases. No bootstrap: the combined
    interval does not use it (a prediction that gives the earlier run no weight then has the
    extrapolation interval only)."""
    from coach.estimate.convergence import prepare_earlier_run

    names = sorted({p.stem for p in (ROOT / "curves" / "repeats").glob("seed*/*.csv")})
    curves = {(n, seed): read_curve(path) for n in names for seed, path in _seeds(n).items()}
    earlier = {key: prepare_earlier_run(c.epochs, c.losses, f"{key[0]} seed {key[1]}") for key, c in curves.items()}
    for n in names:
        c = curves[(n, 1)]
        if end := _highest_target_end(c, consecutive):
            earlier[(n, 1, "cut")] = prepare_earlier_run(c.epochs[:end], c.losses[:end], f"{n} seed 1 to {end}")
    pairs = {"another seed, seeds 1 and 2": [((n, s), [(n, 3 - s)]) for n in names for s in (1, 2)
                                             if (n, 3 - s) in curves],
             "another seed, seed 3 (held out)": [((n, 3), [(n, o)]) for n in names for o in (1, 2)
                                                 if (n, 3) in curves],
             "earlier run stopped at a higher target": [((n, 2), [(n, 1, "cut")]) for n in names
                                                        if (n, 1, "cut") in earlier and (n, 2) in curves],
             "another learning rate or optimizer": [
                 ((n, 2), [(m, 1)]) for n in names for m in names
                 if m != n and _model_and_data(n) == _model_and_data(m) and (n, 2) in curves],
             "first run of a configuration, seeds 2 and 3": [
                 ((n, s), [(m, 1) for m in names if m != n and _model_and_data(n) == _model_and_data(m)])
                 for n in names for s in (2, 3) if (n, s) in curves],
             "first run of a configuration, seeds 2 and 3, the others cut": [
                 ((n, s), [(m, 1, "cut") for m in names
                           if m != n and _model_and_data(n) == _model_and_data(m) and (m, 1, "cut") in earlier])
                 for n in names for s in (2, 3) if (n, s) in curves]}
    out: dict = {}
    for scenario, among in pairs.items():
        rows = []
        for new, olds in among:
            c = curves[new]
            epochs, losses = np.array(c.epochs), np.array(c.losses)
            train = None if c.train_losses is None else np.array(c.train_losses)
            for target, n_true in targets_for(epochs, losses, consecutive):
                for h in HORIZONS:
                    seen = max(MIN_SEEN, int(math.ceil(h * n_true)))
                    fit = fit_convergence(epochs[:seen], losses[:seen], bootstrap=0, earlier=[earlier[o] for o in olds],
                                          train_losses=None if train is None else train[:seen])
                    row = {"horizon": f"{h:.0%}"}
                    for method, f in (("alone", dataclasses.replace(fit, earlier=())), ("with earlier run", fit)):
                        p = _ask(f, epochs, losses, seen, target, consecutive)
                        row[method], row[f"{method} covered"] = _judge(p, n_true)
                    row["weight"] = p.earlier_weight
                    rows.append(row)
        out[scenario] = {f"{h:.0%}": _earlier_summary([r for r in rows if r["horizon"] == f"{h:.0%}"])
                         for h in HORIZONS}
    return out


def _earlier_summary(rows: list[dict]) -> dict:
    summary: dict = {"predictions": len(rows),
                     "earlier run weighted over half": float(np.mean([r["weight"] > 0.5 for r in rows]))}
    for method in ("alone", "with earlier run"):
        summary[method] = _stats([r[method] for r in rows], [r[f"{method} covered"] for r in rows])
    return summary


def _errors(cases: list[dict], key: str) -> dict:
    return {"cases": len(cases), **_stats([c[f"err@{key}"] for c in cases], [c[f"covered@{key}"] for c in cases])}


def _stats(errors: list[float], covered: list[bool]) -> dict:
    """Median, p90 and unreachable count of relative errors (inf: predicted unreachable), and how
    often the interval held the true epoch among the predictions that name one (an unreachable
    one has no interval to judge)."""
    errs = np.array(errors, dtype=float)
    named = [c for c, e in zip(covered, errs) if math.isfinite(e)]
    return {"median": float(np.median(errs)), "p90": float(np.percentile(errs, 90, method="higher")),
            "unreachable": int(np.isinf(errs).sum()), "interval_coverage": float(np.mean(named)) if named else math.nan}


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
    with_earlier = earlier_run_benchmark(args.consecutive)
    if args.json:
        print(json.dumps({"convergence": summary, "interval_spread": calibration, "earlier_run": with_earlier,
                          "speed": speed, "speed_mape": speed_mape,
                          "cases": cases if args.cases else len(cases)}, default=str))
        return
    if args.cases:
        for c in cases:
            print("  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in c.items()))
    n_curves = len({c["curve"] for c in cases})
    print(f"convergence: {len(cases)} (curve, target) cases from {n_curves} curves, stop rule "
          f"{args.consecutive} in a row")
    print("  (\"others\": with the runs of the other configurations of the same model and data, whole or cut "
          "where each met its highest target)")
    for h, by_group in summary.items():
        for name, s in by_group.items():
            print(f"  after {h:<14} {name:<17}: median relative error {s['median']:.1%}, "
                  f"p90 {s['p90']:.1%}, predicted unreachable {s['unreachable']}/{s['cases']}, "
                  f"80% interval holds the true epoch in {s['interval_coverage']:.0%}")
    print(f"  interval spread: shipped {calibration['shipped']:g}, recalibrated on these cases "
          f"{calibration['spread']:.3f}; calibrated without the curve, the extrapolation interval "
          "holds its true epoch in " + ", ".join(f"{calibration[f'{h:.0%}']:.0%} after {h:.0%}"
                                                for h in HORIZONS))
    print("with earlier runs of the same model and data (bench/curves/repeats):")
    for scenario, by_h in with_earlier.items():
        for h, r in by_h.items():
            a, w = r["alone"], r["with earlier run"]
            print(f"  {scenario}, after {h:>3}, {r['predictions']} predictions: median {w['median']:.1%} "
                  f"(alone {a['median']:.1%}), p90 {w['p90']:.1%} ({a['p90']:.1%}), unreachable "
                  f"{w['unreachable']} ({a['unreachable']}), 80% interval holds N in {w['interval_coverage']:.0%}; "
                  f"earlier run weighted over half in {r['earlier run weighted over half']:.0%}")
    if speed_mape is None:
        print("speed: no data in bench/speed/*.csv (columns workers,servers,samples_per_s,global_batch)")
    else:
        for name, s in speed.items():
            print(f"  speed {name}: {s['configs']} configurations, {s['form']} form, held-out MAPE {s['mape']:.1%}")
        print(f"speed: held-out MAPE over all configurations {speed_mape:.1%}")


if __name__ == "__main__":
    main()
