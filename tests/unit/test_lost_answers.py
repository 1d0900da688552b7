"""What an epoch attempt charges for a call that came back without the function's own count."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from coach.job.epoch import _served, abandoned
from coach.roles import attempt_files


def _pid_file(folder: Path, name: str, start: float, seen: float | None = None) -> None:
    """As a function writes it when its role process starts, and touches it while it runs."""
    (folder / name).write_text(f"123 {start}")
    os.utime(folder / name, (seen or start, seen or start))


def _role_starts(folder: Path) -> dict[str, list[float]]:
    return {role: [p.start for p in ps] for role, ps in attempt_files.running(folder).items()}


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


class StandIn:
    """A backend stand-in whose `invoke` each test gives: a 503 from one replica and a lost answer
    from another at chosen moments cannot be provoked reliably from outside."""

    keep_warm = True

    def deploy(self, *args: object, **kwargs: object) -> None:
        return None

    def ps_root(self, job_id: str) -> tuple[str, int, str]:
        return "127.0.0.1", 1, "127.0.0.1"


def failed_epoch(backend: StandIn, folder: Path, workers: int, retries: int):
    """Run one epoch through the real EpochRunner; the EpochFailed it ends with."""
    from coach.errors import EpochFailed
    from coach.job.epoch import EpochPlan, EpochRunner

    plan = EpochPlan(job_id="j", phase="training", epoch=1, workers=workers, servers=1, seed=1, limit=1,
                     deadline_s=60, checkpoint_in=None, checkpoint_out="x", task={})
    with pytest.raises(EpochFailed) as failed:
        EpochRunner(backend, folder, retries, lambda *_: None).run(plan)
    return failed.value


def test_a_function_that_refused_the_event_does_not_take_a_lost_answers_start(tmp_path: Path) -> None:
    """Through the real EpochRunner, on a stand-in backend (`StandIn`). Worker 0 was busy (503, no
    role process, no count); worker 1 started its role process and its answer was lost. The 503
    took worker 1's start and was clamped to 0, and worker 1 then found none."""
    from coach.backends.base import NO_ANSWER, Invocation

    class Answers(StandIn):
        def invoke(self, job_id: str, role: str, i: int, payload: dict, timeout_s: float) -> Invocation:
            if role == "worker" and i == 0:
                return Invocation(503, {"error": "busy: this replica is running another epoch"})
            if role == "worker":
                _pid_file(Path(payload["abort_file"]).parent, "worker-1.pid", time.time() - 2.0)
                return Invocation(NO_ANSWER, {"error": "worker function unreachable: ReadError"})
            time.sleep(0.2)
            return Invocation(409, {"error": "aborted", "function_s": 0.2})

    failed = failed_epoch(Answers(), tmp_path, workers=2, retries=0)
    assert failed.function_s["worker"] == pytest.approx(2.0, abs=0.5)
    assert failed.function_s["server"] == pytest.approx(0.2)


def test_a_lost_answer_of_a_function_that_finished_is_charged_what_it_left(tmp_path: Path) -> None:
    """Its pid file is gone (it answered), but the seconds it charged are in the attempt's folder.
    Stand-in backend, as above: the answer is lost after the function wrote its charge."""
    from coach.backends.base import NO_ANSWER, Invocation

    class Answers(StandIn):
        def invoke(self, job_id: str, role: str, i: int, payload: dict, timeout_s: float) -> Invocation:
            if role == "worker":
                attempt_files.mark_served(Path(payload["abort_file"]).parent, role, 3.5)
                return Invocation(NO_ANSWER, {"error": "worker function unreachable: ReadError"})
            attempt_files.mark_served(Path(payload["abort_file"]).parent, role, 0.25)
            return Invocation(409, {"error": "aborted", "function_s": 0.25})

    failed = failed_epoch(Answers(), tmp_path, workers=1, retries=1)
    # both attempts, each role once: the answers' own figures are not counted twice
    assert failed.function_s == pytest.approx({"scheduler": 0.5, "server": 0.5, "worker": 7.0})
    # kept for the caller, which removes it once the charge is recorded (a kill before that leaves it)
    assert failed.folder and sorted(p.name for p in Path(failed.folder).iterdir()) == ["0", "1"]


def test_a_killed_run_leaves_what_its_unfinished_epoch_owes(tmp_path: Path) -> None:
    epoch = tmp_path / "attempts" / "training-0003-abc123"
    first, second = epoch / "0", epoch / "1"
    first.mkdir(parents=True)
    second.mkdir()
    attempt_files.mark_served(first, "worker", 2.0)        # attempt 0 failed; its answers came
    attempt_files.mark_served(first, "server", 1.5)
    _pid_file(second, "worker-0.pid", 1000.0, seen=1004.0)   # attempt 1 ran when the run died
    _pid_file(second, "worker-1.pid", 1001.0, seen=1004.5)
    _pid_file(second, "scheduler-77.pid", 999.0, seen=1004.0)
    (second / "server-78.pid").write_text("12")            # garbled (an older layout): skipped
    (second / "abort").write_text("")
    old = tmp_path / "attempts" / "tuning-0001-0-ffffff"   # an older layout: nothing it can say
    old.mkdir()
    (old / "worker-0.pid").write_text("42")
    # the run that recorded training epoch 2 died before it removed the folder: already charged
    recorded = tmp_path / "attempts" / "training-0002-def456" / "0"
    recorded.mkdir(parents=True)
    attempt_files.mark_served(recorded, "worker", 100.0)
    left = abandoned(tmp_path, settled={"training-0002-def456"})
    assert left is not None
    assert left.function_s == pytest.approx({"scheduler": 5.0, "server": 1.5, "worker": 2.0 + 4.0 + 3.5})
    assert left.epochs == ["training epoch 3", "tuning epoch 1"]
    assert [Path(f).name for f in left.folders] == ["training-0002-def456", "training-0003-abc123",
                                                    "tuning-0001-0-ffffff"], "all removed once charged"


def test_a_job_that_never_ran_an_epoch_owes_nothing(tmp_path: Path) -> None:
    assert abandoned(tmp_path, set()) is None
    (tmp_path / "attempts").mkdir()
    assert abandoned(tmp_path, set()) is None
