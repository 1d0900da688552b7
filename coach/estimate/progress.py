"""Training progress in epochs, the x axis of the convergence model.

A training epoch counts 1. A tuning mini-epoch counts the share of an epoch it processed
(its samples over a training epoch's), so mini-epochs neither vanish from the fit nor
count as full epochs (the thesis counted epochs once per worker).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class EpochLike(Protocol):
    """What `progress_of` reads of a record (coach.state.records.EpochRecord has it)."""

    phase: str          # "tuning" | "training"
    epoch: int          # training epochs count from 1
    samples: int        # samples processed in this (mini-)epoch
    val_loss: float


def progress_of(epochs: Sequence[EpochLike], samples_per_epoch: float | None = None) -> list[float]:
    """Progress (epochs) after each record, in order.

    `samples_per_epoch` defaults to the median of the training epochs' samples, or, before
    any training epoch, to the largest tuning run (which then counts as 1).
    """
    if samples_per_epoch is None:
        train = [e.samples for e in epochs if e.phase == "training" and e.samples > 0]
        samples_per_epoch = float(np.median(train)) if train else float(max([e.samples for e in epochs] + [1]))
    out, tuned = [], 0.0
    for e in epochs:
        if e.phase == "tuning":
            tuned += e.samples / samples_per_epoch if samples_per_epoch > 0 else 0.0
            out.append(tuned)
        else:
            out.append(tuned + e.epoch)
    return out


def streak_of(epochs: Sequence[EpochLike], target: float) -> int:
    """How many of the latest training epochs are at or below `target` in a row: the stop
    rule's count so far (tuning mini-epochs never count; NaN never reaches the target)."""
    n = 0
    for e in reversed([e for e in epochs if e.phase == "training"]):
        if not e.val_loss <= target:
            break
        n += 1
    return n
