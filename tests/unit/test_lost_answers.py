"""What an epoch attempt charges for a call that came back without the function's own count."""

from __future__ import annotations

import os
import time
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


def test_a_function_that_refused_the_event_does_not_take_a_lost_answers_start(tmp_path: Path) -> None:
    """Through the real EpochRunner; the backend is a stand-in because a 503 from one replica and a
    lost answer from another at chosen moments cannot be provoked reliably from outside. Worker 0
    was busy (503, no role process, no count); worker 1 started its role process and its answer
    was lost. The 503 took worker 1's start and was clamped to 0, and worker 1 then found none."""
    from coach.backends.base import NO_ANSWER, Invocation
    from coach.errors import EpochFailed
    from coach.job.epoch import EpochPlan, EpochRunner

    class Answers:
        keep_warm = True

        def deploy(self, *args: object, **kwargs: object) -> None:
            return None

        def ps_root(self, job_id: str) -> tuple[str, int, str]:
            return "127.0.0.1", 1, "127.0.0.1"

        def invoke(self, job_id: str, role: str, i: int, payload: dict, timeout_s: float) -> Invocation:
            if role == "worker" and i == 0:
                return Invocation(503, {"error": "busy: this replica is running another epoch"})
            if role == "worker":
                _pid_file(Path(payload["abort_file"]).parent, "worker-1.pid", time.time() - 2.0)
                return Invocation(NO_ANSWER, {"error": "worker function unreachable: ReadError"})
            time.sleep(0.2)
            return Invocation(409, {"error": "aborted", "function_s": 0.2})

    plan = EpochPlan(job_id="j", phase="training", epoch=1, workers=2, servers=1, seed=1, limit=1,
                     deadline_s=60, checkpoint_in=None, checkpoint_out="x", task={})
    with pytest.raises(EpochFailed) as failed:
        EpochRunner(Answers(), tmp_path, 0, lambda *_: None).run(plan)
    assert failed.value.function_s["worker"] == pytest.approx(2.0, abs=0.5)
    assert failed.value.function_s["server"] == pytest.approx(0.2)
