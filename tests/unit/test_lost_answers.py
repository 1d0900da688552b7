"""What an epoch attempt charges for a call that came back without the function's own count."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coach.job.epoch import _role_starts, _served


def _pid_file(folder: Path, name: str, mtime: float) -> None:
    (folder / name).write_text("123")
    os.utime(folder / name, (mtime, mtime))


def test_a_lost_answer_is_charged_from_its_role_process_start(tmp_path: Path) -> None:
    # written by the functions once MXNet was imported, removed by those that answered
    _pid_file(tmp_path, "worker-1.pid", 1000.0)
    _pid_file(tmp_path, "worker-0.pid", 990.0)
    _pid_file(tmp_path, "server-4242.pid", 995.0)
    (tmp_path / "abort").write_text("worker: killed")   # not a role's file
    starts = _role_starts(tmp_path)
    assert starts == {"worker": [990.0, 1000.0], "server": [995.0]}
    assert _served(starts["worker"], 1003.0) == pytest.approx(13.0)   # oldest first
    assert _served(starts["worker"], 1003.0) == pytest.approx(3.0)
    assert _served(starts["worker"], 1003.0) == 0.0   # a third worker never started: nothing to charge
    assert _served(starts["server"], 990.0) == 0.0     # never negative


def test_no_role_process_started_nothing_is_charged(tmp_path: Path) -> None:
    # Ctrl-C while the replicas still imported MXNet: the whole wall time was charged (3x a whole mini-epoch)
    assert _role_starts(tmp_path) == {}
    assert _served(_role_starts(tmp_path).get("scheduler", []), 1e9) == 0.0
