"""When an epoch attempt ends: once every worker has answered, the loop marks the attempt's
folder and the scheduler and server functions are ended (the workers skip ps-lite's shutdown,
so nothing else would end them). Through the real EpochRunner on a stand-in backend whose
functions wait for that marker as the real ones do (`tests/unit/test_function_events.py`
covers the real functions' side)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from coach.backends.base import NO_ANSWER, Invocation
from coach.errors import EpochFailed
from coach.job.epoch import EpochPlan, EpochRunner
from coach.roles.attempt_files import WORKERS_DONE
from tests.unit.test_lost_answers import StandIn


def _worker(i: int) -> dict:
    return {"role": "worker", "rank": i, "shard": i, "train_loss": 0.5, "samples": 10, "steps": 1,
            "duration_s": 0.1, "steady_samples": 10, "steady_s": 0.1, "startup_s": 0.0,
            "checkpoint": "ckpt" if i == 0 else None, "val_sum": 2.0, "val_count": 10, "function_s": 0.1}


class Group(StandIn):
    """Workers answer as `worker_answer` says; the scheduler and servers wait, as ps-lite's would
    without its shutdown, until the workers-done marker (200), the abort marker (409) or 5 s (504).
    A server's answer can then be lost (`lost_server`)."""

    def __init__(self, worker_fails: bool = False, lost_server: bool = False) -> None:
        self.worker_fails, self.lost_server = worker_fails, lost_server
        self.ended_by: list[str] = []

    def invoke(self, job_id: str, role: str, i: int, payload: dict, timeout_s: float) -> Invocation:
        folder = Path(payload["abort_file"]).parent
        if role == "worker":
            time.sleep(0.1 * (i + 1))
            if self.worker_fails and i == 1:
                return Invocation(500, {"error": "worker failed: boom", "function_s": 0.2})
            return Invocation(200, _worker(i))
        end = time.monotonic() + 5.0
        while time.monotonic() < end:
            if (folder / "abort").exists():
                self.ended_by.append("abort")
                return Invocation(409, {"error": f"{role} aborted", "function_s": 0.3})
            if (folder / WORKERS_DONE).exists():
                self.ended_by.append("done")
                if role == "server" and self.lost_server:
                    return Invocation(NO_ANSWER, {"error": "server function unreachable: ReadError"})
                return Invocation(200, {"role": role, "ended": "every worker had answered", "function_s": 0.3})
            time.sleep(0.02)
        return Invocation(504, {"error": f"{role} exceeded its deadline", "function_s": 5.0})


def _run(backend: Group, folder: Path):
    plan = EpochPlan(job_id="j", phase="training", epoch=1, workers=2, servers=1, seed=1, limit=None,
                     deadline_s=60, checkpoint_in=None, checkpoint_out="ckpt", task={})
    return EpochRunner(backend, folder, 0, lambda *_: None).run(plan)


@pytest.mark.parametrize("case,ends_by", [
    ("every worker answers", ["done", "done"]),
    ("a server's answer is lost after the workers were done", ["done", "done"]),
    ("a worker fails", ["abort", "abort"]),
])
def test_the_scheduler_and_servers_are_ended_once_every_worker_has_answered(case: str, ends_by: list[str],
                                                                           tmp_path: Path) -> None:
    backend = Group(worker_fails=case == "a worker fails", lost_server="lost" in case)
    t0 = time.monotonic()
    if case == "a worker fails":
        with pytest.raises(EpochFailed, match="boom"):
            _run(backend, tmp_path)
    else:
        outcome = _run(backend, tmp_path)   # the checkpoint is complete: a lost server answer changes nothing
        assert outcome.val_loss == pytest.approx(0.2) and outcome.retries == 0
        assert outcome.function_s["scheduler"] == pytest.approx(0.3)
    assert time.monotonic() - t0 < 2.0, "nobody waited for a deadline"
    assert backend.ended_by == ends_by
