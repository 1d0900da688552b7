"""`coach estimate`: recovers generated curves, says when a target is unreachable, rejects bad CSV."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from coach.cli.estimate import estimate
from coach.errors import SpecError
from tests.conftest import ROOT

app = typer.Typer()
app.command("estimate")(estimate)


@app.callback()
def _root() -> None:
    """Throwaway root so `estimate` is a subcommand, as in coach/cli/main.py."""


def write_curve(tmp_path: Path, epochs, losses, header: str | None = "epoch,loss") -> Path:
    path = tmp_path / "curve.csv"
    lines = ([header] if header else []) + [f"{e},{l:.8f}" for e, l in zip(epochs, losses)]
    path.write_text("\n".join(lines) + "\n")
    return path


def run(*args: str) -> dict:
    result = CliRunner().invoke(app, ["estimate", *args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize(
    ("b", "target", "crossing"),
    [
        pytest.param((0.5, 1.0, 0.1), 0.205, 18, id="b0.5-b1-1-b2-0.1"),
        pytest.param((0.1, 0.5, 0.5), 1.01, 15, id="slow"),
        pytest.param((1.0, 0.0, 0.02), 0.05, 34, id="b1-zero"),
    ],
)
def test_recovers_generated_curve(tmp_path, b, target, crossing):
    k = np.arange(1, 41)
    out = run(str(write_curve(tmp_path, k, 1 / (b[0] * k + b[1]) + b[2])), "--target", str(target))
    assert out["reachable"] is True
    assert out["epochs_to_target"] == crossing
    assert out["interval"][0] <= crossing <= out["interval"][1]
    assert out["asymptote"] == pytest.approx(b[2], abs=1e-4)
    # every coefficient comes back, not the asymptote only: l(e) = 1/(b0·e + b1) + b2
    assert [out["fit"][n] for n in ("b0", "b1", "b2")] == pytest.approx(b, abs=1e-3)


def test_coefficients_are_in_the_files_epoch_numbers(tmp_path):
    k = np.arange(1, 21)   # written as epochs 0..19: 1/(0.5·k + 1) = 1/(0.5·e + 1.5)
    out = run(str(write_curve(tmp_path, k - 1, 1 / (0.5 * k + 1.0) + 0.1)), "--target", "0.15")
    assert [out["fit"][n] for n in ("b0", "b1", "b2")] == pytest.approx((0.5, 1.5, 0.1), abs=1e-3)


def test_consecutive_counts_the_stop_rule(tmp_path):
    k = np.arange(1, 41)
    path = str(write_curve(tmp_path, k, 1 / (0.5 * k + 1.0) + 0.1))
    assert run(path, "--target", "0.205", "--consecutive", "3")["epochs_to_target"] == 20


def test_file_counting_from_zero_keeps_its_numbering(tmp_path):
    k = np.arange(1, 16)
    path = str(write_curve(tmp_path, k - 1, 1 / (0.5 * k + 1.0) + 0.1))   # epochs 0..14 of the curve below
    out = run(path, "--target", "0.205")
    assert out["epochs_to_target"] == 17
    # the note counts as the answer does (it said the interval in the fit's numbering, one higher)
    assert out["note"] == f"80% interval [{out['interval'][0]}, {out['interval'][1]}]"
    # and the file's own rows are named as it numbers them: a row at 0.5 is not "epoch 0"
    path = write_curve(tmp_path, [0.5, 1.0, 1.5, 2.0], [0.2, 0.15, 0.12, 0.1])
    assert run(str(path), "--target", "0.16")["epochs_to_target"] == 1
    assert run(str(path), "--target", "0.2")["interval"] == [0.5, 0.5]


def test_a_file_that_starts_a_new_curve_late_is_told_why_it_does_not_fit(tmp_path):
    """Epochs 100-109 falling as a new curve (after a drop of the learning rate, say) were fitted
    flat above the last three losses and read unreachable without a word (review, session 41).
    Counted from the start of training they cannot be followed; renumbered from 1 they are."""
    k = np.arange(1, 11)
    late = run(str(write_curve(tmp_path, k + 99, 1 / (0.5 * k + 1.0) + 0.1)), "--target", "0.25")
    assert not late["reachable"] and late["note"].startswith("the fit runs above the last losses: "), late
    assert "renumber its rows from 1" in late["note"]
    assert run(str(write_curve(tmp_path, k, 1 / (0.5 * k + 1.0) + 0.1)), "--target", "0.25")["epochs_to_target"] == 12
    # an excerpt of a curve counted from epoch 1 is followed, and nothing is said
    k = np.arange(11, 31)
    excerpt = run(str(write_curve(tmp_path, k, 1 / (0.5 * k + 1.0) + 0.1)), "--target", "0.151")
    assert excerpt["epochs_to_target"] == 38 and "renumber" not in excerpt["note"]


def test_noisy_curve(tmp_path):
    rng = np.random.default_rng(11)
    k = np.arange(1, 31)
    y = 1 / (0.3 * k + 1.0) + 0.2 + rng.normal(0, 0.01, k.size)
    y[12] += 0.5
    # the first 20 rows, spike included: the noise-free curve crosses 0.3 at epoch 30
    out = run(str(write_curve(tmp_path, k[:20], y[:20], header=None)), "--target", "0.3")
    assert out["reachable"] and abs(out["epochs_to_target"] - 30) <= 3
    # all 30 rows: the noisy losses first got there at epoch 25, and the file says so
    assert run(str(write_curve(tmp_path, k, y, header=None)), "--target", "0.3")["epochs_to_target"] == 25


@pytest.mark.parametrize(
    ("rows", "target", "consecutive", "expected"),
    [
        pytest.param(None, 1.0, 1, (11, 11, 11), id="met-in-the-file"),
        pytest.param(None, 1.5, 3, (9, 9, 9), id="met-3-in-a-row"),
        pytest.param(None, 0.3, 1, (29, 29, 29), id="met-at-the-last-rows"),
        pytest.param(15, 0.5, 1, (19, 16, None), id="ahead-of-the-rows"),   # the file meets it at 19
    ],
)
def test_the_answer_is_never_before_the_rows_that_do_not_meet_the_target(tmp_path, rows, target, consecutive,
                                                                          expected):
    """A recorded run (bench/curves/digits_mlp_sgd_lr0.01.csv). Where its rows meet the stop rule
    that epoch is the answer; otherwise the prediction starts after the last row. Before, the fit
    (weighted to the recent rows) was followed from epoch 1: target 1.0 came out as epoch 3,
    where the loss was 1.91."""
    lines = (ROOT / "bench" / "curves" / "digits_mlp_sgd_lr0.01.csv").read_text().splitlines()
    path = tmp_path / "curve.csv"
    path.write_text("\n".join(lines[:rows + 1] if rows else lines) + "\n")
    out = run(str(path), "--target", str(target), "--consecutive", str(consecutive))
    epoch, lo, hi = expected
    assert out["reachable"] and out["epochs_to_target"] == epoch
    if hi is not None:
        assert out["interval"] == [lo, hi]
    else:   # predicted: an interval around it, all of it after the rows
        assert lo <= out["interval"][0] <= epoch <= out["interval"][1]


def test_non_converging_curve_is_unreachable(tmp_path):
    rng = np.random.default_rng(2)
    k = np.arange(1, 31)
    out = run(str(write_curve(tmp_path, k, 2.3 + rng.normal(0, 0.02, k.size))), "--target", "0.2")
    assert out == {"epochs_to_target": None, "interval": [None, None], "asymptote": out["asymptote"],
                   "reachable": False, "note": out["note"], "fit": {"b0": 0.0, "b1": None, "b2": out["asymptote"]},
                   "read": {"column": "loss", "epochs": 30, "train_column": None, "rows_skipped": 0}}
    assert out["asymptote"] > 0.2 and "at or below the fitted asymptote" in out["note"]   # says why


@pytest.mark.parametrize(("losses", "rises"), [
    pytest.param([0.5, 0.6, 0.7, 0.8, 0.9], "the loss rises (0.5 at epoch 1, 0.9 at epoch 5)", id="diverging"),
    pytest.param([0.9, 0.5, 0.45, 0.5, 0.6, 0.7, 0.8], "the loss rises (0.45 at epoch 3, 0.8 at epoch 7)",
                 id="overfitting"),
    pytest.param([0.7] * 6, None, id="constant"),   # polyfit's slope of 1e-17 read as a rise
    pytest.param([1.0, 0.9, 0.8, 0.7, 0.8, 0.9], None, id="up-in-its-last-3-only"),
    pytest.param([1.0, 1.02, 0.99, 1.01, 1.03, 1.0], None, id="flat-within-its-noise"),
    pytest.param([1.0, 0.9, 0.99, 0.95, 1.01, 1.02], None, id="up-at-the-end-within-its-noise"),
])
def test_an_unreachable_target_says_when_the_loss_rises(tmp_path, losses: list[float], rises: str | None) -> None:
    # the fit of a curve that only falls is flat on a rising one, and said only that the target
    # was below it ("flat at 0.7" for losses from 0.5 up to 0.9)
    out = run(str(write_curve(tmp_path, range(1, len(losses) + 1), losses)), "--target", "0.2")
    assert out["reachable"] is False and "at or below the fitted asymptote" in out["note"]
    if rises is None:
        assert "rises" not in out["note"], out["note"]
    else:
        assert out["note"].startswith(rises + ": overfitting or diverging"), out["note"]


@pytest.mark.parametrize(("consecutive", "reachable", "note"), [
    (3, True, "met in the file at epoch 5"),
    # under the target from epoch 3 on: the rule's run in a row is not held against the horizon (it
    # said "falls too slowly: it would reach 0.2 only after 104 epochs" for a curve there at epoch 5)
    (100, False, "crosses 0.2 at epoch 5, but with the observed noise 100 epochs in a row under it are not "
                 "expected within the horizon of 199"),
])
def test_a_long_run_in_a_row_is_told_apart_from_a_slow_curve(tmp_path, consecutive: int, reachable: bool,
                                                             note: str) -> None:
    path = tmp_path / "under.csv"
    path.write_text("epoch,loss\n1,1\n2,0.5\n3,0.1\n4,0.09\n5,0.08\n")
    out = run(str(path), "--target", "0.2", "--consecutive", str(consecutive))
    assert out["reachable"] is reachable and note in out["note"]


def test_table_without_json(tmp_path):
    k = np.arange(1, 41)
    path = write_curve(tmp_path, k, 1 / (0.5 * k + 1.0) + 0.1)
    result = CliRunner().invoke(app, ["estimate", str(path), "--target", "0.205"])
    assert result.exit_code == 0 and "epochs to target" in result.output and "18" in result.output


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param("epoch,loss\n1,1.0\n2,0.8\n3,abc\n", "line 4: loss: not a number: 'abc'", id="bad-loss"),
        pytest.param("epoch,loss\n1,1.0\nx,0.8\n3,0.5\n", "line 3: epoch: not a number: 'x'", id="bad-epoch"),
        # Python's float() reads a digit separator: epochs 20 and 30 without a word
        pytest.param("epoch,loss\n1,1.0\n2_0,0.8\n3_0,0.5\n", "line 3: epoch: not a number: '2_0'",
                     id="underscore"),
        pytest.param("epoch,loss\n1,1.0\n2\n3,0.5\n", "line 3: loss: missing", id="missing-column"),
        pytest.param("epoch,loss\n1,1.0\n1,0.8\n2,0.5\n", "line 3: epoch: epochs must increase", id="not-increasing"),
        pytest.param("epoch,loss\n-1,1.0\n0,0.8\n1,0.5\n2,0.4\n", "line 2: epoch: must be between 0 and 1,000,000,000, "
                     "got -1", id="negative-epoch"),   # was fitted as epochs 1, 2, 3, 4
        # read as "flat at 0.55" though the losses fell; 1e308 printed a 309-digit epoch (helper-30)
        pytest.param("epoch,loss\n1e306,1.0\n2e306,0.7\n3e306,0.5\n", "line 2: epoch: must be between 0 and 1,000,000,000, "
                     "got 1e+306", id="huge-epoch"),
        pytest.param("epoch,loss\n1,1.0\n2,-0.8\n3,0.5\n", "line 3: loss: must be ≥ 0", id="negative"),
        pytest.param("step,value\n1,1.0\n", "line 1: header must name", id="bad-header"),
        # it said line 1 for a header after comments and blank lines
        pytest.param("# x\n\nstep,val_loss\n1,1\n", "line 3: header must name", id="bad-header-after-comments"),
        # a cell more than the columns was dropped without a word, and so was a second 'epoch'
        pytest.param("epoch,loss\n1,1.0,0.9\n2,0.8\n3,0.5\n",
                     "line 2: 3 cells, but the header names 2 columns", id="extra-cell"),
        pytest.param("1,1.0\n2,0.8,x\n3,0.5\n", "line 2: 3 cells, but without a header a line is 'epoch,loss'",
                     id="extra-cell-no-header"),
        pytest.param("epoch,epoch,loss\n1,1,1.0\n", "line 1: header names the column 'epoch' twice", id="twice"),
        pytest.param("epoch,loss\n1,1.0\n2,0.5\n", "need at least 3 rows", id="too-short"),
        pytest.param("", "no rows", id="empty"),
        # a million rows took 57 s and 830 MB with no word; the header is not a row
        pytest.param("epoch,loss\n" + "".join(f"{k},{1 / k}\n" for k in range(1, 100_002)),
                     "line 100002: more than 100000 rows", id="too-long"),
    ],
)
def test_bad_csv_raises_spec_error_naming_line_and_field(tmp_path, content, message):
    path = tmp_path / "curve.csv"
    path.write_text(content)
    with pytest.raises(SpecError) as err:
        CliRunner().invoke(app, ["estimate", str(path), "--target", "0.2"], catch_exceptions=False)
    assert str(err.value) == f"{path}: {message}" or str(err.value).startswith(f"{path}: {message}")
    assert err.value.exit_code == 2


def test_coach_s_own_column_names_are_read(tmp_path):
    """`coach history --json` names the validation loss `val_loss`: a curve written from it was
    refused for its header. A spreadsheet's empty cell at a line's end is not a cell."""
    rows = "1,1.0,1.2,\n2,0.6,0.7\n3,0.45,0.5\n4,0.38,0.4\n"
    ours, plain = tmp_path / "history.csv", tmp_path / "plain.csv"
    ours.write_text("epoch,val_loss,train_loss\n" + rows)
    plain.write_text("epoch,loss,train_loss\n" + rows.replace(",\n", "\n"))
    a, b = run(str(ours), "--target", "0.2"), run(str(plain), "--target", "0.2")
    assert a.pop("read") == {"column": "val_loss", "epochs": 4, "train_column": "train_loss", "rows_skipped": 0}
    assert b.pop("read")["column"] == "loss" and a == b


def test_missing_file_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        CliRunner().invoke(app, ["estimate", str(tmp_path / "nope.csv"), "--target", "0.2"], catch_exceptions=False)


@pytest.mark.parametrize(("which", "said"), [("device", "larger than 16 MiB"), ("folder", "a folder, not a curve file"),
                                             ("loop", "cannot be looked up: Too many levels of symbolic links")])
def test_a_file_that_is_not_a_curve_is_refused_without_reading_it_all(tmp_path, which, said):
    """/dev/zero was read until the memory ran out (a pipe, `<(cmd)`, is read like a file)."""
    path = {"device": Path("/dev/zero"), "folder": tmp_path, "loop": tmp_path / "loop.csv"}[which]
    if which == "loop":   # it read "no such file"
        path.symlink_to(path)
    good = write_curve(tmp_path, np.arange(1, 11, dtype=float), 1 / (0.5 * np.arange(1, 11) + 1) + 0.1)
    for args in ([str(path)], [str(good), "--earlier", str(path)]):
        with pytest.raises(SpecError, match=f"{re.escape(str(path))}: {said}"):
            CliRunner().invoke(app, ["estimate", *args, "--target", "0.2"], catch_exceptions=False)


def test_a_curve_can_come_from_a_pipe(tmp_path):
    read, write = os.pipe()
    os.write(write, b"epoch,loss\n1,1.0\n2,0.8\n3,0.7\n4,0.65\n")
    os.close(write)
    assert run(f"/dev/fd/{read}", "--target", "0.66")["reachable"]
    os.close(read)


@pytest.mark.parametrize("target", ["0", "-1", "nan", "inf"])
def test_target_must_be_a_positive_finite_number(tmp_path, target):
    path = write_curve(tmp_path, np.arange(1, 11, dtype=float), 1 / (0.5 * np.arange(1, 11) + 1) + 0.1)
    with pytest.raises(SpecError, match="--target: must be a finite number > 0") as err:
        CliRunner().invoke(app, ["estimate", str(path), "--target", target], catch_exceptions=False)
    assert err.value.exit_code == 2


def test_byte_order_mark_is_not_part_of_the_header(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbfepoch,loss\n1,1.0\n2,0.8\n3,0.7\n4,0.65\n")
    assert run(str(path), "--target", "0.66")["reachable"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param("epoch,loss\n".encode("utf-16"), "not a UTF-8 text file", id="utf-16"),
        # both were tracebacks (csv.Error), or read whole into memory first
        pytest.param(b"x" * 200_000 + b"\n", "not CSV of 'epoch,loss' lines: field larger than field limit",
                     id="a-line-of-200-KB"),
        pytest.param(b"#" * (16 * 2**20 + 1), "larger than 16 MiB", id="over-16-MiB"),
        # the cut at 16 MiB split a character: it said "not a UTF-8 text file"
        pytest.param("é".encode() * (9 * 2**20), "larger than 16 MiB", id="over-16-MiB-of-two-byte-letters"),
        pytest.param(b"epoch,loss\n1,1e308\n2,1e307\n3,1e306\n4,1e305\n",
                     "loss: values too large to fit a curve to (the largest is 1e+308)", id="huge"),
        # the scipy error for these was a ValueError: a traceback
        pytest.param(b"epoch,loss\n1,1.7e308\n2,1.6e308\n3,1.5e308\n4,1.4e308\n5,1.3e308\n",
                     "loss: values too large", id="huger"),
    ],
)
def test_unusable_files_name_the_problem(tmp_path, content, message):
    path = tmp_path / "curve.csv"
    path.write_bytes(content)
    with pytest.raises(SpecError, match=re.escape(message)) as err:
        CliRunner().invoke(app, ["estimate", str(path), "--target", "0.5"], catch_exceptions=False)
    assert err.value.exit_code == 2


def test_curve_logged_per_step_is_answered_without_walking_every_step(tmp_path):
    # 4 points a million steps apart: the horizon is 40 million; walked one by one this took minutes
    k = np.array([1e6, 2e6, 3e6, 4e6])
    out = run(str(write_curve(tmp_path, k, 1 / (1e-6 * k + 0.8) + 0.44)), "--target", "0.5")
    assert out["reachable"] and 1.3e7 < out["epochs_to_target"] < 1.9e7   # exact crossing: 1.59e7


def test_train_loss_column_is_read_and_tells_noise_from_a_plateau(tmp_path):
    # the first 8 epochs of bench/curves/ext_dlwp_catsdogs_convnet_aug.csv (the run met
    # 0.5422 three epochs in a row at epoch 16): alone the validation loss looks flat
    rows = list(zip(range(1, 9), [0.662, 0.6606, 0.6663, 0.62, 0.628, 0.6841, 0.5717, 0.5858],
                    [0.6857, 0.671, 0.6609, 0.6446, 0.6267, 0.608, 0.5992, 0.5908]))
    alone = tmp_path / "val.csv"
    alone.write_text("epoch,loss\n" + "".join(f"{e},{v}\n" for e, v, _ in rows))
    both = tmp_path / "both.csv"
    both.write_text("epoch,loss,train_loss\n" + "".join(f"{e},{v},{t}\n" for e, v, t in rows))
    assert not run(str(alone), "--target", "0.5422", "--consecutive", "3")["reachable"]
    out = run(str(both), "--target", "0.5422", "--consecutive", "3")
    assert out["reachable"] and 8 < out["epochs_to_target"] < 32


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param("epoch,loss,train_loss\n1,1.0,1.1\n2,0.8,x\n3,0.5,0.6\n",
                     "line 3: train_loss: not a number: 'x'", id="bad-train-loss"),
        pytest.param("epoch,loss,train_loss\n1,1.0,1.1\n2,0.8,-1\n3,0.5,0.6\n",
                     "line 3: train_loss: must be ≥ 0", id="negative-train-loss"),
    ],
)
def test_bad_train_loss_column_raises_spec_error(tmp_path, content, message):
    path = tmp_path / "curve.csv"
    path.write_text(content)
    with pytest.raises(SpecError) as err:
        CliRunner().invoke(app, ["estimate", str(path), "--target", "0.2"], catch_exceptions=False)
    assert str(err.value).startswith(f"{path}: {message}")


def test_a_training_loss_too_large_to_fit_leaves_the_validation_curve_to_decide(tmp_path):
    # a flat validation loss over training losses near 1e308 (a traceback before)
    path = tmp_path / "curve.csv"
    path.write_text("epoch,loss,train_loss\n" + "".join(f"{e},{1.0 + 0.01 * (e % 2)},{1.7e308 - e * 1e307}\n"
                                                         for e in range(1, 7)))
    assert not run(str(path), "--target", "0.5")["reachable"]


CURVES = Path(__file__).resolve().parents[2] / "bench" / "curves"


def test_an_earlier_run_of_the_same_configuration_sharpens_an_early_prediction(tmp_path):
    # the recorded seed-2 LeNet run: 3 epochs in a row at or below 0.2 first at epoch 31
    seed2 = (CURVES / "repeats" / "seed2" / "mnist5k_lenet_sgd_lr0.01.csv").read_text().splitlines()
    first8 = tmp_path / "first8.csv"
    first8.write_text("\n".join(seed2[:9]) + "\n")   # header + epochs 1–8, about 25% of the way
    args = (str(first8), "--target", "0.2", "--consecutive", "3")
    alone = run(*args)
    both = run(*args, "--earlier", str(CURVES / "mnist5k_lenet_sgd_lr0.01.csv"))   # seed 1
    assert "earlier_run_weight" not in alone and both["earlier_run_weight"] > 0.5
    assert abs(alone["epochs_to_target"] - 31) > 0.2 * 31
    assert abs(both["epochs_to_target"] - 31) <= 0.2 * 31
    assert both["interval"][0] <= 31 <= both["interval"][1]


def test_runs_of_other_optimizers_on_the_same_model_and_data_sharpen_a_first_run(tmp_path):
    # the recorded digits MLP with SGD at 0.003: 3 epochs in a row at or below 0.87 first at epoch 40
    path = CURVES / "digits_mlp_sgd_lr0.003.csv"
    losses = [float(line.split(",")[1]) for line in path.read_text().splitlines()[1:]]
    n_true = next(j for j in range(3, len(losses) + 1) if max(losses[j - 3:j]) <= 0.87)
    assert n_true == 40
    first8 = tmp_path / "first8.csv"
    first8.write_text("\n".join(path.read_text().splitlines()[:9]) + "\n")   # header + epochs 1–8: 20%
    args = (str(first8), "--target", "0.87", "--consecutive", "3")
    alone = run(*args)
    others = [CURVES / f"digits_mlp_{c}.csv" for c in ("sgd_lr0.01", "adam_lr1e-4", "rmsprop_lr1e-4")]
    both = run(*args, *(a for p in others for a in ("--earlier", str(p))))
    assert abs(alone["epochs_to_target"] - n_true) > 0.5 * n_true
    assert both["earlier_run"] == str(others[2]) and both["earlier_run_weight"] > 0.5
    assert abs(both["epochs_to_target"] - n_true) <= 0.2 * n_true
    assert both["interval"][0] <= n_true <= both["interval"][1]


def test_an_unusable_earlier_run_is_named(tmp_path):
    k = np.arange(1, 11, dtype=float)
    path = write_curve(tmp_path, k, 1 / (0.5 * k + 1) + 0.1)
    short = tmp_path / "short.csv"
    short.write_text("epoch,loss\n1,1.0\n2,0.8\n3,0.7\n4,0.65\n")
    with pytest.raises(SpecError, match=f"{short}: an earlier run needs 5 epochs or more, got 4") as err:
        CliRunner().invoke(app, ["estimate", str(path), "--target", "0.2", "--earlier", str(short)],
                           catch_exceptions=False)
    assert err.value.exit_code == 2
    # as the curve's own: it read "cannot be fitted ((34, 'Numerical result out of range'))"
    huge = tmp_path / "huge.csv"
    huge.write_text("epoch,loss\n" + "".join(f"{e},1e{201 - e}\n" for e in range(1, 6)))
    with pytest.raises(SpecError, match=f"{huge}: the earlier run's losses are too large to fit a curve to "
                                        r"\(the largest is 1e\+200\)"):
        CliRunner().invoke(app, ["estimate", str(path), "--target", "0.2", "--earlier", str(huge)],
                           catch_exceptions=False)


def test_an_earlier_run_far_beyond_the_curve_is_named_with_no_warning(tmp_path):
    """An earlier epoch of 1e308 overflowed where its curve is laid beyond its end, and numpy's
    RuntimeWarning reached the user's terminal; such an epoch is now refused where it is read."""
    from tests.conftest import run_coach

    k = np.arange(1, 11, dtype=float)
    path = write_curve(tmp_path, k, 1 / (0.5 * k + 1) + 0.1)
    far = tmp_path / "far.csv"
    far.write_text("epoch,loss\n1,0.5\n2,0.4\n3,0.3\n4,0.25\n1e308,0.2\n")
    proc = run_coach("estimate", str(path), "--target", "0.2", "--earlier", str(far), "--json", timeout=300)
    assert proc.returncode == 2 and proc.stderr == f"error: {far}: line 6: epoch: must be between 0 and 1,000,000,000, " \
                                                   "got 1e+308\n", proc.stderr


def test_a_keras_history_is_read_by_its_validation_loss(tmp_path):
    """Keras' CSVLogger writes `epoch,accuracy,loss,val_accuracy,val_loss`, epochs from 0: its
    `loss` is the training loss, and was read as the curve (predicting the training loss's
    crossing, epochs early). `val_loss` is the curve, `loss` the training loss beside it."""
    val, training = [1.1, 0.85, 0.7, 0.62, 0.57, 0.54, 0.52], [1.2, 0.9, 0.7, 0.6, 0.52, 0.47, 0.43]
    keras, ours = tmp_path / "keras.csv", tmp_path / "ours.csv"
    keras.write_text("epoch,accuracy,loss,val_accuracy,val_loss\n"
                     + "".join(f"{e},0.5,{t},0.5,{v}\n" for e, (v, t) in enumerate(zip(val, training))))
    ours.write_text("epoch,loss,train_loss\n" + "".join(f"{e},{v},{t}\n" for e, (v, t) in enumerate(zip(val, training))))
    answer, same = run(str(keras), "--target", "0.5"), run(str(ours), "--target", "0.5")
    assert answer.pop("read") == {"column": "val_loss", "epochs": 7, "train_column": "loss", "rows_skipped": 0}
    assert same.pop("read")["train_column"] == "train_loss" and answer == same
    assert answer["epochs_to_target"] > 6   # the training loss is under 0.5 from epoch 4 on
    table = CliRunner().invoke(app, ["estimate", str(keras), "--target", "0.5"], catch_exceptions=False)
    assert "7 epochs of val_loss (training loss: loss)" in re.sub(r"[│\s]+", " ", table.output), table.output
    bad = tmp_path / "bad.csv"
    bad.write_text("epoch,loss,val_loss\n0,1.0,0.9\n1,0.8,x\n")
    with pytest.raises(SpecError, match=re.escape(f"{bad}: line 3: val_loss: not a number: 'x'")):
        CliRunner().invoke(app, ["estimate", str(bad), "--target", "0.5"], catch_exceptions=False)


def test_a_lightning_metrics_file_is_read_by_its_epochs_validation_rows(tmp_path):
    """PyTorch Lightning's CSVLogger writes training and validation losses on rows of their own,
    the other's cell empty (training per step or per epoch): it was refused at its first empty
    cell. Rows of other metrics are skipped and said to be, each epoch's training loss is the mean
    of its rows', and a row with nothing but its epoch is still a damaged line."""
    val, training = [1.1, 0.85, 0.7, 0.62, 0.57, 0.54], [1.3, 0.9, 0.7, 0.6, 0.52, 0.47]
    lightning, ours = tmp_path / "metrics.csv", tmp_path / "ours.csv"
    lightning.write_text("epoch,step,train_loss,val_loss\n" + "".join(   # two steps an epoch around its mean
        f"{e},{2 * e},{t - 0.1},\n{e},{2 * e + 1},{t + 0.1},\n{e},{2 * e + 1},,{v}\n"
        for e, (v, t) in enumerate(zip(val, training))))
    ours.write_text("epoch,loss,train_loss\n" + "".join(f"{e},{v},{t}\n" for e, (v, t) in enumerate(zip(val, training))))
    answer, same = run(str(lightning), "--target", "0.5"), run(str(ours), "--target", "0.5")
    assert answer.pop("read") == {"column": "val_loss", "epochs": 6, "train_column": "train_loss", "rows_skipped": 12}
    same.pop("read")
    assert answer == same
    table = CliRunner().invoke(app, ["estimate", str(lightning), "--target", "0.5"], catch_exceptions=False)
    assert "12 rows of other metrics skipped" in re.sub(r"[│\s]+", " ", table.output), table.output
    # a run still going: its last validation row came before that epoch's training rows
    going = tmp_path / "going.csv"
    going.write_text(lightning.read_text().rsplit("\n", 4)[0] + "\n5,11,,0.54\n")
    read = run(str(going), "--target", "0.5")["read"]
    assert read == {"column": "val_loss", "epochs": 6, "train_column": None, "rows_skipped": 10}, read
    table = CliRunner().invoke(app, ["estimate", str(going), "--target", "0.5"], catch_exceptions=False)
    assert "train_loss not used: none for epoch 5" in re.sub(r"[│\s]+", " ", table.output), table.output
    for cut in ("epoch,val_loss\n0,1.1\n1,\n2,0.7\n3,0.6\n", "epoch,loss,train_loss\n0,1.1,1.2\n1,,\n2,0.7,0.6\n"):
        damaged = tmp_path / "damaged.csv"
        damaged.write_text(cut)
        with pytest.raises(SpecError, match=re.escape(f"{damaged}: line 3: ")):
            CliRunner().invoke(app, ["estimate", str(damaged), "--target", "0.5"], catch_exceptions=False)
