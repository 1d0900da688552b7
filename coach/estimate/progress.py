"""Training progress in epochs, the x axis of the convergence model.

A training epoch counts 1. A tuning mini-epoch counts the share of an epoch it processed
(its samples over a training epoch's), so mini-epochs neither vanish from the fit nor
count as full epochs (the thesis counted epochs once per worker). Tuning trains the head of
training epoch 1, so that epoch ends at progress 1 like a static job's; mini-epochs recorded
by an older Coach (`first_sample` -1) drew samples of their own and came before it.
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
    first_sample: int   # -1: a mini-epoch outside training epoch 1 (coach.state.records.EpochRecord)


def tuned_ahead(epochs: Sequence[EpochLike]) -> bool:
    """Whether the job's tuning drew samples of its own, before training epoch 1 (mini-epochs
    recorded by a Coach before 2026-11-26) rather than training that epoch's head."""
    return any(e.phase == "tuning" and e.first_sample < 0 for e in epochs)


def progress_of(epochs: Sequence[EpochLike], samples_per_epoch: float | None = None) -> list[float]:
    """Progress (epochs) after each record, in order.

    `samples_per_epoch` defaults to the median of the training epochs' samples (counting those
    tuning trained into epoch 1), or, before any training epoch, to the largest tuning run
    (which then counts as 1).
    """
    if samples_per_epoch is None:
        train = [e.samples + max(e.first_sample, 0) for e in epochs if e.phase == "training" and e.samples > 0]
        samples_per_epoch = float(np.median(train)) if train else float(max([e.samples for e in epochs] + [1]))
    out, tuned = [], 0.0
    ahead = tuned_ahead(epochs)
    for e in epochs:
        if e.phase == "tuning":
            tuned += e.samples / samples_per_epoch if samples_per_epoch > 0 else 0.0
            out.append(tuned)
        else:
            out.append(tuned * ahead + e.epoch)
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
