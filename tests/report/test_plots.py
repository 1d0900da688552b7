"""plot_job writes a PNG for a job with or without fitted models."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from coach.estimate import SpeedSample, fit_convergence, fit_speed
from coach.estimate.progress import progress_of
from coach.report import plot_job
from coach.state.records import EpochRecord

CURVE = Path(__file__).resolve().parents[2] / "bench" / "curves" / "mnist5k_mlp_sgd_lr0.003.csv"


@pytest.fixture(autouse=True)
def _close_figures():
    """Tests that read a figure keep it from `plt.close`; closed here, after monkeypatch undoes that."""
    yield
    from coach.report import plots

    plots.plt.close("all")


def records(n_train: int = 20, tuning_samples: int = 400) -> list[EpochRecord]:
    with CURVE.open() as fh:
        rows = list(csv.DictReader(fh))
    out = [EpochRecord("job1", "tuning", i, w, s, 2.3, 2.3 - 0.05 * i, 5.0, tuning_samples, 80.0 * w, 0.01)
           for i, (w, s) in enumerate([(1, 1), (2, 1), (1, 2), (2, 2)], start=1)]
    for r in rows[:n_train]:
        e = int(r["epoch"])
        w, s = (1, 1) if e < 5 else (2, 1)
        out.append(EpochRecord("job1", "training", e, w, s, float(r["train_loss"]), float(r["loss"]),
                               float(r["seconds"]), 4000, 4000 / float(r["seconds"]), 0.02))
    return out


def test_progress_counts_tuning_as_a_fraction_of_an_epoch():
    """Recorded by a Coach before 2026-11-26 (`first_sample` -1): tuning drew its own samples,
    before training epoch 1. Now it trains epoch 1's head, and epoch 1 ends at 1."""
    p = progress_of(records(3))
    assert p[:4] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert p[4:] == pytest.approx([1.4, 2.4, 3.4])
    head = [replace(r, first_sample=400 * (r.epoch - 1)) for r in records(3)[:4]]
    rest = replace(records(3)[4], samples=4000 - 1600, first_sample=1600)
    p = progress_of(head + [rest] + records(3)[5:])
    assert p == pytest.approx([0.1, 0.2, 0.3, 0.4, 1.0, 2.0, 3.0])


@pytest.mark.parametrize("with_models", [True, False], ids=["fitted", "no-models"])
def test_plot_job_writes_a_png(tmp_path, with_models):
    recs = records()
    fit = speed = None
    if with_models:
        train = [r for r in recs if r.phase == "training"]
        fit = fit_convergence(progress_of(recs), [r.val_loss for r in recs])
        speed = fit_speed([SpeedSample(r.workers, r.servers, r.samples_per_s, 64 * r.workers) for r in recs])
        assert train
    out = plot_job(tmp_path / "sub" / "job.png", recs, target=0.45, fit=fit, speed=speed)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_unreachable_target_is_drawn(tmp_path):
    recs = records()
    fit = fit_convergence(progress_of(recs), [r.val_loss for r in recs])
    out = plot_job(tmp_path / "job.png", recs, target=0.01, fit=fit, speed=None)
    assert out.exists()


@pytest.mark.parametrize(("target", "why"), [(0.3, "the target is at or below it"),
                                             (0.51, "the target is beyond the horizon")])
def test_an_unreachable_label_says_why(tmp_path, monkeypatch, target: float, why: str):
    """A target above the asymptote read "unreachable: asymptote 0.0588" beside "target 0.06"."""
    recs = [EpochRecord("job1", "training", k, 1, 1, 1.0, 1 / (0.01 * k + 1) + 0.5, 1.0, 400, 400.0, 0.01)
            for k in range(1, 13)]   # falls for good, but needs about 9,900 epochs to get within 0.01 of 0.5
    labels = _loss_labels(tmp_path, monkeypatch, recs, target)
    assert any(label.startswith("unreachable: asymptote") and label.endswith(why) for label in labels), labels


@pytest.fixture
def stored_job(tmp_path, monkeypatch):
    """A job with recorded epochs in a fresh state store, for the `coach plot` command."""
    from coach.state.store import Store

    monkeypatch.setenv("COACH_HOME", str(tmp_path / "home"))
    store = Store()
    spec = {"dataset": {"name": "mnist-5k"}, "batch_size": 64, "consecutive": 3}   # 4000 training samples
    store.create_job("job1", "job", "x.yaml", spec, 0.45, 1.0)
    for r in records(8):
        store.record_epoch(r)
    return store


def test_plot_places_tuning_where_the_job_loop_fitted_it(tmp_path, monkeypatch):
    """Before any training epoch, a mini-epoch counts its share of the training split, as in
    the job loop; not the largest mini-epoch as a whole epoch (1, 2, 3 before)."""
    from coach.data import train_size
    from coach.state.store import Store

    monkeypatch.setenv("COACH_HOME", str(tmp_path / "home"))
    store = Store()
    store.create_job("job1", "job", "x.yaml", {"dataset": {"name": "digits"}, "batch_size": 64}, 0.45, 1.0)
    for i, loss in enumerate([1.9, 1.2, 0.8], start=1):
        store.record_epoch(EpochRecord("job1", "tuning", i, i, 1, loss + 0.1, loss, 2.0, 1024, 500.0, 0.001))
    [points] = [line for line in _plot_command(tmp_path, monkeypatch).axes[0].get_lines()
                if line.get_label() == "tuning mini-epochs"]
    n = train_size("digits", {})
    assert list(points.get_xdata()) == pytest.approx([1024 / n, 2048 / n, 3072 / n])


@pytest.mark.parametrize(
    ("output", "written", "error"),
    [
        ("job", "job.png", None),
        (None, "job1.png", None),   # named by the job: one job's plot does not overwrite another's
        ("job.svg", "job.svg", None),
        ("job.xyz", None, "-o: cannot write '.xyz' files"),
        (".", None, "is a folder"),
        ("/proc/nope/job.png", None, "-o: /proc/nope is not a folder this user can write to"),
        # a typo in the folder made it silently (`cluster simulate --plot` refused it)
        ("nowhere/job.png", None, "nowhere is not a folder this user can write to"),
        (".png", None, "-o: .png has no name before its suffix"),   # wrote .png.png
        ("/dev/null", None, "-o: /dev/null is not a regular file"),   # wrote a new file /dev/null.png
        ("made", None, "-o: made.png is not a regular file"),   # a folder named as the plot would be
        ("-", None, "-o: a plot is written to a file, not to standard output"),   # wrote -.png (helper-30)
        ("x.png.", None, "-o: x.png. ends with a dot"),   # wrote x.png..png (helper-32)
    ],
)
def test_plot_command_output_paths(tmp_path, stored_job, monkeypatch, output, written, error):
    import typer
    from typer.testing import CliRunner

    from coach.cli.plot import plot
    from coach.errors import CoachError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "made.png").mkdir()
    app = typer.Typer()
    app.command()(plot)
    if error is None:
        result = CliRunner().invoke(app, ["job1", *(["-o", output] if output else [])], catch_exceptions=False)
        assert result.exit_code == 0 and result.output.strip() == written and (tmp_path / written).stat().st_size
    else:
        with pytest.raises(CoachError, match=error):
            CliRunner().invoke(app, ["job1", "-o", output], catch_exceptions=False)


@pytest.mark.parametrize("edit", [
    {"dataset": "mnist-5k"},                  # AttributeError
    {"dataset": {"name": "foo"}},             # KeyError
    {"batch_size": "abc"},                    # ValueError
    {"max_workers": [], "max_servers": 2},    # TypeError
])
def test_a_recorded_spec_edited_by_hand_is_named_not_a_traceback(tmp_path, stored_job, monkeypatch, edit):
    import json
    import sqlite3

    import typer
    from typer.testing import CliRunner

    from coach.cli.plot import plot
    from coach.errors import StateError

    spec = dict(stored_job.spec("job1"), **edit)
    with sqlite3.connect(stored_job.path) as c:
        c.execute("UPDATE jobs SET spec_json = ? WHERE job_id = 'job1'", (json.dumps(spec),))
    monkeypatch.chdir(tmp_path)
    app = typer.Typer()
    app.command()(plot)
    with pytest.raises(StateError, match="job job1: spec_json: cannot be read back .*edited or damaged"):
        CliRunner().invoke(app, ["job1"], catch_exceptions=False)


def test_plot_draws_the_earlier_run_the_eta_asked(tmp_path, monkeypatch):
    from coach.state.store import Store

    monkeypatch.setenv("COACH_HOME", str(tmp_path / "home"))
    store = Store()
    spec = {"model": {"name": "mlp"}, "dataset": {"name": "mnist-5k"}, "batch_size": 64, "consecutive": 3}
    store.create_job("job0", "job", "x.yaml", spec, 0.45, 1.0)   # the same configuration, run before
    for r in records(20):
        store.record_epoch(EpochRecord("job0", r.phase, r.epoch, r.workers, r.servers, r.train_loss, r.val_loss,
                                       r.duration_s, r.samples, r.samples_per_s, r.cost))
    store.update_job("job0", status="succeeded")
    store.create_job("job1", "job", "x.yaml", spec, 0.45, 1.0)
    for r in records(6):
        store.record_epoch(r)
    labels = [t.get_text() for t in _plot_command(tmp_path, monkeypatch).axes[0].get_legend().get_texts()]
    assert any(label.startswith("earlier run job0 at pace") for label in labels), labels


@pytest.mark.parametrize(("batch", "marked"), [(64, True), (32, False)])
def test_the_speed_panel_marks_what_earlier_jobs_measured(tmp_path, monkeypatch, batch: int, marked: bool):
    """The surface is the one the job's planner used, earlier jobs' speeds included (`speeds_before`):
    the configurations only they measured are marked apart; a job of another batch counts for nothing."""
    from coach.state.store import Store

    monkeypatch.setenv("COACH_HOME", str(tmp_path / "home"))
    store = Store()
    spec = {"model": {"name": "mlp"}, "dataset": {"name": "mnist-5k"}, "batch_size": 64, "consecutive": 3}
    store.create_job("job0", "job", "x.yaml", dict(spec, batch_size=batch), 0.45, 1.0)
    store.record_epoch(EpochRecord("job0", "training", 1, 3, 2, 2.0, 1.9, 1.0, 4000, 500.0, 0.01))
    store.update_job("job0", status="succeeded")
    store.create_job("job1", "job", "x.yaml", spec, 0.45, 1.0)
    for r in records(6):
        store.record_epoch(r)
    speed_axes = _plot_command(tmp_path, monkeypatch).axes[2]
    labels = [t.get_text() for t in speed_axes.get_legend().get_texts()]
    assert labels == ["measured", "measured by earlier jobs"] if marked else ["measured"], labels
    assert speed_axes.get_xlim()[1] == (5.5 if marked else 4.5)   # drawn past (3, 2) too


def _plot_command(tmp_path, monkeypatch):
    """`coach plot job1`, run in-process; the figure it drew."""
    import typer
    from typer.testing import CliRunner

    from coach.cli.plot import plot
    from coach.report import plots

    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)
    app = typer.Typer()
    app.command()(plot)
    result = CliRunner().invoke(app, ["job1", "-o", str(tmp_path / "job.png")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return figures[0]


def _loss_labels(tmp_path, monkeypatch, recs, target):
    from coach.report import plots

    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)
    fit = fit_convergence(progress_of(recs), [r.val_loss for r in recs])
    plot_job(tmp_path / "job.png", recs, target=target, fit=fit, speed=None)
    return [t.get_text() for t in figures[0].axes[0].get_legend().get_texts()]


@pytest.mark.parametrize(
    ("n_train", "tuning_samples", "target", "expected"),
    [
        (20, 400, 0.85, "stop rule met at training epoch 20"),        # epochs 18-20 ≤ 0.85: it stopped there
        (19, 400, 0.85, "stop rule predicted at training epoch 20"),  # 18 and 19 ≤ 0.85: one more epoch
        (15, 400, 0.85, "stop rule predicted at training epoch"),     # nothing under the target yet
        # four mini-epochs of a quarter epoch each put training epoch 19 at progress 20: the label
        # still counts training epochs, as `coach status` does (it read "epoch 21" before)
        (19, 1000, 0.85, "stop rule predicted at training epoch 20"),
    ],
    ids=["met", "two-in-a-row", "none-yet", "after-a-whole-epoch-of-tuning"],
)
def test_loss_panel_counts_the_epochs_already_under_the_target(tmp_path, monkeypatch, n_train, tuning_samples,
                                                              target, expected):
    labels = _loss_labels(tmp_path, monkeypatch, records(n_train, tuning_samples), target)
    assert any(label.startswith(expected) for label in labels), labels
    assert sum("stop rule" in label for label in labels) == 1, labels


def test_the_interval_stops_at_max_epochs_as_the_eta_does(tmp_path, monkeypatch):
    """`coach status` bounds its prediction by what max_epochs leaves; the plot did not, and drew
    "80% interval [6, 44]" for a job of max_epochs 25."""
    from coach.report import plots

    recs = records(15)
    fit = fit_convergence(progress_of(recs), [r.val_loss for r in recs])
    unbounded = fit.epochs_to_target(0.6, 3, start=15)
    assert unbounded.hi is not None and unbounded.hi > 35, unbounded   # the case: an upper end past it

    def interval(max_epochs: int | None) -> str:
        figures = []
        monkeypatch.setattr(plots.plt, "close", figures.append)
        plot_job(tmp_path / "job.png", recs, target=0.6, fit=fit, speed=None, max_epochs=max_epochs)
        labels = [t.get_text() for t in figures[0].axes[0].get_legend().get_texts()]
        return next(label for label in labels if label.startswith("80% interval"))

    assert not interval(None).endswith("never]")
    assert interval(35).endswith(", never]")


@pytest.mark.parametrize(("losses", "target", "scale"), [
    ([4.5, 2.0, 1.2, 0.8, 0.5, 0.4], 0.06, "log"),     # the target far under the losses (it was linear)
    ([4.5, 2.0, 1.2, 0.8, 0.5, 0.4], 0.3, "linear"),   # all within a factor of 15 (log from 20)
    ([2.0, 0.05, 0.04, 0.03], 0.03, "log"),
])
def test_the_loss_axis_is_logarithmic_when_the_losses_and_target_span_a_decade(tmp_path, monkeypatch, losses,
                                                                               target, scale):
    from coach.report import plots

    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)
    recs = [EpochRecord("job1", "training", e, 1, 1, loss, loss, 1.0, 400, 400.0, 0.01)
            for e, loss in enumerate(losses, start=1)]
    plot_job(tmp_path / "job.png", recs, target=target, fit=None, speed=None)
    assert figures[0].axes[0].get_yscale() == scale


def test_a_plateau_is_labelled_as_one(tmp_path, monkeypatch):
    noise = np.random.default_rng(1).normal(0, 0.002, 12)
    recs = [EpochRecord("job1", "training", e, 1, 1, 2.3 + n, 2.3 + n, 1.0, 400, 400.0, 0.01)
            for e, n in enumerate(noise, start=1)]   # stuck at chance level, training loss too
    labels = _loss_labels(tmp_path, monkeypatch, recs, target=0.5)
    assert any(label.startswith("fit: flat at 2.3") for label in labels), labels


def test_workers_and_servers_are_drawn_over_the_epoch_they_ran(tmp_path, monkeypatch):
    """Each point sits at its epoch's end, so its (w, s) spans the progress up to it: drawn from
    there on ("post"), an epoch showed the next epoch's (w, s)."""
    from coach.report import plots

    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)
    recs = [EpochRecord("job1", "training", e, w, s, 1.0, 1.0 / e, 5.0, 4000, 800.0, 0.02)
            for e, (w, s) in enumerate([(1, 1), (2, 1), (2, 2), (1, 2)], start=1)]
    plot_job(tmp_path / "job.png", recs, target=0.1, fit=None, speed=None)
    ax = next(a for a in figures[0].axes if a.get_title() == "workers and servers per epoch")
    drawn = {line.get_label(): line for line in ax.get_lines()}
    for label, role in (("workers w", "workers"), ("servers s", "servers")):
        xs, ys = (np.asarray(v, dtype=float) for v in drawn[label].get_path().vertices.T)
        # the drawn path's horizontal pieces (x from, x to, y)
        flat = [(xs[i], xs[i + 1], ys[i]) for i in range(len(xs) - 1) if ys[i] == ys[i + 1] and xs[i] < xs[i + 1]]
        for e, r in enumerate(recs, start=1):   # the middle of epoch e: progress e − ½
            assert {y for a, b, y in flat if a < e - 0.5 < b} == {getattr(r, role)}, (label, e, flat)


@pytest.mark.parametrize(("limits", "shown"), [((2, 2), (2, 2)), ((8, 4), (4, 3)), (None, (4, 3))])
def test_the_speed_surface_stops_at_the_job_limits(tmp_path, monkeypatch, limits, shown):
    """Drawn a little past the (w, s) measured (here up to (2, 2)), but never past the job's
    max_workers / max_servers: the planner never goes there, a colour there only misleads."""
    from coach.state.store import Store

    monkeypatch.setenv("COACH_HOME", str(tmp_path / "home"))
    store = Store()
    spec = {"dataset": {"name": "mnist-5k"}, "batch_size": 64, "consecutive": 3}
    if limits:
        spec.update(max_workers=limits[0], max_servers=limits[1])
    store.create_job("job1", "job", "x.yaml", spec, 0.45, 1.0)
    for r in records(8):
        store.record_epoch(r)
    ax = next(a for a in _plot_command(tmp_path, monkeypatch).axes if a.get_title().startswith("speed model"))
    [surface] = ax.get_images()
    assert surface.get_array().shape == (shown[1], shown[0])


def near_the_target() -> list[EpochRecord]:
    """Four mini-epochs of 0.128 epochs, then six epochs just above a target of 0.14."""
    tuning = [EpochRecord("job1", "tuning", i, 1, 1, 2.0, 2.0 - 0.2 * i, 1.0, 128, 100.0, 0.01) for i in range(1, 5)]
    return tuning + [EpochRecord("job1", "training", k, 1, 1, v + 0.05, v, 1.0, 1000, 100.0, 0.01)
                     for k, v in enumerate([0.5, 0.3, 0.22, 0.18, 0.16, 0.146], start=1)]


@pytest.mark.parametrize("recs, target", [(near_the_target(), 0.14), (records(10, 1000), 0.85),
                                          (records(12, 400), 0.8)], ids=["near-the-target", "far", "farther"])
def test_the_plot_predicts_what_status_does(tmp_path, monkeypatch, recs, target):
    """Near the target, the plot said "training epoch 8, [8, 9]" after epoch 6 while the ETA said 3
    epochs: with none under the target yet, 3 in a row cannot end before epoch 9. It rounded the
    mini-epochs' fractions its own way and did not keep the rule's epochs in a row."""
    from coach.estimate import eta
    from coach.estimate.progress import streak_of

    n_train = recs[-1].epoch
    progress = progress_of(recs)
    fit = fit_convergence(progress, [r.val_loss for r in recs])
    e = eta(fit, target, 3, epochs_done=progress[-1], epoch_seconds=1.0, streak=streak_of(recs, target))
    labels = _loss_labels(tmp_path, monkeypatch, recs, target)
    assert f"stop rule predicted at training epoch {n_train + e.epochs_left}" in labels, labels
    hi = "never" if e.hi is None else n_train + e.hi
    assert f"80% interval [{n_train + e.lo}, {hi}]" in labels, labels


def test_the_fit_is_drawn_solid_only_over_the_points_it_was_fitted_to(tmp_path, monkeypatch):
    """The fit weighs the recent half; run backwards over the head, LeNet's curve read 2× its first
    epochs' losses and looked like a bad fit of them, and it set the scale (up to 1.45 over losses
    of 0.13–0.25). Drawn dotted there, and the scale is the data's."""
    from coach.report import plots

    k = np.arange(1, 13, dtype=float)
    head = np.array([0.9, 0.5, 0.35, 0.3, 0.27])   # a fast head, then the tail of 1/(k + 2) + 0.1
    losses = np.concatenate([head, 1.0 / (k[5:] + 2.0) + 0.1])
    recs = [EpochRecord("job1", "training", int(e), 1, 1, v, v, 1.0, 400, 400.0, 0.01) for e, v in zip(k, losses)]
    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)
    fit = fit_convergence(k, losses)
    assert fit.fitted_from == 6.0   # the recent half of 12 epochs
    plot_job(tmp_path / "job.png", recs, target=0.15, fit=fit, speed=None)
    ax = figures[0].axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    solid = next(line for label, line in lines.items() if label.startswith("fit 1/"))
    assert solid.get_label().endswith("to the points from 6 on"), solid.get_label()
    assert solid.get_xdata().min() == pytest.approx(6.0, abs=0.05) and solid.get_linestyle() == "-"
    dotted = lines["the same curve before them (not fitted)"]
    assert dotted.get_xdata().max() <= 6.0 and dotted.get_linestyle() == ":"
    assert fit.predict(0.1) > 1.2 * losses.max()   # the curve run back rises far above the points ...
    low, high = ax.get_ylim()
    assert high < 1.1 * losses.max() and low < 0.15   # ... and is clipped: the points and the target set the scale


@pytest.mark.parametrize("tuning_loss, off_axis", [(1.176, True), (0.2, False)], ids=["far-above", "within"])
def test_a_tuning_loss_far_above_the_epochs_is_marked_at_the_top_edge(tmp_path, monkeypatch, tuning_loss, off_axis):
    """The demo's (2, 1) mini-epoch read 1.18 and set the scale: its 8 epochs, 0.13-0.25, took the
    bottom tenth of the panel. Above the axis it is marked at the top edge with its loss written."""
    from coach.report import plots

    losses = [0.2526, 0.1892, 0.1396, 0.1569, 0.1611, 0.1256, 0.1272, 0.1296]   # the demo's epochs
    recs = [EpochRecord("job1", "tuning", 1, 2, 1, 2.0, tuning_loss, 1.5, 1024, 974.0, 0.0001)]
    recs += [EpochRecord("job1", "training", e, 2, 2, v, v, 5.0, 4000, 950.0, 0.0002)
             for e, v in enumerate(losses, start=1)]
    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)
    plot_job(tmp_path / "job.png", recs, target=0.15, fit=None, speed=None)
    ax = figures[0].axes[0]
    low, high = ax.get_ylim()
    lines = {line.get_label(): line for line in ax.get_lines()}
    if off_axis:
        assert high < 0.3 and low < 0.125, (low, high)   # the epochs and the target set the scale
        edge = lines["tuning mini-epochs above the axis (loss written)"]
        assert list(edge.get_ydata()) == [high] and "tuning mini-epochs" not in lines
        assert [t.get_text() for t in ax.texts] == ["1.18"]
    else:   # under the highest epoch: drawn where it is
        assert list(lines["tuning mini-epochs"].get_ydata()) == [0.2] and not ax.texts
        assert "tuning mini-epochs above the axis (loss written)" not in lines
