"""A data scientist stops a running job and resumes it later: nothing recorded is lost, the
resumed job continues from its checkpoint and counts every epoch once."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

import pytest

from coach.spec import parse_spec
from coach.state.store import Store
from tests.conftest import COACH, FAST_JOB, ROOT, run_coach, write_job

pytestmark = pytest.mark.slow


def _submit_until(job: Path, reached: Callable[[dict], bool]) -> tuple[subprocess.Popen, str]:
    """Start `coach submit JOB --json` and return once `coach status` shows `reached` true."""
    proc = subprocess.Popen([*COACH, "submit", str(job), "--json"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        jobs = json.loads(run_coach("status", "--json", check=True).stdout)
        if jobs and reached(jobs[0]):
            return proc, jobs[0]["job_id"]
        time.sleep(0.3)
    proc.kill()
    raise AssertionError(f"the job never got there in 300 s: {proc.communicate()[1][-2000:]}")


def test_stop_then_resume_continues_from_the_checkpoint(tmp_path: Path, coach_home: Path) -> None:
    job = write_job(tmp_path / "sr.yaml", name="sr", **dict(FAST_JOB, allocation="static", workers=1, servers=1,
                                                              target_loss=0.1))
    proc, job_id = _submit_until(job, lambda j: j["epoch"] >= 1 and j["val_loss"] is not None)
    stop = run_coach("stop", job_id[:6])          # a prefix is enough
    assert stop.returncode == 0, stop.stderr
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    [rec] = json.loads(out)
    assert rec["status"] == "stopped"
    before = json.loads(run_coach("history", job_id, "--json", check=True).stdout)
    assert before and all(r["phase"] == "training" for r in before)

    time.sleep(3)   # sits stopped: not part of its elapsed time
    again = run_coach("resume", job_id, "--json")
    assert again.returncode == 0, again.stderr
    [rec] = json.loads(again.stdout)
    assert rec["status"] == "succeeded"
    after = json.loads(run_coach("history", job_id, "--json", check=True).stdout)
    assert after[:len(before)] == before, "what was recorded before the stop is intact"
    assert [r["epoch"] for r in after] == list(range(1, len(after) + 1))
    assert after[len(before)]["val_loss"] < before[0]["val_loss"], "resumed from the checkpoint, not from scratch"
    events = json.loads(run_coach("events", job_id, "--json", check=True).stdout)
    kinds = [e["kind"] for e in events]
    assert kinds.count("stopped") == 1 and "resumed" in kinds and kinds[-1] == "succeeded"
    assert 0 < rec["elapsed_s"] < events[-1]["ts"] - events[0]["ts"] - 2.5, (rec["elapsed_s"], events)
    assert (rec["eta_s"], rec["eta_interval_s"]) == (None, [None, None])   # nothing left once it succeeded


def test_a_resumed_job_trains_its_model_file_as_submitted(tmp_path: Path, coach_home: Path) -> None:
    # the network under the checkpoint is the one submitted: editing the file between stop
    # and resume (a data scientist's next experiment) changes nothing for this job
    (tmp_path / "net.py").write_text("from mxnet.gluon import nn\n\ndef build(num_classes):\n"
                                     "    net = nn.Sequential()\n    net.add(nn.Dense(32, activation='relu'), "
                                     "nn.Dense(num_classes))\n    return net\n")
    job = write_job(tmp_path / "own.yaml", name="own", **dict(FAST_JOB, model="net.py", allocation="static",
                                                                workers=1, servers=1, target_loss=0.1))
    proc, job_id = _submit_until(job, lambda j: j["epoch"] >= 1 and j["val_loss"] is not None)
    run_coach("stop", job_id, check=True)
    proc.communicate(timeout=300)
    (tmp_path / "net.py").write_text("raise RuntimeError('edited after submit')\n")
    again = run_coach("resume", job_id, "--json")
    assert again.returncode == 0, again.stderr
    [rec] = json.loads(again.stdout)
    assert rec["status"] == "succeeded", rec["message"]


def test_resume_refuses_a_finished_job(tmp_path: Path, coach_home: Path) -> None:
    job = write_job(tmp_path / "done.yaml", name="done", **dict(FAST_JOB, allocation="static", workers=1, servers=1))
    run_coach("submit", str(job), "--json", check=True)
    [rec] = json.loads(run_coach("status", "--json", check=True).stdout)
    again = run_coach("resume", rec["job_id"])
    assert again.returncode == 1 and "succeeded" in again.stderr and "Traceback" not in again.stderr


@pytest.mark.parametrize(("option", "said"), [
    (("--budget", "nan"), "--budget: must be a finite number above 0 and at most 1e+15, got nan"),   # "should be >= 0"
    (("--budget", "1e300"), "--budget: must be a finite number above 0 and at most 1e+15, got 1e+300"),   # accepted
    (("--budget", "0"), "--budget: must be a finite number above 0"),
    (("--budget", "0.0001"), "--budget: stopped has spent 0.001; give more than 0.001, got 0.0001"),   # exit 1
    # accepted, and a reviewer's job then trained for 9 minutes until its budget ran out
    (("--max-epochs", "99999999999999999999"), "--max-epochs: must be at most 1e+15"),
    # it blamed the job file's resources, by the path as given at submit, relative to another folder
    (("--cpu", "0.1"), "--cpu: 0.1 cores are too few for /jobs/j.yaml: its smallest allocation"),
])
def test_resume_refuses_bad_limits_as_bad_input_and_keeps_the_job(coach_home: Path, option: tuple[str, str],
                                                                   said: str) -> None:
    store = Store()
    spec = dataclasses.asdict(parse_spec(dict(FAST_JOB, name="stopped", budget=0.01), "j.yaml"))
    store.create_job("stopped", "stopped", "/jobs/j.yaml", spec, 0.3, 0.01)
    store.update_job("stopped", status="stopped", message="stopped by request", spent=0.001)
    proc = run_coach("resume", "stopped", *option)
    assert proc.returncode == 2 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    job = store.job("stopped")
    assert (job.status, job.budget, job.spent) == ("stopped", 0.01, 0.001)


def test_resume_refuses_a_budget_that_cannot_pay_for_the_next_epoch(coach_home: Path) -> None:
    """A raise under the next epoch's predicted cost was accepted: the job started its functions
    and stopped on its budget again 1.7 s later."""
    store = Store()
    spec = dataclasses.asdict(parse_spec(dict(FAST_JOB, name="poor", budget=0.01), "j.yaml"))
    store.create_job("poor", "poor", "/jobs/j.yaml", spec, 0.3, 0.01)
    store.update_job("poor", status="budget_exhausted", spent=0.009, eta={"next_epoch_cost": 0.002},
                     message="budget exhausted: the next epoch would cost 0.002 but only 0.001 is left")
    proc = run_coach("resume", "poor", "--budget", "0.0105")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert ("--budget: poor has spent 0.009 and its next epoch is predicted to cost 0.002; give at least 0.011, "
            "got 0.0105") in proc.stderr, proc.stderr
    job = store.job("poor")
    assert (job.status, job.budget, job.spent) == ("budget_exhausted", 0.01, 0.009)


def test_interrupting_submit_stops_the_job_and_leaves_no_process(tmp_path: Path, coach_home: Path) -> None:
    from tests.e2e.test_failures import _wait_no_processes_of

    job = write_job(tmp_path / "int.yaml", name="int", **dict(FAST_JOB, allocation="static", workers=2, servers=1,
                                                                target_loss=0.01))
    proc, job_id = _submit_until(job, lambda j: j["epoch"] >= 1)
    # interrupt while a training epoch after the first runs (between epochs nothing is in
    # flight, so nothing would be owed): its attempt folder exists while its functions run
    attempts, cut = coach_home / "jobs" / job_id / "attempts", 0
    deadline = time.time() + 120
    while not cut and time.time() < deadline:
        cut = max((int(p.name.split("-")[1]) for p in attempts.glob("training-*")), default=0)
        cut = cut if cut >= 2 else 0
        time.sleep(0.02)
    assert cut, "no second training epoch started"
    time.sleep(0.3)   # well inside the epoch: forking, forming the ps-lite group, first steps
    # what a cut epoch leaves when the stop comes as its worker saves: a checkpoint never recorded
    (coach_home / "jobs" / job_id / "checkpoints" / f"training-{cut:04d}").mkdir(exist_ok=True)
    # a held-down Ctrl-C: it re-entered the handler's store write, which waited for its own lock for
    # 30 s and lost the stop (1 run in 3). Over in 20 ms: a signal that comes as the interpreter
    # exits, after its handlers are gone, ends it with -2 whatever Coach does.
    for _ in range(10):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.002)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    [rec] = json.loads(out)
    assert rec["status"] == "stopped"
    assert _wait_no_processes_of(coach_home, timeout=15), "a function process outlived the interrupted run"
    history = json.loads(run_coach("history", rec["job_id"], "--json", check=True).stdout)
    assert [r["epoch"] for r in history] == list(range(1, cut)), "recorded epochs kept, the cut one not"
    kept = [str(p) for p in (coach_home / "jobs" / job_id / "checkpoints").iterdir()]
    assert kept == [Store().checkpoint(job_id)], "only the recorded checkpoint stays, not the cut epoch's"
    # the cut epoch is not recorded, but the function time it used is paid for
    assert rec["spent"] > sum(r["cost"] for r in history) * 1.01, (rec["spent"], history)
    events = json.loads(run_coach("events", rec["job_id"], "--json", check=True).stdout)
    assert not [e for e in events if e["kind"] == "retry"], "an interrupted attempt is not retried"
    # and an event says so: the history and these events add up to what was spent
    charged = [float(e["message"].split()[0]) for e in events if e["kind"] == "charged"]
    assert sum(r["cost"] for r in history) + sum(charged) == pytest.approx(rec["spent"], rel=1e-3), events


def test_a_killed_submit_shows_interrupted_and_resumes_without_force(tmp_path: Path, coach_home: Path) -> None:
    job = write_job(tmp_path / "k.yaml", name="k", **dict(FAST_JOB, allocation="static", workers=1, servers=1,
                                                            target_loss=0.1))
    proc, job_id = _submit_until(job, lambda j: j["status"] == "training" and j["epoch"] >= 1)
    busy = run_coach("resume", job_id)
    assert busy.returncode == 1 and "in another coach process" in busy.stderr, busy.stderr
    proc.kill()                                   # kill -9: no chance to record an end
    proc.communicate(timeout=60)
    [rec] = json.loads(run_coach("status", "--json", check=True).stdout)
    assert rec["status"] == "interrupted" and f"pid {proc.pid}" in rec["message"], rec
    ran = rec["elapsed_s"]
    time.sleep(2)   # it sits interrupted: not part of its elapsed time
    stop = run_coach("stop", job_id)
    assert stop.returncode == 1 and "not running (interrupted)" in stop.stderr, stop.stderr
    before = json.loads(run_coach("history", job_id, "--json", check=True).stdout)
    again = run_coach("resume", job_id, "--json")
    assert again.returncode == 0, again.stderr
    [rec] = json.loads(again.stdout)
    assert rec["status"] == "succeeded"
    after = json.loads(run_coach("history", job_id, "--json", check=True).stdout)
    assert after[:len(before)] == before, "what was recorded before the kill is intact"
    # the killed run counts to its last update, as it read while interrupted; the 2 s after it do not
    events = json.loads(run_coach("events", job_id, "--json", check=True).stdout)
    resumed = next(e["ts"] for e in events if e["kind"] == "resumed")
    assert rec["elapsed_s"] == pytest.approx(ran + events[-1]["ts"] - resumed, abs=0.05), (rec, events)


def test_a_job_stopped_during_tuning_resumes_the_tuning(tmp_path: Path, coach_home: Path) -> None:
    # it went straight to training on what one mini-epoch had measured
    from coach.state.store import Store

    job = write_job(tmp_path / "t.yaml", name="t", **dict(FAST_JOB, allocation="dynamic"))
    # on 1.5 cores (2, 2) never fits, so tuning measures (1, 1) and (2, 1) by mini-epochs of their
    # own and (1, 2) on the rest of epoch 1 (with (2, 2), (1, 1) would be left to the planner and
    # (2, 1) measured inside epoch 1: no mini-epoch to stop in)
    proc = subprocess.Popen([*COACH, "submit", str(job), "--json", "--cpu", "1.5"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # stopped as `coach stop` does, while the first mini-epoch runs: a stop ends a job between
    # epochs. Polled through `coach status` and stopped through `coach stop` (a second each), the
    # stop could land in the next.
    store, deadline = Store(), time.time() + 300
    while not (jobs := store.jobs()) or jobs[0].status != "tuning":
        assert time.time() < deadline and proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.02)
    job_id = jobs[0].job_id
    store.update_job(job_id, stop_requested=1)
    proc.communicate(timeout=300)
    before = json.loads(run_coach("history", job_id, "--json", check=True).stdout)
    assert [(r["phase"], r["workers"], r["servers"]) for r in before] == [("tuning", 1, 1)], before
    again = run_coach("resume", job_id, "--json", "--cpu", "1.5")
    assert again.returncode == 0, again.stderr
    after = json.loads(run_coach("history", job_id, "--json", check=True).stdout)
    tuned = [(r["workers"], r["servers"]) for r in after if r["phase"] == "tuning"]
    assert tuned == [(1, 1), (2, 1)], tuned   # the rest tuned, none twice
    phases = [r["phase"] for r in after]
    assert phases == sorted(phases, key=lambda p: p == "training"), "tuning before any training"
    assert (after[2]["workers"], after[2]["servers"]) == (1, 2), after   # the last configuration: epoch 1


def test_a_resumed_job_shows_its_last_recorded_loss_and_a_fresh_eta(tmp_path: Path, coach_home: Path) -> None:
    """A training epoch's loss reaches the job's row after its record (with its ETA): a run killed
    in between left the row one epoch behind, and the resumed job showed that older loss until
    its next epoch ended. Its ETA counted down through the time it stood still ("~0s"). Here the
    record already meets the stop rule, so the resumed job ends at once and its row keeps what
    the resume wrote."""
    from coach.job.submit import register
    from coach.spec import load_spec
    from coach.state.records import EpochRecord
    from coach.state.store import Store

    store = Store()
    job_id = register(load_spec(write_job(tmp_path / "k.yaml", name="killed", **FAST_JOB)), store)
    for epoch, loss in enumerate([0.24, 0.22, 0.2], start=1):
        store.record_epoch(EpochRecord(job_id, "training", epoch, 1, 1, loss, loss, 1.0, 1000, 1000.0, 0.0))
    predicted = {"epochs_left": 5, "seconds": 50.0, "at": time.time() - 3600}   # an hour ago, then stopped
    store.update_job(job_id, status="stopped", epoch=3, val_loss=0.22, val_epoch="training 2",   # as the kill left it
                     eta=predicted)
    store.release_job(job_id)   # registered by this process, which runs nothing
    out = run_coach("resume", job_id, "--json")
    assert out.returncode == 0, out.stderr
    [rec] = json.loads(out.stdout)
    assert rec["status"] == "succeeded", out.stderr
    assert (rec["val_loss"], rec["val_epoch"]) == (0.2, "training 3")
    eta = store.job(job_id).eta
    assert eta["seconds"] == 50.0 and eta["at"] > predicted["at"] + 3000, eta   # counts down from the resume
