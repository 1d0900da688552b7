"""`coach plot JOB_ID`: one PNG that shows how a job converged, what it ran with and why.

Three panels, left to right:

1. validation loss per epoch (tuning mini-epochs at their fractional progress), the
   fitted curve l(k) = 1/(b0·k + b1) + b2, the target, and the predicted epoch at which
   the stop rule is met with its 80% interval, counting the epochs already under the target
   (or "unreachable" and the asymptote; for a job that met the rule, where it did); and
   the earlier run of the same model and data the prediction asked (the closest one), at the new run's pace;
2. workers and servers per epoch;
3. the fitted speed surface f(w, s) in samples/s as a heatmap, with the measured
   configurations marked.

The x axis of panel 1 is training progress in epochs, the same numbers the job loop
passes to `fit_convergence` (tuning mini-epochs count as the fraction of an epoch they
processed), so the fitted curve lines up with the points.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from coach.estimate.convergence import ConvergenceFit  # noqa: E402
from coach.estimate.eta import epochs_left  # noqa: E402
from coach.estimate.progress import progress_of, streak_of, tuned_ahead  # noqa: E402
from coach.estimate.speed import SpeedModel  # noqa: E402
from coach.state.records import EpochRecord  # noqa: E402


def plot_job(out: Path, epochs: Sequence[EpochRecord], target: float, fit: ConvergenceFit | None,
             speed: SpeedModel | None, consecutive: int = 3, title: str | None = None,
             samples_per_epoch: float | None = None, limits: tuple[int, int] | None = None,
             max_epochs: int | None = None, measured_before: Sequence[EpochRecord] = ()) -> Path:
    """Draw the three panels into `out` (PNG) and return its path. `samples_per_epoch`: the
    training split's size, which places tuning mini-epochs where the job loop's fit did
    (None: the training epochs' median, see `progress_of`). `limits`: the job's max_workers and
    max_servers, beyond which the speed surface is not drawn (the job never runs there).
    `max_epochs`: the job's, past which the prediction is "not within max_epochs", as its ETA says.
    `measured_before`: earlier jobs' epochs that its speed model counts (`speeds_before`), marked
    apart from the job's own measurements."""
    out = Path(out)
    fig, (ax_loss, ax_ws, ax_speed) = plt.subplots(1, 3, figsize=(16, 4.8))
    fig.suptitle(title or (f"job {epochs[0].job_id}" if epochs else "job"))
    x = np.array(progress_of(epochs, samples_per_epoch), dtype=float)
    _loss_panel(ax_loss, x, epochs, target, fit, consecutive, max_epochs)
    _ws_panel(ax_ws, x, epochs)
    _speed_panel(fig, ax_speed, epochs, speed, limits, measured_before)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _loss_panel(ax, x: np.ndarray, epochs: Sequence[EpochRecord], target: float, fit: ConvergenceFit | None,
                consecutive: int, max_epochs: int | None = None) -> None:
    y = np.array([e.val_loss for e in epochs], dtype=float)
    tuning = np.array([e.phase == "tuning" for e in epochs], dtype=bool)
    done = x_end = float(x.max()) if x.size else 1.0
    trained = max((e.epoch for e in epochs if e.phase == "training"), default=0)
    # where training epoch 0 ends on the x axis: after an older Coach's tuning, which drew samples
    # of its own; at 0 where tuning trains the head of epoch 1 (`progress_of`)
    x0 = float(x[tuning][-1]) if tuned_ahead(epochs) else 0.0
    streak = streak_of(epochs, target)
    met = streak >= consecutive   # a finished job: where it stopped is a fact
    pred = None
    if fit is not None and not met:
        # the job loop's horizon: an interval past max_epochs was drawn ([6, 44] for max_epochs 25)
        horizon = None if max_epochs is None else done + max_epochs - trained
        pred = fit.epochs_to_target(target, consecutive, start=math.floor(done + 1e-9), streak=streak,
                                    horizon=horizon)
    # epochs left to the stop and to the interval's ends, as `coach status` counts them; the x axis
    # counts tuning as fractions of an epoch, the labels count training epochs
    n, lo, hi = epochs_left(pred, done, consecutive, streak) if pred is not None else (None, None, None)
    if n is not None:
        x_end = max(x_end, x0 + trained + (hi if hi is not None else n)) * 1.05
    grid = np.linspace(min(0.1, x.min()) if x.size else 0.1, max(x_end, 1.0), 300)
    if fit is not None:
        # drawn solid where it was fitted: the recent half. Before that the same curve, run backwards,
        # missed LeNet's first epochs by 2× and read as a bad fit of them; it was never fitted there
        head = np.append(grid[grid < fit.fitted_from], fit.fitted_from)   # the two meet at fitted_from
        tail = np.insert(grid[grid > fit.fitted_from], 0, fit.fitted_from)
        fitted = fit.predict(tail)
        ax.plot(tail, fitted, "-", color="tab:orange",
                label=(f"fit 1/({_coef(fit.b0)}·k + {_coef(fit.b1)}) + {_coef(fit.b2)}" if fit.b0 > 0
                       else f"fit: flat at {fit.b2:.3g} (a plateau)") + f", to the points from {fit.fitted_from:.3g} on")
        if head.size > 1:
            ax.plot(head, fit.predict(head), ":", color="tab:orange", lw=1, label="the same curve before them (not fitted)")
    if pred is not None and pred.earlier is not None:
        w = pred.earlier
        ax.plot(grid, w.run.level(w.c * grid), "--", color="tab:purple", lw=1,
                label=f"earlier run {w.run.label} at pace {w.c:.2f} ({pred.earlier_weight:.0%} of the prediction)")
    if (~tuning).any():
        ax.plot(x[~tuning], y[~tuning], "o-", color="tab:blue", ms=4, label="validation loss")
    ax.axhline(target, color="tab:green", ls="--", lw=1, label=f"target {target:g}")
    if met:
        ax.axvline(x[-1], color="tab:red", lw=1,
                   label=f"stop rule met at training epoch {epochs[-1].epoch} ({consecutive} in a row ≤ target)")
    if pred is not None:
        if n is not None:
            at = x0 + trained   # where the last training epoch ended
            ax.axvline(at + n, color="tab:red", lw=1, label=f"stop rule predicted at training epoch {trained + n}")
            if lo is not None:
                ax.axvspan(at + lo, at + hi if hi is not None else x_end, color="tab:red", alpha=0.12,
                           label=f"80% interval [{trained + lo}, {'never' if hi is None else trained + hi}]")
        else:   # the note says which: the target under the curve's floor, or too far to follow it
            why = ("the target is at or below it" if target <= pred.asymptote
                   else "not within max_epochs" if max_epochs is not None else "the target is beyond the horizon")
            ax.axhline(pred.asymptote, color="tab:red", ls=":", lw=1,
                       label=f"unreachable: asymptote {pred.asymptote:.3g}, {why}")
    ax.set_xlabel("training progress (epochs; tuning mini-epochs count as fractions)")
    ax.set_ylabel("validation loss")
    ax.set_title("convergence")
    # a tuning mini-epoch's loss above every training epoch's does not set the scale: the demo's 1.18
    # squeezed its epochs' 0.13-0.25 into the bottom tenth of the panel
    above = tuning & (y > y[~tuning].max()) if (~tuning).any() else np.zeros_like(tuning)
    # judged with the target: losses from 4.5 to 0.4 with a target of 0.06 drew the target, the fit
    # and its crossing in the bottom few pixels of a linear axis
    shown = np.append(y[~above], target)
    log = bool(np.all(shown > 0) and shown.max() / shown.min() > 20)
    if log:
        ax.set_yscale("log")
    # the points, the target, the fitted part of the curve and a floor drawn as unreachable set
    # the scale, not the unfitted curve before them (it rose to 1.45 over LeNet's 0.13–0.25)
    drawn = [shown] + ([fitted] if fit is not None else [])
    if pred is not None and n is None:
        drawn.append(np.array([pred.asymptote]))
    values = np.concatenate(drawn)
    values = values[np.isfinite(values) & (values > 0 if log else True)]
    low, high = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
    if high > low:
        ax.set_ylim(*((low / 1.15, high * 1.15) if log else (low - 0.05 * (high - low), high + 0.05 * (high - low))))
    top = ax.get_ylim()[1]
    off = tuning & (y > top)   # marked at the top edge, with the loss written
    if (tuning & ~off).any():
        ax.plot(x[tuning & ~off], y[tuning & ~off], "s", color="tab:gray", ms=5, label="tuning mini-epochs")
    if off.any():
        ax.plot(x[off], np.full(int(off.sum()), top), "^", color="tab:gray", ms=6, clip_on=False,
                label="tuning mini-epochs above the axis (loss written)")
        for xi, yi in zip(x[off], y[off]):
            ax.annotate(f"{yi:.3g}", (xi, top), xytext=(4, -10), textcoords="offset points", fontsize=7,
                        color="tab:gray")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def _ws_panel(ax, x: np.ndarray, epochs: Sequence[EpochRecord]) -> None:
    # x is each epoch's end: an epoch's (w, s) spans the progress up to it ("pre"), from 0 for the first
    edges = np.concatenate([[0.0], x])
    # dashed servers over solid workers: where the two are equal, both lines show
    for values, marker, style, label in (([e.workers for e in epochs], "o", "-", "workers w"),
                                         ([e.servers for e in epochs], "s", "--", "servers s")):
        (line,) = ax.step(edges, [values[0], *values], where="pre", ls=style, label=label)
        ax.plot(x, values, marker, ms=3, color=line.get_color())
    for xi, e in zip(x, epochs):
        if e.retries:
            ax.annotate(f"{e.retries} retr.", (xi, e.workers), fontsize=6, color="tab:red")
    ax.set_xlabel("training progress (epochs)")
    ax.set_ylabel("functions")
    ax.set_title("workers and servers per epoch")
    top = max([e.workers for e in epochs] + [e.servers for e in epochs] + [1])
    ax.set_ylim(0, top + 1)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def _speed_panel(fig, ax, epochs: Sequence[EpochRecord], speed: SpeedModel | None,
                 limits: tuple[int, int] | None, before: Sequence[EpochRecord] = ()) -> None:
    ax.set_title("speed model f(w, s)" + (f": {speed.form}" if speed else ""))
    ax.set_xlabel("workers w")
    ax.set_ylabel("servers s")
    if speed is None:
        ax.text(0.5, 0.5, "no speed model yet", ha="center", va="center", transform=ax.transAxes)
        return
    w_max = max([e.workers for e in (*epochs, *before)] + [1]) + 2   # a little past what was measured ...
    s_max = max([e.servers for e in (*epochs, *before)] + [1]) + 1
    if limits is not None:                                 # ... but not past what the job may run
        w_max, s_max = min(w_max, max(limits[0], 1)), min(s_max, max(limits[1], 1))
    grid = np.array([[speed.predict(w, s) for w in range(1, w_max + 1)] for s in range(1, s_max + 1)])
    im = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis",
                   extent=(0.5, w_max + 0.5, 0.5, s_max + 0.5))
    fig.colorbar(im, ax=ax, label="samples/s")
    for s in range(1, s_max + 1):
        for w in range(1, w_max + 1):
            r, g, b, _ = im.cmap(im.norm(grid[s - 1, w - 1]))   # dark text on the light (yellow) cells
            ax.text(w, s, f"{grid[s - 1, w - 1]:.0f}", ha="center", va="center", fontsize=7,
                    color="black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white")
    seen = {(e.workers, e.servers) for e in epochs}
    earlier = {(e.workers, e.servers) for e in before} - seen
    marks = ((seen, "o", "red", "measured"), (earlier, "s", "orange", "measured by earlier jobs"))
    for ws, marker, color, label in marks:
        if ws:
            ax.plot([w for w, _ in sorted(ws)], [s for _, s in sorted(ws)], marker, mfc="none", mec=color, ms=16,
                    label=label)
    if seen or earlier:
        ax.legend(fontsize=7, loc="upper right")
    mape = "n/a" if speed.mape is None else f"{speed.mape:.1%}"
    ax.set_xlabel(f"workers w   (held-out MAPE {mape})")
    ax.set_xticks(range(1, w_max + 1))
    ax.set_yticks(range(1, s_max + 1))


def _coef(value: float) -> str:
    """A fitted coefficient for a label: 1e-15 is a bound the fit pressed against, i.e. 0."""
    return "0" if abs(value) < 1e-9 else f"{value:.3g}"
