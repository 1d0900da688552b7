"""The files a role function keeps beside its attempt's abort marker, for the job loop.

The loop learns what an event served from the function's answer. These files are for answers
that never come. `<role>-<key>.pid` names a running role process and holds its start; the
function touches it every HEARTBEAT_S while the process runs, so its mtime is when the process
was last seen alive; it is removed when the function answers. `<role>-<id>.served` holds the
seconds an answered event charged. The loop removes an epoch's attempt folders once it has
recorded the epoch's charge, so a folder left behind (and not marked settled in the store)
belongs to a run that was killed (`kill -9`, a crashed machine) before that, and these files
are what that epoch still owes.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

HEARTBEAT_S = 1.0
WORKERS_DONE = "workers-done"
"""Written by the job loop beside the abort marker once every worker of the attempt has
answered: the scheduler and servers have nothing left to do, and their functions end them
(see `coach.roles.runner` for why the group does not shut ps-lite down itself)."""


@dataclass(frozen=True)
class Running:
    """A role process that had not answered when its folder was read."""

    pid: int
    start: float   # wall clock, when its function saw it start (MXNet already imported)
    seen: float    # wall clock, its function's last heartbeat


def mark_running(folder: Path, role: str, key: str, pid: int) -> Path | None:
    """Write the role process's pid file; None if the attempt's folder is gone (abandoned)."""
    path = folder / f"{role}-{key}.pid"
    try:
        path.write_text(f"{pid} {time.time():.3f}")
    except OSError:
        return None
    return path


def heartbeat(path: Path) -> None:
    """Say the role process still runs (an mtime update is atomic: a kill cannot garble it)."""
    try:
        os.utime(path)
    except OSError:   # the folder was removed: the function's abort check sees that
        pass


def mark_workers_done(folder: Path) -> None:
    """Tell the attempt's scheduler and server functions that the workers are done."""
    try:
        (folder / WORKERS_DONE).touch()
    except OSError:   # the folder is gone: the loop is done with the attempt, and so are they
        pass


def mark_served(folder: Path, role: str, seconds: float) -> None:
    """Leave what an answered event charged, in case its answer is never recorded."""
    path = folder / f"{role}-{uuid.uuid4().hex[:8]}.served"
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(repr(seconds))
        tmp.replace(path)   # whole or not at all, as a kill may come at any moment
    except OSError:   # the folder is gone: the loop is done with the attempt
        pass


def running(folder: Path) -> dict[str, list[Running]]:
    """Every role process of the attempt that has not answered, by role, oldest first. A file
    that cannot be read (removed meanwhile: it answered) is skipped."""
    found: dict[str, list[Running]] = {}
    for f in folder.glob("*.pid"):
        try:
            pid, start = f.read_text().split()
            found.setdefault(f.name.split("-", 1)[0], []).append(Running(int(pid), float(start), f.stat().st_mtime))
        except (OSError, ValueError):
            pass
    return {role: sorted(rs, key=lambda r: r.start) for role, rs in found.items()}


def served(folder: Path) -> dict[str, float]:
    """Seconds charged by the attempt's answered events, summed by role."""
    total: dict[str, float] = {}
    for f in folder.glob("*.served"):
        role = f.name.split("-", 1)[0]
        try:
            total[role] = total.get(role, 0.0) + float(f.read_text())
        except (OSError, ValueError):
            pass
    return total
