"""The invocation contract between the job loop and the role functions.

An event body is JSON; it is validated here, in the function, so that a malformed event
gets HTTP 400 naming the field, whichever client sent it.

A worker answers `train_loss`, `samples`, `steady_samples` / `steady_s` (the rate the speed
model fits), `val_sum` / `val_count` (its slice of the held-out split) and, from rank 0, the
`checkpoint` it wrote; `startup_s`, `steps`, `duration_s`, `shard` and the runner's `wall_s`
are not read by the job loop: they are there for whoever invokes a function by hand.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROLES = ("scheduler", "server", "worker")
READY_PATH = "/__ready"   # GET: 200 once a replica serves an event at once (`FunctionRuntime.readiness`)


class EventError(ValueError):
    """A malformed invocation; `field` names the offending field."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        super().__init__(f"{field}: {problem}")


@dataclass(frozen=True)
class EpochTask:
    """One role's share of one epoch attempt."""

    job_id: str
    epoch: int                  # training epoch number (tuning mini-epochs: their own counter)
    attempt: str                # unique per attempt; names the abort marker
    role: str                   # scheduler | server | worker
    root_uri: str               # DMLC_PS_ROOT_URI: where the MXNet scheduler listens
    root_port: int              # DMLC_PS_ROOT_PORT
    workers: int                # DMLC_NUM_WORKER
    servers: int                # DMLC_NUM_SERVER
    deadline_s: float           # wall-clock limit; past it the role process is killed
    abort_file: str = ""        # if this file appears, the attempt is aborted
    node_host: str = ""         # DMLC_NODE_HOST (empty: keep the function's environment)
    shard: int = 0              # worker only: which 1/workers of the data
    seed: int = 0               # permutation seed of this epoch's data
    limit: int | None = None    # mini-epoch: samples to process in total (None: the whole set)
    first: int = 0              # where in the epoch's permutation this attempt's samples start
    probe: int = 0              # the first `probe` samples train on one server only (`training.keys`)
    dataset: dict[str, Any] = field(default_factory=dict)   # {"name": ..., **options}
    model: dict[str, Any] = field(default_factory=dict)     # {"name": ..., "file": ...}
    hyper: dict[str, Any] = field(default_factory=dict)     # batch_size (global), optimizer, learning_rate, ...
    checkpoint_in: str | None = None    # load parameters and optimizer state from here
    checkpoint_out: str = ""            # rank 0 writes the epoch's result here (atomically)

    def to_json(self) -> str:
        return json.dumps(asdict(self))


_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "job_id": str, "epoch": int, "attempt": str, "role": str, "root_uri": str, "root_port": int,
    "workers": int, "servers": int, "deadline_s": (int, float),
}
_OPTIONAL: dict[str, type | tuple[type, ...]] = {
    "abort_file": str, "node_host": str, "shard": int, "seed": int, "limit": (int, type(None)), "first": int,
    "probe": int, "dataset": dict, "model": dict, "hyper": dict, "checkpoint_in": (str, type(None)),
    "checkpoint_out": str,
}


def _type_name(t: type | tuple[type, ...]) -> str:
    names = [x.__name__ for x in (t if isinstance(t, tuple) else (t,))]
    return " or ".join("null" if n == "NoneType" else n.replace("str", "string").replace("int", "integer") for n in names)


def parse_task(body: Any) -> EpochTask:
    """Validate an event body (bytes, str or dict) into an EpochTask or raise EventError."""
    if isinstance(body, (bytes, bytearray)):
        body = body.decode("utf-8", errors="replace")
    if isinstance(body, str):
        if not body.strip():
            raise EventError("body", "empty; expected a JSON object")
        try:
            body = json.loads(body)
        except json.JSONDecodeError as e:
            raise EventError("body", f"not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
        except RecursionError:
            raise EventError("body", "JSON nested too deeply") from None
        except ValueError as e:   # e.g. an integer of thousands of digits
            raise EventError("body", f"not usable JSON: {e}") from None
    if not isinstance(body, dict):
        raise EventError("body", f"expected a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise EventError(unknown[0], "unknown field")
    for name, typ in {**_REQUIRED, **_OPTIONAL}.items():
        if name not in body:
            if name in _REQUIRED:
                raise EventError(name, "missing")
            continue
        value = body[name]
        if isinstance(value, bool) and typ is not bool:
            raise EventError(name, f"expected {_type_name(typ)}, got boolean")
        if not isinstance(value, typ):
            raise EventError(name, f"expected {_type_name(typ)}, got {type(value).__name__}")
    for name in ("dataset", "model", "hyper"):   # deep inside one, it failed as a RecursionError at to_json
        if _depth(body.get(name)) > MAX_DEPTH:
            raise EventError(name, f"nested more than {MAX_DEPTH} levels deep")
    task = EpochTask(**body)
    if task.role not in ROLES:
        raise EventError("role", f"must be one of {', '.join(ROLES)}, got {task.role!r}")
    if task.workers < 1 or task.servers < 1:
        raise EventError("workers" if task.workers < 1 else "servers", "must be >= 1")
    if not 0 < task.root_port < 65536:
        raise EventError("root_port", f"must be a TCP port, got {task.root_port}")
    if not (math.isfinite(task.deadline_s) and task.deadline_s > 0):   # NaN would never expire
        raise EventError("deadline_s", f"must be a finite number > 0, got {task.deadline_s}")
    if task.role == "worker":
        if not 0 <= task.shard < task.workers:
            raise EventError("shard", f"must be in [0, {task.workers}), got {task.shard}")
        if not task.dataset.get("name"):
            raise EventError("dataset.name", "missing")
        from coach.data.datasets import DATASETS   # numpy: only where a worker's event is read

        if not isinstance(task.dataset["name"], str) or task.dataset["name"] not in DATASETS:
            raise EventError("dataset.name", f"must be one of {', '.join(DATASETS)}, got {task.dataset['name']!r}")
        _check_model(task.model)
        _check_checkpoint_out(task.checkpoint_out)
        batch = task.hyper.get("batch_size")
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < task.workers:
            raise EventError("hyper.batch_size", f"must be an integer >= workers ({task.workers}), got {batch!r}")
        _check_hyper(task.hyper)
        if not 0 <= task.seed < 2**32:   # numpy's seeds; MXNet said so only after the role had started
            raise EventError("seed", f"must be in [0, 2**32), got {task.seed}")
        if task.limit is not None and task.limit < task.workers:
            raise EventError("limit", f"must be >= workers ({task.workers}), got {task.limit}")
        if task.first < 0:
            raise EventError("first", f"must be >= 0, got {task.first}")
        if task.probe < 0 or (task.probe and task.servers < 2):
            raise EventError("probe", f"must be >= 0, and 0 with one server ({task.servers}), got {task.probe}")
    return task


MAX_DEPTH = 20   # dataset options are 3 levels deep at most ({"shape": [1, 8, 8]})


def _depth(value: Any) -> int:
    """How deeply lists and objects nest in a JSON value, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, level = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, level)
            stack.extend((item, level + 1) for item in (v.values() if isinstance(v, dict) else v))
    return deepest


HYPER = {"batch_size": int, "optimizer": str, "learning_rate": float, "momentum": float, "weight_decay": float,
         "init_seed": int}   # what coach.spec.JobSpec.hyper sends
OPTIMIZERS = ("sgd", "nag", "adam", "rmsprop", "adagrad")   # a job file's `optimizer` too


def _check_hyper(hyper: dict[str, Any]) -> None:
    """A typo (`learnig_rate`) trained with the default rate without a word; a text rate or an
    unknown optimizer failed inside the role, as an error retried like a crash."""
    for key, value in hyper.items():
        kind = HYPER.get(key)
        if kind is None:
            raise EventError(f"hyper.{key}", f"unknown; known: {', '.join(HYPER)}")
        number = isinstance(value, (int, float) if kind is float else kind) and not isinstance(value, bool)
        if not number or (kind is not str and not (math.isfinite(value) and value >= 0)):
            raise EventError(f"hyper.{key}", f"must be {'text' if kind is str else 'a number >= 0'}, got {value!r}")
    if hyper.get("optimizer", "sgd") not in OPTIMIZERS:
        raise EventError("hyper.optimizer", f"must be one of {', '.join(OPTIMIZERS)}, got {hyper['optimizer']!r}")


def _check_model(model: dict[str, Any]) -> None:
    from coach.models.zoo import BUILTIN_MODELS

    if model.get("file"):
        if not (isinstance(model["file"], str) and isinstance(model.get("source"), str)):
            raise EventError("model.source", "a model file travels with its source text")
    elif model.get("name") not in BUILTIN_MODELS:
        raise EventError("model.name", f"must be one of {', '.join(BUILTIN_MODELS)}, or give model.file and "
                                       f"model.source, got {model.get('name')!r}")


def _check_checkpoint_out(path: str) -> None:
    """Rank 0 replaces what is at checkpoint_out with the epoch's checkpoint: a folder that is
    not a checkpoint (a job's work folder given by mistake) was deleted whole."""
    from coach.training.checkpoint import is_checkpoint_or_part

    if not path:
        raise EventError("checkpoint_out", "missing")
    out = Path(path)
    if not out.is_absolute() or out.name in ("", ".", ".."):
        raise EventError("checkpoint_out", f"must be an absolute path to a folder to create, got {path!r}")
    if (out.exists() or out.is_symlink()) and not is_checkpoint_or_part(out):
        raise EventError("checkpoint_out", f"{path} exists and is not a checkpoint: it is not replaced")
