"""Dataset sizes known without loading agree with the loaded data (job files are checked against them)."""

from __future__ import annotations

import pytest

from coach.data import load_dataset, train_size


@pytest.mark.parametrize("name,options", [("mnist-5k", {}), ("digits", {}), ("synthetic", {}),
                                          ("synthetic", {"samples": 101, "shape": [2]})])
def test_train_size_is_the_loaded_training_split(name: str, options: dict) -> None:
    assert train_size(name, options) == len(load_dataset(name, options).x_train)
