"""Model state between epochs: parameters and optimizer state, written atomically.

Workers are stateless; rank 0 writes a checkpoint directory at the end of an epoch and every
worker of the next epoch loads it. The directory is written under a temporary name and renamed
into place, so a reader sees a whole checkpoint or none.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

PARAMS, TRAINER, META = "params", "trainer.states", "meta.json"


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
    if out.exists():  # a retried attempt may have left the same name; replace it whole
        shutil.rmtree(out)
    os.rename(tmp, out)
    return out


def is_complete(path: str | Path) -> bool:
    p = Path(path)
    return all((p / n).is_file() for n in (PARAMS, TRAINER, META))


def load(path: str | Path, net: Any, trainer: Any, ctx: Any) -> dict[str, Any]:
    p = Path(path)
    if not is_complete(p):
        raise FileNotFoundError(f"{p}: not a complete checkpoint")
    net.load_parameters(str(p / PARAMS), ctx=ctx)
    trainer.load_states(str(p / TRAINER))
    return json.loads((p / META).read_text())
