"""Run one job through the real `coach submit` in a throwaway COACH_HOME, for benchmarks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def submit_job(job: dict, *args: str) -> tuple[float, dict, list[dict]]:
    """(wall seconds of `coach submit JOB ARGS`, the job's final record, its history records)."""
    with tempfile.TemporaryDirectory() as home:
        path = Path(home) / f"{job['name']}.yaml"
        path.write_text(yaml.safe_dump(job))
        env = dict(os.environ, COACH_HOME=home)

        def coach(*args: str) -> str:
            return subprocess.run([sys.executable, "-m", "coach.cli.main", *args], env=env, capture_output=True,
                                  text=True, cwd=ROOT).stdout

        t0 = time.monotonic()
        [rec] = json.loads(coach("submit", str(path), "--json", *args))
        wall = time.monotonic() - t0
        return wall, rec, json.loads(coach("history", rec["job_id"], "--json"))
