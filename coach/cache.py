"""Where Coach keeps what it can rebuild: built binaries, the local cluster, parsed datasets.

Outside the state folder ($COACH_HOME): every Coach home on the machine shares it, and deleting
it loses nothing but time."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/coach, else ~/.cache/coach."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "coach"
