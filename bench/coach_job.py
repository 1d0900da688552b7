"""Run jobs through the real `coach` CLI in a throwaway COACH_HOME, for benchmarks."""

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
COACH = [sys.executable, "-m", "coach.cli.main"]


def coach(home: Path | str, *args: str) -> subprocess.CompletedProcess:
    """The real CLI on the state in `home`."""
    return subprocess.run([*COACH, *args], env=dict(os.environ, COACH_HOME=str(home)), capture_output=True,
                          text=True, cwd=ROOT)


def submitted(returncode: int | None, stdout: str, stderr: str) -> list[dict]:
    """The jobs' final records that `coach submit --json` printed; exit 1 means a job stopped
    short (a figure), anything else that the run itself failed."""
    if returncode not in (0, 1):
        raise SystemExit(f"coach submit exited {returncode}: {stderr[-2000:]}")
    return json.loads(stdout)


def submit_job(job: dict, home: Path | None = None) -> tuple[float, dict, list[dict]]:
    """(wall seconds of `coach submit`, the job's final record, its history records), in the
    store at `home`, by default a throwaway one (no earlier jobs)."""
    with tempfile.TemporaryDirectory() as scratch:
        home = home or Path(scratch)
        path = Path(scratch) / f"{job['name']}.yaml"
        path.write_text(yaml.safe_dump(job))
        t0 = time.monotonic()
        run = coach(home, "submit", str(path), "--json")
        wall = time.monotonic() - t0
        [rec] = submitted(run.returncode, run.stdout, run.stderr)
        return wall, rec, json.loads(coach(home, "history", rec["job_id"], "--json").stdout)
