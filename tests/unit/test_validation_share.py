"""How many held-out samples an epoch validates on (`coach.training.worker.validation_stride`)."""

from __future__ import annotations

import pytest

from coach.training.worker import MINI_VAL_SAMPLES, validation_stride


@pytest.mark.parametrize("n_val, n_train, limit, stride, why", [
    (1000, 4000, None, 1, "a training epoch validates on every held-out sample"),
    (1000, 4000, 4000, 1, "a mini-epoch as long as the training set is a whole epoch"),
    (1000, 4000, 1024, 4, "LeNet's mini-epoch, a quarter of the data: a quarter of the split"),
    (1000, 4000, 64, 4, "a tiny mini-epoch still validates on MINI_VAL_SAMPLES"),
    (1000, 4000, 3000, 1, "three quarters: every sample is nearer than every second"),
    (360, 1437, 359, 1, "the digits' split is barely above the floor: all of it"),
    (200, 4000, 1024, 1, "a split smaller than the floor is validated whole"),
    (10000, 50000, 1024, 40, "a larger split: the mini-epoch's share, 250 samples, is at the floor"),
    (50000, 50000, 1024, 49, "a large split: the mini-epoch's share of it, above the floor"),
])
def test_a_mini_epoch_validates_on_its_share_of_the_split(n_val: int, n_train: int, limit: int | None,
                                                          stride: int, why: str) -> None:
    assert validation_stride(n_val, n_train, limit) == stride, why
    assert len(range(0, n_val, stride)) >= min(n_val, MINI_VAL_SAMPLES), why
