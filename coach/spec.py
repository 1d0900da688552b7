"""Job files: YAML in, a validated JobSpec out, or a SpecError naming file, field and problem.

    name: lenet-mnist
    model: lenet                 # lenet | mlp | resnet18 | path/to/model.py (defines build(num_classes))
    dataset: mnist-5k            # mnist-5k | digits | synthetic | {name: cifar10, path: ~/cifar-10-batches-py}
    target_loss: 0.1             # validation cross-entropy to reach
    budget: 1.0                  # in the prices' currency
    ...                          # see FIELDS below and the README's job file reference
"""

from __future__ import annotations

import ast
import datetime
import json
import math
import re
import reprlib
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from coach import quantities
from coach.data import DATASET_OPTIONS, DATASETS, SYNTHETIC_DEFAULTS, train_size
from coach.errors import SpecError, StateError
from coach.estimate.cost import (DEFAULT_CPU_CORE_SECOND_PRICE, DEFAULT_GIB_SECOND_PRICE, DEFAULT_RESOURCES, ROLES,
                                 Prices, RoleResources, epoch_cost)
from coach.files import looked_up
from coach.models import BUILTIN_MODELS
from coach.recorded import check_types
from coach.roles.protocol import OPTIMIZERS

MOMENTUM_OPTIMIZERS = ("sgd", "nag")   # the others have their own (adam's betas) or none
MAX_NUMBER = 1e15
MAX_DIGITS = 100   # a number in a job or workload file
MAX_MODEL_SOURCE = 1 << 20   # a model file's source goes in every worker's event
_SHOWN = reprlib.Repr()   # 2 levels of at most 4 items: cheap to compute, however large the value
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxdict, _SHOWN.maxstring, _SHOWN.maxother = 2, 4, 4, 80, 80


def shown(value: Any) -> str:
    """A value as an error message quotes it: short, however large it is (YAML anchors can
    expand a 400-byte file into a value whose full repr runs to gigabytes)."""
    if isinstance(value, bool):   # as the file writes it, not Python's True
        return str(value).lower()
    return _SHOWN.repr(value)


NAME_RE = re.compile(r"[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?")   # fullmatch: "$" would let "a\n" in


@dataclass(frozen=True)
class JobSpec:
    """A job as the loop runs it; every field already validated."""

    source: str
    name: str
    model: dict[str, Any]                  # {"name": "lenet"} or {"file": "/abs/model.py", "source": its text}
    dataset: dict[str, Any]                # {"name": "mnist-5k", **options}
    target_loss: float
    budget: float
    batch_size: int                        # global batch per synchronous step, whatever w is
    optimizer: str
    learning_rate: float
    momentum: float
    weight_decay: float
    allocation: str                        # dynamic | static
    workers: int                           # static: exactly; dynamic: 1, unused (tuning and the planner decide)
    servers: int
    max_workers: int
    max_servers: int
    resources: dict[str, RoleResources]
    scheduler: str                         # default | gang (placement on clusters)
    consecutive: int                       # epochs at or below target in a row to stop
    max_epochs: int
    tuning_samples: int                    # samples per tuning mini-epoch (equal for every (w, s))
    max_retries: int                       # retries of one epoch before the job fails
    prices: Prices = field(default_factory=Prices)
    seed: int = 0                          # initial weights and data order; same seed, same run
    retune: bool = False                   # tune even what earlier jobs measured (`speeds_before`)

    @property
    def hyper(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "optimizer": self.optimizer,
                "learning_rate": self.learning_rate, "momentum": self.momentum,
                "weight_decay": self.weight_decay, "init_seed": (42 + self.seed) % 2**31}


FIELDS = {
    "name", "model", "dataset", "target_loss", "budget", "batch_size", "optimizer",
    "learning_rate", "momentum", "weight_decay", "allocation", "workers", "servers", "max_workers",
    "max_servers", "resources", "scheduler", "consecutive", "max_epochs", "tuning_samples",
    "max_retries", "prices", "seed", "retune",
}


class _Reader:
    """Typed look-ups into the parsed YAML that fail with the file and field named."""

    def __init__(self, source: str, data: dict[str, Any]) -> None:
        self.source, self.data = source, data

    def fail(self, field: str, problem: str) -> SpecError:
        return SpecError(self.source, field, problem)

    def number(self, key: str, default: float | None = None, *, gt: float | None = None,
               ge: float | None = None, integer: bool = False, data: dict[str, Any] | None = None,
               prefix: str = "") -> Any:
        d = self.data if data is None else data
        name = prefix + key
        if key not in d or d[key] is None:
            if default is None:
                raise self.fail(name, "missing (required)")
            return default
        v = d[key]
        if isinstance(v, str) and NUMBER_TEXT.fullmatch(v.strip()):
            v = float(v)   # YAML 1.1 reads 1e-1 (an exponent without a dot) as text
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.fail(name, f"must be a number, got {shown(v)}")
        if abs(v) > MAX_NUMBER or not math.isfinite(v):
            raise self.fail(name, f"must be finite and at most {MAX_NUMBER:g} in size, got {str(v)[:30]}")
        if integer and (not float(v).is_integer()):
            raise self.fail(name, f"must be a whole number, got {shown(v)}")
        if gt is not None and not v > gt:
            raise self.fail(name, f"must be > {gt:g}, got {shown(v)}")
        if ge is not None and not v >= ge:
            raise self.fail(name, f"must be >= {ge:g}, got {shown(v)}")
        return int(v) if integer else float(v)

    def flag(self, key: str, default: bool) -> bool:
        v = self.data.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):   # YAML reads yes/no/on/off as booleans too; "false" in quotes is text
            raise self.fail(key, f"must be true or false, got {shown(v)}")
        return v

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        v = self.data.get(key, default)
        if v is None:
            v = default
        if not isinstance(v, str) or v not in choices:
            raise self.fail(key, f"must be one of {', '.join(choices)}, got {shown(v)}")
        return v


def _quantity_text(value: Any) -> str:
    """A quantity as text; "" for anything but text or a number (str() of a nested value can
    take gigabytes, and a boolean is no size)."""
    return str(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else ""


def _memory_gib(r: _Reader, value: Any, name: str) -> float:
    """Kubernetes quantities (512Mi, 1Gi, 1G) or plain GiB numbers, up to MAX_ROLE_GIB."""
    size = quantities.gib(_quantity_text(value))
    if size is None or size <= 0:
        raise r.fail(name, f"must be a memory size like 512Mi or 2Gi, got {shown(value)}")
    if size < 1 / 1024:   # a pod's request is written in MiB: it would ask for 0
        raise r.fail(name, f"{shown(value)} is under 1Mi, the smallest request a function's pod can have")
    if size > MAX_ROLE_GIB:   # e.g. 1073741824 meant as bytes: a plain number here is GiB
        raise r.fail(name, f"{shown(value)} is {size:g} GiB, more than {MAX_ROLE_GIB} GiB for one function "
                           "(a plain number is GiB; write bytes as 1Gi, 512Mi)")
    return quantities.written_gib(size)


def _cpu(r: _Reader, value: Any, name: str) -> float:
    """Kubernetes CPU quantities (500m, 0.5, 2, "2"), up to MAX_ROLE_CPU."""
    n = quantities.cores(_quantity_text(value))
    if n is None or n <= 0:
        raise r.fail(name, f"must be cores like 0.5 or 500m, got {shown(value)}")
    if n < 0.001:   # a pod's request is written in millicores: it would ask for 0
        raise r.fail(name, f"{shown(value)} is under 1m, the smallest request a function's pod can have")
    if n > MAX_ROLE_CPU:
        raise r.fail(name, f"{shown(value)} is {n:g} cores, more than {MAX_ROLE_CPU} for one function")
    return quantities.written_cores(n)


def _local_path(r: _Reader, field: str, base: Path, value: str) -> Path:
    """`value` (relative to the job file's folder, `~` expanded) as an absolute path; one the
    system cannot even look up (an unknown user's `~`, a NUL byte, a name too long, a symlink
    loop) is named as the field's problem, not a traceback."""
    try:
        path = (base / Path(value).expanduser()).resolve()
        path.exists()   # the lookup itself is what fails for a name too long or a NUL byte
    except (OSError, ValueError, RuntimeError) as e:
        raise r.fail(field, f"{shown(value)} is not a usable path: {getattr(e, 'strerror', None) or e}") from None
    return path


def _model(r: _Reader, base: Path) -> dict[str, Any]:
    v = r.data.get("model")
    if v is None:
        raise r.fail("model", f"missing (required): one of {', '.join(BUILTIN_MODELS)} or a .py file")
    if isinstance(v, dict):
        extra = sorted(set(v) - {"name", "file"})
        if extra or len(v) != 1:
            raise r.fail("model", f"a mapping takes exactly one of name or file, got {sorted(v)}")
        v = v.get("file") or v.get("name")
    if not isinstance(v, str) or not v:
        raise r.fail("model", f"must be a model name or a .py file, got {shown(r.data.get('model'))}")
    if v.endswith(".py"):
        path = _local_path(r, "model", base, v)
        if path.is_dir():
            raise r.fail("model", f"model file {path} is a folder")
        if not path.is_file():
            raise r.fail("model", f"model file {path} does not exist")
        try:
            size = path.stat().st_size
            text = path.read_text() if size <= MAX_MODEL_SOURCE else ""
        except (OSError, UnicodeDecodeError) as e:
            raise r.fail("model", f"cannot read model file {path}: {getattr(e, 'strerror', None) or e}") from None
        if size > MAX_MODEL_SOURCE or len(json.dumps(text)) > MAX_MODEL_SOURCE:   # as an event carries it
            raise r.fail("model", f"model file {path} is larger than {MAX_MODEL_SOURCE >> 20} MiB as JSON: its "
                                  f"source travels in every event, and an HTTP trigger takes at most 4 MiB")
        problem = _build_problem(text)
        if problem:
            raise r.fail("model", f"{path}: {problem}")
        # the job trains the model as submitted: an edit to the file while it runs (or before
        # a resume) does not change the network under its checkpoint
        return {"file": str(path), "source": text}
    if v not in BUILTIN_MODELS:
        raise r.fail("model", f"unknown model {shown(v)}; choose one of {', '.join(BUILTIN_MODELS)} or a .py file")
    return {"name": v}


def _build_problem(source: str) -> str | None:
    """What keeps a model file from providing build(num_classes), read without running it.

    Parsing (not importing) catches syntax errors and a missing or wrongly shaped build()
    at submit time, before any epoch is charged, without importing MXNet into the CLI;
    what build() does when called is only known at run time.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as e:   # ValueError: a NUL byte, on some Python versions
        line = getattr(e, "lineno", None)
        return f"{f'line {line}: ' if line else ''}syntax error: {getattr(e, 'msg', None) or e}"
    except (RecursionError, MemoryError):   # e.g. one expression of 3,000 terms
        return "too deeply nested for Python to parse (split its longest expression)"
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "build":
            a = node.args
            positional = len(a.posonlyargs) + len(a.args)
            required = positional - len(a.defaults)
            kw_required = [k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is None]
            if isinstance(node, ast.AsyncFunctionDef):
                return f"line {node.lineno}: build must be a plain function, not async"
            if (positional < 1 and a.vararg is None) or required > 1 or kw_required:
                return (f"line {node.lineno}: build must accept exactly one argument (num_classes), "
                        f"it is build({ast.unparse(a)})")
            return None
        names = []
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.asname or a.name for a in node.names]
        elif isinstance(node, ast.ClassDef):
            names = [node.name]   # class build(HybridBlock): build(num_classes) makes the block
        if "build" in names or "*" in names:
            return None   # bound some other way (an import, a partial, a class): checked when it runs
    return "must define build(num_classes) returning a Gluon Block (no top-level build found)"


def _dataset(r: _Reader, base: Path) -> dict[str, Any]:
    v = r.data.get("dataset")
    if v is None:
        raise r.fail("dataset", f"missing (required): one of {', '.join(DATASETS)}")
    d = {"name": v} if isinstance(v, str) else v
    if not isinstance(d, dict) or not isinstance(d.get("name"), str):
        raise r.fail("dataset", f"must be a dataset name or a mapping with `name:`, got {shown(v)}")
    if d["name"] not in DATASETS:
        raise r.fail("dataset.name", f"unknown dataset {shown(d['name'])}; choose one of {', '.join(DATASETS)}")
    d = dict(d)
    if d["name"] == "cifar10":
        from coach.data.datasets import CIFAR_HELP, cifar_missing

        if not d.get("path") or not isinstance(d["path"], str):
            raise r.fail("dataset.path", f"cifar10 needs a local folder, got {shown(d.get('path'))}; {CIFAR_HELP}")
        root = _local_path(r, "dataset.path", base, d["path"])
        if not root.exists():   # it read "/nonexistent lacks data_batch_1, …"
            raise r.fail("dataset.path", f"{root} does not exist; {CIFAR_HELP}")
        if not root.is_dir():
            raise r.fail("dataset.path", f"{root} is a file, not a folder; {CIFAR_HELP}")
        if missing := cifar_missing(root):
            raise r.fail("dataset.path", f"{root} lacks {', '.join(missing)}; {CIFAR_HELP}")
        d["path"] = str(root)
    unknown = sorted(set(d) - {"name"} - set(DATASET_OPTIONS[d["name"]]))
    if unknown:
        allowed = ", ".join(DATASET_OPTIONS[d["name"]]) or "none"
        raise r.fail(f"dataset.{unknown[0]}", f"unknown setting for {d['name']} (settings: {allowed})")
    if d["name"] == "synthetic":
        for key in ("samples", "classes", "seed"):
            if key in d:
                d[key] = r.number(key, data=d, integer=True, ge=0 if key == "seed" else 2, prefix="dataset.")
        if d.get("seed", 0) >= 2**32:
            raise r.fail("dataset.seed", f"must be < 2**32, got {d['seed']}")
        if "noise" in d:
            d["noise"] = r.number("noise", data=d, ge=0, prefix="dataset.")
        if "shape" in d:
            shape = d["shape"]
            if (not isinstance(shape, list) or not 1 <= len(shape) <= 3
                    or not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1024 for v in shape)):
                raise r.fail("dataset.shape", f"must be 1 to 3 whole numbers in [1, 1024] like [3, 32, 32], "
                                              f"got {shown(shape)}")
        o = {**SYNTHETIC_DEFAULTS, **d}
        size = o["samples"] * math.prod(o["shape"])
        if size > MAX_SYNTHETIC_VALUES:
            raise r.fail("dataset.samples", f"samples × shape is {size:g} values, more than "
                                            f"{MAX_SYNTHETIC_VALUES:g} ({MAX_SYNTHETIC_VALUES * 4 / 2**30:g} GiB)")
        # each class has a centre of the samples' shape and an output of the network: 10**12 was
        # accepted, and every attempt's worker then died allocating 466 TiB of centres
        if o["classes"] > min(o["samples"], MAX_SYNTHETIC_CLASSES):
            raise r.fail("dataset.classes", f"must be at most the samples ({o['samples']}) and at most "
                                            f"{MAX_SYNTHETIC_CLASSES}, got {o['classes']}")
    return d


def _resources(r: _Reader) -> dict[str, RoleResources]:
    v = r.data.get("resources")
    v = {} if v is None else v
    if not isinstance(v, dict):
        raise r.fail("resources", f"must map roles ({', '.join(ROLES)}) to cpu/memory, got {shown(v)}")
    out = dict(DEFAULT_RESOURCES)
    for role, res in v.items():
        if role not in ROLES:
            raise r.fail(f"resources.{role}", f"unknown role; choose from {', '.join(ROLES)}")
        if not isinstance(res, dict) or set(res) - {"cpu", "memory"}:
            raise r.fail(f"resources.{role}", f"must be a mapping with cpu and/or memory, got {shown(res)}")
        cpu = _cpu(r, res["cpu"], f"resources.{role}.cpu") if "cpu" in res else out[role].cpu
        mem = _memory_gib(r, res["memory"], f"resources.{role}.memory") if "memory" in res else out[role].memory_gib
        out[role] = RoleResources(cpu, mem)
    return out


def parse_spec(data: Any, source: str, base: Path | None = None) -> JobSpec:
    """Validate parsed YAML into a JobSpec; `source` names the file in every message."""
    if not isinstance(data, dict):
        got = "an empty file" if data is None else type(data).__name__
        raise SpecError(source, "", f"must be a YAML mapping of job fields, got {got}")
    r = _Reader(source, data)
    unknown = sorted(set(map(str, data)) - FIELDS)
    if unknown:
        raise r.fail(unknown[0], f"unknown field; known fields: {', '.join(sorted(FIELDS))}")
    base = base or Path.cwd()
    name = data.get("name")
    if name is None:
        raise r.fail("name", "missing (required): 1-40 lowercase letters, digits or '-'")
    if isinstance(name, (bool, int, float, datetime.date)):   # `name: 12` read "must be ... digits, got 12"
        kind = ("true/false" if isinstance(name, bool) else "a date" if isinstance(name, datetime.date)
                else "a number")
        raise r.fail("name", f"YAML read it as {kind} ({shown(name)}), not text: quote it as written")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise r.fail("name", f"must be 1-40 lowercase letters, digits or '-', starting and ending with a letter "
                             f"or digit, got {shown(name)}")
    allocation = r.choice("allocation", ("dynamic", "static"), "dynamic")
    for key in ("workers", "servers"):
        if allocation == "static" and key not in data:
            raise r.fail(key, "missing: a static allocation needs workers and servers")
        if allocation == "dynamic" and data.get(key) is not None:   # it would be ignored without a word
            raise r.fail(key, f"is only for allocation: static; a dynamic job's {key} are chosen by tuning and "
                              f"the planner (bound them with max_{key}, or set allocation: static)")
    workers = r.number("workers", 1, integer=True, ge=1)
    servers = r.number("servers", 1, integer=True, ge=1)
    # a static job's limits default to its allocation: 10 workers were refused as "more than
    # max_workers (8)", and 1 worker with a batch of 4 as "batch_size must be >= max_workers (8)"
    static = allocation == "static"
    max_workers = r.number("max_workers", workers if static else 8, integer=True, ge=1)
    max_servers = r.number("max_servers", servers if static else 4, integer=True, ge=1)
    if workers > max_workers:
        raise r.fail("workers", f"must be <= max_workers ({max_workers}), got {workers}")
    if servers > max_servers:
        raise r.fail("servers", f"must be <= max_servers ({max_servers}), got {servers}")
    model, dataset = _model(r, base), _dataset(r, base)
    if model.get("name") in ("lenet", "resnet18") and dataset["name"] == "synthetic":
        shape = {**SYNTHETIC_DEFAULTS, **dataset}["shape"]
        if len(shape) != 3:   # 2-D convolutions; else every attempt fails in the first forward pass
            raise r.fail("dataset.shape", f"{model['name']} convolves images: give [channels, height, width] "
                                          f"like [1, 8, 8], got {shown(shape)}")
        if model["name"] == "lenet" and min(shape[1:]) < LENET_MIN_SIDE:   # two 2×2 poolings
            raise r.fail("dataset.shape", f"lenet pools twice by 2: images need a height and width of at least "
                                          f"{LENET_MIN_SIDE}, got {shown(shape)}")
    batch_size = r.number("batch_size", 64, integer=True, ge=1)
    if batch_size < max_workers:
        raise r.fail("batch_size", f"must be >= max_workers ({max_workers}) so every worker gets a sample per step")
    try:
        n_train = train_size(dataset["name"], dataset)
    except SpecError as e:   # a CIFAR-10 batch that does not load, named by file
        raise r.fail("dataset.path", e.problem) from None
    if batch_size > n_train:
        raise r.fail("batch_size", f"{batch_size} is more than the {n_train} training samples of "
                                   f"{dataset['name']}: every epoch would be a single step")
    # a mini-epoch is trimmed to the data; it needs a sample for every worker it is tried with
    tuning_samples = min(r.number("tuning_samples", max(1024, batch_size), integer=True, ge=1), n_train)
    if tuning_samples < max_workers:
        raise r.fail("tuning_samples", f"must be >= max_workers ({max_workers}) so every worker gets a sample, "
                                       f"got {tuning_samples}")
    prices = data.get("prices")
    prices = {} if prices is None else prices
    if not isinstance(prices, dict) or set(prices) - {"cpu_core_second", "gib_second"}:
        raise r.fail("prices", f"must be a mapping with cpu_core_second and/or gib_second, got {shown(prices)}")
    momentum = r.number("momentum", 0.9, ge=0)
    optimizer = r.choice("optimizer", OPTIMIZERS, "sgd")
    if data.get("momentum") is not None and optimizer not in MOMENTUM_OPTIMIZERS:   # it was ignored unsaid
        raise r.fail("momentum", f"is used by {' and '.join(MOMENTUM_OPTIMIZERS)} only, not {optimizer}: leave it out")
    if momentum >= 1:
        raise r.fail("momentum", f"must be < 1 (at 1 or more the updates grow without bound), got {momentum:g}")
    consecutive = r.number("consecutive", 3, integer=True, ge=1)
    if consecutive > MAX_CONSECUTIVE:   # the stop rule's chain grows with it (10,000: minutes per prediction)
        raise r.fail("consecutive", f"must be at most {MAX_CONSECUTIVE}, got {consecutive}")
    max_epochs = r.number("max_epochs", 50, integer=True, ge=1)
    if consecutive > max_epochs and "consecutive" not in r.data:   # the file set max_epochs only
        raise r.fail("max_epochs", f"must be >= consecutive ({consecutive} by default): the stop rule needs "
                                   f"{consecutive} training epochs in a row, got {max_epochs}")
    if consecutive > max_epochs:
        raise r.fail("consecutive", f"must be <= max_epochs ({max_epochs}): the stop rule needs "
                                    f"{consecutive} training epochs in a row, got {consecutive}")
    retune = r.flag("retune", False)
    if static and retune:   # it would be ignored without a word
        raise r.fail("retune", "is only for allocation: dynamic; a static job does not tune")
    spec = JobSpec(
        source=source, name=name, model=model, dataset=dataset,
        target_loss=r.number("target_loss", gt=0), budget=r.number("budget", gt=0),
        batch_size=batch_size, optimizer=optimizer,
        learning_rate=r.number("learning_rate", 0.05, gt=0), momentum=momentum,
        weight_decay=r.number("weight_decay", 0.0, ge=0), allocation=allocation,
        workers=workers, servers=servers, max_workers=max_workers, max_servers=max_servers,
        resources=_resources(r), scheduler=r.choice("scheduler", ("default", "gang"), "default"),
        consecutive=consecutive, max_epochs=max_epochs,
        tuning_samples=tuning_samples,
        max_retries=r.number("max_retries", 3, integer=True, ge=0),
        seed=r.number("seed", 0, integer=True, ge=0), retune=retune,
        prices=Prices(r.number("cpu_core_second", DEFAULT_CPU_CORE_SECOND_PRICE, ge=0, data=prices, prefix="prices."),
                      r.number("gib_second", DEFAULT_GIB_SECOND_PRICE, ge=0, data=prices, prefix="prices.")),
    )
    smallest = epoch_cost(1, 1, spec.resources, MIN_BUDGET_SECONDS, spec.prices)
    if spec.budget < smallest:
        raise r.fail("budget", f"{spec.budget:g} buys less than {MIN_BUDGET_SECONDS:g} s of the smallest "
                               f"configuration (a scheduler, a server and a worker cost {smallest:.3g} per "
                               "second at these prices and resources): its first epoch alone would overspend it")
    return spec


MIN_BUDGET_SECONDS = 1.0
"""A budget must buy at least this long on (1, 1): an epoch's cost is only known once it ran,
so a smaller one was overspent hundreds of times by the first (mini-)epoch."""


MAX_SYNTHETIC_VALUES = 2 * 10**9 // 4
"""At most 2 GiB of float32 for a generated dataset (it lives in every role process)."""
MAX_CONSECUTIVE = 1000
"""Epochs in a row of the stop rule, as `coach estimate --consecutive` allows."""

MAX_SYNTHETIC_CLASSES = 100_000
"""Classes of a generated dataset: their centres (classes × shape values) and the network's output layer."""
NUMBER_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", re.ASCII)
"""A number YAML 1.1 reads as text: an exponent without a dot (1e-1, 1e3); ASCII digits only
(float() reads a fullwidth "３" too)."""
LENET_MIN_SIDE = 4
"""Smaller images fail in MXNet's second pooling at every attempt ('kernel size (2) exceeds input')."""
MAX_ROLE_CPU = 1024
MAX_ROLE_GIB = 4096


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice (plain YAML keeps the last one silently). Keys
    merged in with `<<: *anchor` are not given twice: a key written beside them overrides them."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":   # refused as a key without a constructor
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:   # a list or mapping as a key
                raise yaml.constructor.ConstructorError(None, None, "a key must be a plain value, not a list or "
                                                        "mapping", key_node.start_mark) from None
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice",
                                                        key_node.start_mark)
            if key is None:   # was named "None"
                raise yaml.constructor.ConstructorError(None, None, "a key is empty (null); give a field's name",
                                                        key_node.start_mark)
            seen.add(key)
        self.flatten_mapping(node)
        return super().construct_mapping(node, deep=deep)


def _number_as_yaml_12(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    """Two of YAML 1.1's number forms, read as YAML 1.2 reads them: `1:30` (base 60, was 90) is
    text, and `010` (octal, was 8) is ten. A job file means what it shows."""
    text = node.value.replace("_", "")
    if len(text) > MAX_DIGITS:   # Python reads at most 4,300 digits of an int: a ValueError traceback
        raise yaml.constructor.ConstructorError(None, None, f"a number written with {len(text)} digits; at most "
                                                            f"{MAX_DIGITS}", node.start_mark)
    if ":" in text:
        return loader.construct_scalar(node)
    integer = node.tag.endswith(":int")
    if integer and text.lstrip("+-")[:1] == "0" and text.lstrip("+-")[1:2].isdigit():
        return int(text, 10)
    try:   # `!!int abc` and `!!float ""` ended in a ValueError or IndexError
        return (yaml.SafeLoader.construct_yaml_int if integer else yaml.SafeLoader.construct_yaml_float)(loader, node)
    except (ValueError, IndexError):
        raise yaml.constructor.ConstructorError(None, None, f"{node.value[:40]!r} is not a number",
                                                node.start_mark) from None


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _number_as_yaml_12)
_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:float", _number_as_yaml_12)


def load_spec(path: str | Path) -> JobSpec:
    """Read and validate one job file."""
    return parse_spec(read_yaml(path), str(path), Path(path).parent)


def read_yaml(path: str | Path, what: str = "job file") -> Any:
    """A YAML file's content (a key given twice is an error); every problem is a SpecError
    naming the file (and the line, for invalid YAML)."""
    p = Path(path)
    source = str(path)
    mode = looked_up(p, source)
    if not stat.S_ISREG(mode):
        raise SpecError(source, "", f"a folder, not a {what}" if stat.S_ISDIR(mode) else "not a regular file")
    text = ""
    try:
        text = p.read_text(encoding="utf-8")
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.reader.ReaderError as e:   # a character YAML does not allow, e.g. a NUL byte
        line = text[:e.position].count("\n") + 1
        code = e.character if isinstance(e.character, int) else ord(e.character)
        raise SpecError(source, f"line {line}", f"not valid YAML: character U+{code:04X} is not allowed") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "YAML"
        problem = getattr(e, "problem", None) or str(e)
        if "another document" in problem:   # a second `---`: one file, one job or workload
            problem = "a second YAML document starts here; the file must hold one"
        raise SpecError(source, where, f"not valid YAML: {problem}") from None
    except UnicodeDecodeError as e:
        line = e.object[:e.start].count(b"\n") + 1
        raise SpecError(source, f"line {line}", f"not UTF-8 text (byte 0x{e.object[e.start]:02x}); "
                                                "save the file as UTF-8") from None
    except RecursionError:
        raise SpecError(source, "YAML", "nested too deeply") from None
    except OSError as e:
        raise SpecError(source, "", f"cannot read: {e.strerror}") from None
    return data


def _rebuilt(cls: type, values: Any, prefix: str) -> Any:
    try:
        return cls(**values)
    except TypeError as e:
        raise TypeError(f"{prefix}: {e}") from None


def spec_from_dict(d: dict[str, Any]) -> JobSpec:
    """Rebuild the JobSpec recorded at submission (for `coach resume`)."""
    try:
        d = dict(d)
        d["resources"] = {k: _rebuilt(RoleResources, v, f"resources.{k}") for k, v in d["resources"].items()}
        d["prices"] = _rebuilt(Prices, d["prices"], "prices")
        spec = JobSpec(**d)
        check_types(spec)
        _check_values(spec)
        return spec
    except (KeyError, TypeError, AttributeError, ValueError) as e:   # edited or damaged in the store
        raise StateError(f"the job's recorded spec cannot be read back ({type(e).__name__}: {e}); "
                         "submit its job file again") from None


_AT_LEAST = {"batch_size": 1, "workers": 1, "servers": 1, "max_workers": 1, "max_servers": 1, "consecutive": 1,
             "max_epochs": 1, "tuning_samples": 1, "max_retries": 0, "seed": 0, "weight_decay": 0, "momentum": 0}
_CHOICES = {"optimizer": OPTIMIZERS, "allocation": ("dynamic", "static"), "scheduler": ("default", "gang")}


def _check_values(spec: JobSpec) -> None:
    """What parse_spec checks of each value on its own, again: an edited spec ran (an unknown
    model failed every attempt of an epoch, each charged) or failed as a KeyError (a role left out)."""
    bad = [(k, f"must be >= {v}") for k, v in _AT_LEAST.items() if getattr(spec, k) < v]
    bad += [(k, "must be > 0") for k in ("target_loss", "budget", "learning_rate") if getattr(spec, k) <= 0]
    bad += [(k, f"must be one of {', '.join(v)}") for k, v in _CHOICES.items() if getattr(spec, k) not in v]
    if spec.momentum >= 1:
        bad.append(("momentum", "must be < 1"))
    if not NAME_RE.fullmatch(spec.name):
        bad.append(("name", "must be 1-40 lowercase letters, digits or '-'"))
    if not (spec.model.get("name") in BUILTIN_MODELS and len(spec.model) == 1 or
            set(spec.model) == {"file", "source"} and all(isinstance(v, str) for v in spec.model.values())):
        bad.append(("model", f"must be one of {', '.join(BUILTIN_MODELS)} or a file with its source"))
    if spec.dataset.get("name") not in DATASETS:
        bad.append(("dataset", f"must be one of {', '.join(DATASETS)}"))
    if set(spec.resources) != set(ROLES):
        bad.append(("resources", f"must give {', '.join(ROLES)}"))
    if bad:
        k, problem = bad[0]
        value = sorted(spec.resources) if k == "resources" else getattr(spec, k)
        raise ValueError(f"{k} {problem}, got {shown(value)}")
