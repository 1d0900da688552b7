"""Built-in Gluon models and the loader for a user's model file.

A user model file is plain Python that defines `build(num_classes: int) -> gluon.Block`;
its text is recorded at submit and run inside each worker, so it must not depend on the
submitting machine (nor on later edits of the file). Its code runs under a time limit
(limit.py).
"""

from __future__ import annotations

import linecache
import types
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from coach.errors import UserCodeError, one_line
from coach.models.limit import limited

BUILTIN_MODELS = ("lenet", "mlp", "resnet18")


def _lenet(num_classes: int) -> Any:
    from mxnet.gluon import nn

    net = nn.HybridSequential()
    net.add(nn.Conv2D(20, kernel_size=5, padding=2, activation="relu"), nn.MaxPool2D(2, 2),
            nn.Conv2D(50, kernel_size=5, padding=2, activation="relu"), nn.MaxPool2D(2, 2),
            nn.Flatten(), nn.Dense(500, activation="relu"), nn.Dense(num_classes))
    return net


def _mlp(num_classes: int) -> Any:
    from mxnet.gluon import nn

    net = nn.HybridSequential()
    net.add(nn.Flatten(), nn.Dense(256, activation="relu"), nn.Dense(128, activation="relu"),
            nn.Dense(num_classes))
    return net


def _resnet18(num_classes: int) -> Any:
    from mxnet.gluon.model_zoo import vision

    return vision.resnet18_v1(classes=num_classes, thumbnail=True)


def build_model(name: str, num_classes: int, file: str | None = None, source: str | None = None) -> Any:
    """Build the job's network; `file` (a user's Python file, as `source` when submitted)
    wins over a built-in name."""
    if file:
        return _user_model(Path(file), num_classes, source)
    builders = {"lenet": _lenet, "mlp": _mlp, "resnet18": _resnet18}
    if name not in builders:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(BUILTIN_MODELS)} or give a file")
    return builders[name](num_classes)


def _user_model(path: Path, num_classes: int, source: str | None) -> Any:
    """Run the model file (its `source` as submitted, else the file now) and call its
    build(num_classes); every failure names the file (UserCodeError). Compiled under the
    file's own name, so that tracebacks point at it."""
    from mxnet.gluon import Block

    module = types.ModuleType(f"coach_user_model_{path.stem}")
    module.__file__ = str(path)
    try:
        if source is None:
            source = path.read_text()
    except OSError as e:
        raise UserCodeError(f"{path}: cannot be read: {e.strerror or e}") from None
    # tracebacks quote the lines that ran, not the file as edited since (no mtime: kept)
    linecache.cache[str(path)] = (len(source), None, source.splitlines(True), str(path))
    with limited(path, "importing it"):
        try:
            exec(compile(source, str(path), "exec"), module.__dict__)
        except Exception as e:
            raise UserCodeError(f"{path}: importing it raised {type(e).__name__}: {e}") from None
    build = getattr(module, "build", None)
    if not callable(build):
        raise UserCodeError(f"{path}: must define build(num_classes) returning a Gluon Block")
    with limited(path, f"build({num_classes})"):
        try:
            net = build(num_classes)
        except Exception as e:
            raise UserCodeError(f"{path}: build({num_classes}) raised {type(e).__name__}: {e}") from None
    if not isinstance(net, Block):
        raise UserCodeError(f"{path}: build({num_classes}) returned {type(net).__name__}, not a Gluon Block")
    return net


def first_forward(net: Any, sample_shape: tuple[int, ...], num_classes: int, file: str | None, ctx: Any) -> None:
    """Pass one zero sample through the initialised network: that materialises Gluon's deferred
    shapes, and shows whether a user's network gives one score per class. A network with too
    few outputs would train anyway (the loss clips labels to its outputs) and report losses
    that mean nothing, so that and a forward pass that raises are UserCodeError (not retried)."""
    import mxnet as mx

    with limited(Path(file), "the first forward pass") if file else nullcontext():
        try:
            out = net(mx.nd.zeros((1,) + tuple(sample_shape), ctx=ctx))
            shape = tuple(out.shape)
            mx.nd.waitall()   # operators run asynchronously: one that hangs does so here, within the limit
        except Exception as e:
            if not file:   # a built-in network: the job file's data is checked at submit
                raise
            first = one_line(e)
            raise UserCodeError(f"{file}: the network failed on one sample of shape {tuple(sample_shape)}: "
                                f"{type(e).__name__}: {first}") from None
    if file and shape != (1, num_classes):
        raise UserCodeError(f"{file}: the network outputs shape {shape[1:]} per sample; it must output "
                            f"({num_classes},), one score per class (build gets num_classes={num_classes})")
