"""A user's model file runs as it was submitted, and its tracebacks quote what ran."""

from __future__ import annotations

import linecache
from pathlib import Path

from coach.models.zoo import build_model


def test_a_model_file_runs_and_is_quoted_as_submitted(tmp_path: Path) -> None:
    path = tmp_path / "net.py"
    path.write_text("raise RuntimeError('edited after submit')\n")   # the file now
    submitted = "from mxnet.gluon import nn\n\n\ndef build(num_classes):\n    return nn.Dense(num_classes)\n"
    from mxnet.gluon import Block

    assert isinstance(build_model("", 10, str(path), submitted), Block)
    # a traceback through the network's code shows the submitted line, not the edited file's
    assert linecache.getline(str(path), 5) == "    return nn.Dense(num_classes)\n"
    linecache.checkcache(str(path))   # what traceback printing does first
    assert linecache.getline(str(path), 5) == "    return nn.Dense(num_classes)\n"
