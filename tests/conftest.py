"""Shared fixtures: an isolated COACH_HOME per test and a way to run the real `coach` CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COACH = [sys.executable, "-m", "coach.cli.main"]


@pytest.fixture
def coach_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("COACH_HOME", str(home))
    return home


def run_coach(*args: str, timeout: float = 900, check: bool = False, cwd: Path = ROOT,
              **kw) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess (same COACH_HOME as the test's environment)."""
    proc = subprocess.run([*COACH, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=dict(os.environ), **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"coach {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def write_job(path: Path, **fields) -> Path:
    path.write_text(yaml.safe_dump(fields, sort_keys=False))
    return path


FAST_JOB = dict(model="mlp", dataset="digits", target_loss=0.25, budget=1.0, batch_size=32,
                learning_rate=0.05, momentum=0.9, max_workers=2, max_servers=2, max_epochs=25,
                tuning_samples=256)
