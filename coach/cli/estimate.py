"""`coach estimate CURVE.csv --target T`: when does a recorded loss curve reach a target?

A what-if for data scientists (and a check of the estimator on curves from anywhere):
fit l(k) = 1/(b0·k + b1) + b2 to the `epoch,loss` rows and print the predicted epoch of
the first crossing (or of the stop rule with `--consecutive 3`), its interval and the
asymptote. The body is thin: parse, call `coach.estimate`, print.
"""

from __future__ import annotations

import csv
import json
import math
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from coach.errors import EstimateError, SpecError
from coach.files import looked_up

if TYPE_CHECKING:  # scipy costs a second: every other command starts without it
    from coach.estimate import ConvergenceFit, EarlierRun, EpochsPrediction


@dataclass(frozen=True)
class Curve:
    """Epochs and losses as read from a CSV, and the shift that makes them model progress."""

    epochs: list[float]        # as in the file
    losses: list[float]
    offset: float              # model progress = file epoch + offset (nonzero only if the file starts at ≤ 0)
    train_losses: list[float] | None = None   # the training losses, if the header names a column of them
    column: str = "loss"       # the header's name of the column read as the curve
    train_column: str | None = None   # the column read as the training loss, if used
    skipped: int = 0           # rows of other metrics (a logger's), without the curve's loss
    unused: str = ""           # why a training-loss column the header names is not used

    def read(self) -> dict[str, object]:
        """What was read, for `--json`: a Keras or Lightning log has columns to choose from."""
        return {"column": self.column, "epochs": len(self.epochs), "train_column": self.train_column,
                "rows_skipped": self.skipped}

    def said(self) -> str:
        """What was read, in words, for the table."""
        training = f" (training loss: {self.train_column})" if self.train_column else ""
        skipped = f"{self.skipped} row{'s' * (self.skipped != 1)} of other metrics skipped" if self.skipped else ""
        return "; ".join(p for p in (f"{len(self.epochs)} epochs of {self.column}{training}", self.unused, skipped) if p)


MAX_ROWS = 100_000
"""Rows of a curve: 100,000 take about 11 s to fit here, a million took 57 s and 830 MB."""
MAX_BYTES = 16 * 2**20
"""A curve file's size: 100,000 rows of 'epoch,loss,train_loss' are about 3 MiB."""
MAX_CURVE_EPOCH = 1e9
"""Epochs beyond are not a curve's: 1e306 read as flat, 1e308 printed a 309-digit epoch."""


def read_curve(path: Path) -> Curve:
    """Read `epoch,loss` rows (an optional header may name the columns and add others; the loss
    column may be named `val_loss` and a `train_loss` column, as in Coach's own records, is read
    too and helps tell a plateau). A header with `loss` and `val_loss` is Keras': there `val_loss`
    is the curve and `loss` the training loss.

    Raises SpecError naming the file, the line and the field for anything unusable.
    """
    source = str(path)
    try:
        if stat.S_ISDIR(looked_up(path, source)):   # a pipe is fine (`<(cmd)`): what is read is capped
            raise SpecError(source, "", "a folder, not a curve file")
        with path.open("rb") as f:   # /dev/zero was read until the memory ran out
            data = f.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:   # before decoding: the cut may split a character
            raise SpecError(source, "", f"larger than {MAX_BYTES // 2**20} MiB: a curve has one line per epoch")
        text = data.decode("utf-8-sig")   # a spreadsheet's byte-order mark is not data
    except UnicodeDecodeError as exc:
        raise SpecError(source, "", f"not a UTF-8 text file (byte {exc.start}): expected lines of "
                                    "'epoch,loss'") from None
    except (OSError, ValueError) as exc:   # ValueError: a NUL byte in the name
        raise SpecError(source, "", f"cannot read the file: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        rows = [(n, row) for n, row in enumerate(csv.reader(text.splitlines()), start=1)
                if row and any(c.strip() for c in row) and not row[0].lstrip().startswith("#")]
    except csv.Error as exc:   # e.g. a field of more than 128 KiB
        raise SpecError(source, "", f"not CSV of 'epoch,loss' lines: {exc}") from None
    if not rows:
        raise SpecError(source, "", "no rows: expected lines of 'epoch,loss'")
    i_epoch, i_loss, i_train, width, named, train_named = 0, 1, None, 2, "loss", "train_loss"
    first = [c.strip().lower() for c in rows[0][1]]
    if header := not _is_number(first[0]):
        # `val_loss` is the validation loss wherever it is named (Coach's `history --json`, Keras'
        # CSVLogger); beside it Keras' `loss` is the training loss, which was read as the curve
        named = "val_loss" if "val_loss" in first else "loss"
        train_named = "train_loss" if "train_loss" in first or named == "loss" else "loss"
        if "epoch" not in first or named not in first:
            raise SpecError(source, f"line {rows[0][0]}", "header must name the columns 'epoch' and 'loss' (or "
                                                           f"'val_loss'), got {rows[0][1]}")
        if twice := next((c for c in ("epoch", named, train_named) if first.count(c) > 1), None):
            raise SpecError(source, f"line {rows[0][0]}", f"header names the column {twice!r} twice: {rows[0][1]}")
        i_epoch, i_loss, width = first.index("epoch"), first.index(named), len(first)
        i_train = first.index(train_named) if train_named in first else None
        rows = rows[1:]
    columns = (f"the header names {width} columns" if header else
               "without a header a line is 'epoch,loss'; a header line such as 'epoch,loss,train_loss' names more")
    for n, row in rows:   # a cell more than the columns named is a damaged line, not data to drop
        if (cells := len(_trimmed(row))) > width:
            raise SpecError(source, f"line {n}", f"{cells} cells, but {columns}: {row}")
    if len(rows) > MAX_ROWS:
        raise SpecError(source, f"line {rows[MAX_ROWS][0]}", f"more than {MAX_ROWS} rows: a curve has one loss per "
                                                            "epoch (average finer-grained losses per epoch)")
    epochs: list[float] = []
    losses: list[float] = []
    trains: dict[float, list[float]] = {}   # an epoch's training losses, from whichever of its rows give one
    skipped = 0
    for n, row in rows:
        epoch = _field(source, n, row, i_epoch, "epoch")
        if not 0 <= epoch <= MAX_CURVE_EPOCH:   # from the start of training: 0 is its untrained start at most
            raise SpecError(source, f"line {n}: epoch", f"must be between 0 and {MAX_CURVE_EPOCH:,.0f}, got {epoch:g}")
        if i_train is not None and not _empty(row, i_train):
            train_loss = _field(source, n, row, i_train, train_named)
            if train_loss < 0:
                raise SpecError(source, f"line {n}: {train_named}", f"must be ≥ 0, got {train_loss:g}")
            trains.setdefault(epoch, []).append(train_loss)
        if header and _empty(row, i_loss) and any(c.strip() for i, c in enumerate(row) if i not in (i_epoch, i_loss)):
            # a logger's row of other metrics: PyTorch Lightning's CSVLogger writes an epoch's
            # training and validation losses on rows of their own, each with the other's cell empty
            # (a row with nothing but its epoch is cut short, and refused below)
            skipped += 1
            continue
        loss = _field(source, n, row, i_loss, named)
        if epochs and epoch <= epochs[-1]:
            raise SpecError(source, f"line {n}: epoch", f"epochs must increase, got {epoch:g} after {epochs[-1]:g}")
        if loss < 0:
            raise SpecError(source, f"line {n}: {named}", f"must be ≥ 0, got {loss:g}")
        epochs.append(epoch)
        losses.append(loss)
    if len(epochs) < 3:
        without = f" (and {skipped} of other metrics, skipped)" if skipped else ""
        raise SpecError(source, "", f"need at least 3 rows of 'epoch,loss' to fit a curve, got {len(epochs)}{without}")
    offset = 1.0 - epochs[0] if epochs[0] <= 0 else 0.0
    # an epoch's mean (a logger's per-step rows), and only whole: it decides plateaus with the curve, epoch by epoch
    missing = next((e for e in epochs if e not in trains), None)
    train = None if i_train is None or missing is not None else [sum(trains[e]) / len(trains[e]) for e in epochs]
    unused = f"{train_named} not used: none for epoch {missing:g}" if i_train is not None and missing is not None else ""
    return Curve(epochs, losses, offset, train, named, train_named if train else None, skipped, unused)


def predict_curve(curve: Curve, target: float, consecutive: int = 1,
                  earlier: Sequence[EarlierRun] = ()) -> tuple[ConvergenceFit, EpochsPrediction]:
    """The fit and the curve's stop epoch, in the file's epoch numbering: where the rows already
    meet the stop rule, that epoch; else predicted by the fit from the last row on (as the job
    loop predicts from the epochs run), with `earlier` runs of the same model and data (see
    `earlier_of`) as a second opinion."""
    from coach.estimate import EpochsPrediction, fit_convergence
    from coach.estimate.stop_rule import met_in

    progress = [e + curve.offset for e in curve.epochs]
    fit = fit_convergence(progress, curve.losses, train_losses=curve.train_losses, earlier=earlier)
    at, streak = met_in(curve.losses, target, consecutive)
    if at is not None:   # the fitted curve, a compromise over all rows, may cross somewhere else
        epoch = curve.epochs[at]   # as the file writes it: a row at epoch 0.5 is not epoch 0
        epoch = int(epoch) if epoch.is_integer() else epoch
        return fit, EpochsPrediction(epoch=epoch, lo=epoch, hi=epoch, reachable=True, asymptote=fit.b2,
                                     note=f"met in the file at epoch {epoch:g}")
    return fit, fit.epochs_to_target(target, consecutive, start=math.floor(progress[-1] + 1e-9), streak=streak,
                                     offset=curve.offset)


def earlier_of(path: Path) -> EarlierRun:
    """Read and prepare an earlier run's curve; SpecError naming the file if it cannot serve."""
    from coach.estimate import prepare_earlier_run

    curve = read_curve(path)
    try:
        return prepare_earlier_run([e + curve.offset for e in curve.epochs], curve.losses, str(path))
    except EstimateError as exc:
        raise SpecError(str(path), "", str(exc)) from None


def estimate(
    curve: Annotated[Path, typer.Argument(metavar="CURVE.csv", help="CSV of 'epoch,loss' rows; answered in the file's epoch numbers.")],
    target: Annotated[float, typer.Option("--target", help="Target validation loss.")],
    consecutive: Annotated[int, typer.Option("--consecutive", min=1, max=1000,  # spec.MAX_CONSECUTIVE
                                             help="Epochs in a row at or below the target (Coach stops at 3).")] = 1,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    earlier: Annotated[list[Path] | None, typer.Option(
        "--earlier", help="CSV of an earlier run of the same model and data (another seed, learning rate or "
                          "optimizer); repeat for several. The closest is a second opinion, weighted by how "
                          "well it matches.")] = None,
) -> None:
    """Predict the epoch at which a loss curve first reaches TARGET, with an interval."""
    if not (math.isfinite(target) and target > 0):
        # as a job file's target_loss: losses are ≥ 0, so a target ≤ 0 can never be met
        raise SpecError("--target", "", f"must be a finite number > 0 (losses are ≥ 0), got {target:g}")
    data = read_curve(curve)
    # a long curve's fit and its 100 bootstrap refits took 16 s for 100,000 rows with no word
    # (shown on a terminal only; the table or JSON goes to stdout)
    with Console(stderr=True).status(Text(f"fitting {len(data.epochs):,} rows of {curve.name}…")):   # not markup
        before = [earlier_of(path) for path in earlier or []]
        try:
            fit, pred = predict_curve(data, target, consecutive, before)
        except EstimateError as exc:
            raise SpecError(str(curve), "", str(exc)) from exc
        except (OverflowError, FloatingPointError, ValueError):   # e.g. losses near 1e308 (OverflowError reads '(34, ...)')
            raise SpecError(str(curve), "loss", f"values too large to fit a curve to (the largest is "
                                                f"{max(data.losses):.3g})") from None
    used = pred.earlier.run.label if pred.earlier is not None else None   # the earlier run that counted
    note = pred.note
    if not pred.reachable and fit.b0 == 0:   # flat: say why, where the losses rise
        from coach.estimate import rising

        if (start := rising(data.epochs, data.losses)) is not None:
            note = (f"the loss rises ({data.losses[start]:.4g} at epoch {data.epochs[start]:g}, {data.losses[-1]:.4g} "
                    f"at epoch {data.epochs[-1]:g}): overfitting or diverging, where no falling curve fits; {note}")
    if data.epochs[0] > 1 and max(data.losses[-3:]) < fit.b2:   # the fit runs above the file's last losses
        # epochs 100-109 falling as a new curve (after a drop of the learning rate) cannot be
        # followed at k = 100… (b1 ≥ 0): it read "unreachable" with no word why. Counting the
        # file from 1 instead fitted excerpts of smooth curves worse (noise, `--earlier`), so it is said
        note = (f"the fit runs above the last losses: epochs are counted from the start of training, and a "
                f"file from epoch {data.epochs[0]:g} on that starts a new curve (a drop of the learning rate) "
                f"cannot be followed there; renumber its rows from 1 to fit it as one; {note}")
    # l(e) = 1/(b0·e + b1) + b2 in the file's epoch numbers (the fit's k is e + offset); a plateau
    # is b0 = 0 with no b1 to speak of
    b0, b1, b2 = (float(f"{v:.6g}") for v in (fit.b0, fit.b1 + fit.b0 * data.offset, fit.b2))
    if json_out:
        out = {"epochs_to_target": pred.epoch, "interval": [pred.lo, pred.hi],
               "asymptote": float(f"{pred.asymptote:.6g}"), "reachable": pred.reachable, "note": note,
               "fit": {"b0": b0, "b1": b1 if b0 > 0 else None, "b2": b2}, "read": data.read()}
        if before:
            out["earlier_run"] = used
            out["earlier_run_weight"] = round(pred.earlier_weight, 3)
        typer.echo(json.dumps(out))
        return
    table = Table(title=f"{curve.name}: target {target:g}"
                        + (f", {consecutive} in a row" if consecutive > 1 else ""), show_header=False)
    table.add_column("")
    table.add_column("", justify="right")
    table.add_row("read", data.said())
    table.add_row("epochs to target", "never (unreachable)" if pred.epoch is None else str(pred.epoch)
                  + (" (met in the file)" if pred.epoch is not None and pred.epoch <= data.epochs[-1] else ""))
    table.add_row("80% interval", f"[{_show(pred.lo)}, {_show(pred.hi, 'never')}]")
    table.add_row("asymptote b2", f"{pred.asymptote:.4g}")
    table.add_row("fit", f"1/({b0:.4g}·epoch + {b1:.4g}) + {b2:.4g}" if b0 > 0 else f"flat at {b2:.4g}")
    table.add_row("reachable", "yes" if pred.reachable else "no")
    if before:
        table.add_row(f"weight of {used or 'earlier runs'}", f"{pred.earlier_weight:.0%}")
    Console(markup=False).print(table)
    if not pred.reachable or pred.earlier_weight > 0:
        typer.echo(note)


def _show(value: int | None, none: str = "-") -> str:
    return none if value is None else str(value)


def _trimmed(row: list[str]) -> list[str]:
    """The row without the empty cells a spreadsheet may leave at its end ("1,0.5,")."""
    while row and not row[-1].strip():
        row = row[:-1]
    return row


def _empty(row: list[str], index: int) -> bool:
    """Whether the row has the cell, empty: a logger's "no value here" (a row that ends before
    the cell is cut short, and is named as such by `_field`)."""
    return index < len(row) and not row[index].strip()


def _float(text: str) -> float:
    """float() as a CSV means it: Python also reads "1_0" as 10 (a digit separator in its own
    source), which turned epochs 1_0, 2_0, 3_0 into 10, 20, 30 without a word."""
    if "_" in text:
        raise ValueError(text)
    return float(text)


def _is_number(text: str) -> bool:
    try:
        _float(text)
    except ValueError:
        return False
    return True


def _field(source: str, line: int, row: list[str], index: int, name: str) -> float:
    if index >= len(row):
        raise SpecError(source, f"line {line}: {name}", f"missing (the row has {len(row)} column(s))")
    text = row[index].strip()
    try:
        value = _float(text)
    except ValueError:
        raise SpecError(source, f"line {line}: {name}", f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise SpecError(source, f"line {line}: {name}", f"not a finite number: {text!r}")
    return value
