"""Model state between epochs: parameters and optimizer state, written atomically.

Workers are stateless; rank 0 writes a checkpoint directory at the end of an epoch and every
worker of the next epoch loads it. The directory is written under a temporary name and renamed
into place, so a reader sees a whole checkpoint or none.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

from coach.errors import CheckpointError, one_line

PARAMS, TRAINER, META = "params", "trainer.states", "meta.json"
FILES = (PARAMS, TRAINER, META)


def save(out: str | Path, net: Any, trainer: Any, meta: dict[str, Any]) -> Path:
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    net.save_parameters(str(tmp / PARAMS))
    trainer.save_states(str(tmp / TRAINER))
    (tmp / META).write_text(json.dumps(meta))
    for f in tmp.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    if out.exists():  # a retried attempt may have left the same name; replace it whole, if it is one
        if not is_checkpoint_or_part(out):
            raise CheckpointError(f"{out}: exists and is not a checkpoint; not replaced")
        shutil.rmtree(out)
    os.rename(tmp, out)
    return out


def is_complete(path: str | Path) -> bool:
    p = Path(path)
    return all((p / n).is_file() for n in FILES)


def is_checkpoint_or_part(path: Path) -> bool:
    """Whether `save` may replace what is at `path`: a folder of checkpoint files, nothing else."""
    try:
        return not path.is_symlink() and path.is_dir() and {p.name for p in path.iterdir()} <= set(FILES)
    except OSError:
        return False


def load(path: str | Path, net: Any, trainer: Any, ctx: Any) -> dict[str, Any]:
    """Load a checkpoint into `net` and `trainer`; a missing or damaged one is a CheckpointError
    naming the file (loading it again would fail again, so it is not retried)."""
    p = Path(path)
    if not is_complete(p):
        raise CheckpointError(f"{p}: not a complete checkpoint")
    from mxnet.base import MXNetError

    for name, read in ((PARAMS, lambda f: net.load_parameters(f, ctx=ctx)), (TRAINER, trainer.load_states)):
        try:
            read(str(p / name))
        # what a file that is not what save() wrote raises; OSError or MemoryError are retried
        except (MXNetError, ValueError, KeyError, EOFError, pickle.UnpicklingError) as e:
            # MXNet's own messages are C++ stack traces: keep their first line
            first = one_line(e, 200)
            raise CheckpointError(f"{p / name}: damaged checkpoint, cannot be loaded "
                                  f"({type(e).__name__}: {first})") from None
    try:
        return json.loads((p / META).read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{p / META}: damaged checkpoint: {e}") from None
