"""Killing any one role process mid-epoch does not fail the job: the group is aborted and the
epoch retried from the last checkpoint with fresh processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from coach.roles import attempt_files
from tests.conftest import COACH, ROOT, run_coach, write_job

pytestmark = pytest.mark.slow

# 60 000 samples: an epoch of about 5 s on a quiet machine (with 15 000 it took 1.4 s, and the kill
# 1.5 s after the role process appeared found it gone)
JOB = dict(name="victim", model="mlp", dataset={"name": "synthetic", "samples": 60000}, target_loss=0.3,
           budget=1.0, batch_size=32, learning_rate=0.05, allocation="static", workers=2, servers=1,
           max_workers=2, max_epochs=10, max_retries=2)


def _role_pid(home: Path, role: str, timeout: float = 300) -> int:
    """The pid of a role process of training epoch 2's first attempt, once it is running."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for folder in home.glob("jobs/*/attempts/training-0002-*/0"):
            if running := attempt_files.running(folder).get(role):
                return running[0].pid
        time.sleep(0.05)
    raise AssertionError(f"no {role} process of epoch 2 appeared")


@pytest.mark.parametrize("role", ["worker", "server", "scheduler"])
def test_killing_a_role_process_mid_epoch_does_not_fail_the_job(role: str, tmp_path: Path,
                                                                 coach_home: Path) -> None:
    job = write_job(tmp_path / "victim.yaml", **JOB)
    proc = subprocess.Popen([*COACH, "submit", str(job), "--json"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        pid = _role_pid(coach_home, role)
        time.sleep(1.5)   # let the group form and training start
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    [rec] = json.loads(out)
    assert rec["status"] == "succeeded"
    history = json.loads(run_coach("history", rec["job_id"], "--json", check=True).stdout)
    epoch2 = [r for r in history if r["phase"] == "training" and r["epoch"] == 2]
    assert len(epoch2) == 1 and epoch2[0]["retries"] >= 1, "epoch 2 recorded once, after a retry"
    events = json.loads(run_coach("events", rec["job_id"], "--json", check=True).stdout)
    retry = [e for e in events if e["kind"] == "retry"]
    assert retry and "epoch 2" in retry[0]["message"]
    assert _wait_no_processes_of(coach_home), "a function process outlived coach submit"


def processes_of(home: Path, but_our_zygote: bool = False) -> list[int]:
    """Pids of processes started for this COACH_HOME (found by their environment); without the
    zygote of a backend this process runs if `but_our_zygote` (the fork-servers forked from it
    share its command line, not its parent)."""
    found = []
    needle = f"COACH_HOME={home}".encode()
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if needle not in (d / "environ").read_bytes().split(b"\0"):
                    continue
                if (but_our_zygote and b"coach.roles.zygote" in (d / "cmdline").read_bytes()
                        and int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid()):
                    continue
                found.append(int(d.name))
            except OSError:
                pass
    return found


def _wait_no_processes_of(home: Path, timeout: float = 10, but_our_zygote: bool = False) -> bool:
    deadline = time.time() + timeout
    while processes_of(home, but_our_zygote):
        if time.time() > deadline:
            return False
        time.sleep(0.2)
    return True


def test_the_epoch_a_killed_submit_left_unfinished_is_charged_at_resume(tmp_path: Path, coach_home: Path) -> None:
    """`kill -9` of `coach submit` during an epoch leaves no process to record what the epoch's
    functions served; it went unpaid, so a budget could be overspent by it. The resume charges
    it from what the functions left in the attempt's folder (each role process's start and last
    heartbeat): about the seconds from each process's start to the kill."""
    job = write_job(tmp_path / "victim.yaml", **dict(JOB, max_epochs=3))
    proc = subprocess.Popen([*COACH, "submit", str(job), "--json"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        _role_pid(coach_home, "worker")
        time.sleep(3)
        [folder] = coach_home.glob("jobs/*/attempts/training-0002-*/0")
        starts = [p.start for ps in attempt_files.running(folder).values() for p in ps]
        proc.kill()
        killed_at = time.time()
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(starts) == 4, "scheduler, server and 2 workers were running"
    assert _wait_no_processes_of(coach_home), "the functions die with the coach process"
    job_id = folder.parts[-4]
    spent = json.loads(run_coach("status", job_id, "--json", check=True).stdout)[0]["spent"]
    history = json.loads(run_coach("history", job_id, "--json", check=True).stdout)
    assert spent == pytest.approx(sum(r["cost"] for r in history), rel=1e-6), "the killed epoch is unpaid so far"
    # a budget above what is spent but not above what is owed as well was accepted, and the
    # resumed job then ended budget_exhausted at once
    short = run_coach("resume", job_id, "--budget", f"{spent * 1.0001:.10g}")
    assert short.returncode == 2 and "Traceback" not in short.stderr, short.stderr
    assert "owes" in short.stderr and "training epoch 2, which its killed run did not record" in short.stderr

    again = run_coach("resume", job_id, "--json")
    [rec] = json.loads(again.stdout)
    assert rec["status"] in ("succeeded", "max_epochs"), again.stderr
    events = json.loads(run_coach("events", job_id, "--json", check=True).stdout)
    [charged] = [e["message"] for e in events if e["kind"] == "charged"]
    assert "training epoch 2, which a killed run did not record" in charged, charged
    seconds = float(charged.split("(")[1].split()[0])
    # each process's last heartbeat is at most 1 s before the kill, and it dies within about 1 s after
    assert seconds == pytest.approx(sum(killed_at - t for t in starts), abs=len(starts) * 1.5), (charged, starts)
    history = json.loads(run_coach("history", job_id, "--json", check=True).stdout)
    assert rec["spent"] == pytest.approx(sum(r["cost"] for r in history) + float(charged.split()[0]), rel=1e-3)
    assert not list(folder.parents[1].iterdir()), "charged once: the folder is gone"


def test_a_diverging_job_fails_at_once_and_cannot_be_resumed(tmp_path: Path, coach_home: Path) -> None:
    from tests.conftest import FAST_JOB

    job = write_job(tmp_path / "wild.yaml", name="wild", **dict(FAST_JOB, learning_rate=1e6, allocation="static",
                                                                  workers=1, servers=1))
    proc = run_coach("submit", job.name, "--json", cwd=tmp_path)   # a path relative to where it was submitted
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    [rec] = json.loads(proc.stdout)
    assert rec["status"] == "failed" and "diverged" in rec["message"] and "lower the learning rate" in rec["message"]
    events = [e["kind"] for e in json.loads(run_coach("events", rec["job_id"], "--json", check=True).stdout)]
    assert "retry" not in events and "diverged" in events
    # a resume runs the same computation from the same checkpoint: refused, and nothing changes
    again = run_coach("resume", rec["job_id"])   # from another folder: the file is named so it can be found
    assert again.returncode == 1 and "Traceback" not in again.stderr
    assert f"submit {job} again with a lower learning_rate (it is 1e+06)" in again.stderr, again.stderr
    assert json.loads(run_coach("status", rec["job_id"], "--json", check=True).stdout)[0]["status"] == "failed"
    # and what the job's report said to do next was not a resume
    assert rec["next_step"] == f"resuming would diverge again: submit {job} again with a lower learning_rate", rec


def _run_injected(backend_class: type, coach_home: Path, tmp_path: Path, stop_at_once: bool = False,
                  **fields: Any) -> tuple[Any, str, str]:
    """Run one FAST_JOB (with `fields`) in this process on `backend_class`, a real local backend
    with a failure injected: (its store, the job's id, its final status)."""
    from coach.job.submit import register, run_jobs
    from coach.spec import parse_spec
    from coach.state.store import Store
    from tests.conftest import FAST_JOB

    store = Store()
    spec = parse_spec(dict(FAST_JOB, **fields), str(tmp_path / "job.yaml"))
    job_id = register(spec, store)
    if stop_at_once:
        store.update_job(job_id, stop_requested=1)   # it stops after its first mini-epoch
    backend = backend_class(log_dir=coach_home / "logs")
    try:
        return store, job_id, run_jobs({job_id: spec}, backend, store)[job_id]
    finally:
        backend.close()


def test_a_failed_head_start_of_tuning_does_not_fail_the_job(tmp_path: Path, coach_home: Path) -> None:
    """Tuning starts every function it will use ahead of the first mini-epoch. That start is only
    a head start: if it fails (a replica slow to come up), the job goes on and each mini-epoch
    deploys what it needs, with its retries. Before, the job failed at once. The failure is
    injected into the real local backend's first deploy: a replica that will not start cannot be
    provoked reliably from outside."""
    from coach.backends.base import Placement
    from coach.backends.local import LocalBackend
    from coach.errors import BackendError

    class FirstDeployFails(LocalBackend):
        calls = 0

        def deploy(self, job_id: str, group: Any, placement: Any = Placement(), on_wait: Any = None,
                   should_stop: Any = lambda: False) -> None:
            FirstDeployFails.calls += 1
            if FirstDeployFails.calls == 1:
                raise BackendError("worker: replica 1 did not start within 60 s")
            super().deploy(job_id, group, placement, on_wait, should_stop)

    store, job_id, status = _run_injected(FirstDeployFails, coach_home, tmp_path, name="headstart")
    events = [e["message"] for e in store.events(job_id) if e["kind"] == "deploy_failed"]
    assert status == "succeeded", store.job(job_id).message
    assert len(events) == 1 and "did not start within 60 s" in events[0], events


def test_epochs_whose_functions_cannot_be_deployed_are_retried_after_a_growing_pause(
        tmp_path: Path, coach_home: Path) -> None:
    """An apiserver that is gone (`coach cluster down --force` under a job) refused every deploy:
    the job used all its retries within one second. Injected into the real local backend, as the
    test above does: its every deploy fails the way the cluster backend's did."""
    from coach.backends.base import Placement
    from coach.backends.local import LocalBackend
    from coach.errors import BackendError
    from coach.job.epoch import DEPLOY_RETRY_S

    calls: list[float] = []

    class NoApiserver(LocalBackend):
        def deploy(self, job_id: str, group: Any, placement: Any = Placement(), on_wait: Any = None,
                   should_stop: Any = lambda: False) -> None:
            calls.append(time.monotonic())
            raise BackendError("[Errno 111] Connection refused")

    store, job_id, status = _run_injected(NoApiserver, coach_home, tmp_path, name="noapi", max_retries=2)
    assert status == "failed" and "failed 3 times" in store.job(job_id).message
    gaps = [b - a for a, b in zip(calls[-3:], calls[-2:])]   # the head start of tuning comes first
    assert len(calls) == 4 and gaps[0] >= DEPLOY_RETRY_S and gaps[1] >= 2 * DEPLOY_RETRY_S, gaps


def test_a_deploy_returns_once_its_new_replicas_serve_at_once(coach_home: Path) -> None:
    """Before, a replica was deployed once it listened, while its fork-server still imported MXNet:
    the roles already warm started their epoch and waited in ps-lite for the new one, charged for
    it (a job grown by one server paid 4.4× its predicted epoch and overspent its budget)."""
    import httpx

    from coach.backends.local import LocalBackend

    backend = LocalBackend(log_dir=coach_home / "logs")
    try:
        for group in ({"scheduler": 1, "server": 1, "worker": 1}, {"scheduler": 1, "server": 2, "worker": 1}):
            backend.deploy("ready", group)
            replicas = backend._jobs["ready"].replicas
            ports = [r.port for role in group for r in replicas[role]]
            assert len(ports) == sum(group.values())
            assert all(httpx.get(f"http://127.0.0.1:{port}/__ready", timeout=10).status_code == 200 for port in ports)
    finally:
        backend.close()


def test_a_ctrl_c_while_replicas_import_is_a_shutdown_not_a_bug(coach_home: Path) -> None:
    """The Ctrl-C handler's close() closes the HTTP client: a readiness request after it raised
    RuntimeError, which no caller expects, and the job ended "failed: internal error"."""
    from coach.backends.local import LocalBackend
    from coach.errors import BackendError

    backend = LocalBackend(log_dir=coach_home / "logs")
    request = backend._http.get

    def closed_meanwhile(*args: Any, **kwargs: Any) -> Any:
        backend.close()   # as the signal handler does, between the check and the request
        return request(*args, **kwargs)

    backend._http.get = closed_meanwhile   # type: ignore[method-assign]
    with pytest.raises(BackendError, match="shut down"):
        backend.deploy("race", {"scheduler": 1, "server": 1, "worker": 1})
    assert _wait_no_processes_of(coach_home), "a replica outlived the interrupted deploy"


@pytest.mark.parametrize("how", ["stop", "close"])
def test_a_stop_while_a_replica_starts_ends_the_deploy_and_its_process(coach_home: Path, tmp_path: Path,
                                                                       how: str) -> None:
    """A replica that is slow to load its handler (up to START_TIMEOUT_S, 60 s, on a busy machine):
    `coach stop` and a shutdown (Ctrl-C) were noticed only once every replica was ready."""
    import shutil
    import threading

    from coach.backends.local import LocalBackend
    from coach.errors import BackendError

    functions = tmp_path / "functions"
    shutil.copytree(ROOT / "functions", functions)
    handler = functions / "scheduler" / "handler.py"
    handler.write_text("import time\ntime.sleep(30)\n" + handler.read_text())   # a handler slow to load
    backend = LocalBackend(functions_dir=functions, log_dir=coach_home / "logs")
    asked = time.monotonic()
    stop = threading.Timer(1.0, backend.close) if how == "close" else None
    try:
        if stop is not None:
            stop.start()
        with pytest.raises(BackendError, match="stopped by request while a local scheduler function started"
                           if how == "stop" else "shut down"):
            backend.deploy("slow", {"scheduler": 1, "server": 1, "worker": 1},
                           should_stop=lambda: how == "stop" and time.monotonic() - asked > 1.0)
        assert time.monotonic() - asked < 10, "ended at the stop, not when the replica was ready (30 s)"
        # the backend's zygote serves its later deploys, and ends with it (or with Coach)
        assert _wait_no_processes_of(coach_home, but_our_zygote=True), "a replica outlived the stopped deploy"
    finally:
        if stop is not None:
            stop.cancel()
        backend.close()


def test_an_epoch_is_not_retried_past_the_budget(tmp_path: Path, coach_home: Path) -> None:
    """Each failed attempt is paid in full, and the budget was checked only before an epoch: an
    epoch retried three times spent twice a job's budget. Injected into the real local backend
    (a failure after a real epoch ran cannot be provoked from outside): from training epoch 2 on,
    worker 0's answer is turned into an error after the epoch ran, with its function-seconds."""
    from coach.backends.base import Invocation
    from coach.backends.local import LocalBackend

    # epochs of 4,000 samples: 3.5 of them must buy more than a second of (1, 1), the least budget a
    # job file may give (digits' epochs cost less than that on a fast day)
    fields = dict(allocation="static", workers=1, servers=1, target_loss=0.001, max_retries=5,
                  dataset={"name": "synthetic", "samples": 4000})
    store, job_id, _ = _run_injected(LocalBackend, coach_home, tmp_path, name="measure", max_epochs=3, **fields)
    epoch_cost = max(r.cost for r in store.epochs(job_id))

    class FailsAfterRunning(LocalBackend):
        def invoke(self, job_id: str, role: str, i: int, payload: dict, timeout_s: float) -> Invocation:
            inv = super().invoke(job_id, role, i, payload, timeout_s)
            if role == "worker" and payload["attempt"].startswith("training") and payload["epoch"] >= 2:
                return Invocation(500, {"error": "worker failed: injected after the epoch ran",
                                        "function_s": inv.body.get("function_s", 0.0)})
            return inv

    budget = 3.5 * epoch_cost   # epoch 1, then two attempts of epoch 2 fit; a third does not
    store, job_id, status = _run_injected(FailsAfterRunning, coach_home, tmp_path, name="retries", budget=budget,
                                          **fields)
    job, history = store.job(job_id), store.epochs(job_id)
    kinds = [e["kind"] for e in store.events(job_id)]
    assert status == "budget_exhausted", job.message
    assert [r.epoch for r in history] == [1] and kinds.count("retry") < 5 and "over_budget" in kinds, kinds
    assert job.spent <= budget + 1.5 * epoch_cost, (job.spent, budget, epoch_cost)   # at most one attempt past it


def test_a_data_folder_that_went_away_fails_the_job_resumably(tmp_path: Path, coach_home: Path) -> None:
    """A worker whose CIFAR-10 folder is gone answers a permanent, resumable error (the runner
    marks it so; tests/unit/test_function_events.py). Injected here into the real local backend
    at training epoch 2, as a warm replica keeps the data it loaded and a folder removed during a
    run is not seen by it. The job fails at once, and `coach resume` goes on once the folder is
    back; before, the job was marked `fails_again` and a resume was refused for good."""
    from coach.backends.base import Invocation
    from coach.backends.local import LocalBackend

    class FolderGone(LocalBackend):
        def invoke(self, job_id: str, role: str, i: int, payload: dict, timeout_s: float) -> Invocation:
            inv = super().invoke(job_id, role, i, payload, timeout_s)
            if role == "worker" and payload["attempt"].startswith("training") and payload["epoch"] == 2:
                return Invocation(500, {"error": "worker failed: dataset {...}: SpecError: dataset: path: "
                                                 "/data/cifar: missing data_batch_1", "permanent": True,
                                        "resumable": True, "function_s": inv.body.get("function_s", 0.0)})
            return inv

    store, job_id, status = _run_injected(FolderGone, coach_home, tmp_path, name="gone", allocation="static",
                                          workers=1, servers=1)
    kinds = [e["kind"] for e in store.events(job_id)]
    assert status == "failed" and "fails_until_fixed" in kinds and "fails_again" not in kinds, kinds
    again = run_coach("resume", job_id, "--json")
    assert again.returncode == 0, again.stderr   # the folder is back: it goes on from epoch 1
    assert json.loads(again.stdout)[0]["status"] == "succeeded"


def test_a_teardown_that_fails_keeps_the_jobs_status(tmp_path: Path, coach_home: Path) -> None:
    """Removing a finished job's functions can fail (on the cluster backend, an apiserver that is
    gone). The job's own status stands, and the failure is an event; before, it turned a stopped
    job into "failed: could not start". Injected into the real local backend: its teardown only
    stops local processes, which does not fail."""
    from coach.backends.local import LocalBackend
    from coach.errors import BackendError

    class TeardownFails(LocalBackend):
        def teardown(self, job_id: str) -> None:
            super().teardown(job_id)
            raise BackendError("apiserver https://127.0.0.1:1: ConnectError")

    store, job_id, status = _run_injected(TeardownFails, coach_home, tmp_path, stop_at_once=True, name="teardown")
    kinds = [e["kind"] for e in store.events(job_id)]
    assert status == "stopped" and store.job(job_id).status == "stopped", store.job(job_id).message
    assert kinds[-1] == "teardown_failed" and "failed" not in kinds, kinds
    assert "ConnectError" in store.events(job_id)[-1]["message"]


def test_a_damaged_checkpoint_fails_once_naming_the_file(tmp_path: Path) -> None:
    """A checkpoint damaged on disk fails the epoch at once, naming the file, instead of four
    charged attempts ending in MXNet's C++ stack trace ('Invalid NDArray file format')."""
    from coach.backends.local import LocalBackend
    from coach.errors import EpochFailed
    from coach.job.epoch import EpochPlan, EpochRunner

    events: list[tuple[str, str]] = []
    backend = LocalBackend(cpu=2)
    runner = EpochRunner(backend, tmp_path, max_retries=3, on_event=lambda *e: events.append(e))
    task = {"dataset": {"name": "digits"}, "model": {"name": "mlp"},
            "hyper": {"batch_size": 32, "optimizer": "sgd", "learning_rate": 0.05, "momentum": 0.9}}

    def plan(epoch: int, checkpoint_in: str | None) -> EpochPlan:
        return EpochPlan(job_id="ck", phase="training", epoch=epoch, workers=1, servers=1, seed=epoch, limit=256,
                         deadline_s=300, checkpoint_in=checkpoint_in, checkpoint_out=str(tmp_path / f"ck{epoch}"),
                         task=task)

    try:
        first = runner.run(plan(1, None))
        (Path(first.checkpoint) / "params").write_bytes(b"not an NDArray file")
        with pytest.raises(EpochFailed, match=r"ck1/params: damaged checkpoint, cannot be loaded") as failed:
            runner.run(plan(2, first.checkpoint))
    finally:
        backend.close()
    assert "not retried" in str(failed.value) and failed.value.resumable   # once the file is restored
    assert not [e for e in events if e[0] == "retry"], events


def test_a_message_with_square_brackets_is_printed_as_it_is(tmp_path: Path, coach_home: Path) -> None:
    # rich read "[/16, /32]" in a model's error as a closing tag: the end of `coach submit` and every
    # later `coach status` ended in a MarkupError traceback, and "[relu, tanh]" vanished from the line
    (tmp_path / "net.py").write_text("def build(num_classes):\n"
                                     "    raise ValueError('sizes must be one of [/16, /32]; activation [relu, tanh]')\n")
    job = write_job(tmp_path / "b.yaml", name="brackets", model="net.py",
                    **{k: v for k, v in JOB.items() if k not in ("name", "model")})
    proc = run_coach("submit", str(job))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "[/16, /32]; activation [relu, tanh]" in proc.stderr, proc.stderr
    status = run_coach("status")
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
    assert "[/16, /32]; activation [relu, tanh]" in status.stdout


def test_a_worker_whose_model_fails_after_the_rendezvous_answers_at_once(tmp_path: Path, coach_home: Path) -> None:
    # `kv.create` runs beside the model's construction: one worker of two fails to build its model
    # once its kvstore has formed. Freed with the failure, that kvstore's destructor waited at
    # ps-lite's exit barrier for the other worker (waiting in its own), so the failing worker never
    # answered and the epoch would have ended at its 900 s deadline instead of failing at once
    (tmp_path / "net.py").write_text(
        "import os\nimport time\nfrom mxnet.gluon import nn\n\n\ndef build(num_classes):\n"
        f"    try:\n        os.close(os.open({str(tmp_path / 'first')!r}, os.O_CREAT | os.O_EXCL))\n"
        "    except FileExistsError:   # the second worker builds it\n"
        "        return nn.Dense(num_classes)\n"
        "    time.sleep(3.0)   # the first fails after the rendezvous (0.1 s, more on a busy machine)\n"
        "    raise RuntimeError('this worker cannot build its model')\n")
    job = write_job(tmp_path / "b.yaml", name="half", model="net.py",
                    **{k: v for k, v in JOB.items() if k not in ("name", "model")})
    proc = run_coach("submit", str(job), timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "net.py: build(10) raised RuntimeError: this worker cannot build its model" in proc.stderr, proc.stderr
