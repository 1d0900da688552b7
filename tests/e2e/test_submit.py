"""`coach submit` end to end: real MXNet parameter-server epochs through the role functions."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from coach.state.store import Store

from tests.conftest import COACH, FAST_JOB, ROOT, run_coach, write_job
from tests.unit.test_models import HANG_OP

pytestmark = pytest.mark.slow


def _history(job_id: str) -> list[dict]:
    return json.loads(run_coach("history", job_id, "--json", check=True).stdout)


def _assert_reached_target(records: list[dict], target: float, consecutive: int = 3) -> None:
    training = [r for r in records if r["phase"] == "training"]
    assert [r["epoch"] for r in training] == list(range(1, len(training) + 1)), "each epoch exactly once"
    assert all(r["val_loss"] <= target for r in training[-consecutive:])
    assert len(training) >= consecutive
    assert not all(r["val_loss"] <= target for r in training[-consecutive - 1:]) or len(training) == consecutive, \
        "the job must stop as soon as the rule is met"


PROGRESS = re.compile(r"^\S+\s+(tuning|training)\s+epoch\s+(\d+)\s+val (\S+) / \S+(?: after (tuning|training) (\d+))?")


def _assert_progress_names_its_losses(err: str, records: list[dict]) -> None:
    """Each progress line's loss is the one of the epoch it names (the running epoch's number
    once sat beside the previous epoch's loss)."""
    loss = {(r["phase"], r["epoch"]): f"{r['val_loss']:.4g}" for r in records}
    lines = [m for m in map(PROGRESS.match, err.splitlines()) if m]
    assert lines
    for m in lines:
        status, epoch, val, after_phase, after_epoch = m.groups()
        of = (after_phase, int(after_epoch)) if after_phase else (status, int(epoch))
        if val != "-":
            assert loss[of] == val, m.string


def test_submit_trains_to_target_and_status_reads_while_running(tmp_path: Path, coach_home: Path) -> None:
    job = write_job(tmp_path / "fast.yaml", name="fast", **FAST_JOB)
    proc = subprocess.Popen([*COACH, "submit", str(job)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    seen_running, shown = False, []
    while proc.poll() is None:   # a second process reads the store while the job runs
        status = run_coach("status", "--json")
        assert status.returncode == 0, status.stderr
        jobs = json.loads(status.stdout)
        seen_running |= any(j["status"] in ("tuning", "training") for j in jobs)
        shown += [(j["val_epoch"], j["eta"]["at"]) for j in jobs if j["eta"] and j["val_epoch"]]
        for _ in range(4):   # and the store directly between them: a status process took seconds on busy
            time.sleep(0.05)   # cores, and once none read the job between its first ETA and its end
            shown += [(j.val_epoch, j.eta["at"]) for j in Store().read_jobs()[0] if j.eta and j.val_epoch]
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert seen_running
    assert "epoch" in err and "val" in err   # progress lines
    [job_rec] = json.loads(run_coach("status", "--json", check=True).stdout)
    assert job_rec["status"] == "succeeded"
    records = _history(job_rec["job_id"])
    _assert_reached_target(records, FAST_JOB["target_loss"])
    _assert_progress_names_its_losses(err, records)
    # a loss is shown with the ETA predicted from it (fitted beside the next epoch), never an older one
    finished = {f"{r['phase']} {r['epoch']}": r["finished_at"] for r in records}
    assert shown and all(at >= finished[epoch] for epoch, at in shown), shown
    tuning = [r for r in records if r["phase"] == "tuning"]
    # (2, 2), the last, on epoch 1, and (2, 1) inside it, through one of its servers, on the first
    # of its samples; (1, 1), which would need a start-up of its own, is left to the planner
    assert [(r["workers"], r["servers"]) for r in tuning] == [(2, 1)]
    epoch1 = next(r for r in records if r["phase"] == "training")
    assert (epoch1["workers"], epoch1["servers"]) == (2, 2)
    assert epoch1["first_sample"] == tuning[0]["samples"] and tuning[0]["first_sample"] == 0
    assert [r["epoch"] for r in tuning] == [1]
    assert tuning[0]["finished_at"] == epoch1["started_at"], "one invocation: it ends as epoch 1 goes on"
    # the invocation's cost, shared by wall time
    shares = [r["cost"] / (tuning[0]["cost"] + epoch1["cost"]) for r in (tuning[0], epoch1)]
    walls = [r["duration_s"] / (tuning[0]["duration_s"] + epoch1["duration_s"]) for r in (tuning[0], epoch1)]
    assert shares == pytest.approx(walls) and all(0 < x < 1 for x in shares)
    events = json.loads(run_coach("events", job_rec["job_id"], "--json", check=True).stdout)
    assert any(e["kind"] == "plan" and e["message"].startswith(
        f"epoch 1: (2, 2): the last configuration tuning measures, on epoch 1, whose first "
        f"{tuning[0]['samples']} samples measure (2, 1) through one of its 2 servers") for e in events)
    assert any(e["kind"] == "tuning_skipped" and e["message"].startswith("(1, 1): left to the planner, which "
                                                                         "measures it by one epoch") for e in events), events
    assert job_rec["spent"] == pytest.approx(sum(r["cost"] for r in records))
    assert all(r["cost"] > 0 for r in records)


def _epoch_1(tmp_path: Path, name: str, **fields) -> list[dict]:
    """The records of a dynamic FAST_JOB (with `fields`) that runs tuning and training epoch 1 only."""
    job = dict(FAST_JOB, max_epochs=1, consecutive=1, target_loss=1e-4, **fields)
    proc = run_coach("submit", str(write_job(tmp_path / f"{name}.yaml", name=name, **job)), "--json")
    [rec] = json.loads(proc.stdout)
    assert rec["status"] == "max_epochs", proc.stderr
    return _history(rec["job_id"])


def test_a_share_of_epoch_1_under_one_batch_is_measured_by_a_mini_epoch_of_its_own(tmp_path: Path,
                                                                                   coach_home: Path) -> None:
    """(2, 1) is measured inside epoch 1's (2, 2) group only on whole global batches that leave
    the rest some: 240 training samples give each of 3 configurations 80, under a batch of 96.
    Probed there, the workers refused the share and the job failed after 4 attempts."""
    records = _epoch_1(tmp_path, "small", dataset={"name": "synthetic", "samples": 300}, batch_size=96)
    assert [(r["phase"], r["workers"], r["servers"]) for r in records] == [
        ("tuning", 1, 1), ("tuning", 2, 1), ("training", 2, 2)]
    assert records[1]["finished_at"] < records[2]["started_at"], "a mini-epoch of its own, before epoch 1"


def test_a_probe_follows_mxnets_bigarray_bound_as_set(tmp_path: Path, coach_home: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A probing worker has MXNet cut no array and splits them itself at the bound its
    environment sets (`coach.training.keys.as_mxnet_splits`): set low, `mlp`'s larger arrays are
    cut in two for the rest of epoch 1, and the probe still sends them whole to one server."""
    monkeypatch.setenv("MXNET_KVSTORE_BIGARRAY_BOUND", "500")
    records = _epoch_1(tmp_path, "low")
    assert [(r["phase"], r["workers"], r["servers"]) for r in records] == [("tuning", 2, 1), ("training", 2, 2)]
    assert all(r["retries"] == 0 for r in records)


def test_a_dynamic_jobs_tuning_trains_the_head_of_the_epoch_a_static_job_trains(tmp_path: Path,
                                                                                 coach_home: Path) -> None:
    """One seed, one trajectory, whatever the allocation: the mini-epochs train epoch 1's
    permutation from where the last one ended and epoch 1 the rest, so epoch 1 ends where a static
    (1, 1) job's does (to the last digit on mlp-digits). Before, tuning drew 768 samples of its own
    first and the two runs parted from the first step."""
    one = dict(FAST_JOB, max_epochs=1, consecutive=1, target_loss=1e-4)
    jobs = {"dyn": one, "static": dict(one, allocation="static", workers=1, servers=1, max_workers=1, max_servers=1)}
    for name, fields in jobs.items():
        run_coach("submit", str(write_job(tmp_path / f"{name}.yaml", name=name, **fields)))
    records = {j["name"]: _history(j["job_id"]) for j in json.loads(run_coach("status", "--json", check=True).stdout)}
    tuning = [r for r in records["dyn"] if r["phase"] == "tuning"]
    [epoch1] = [r for r in records["dyn"] if r["phase"] == "training"]
    [static1] = records["static"]
    assert len(tuning) == 1   # (2, 1), inside epoch 1
    assert [r["first_sample"] for r in tuning] == [256 * i for i in range(len(tuning))]
    assert epoch1["first_sample"] == 256 * len(tuning)
    assert epoch1["first_sample"] + epoch1["samples"] == static1["samples"]
    assert epoch1["val_loss"] == pytest.approx(static1["val_loss"], rel=1e-6)


def test_a_resubmitted_job_skips_tuning_and_plans_epoch_1_on_the_speeds_measured_before(tmp_path: Path,
                                                                                         coach_home: Path) -> None:
    """The second submission of a job finds the first's measured speeds (same model, data, batch,
    resources, scheduler, backend): it tunes nothing and its epoch 1 is a whole epoch on the configuration
    the planner chose from them. Tuning trained epoch 1's head, so both runs of one seed learn
    the same: epoch 1 ends at the same loss. A job of another batch size tunes again."""
    first, again = (json.loads(run_coach("submit", str(write_job(tmp_path / f"{n}.yaml", name=n, **FAST_JOB)),
                                         "--json", check=True).stdout)[0] for n in ("first", "again"))
    before, after = _history(first["job_id"]), _history(again["job_id"])
    assert any(r["phase"] == "tuning" for r in before)
    assert all(r["phase"] == "training" for r in after), after
    assert after[0]["first_sample"] == 0 and after[0]["samples"] == before[-1]["samples"]
    epoch1 = next(r for r in before if r["phase"] == "training")
    assert after[0]["val_loss"] == pytest.approx(epoch1["val_loss"], rel=1e-6)
    events = json.loads(run_coach("events", again["job_id"], "--json", check=True).stdout)
    skipped = [e["message"] for e in events if e["kind"] == "tuning_skipped"]
    assert skipped == [f"(2, 1), (2, 2): measured by {first['job_id']}, earlier job(s) of the same model, "
                       "data, batch, resources and scheduler on this backend",
                       "(1, 1): left to the planner, which measures it by one epoch once the job is predicted "
                       "long enough to pay for it"], skipped
    assert any(e["kind"] == "plan" and e["message"].startswith("epoch 1: ") for e in events), events
    other = json.loads(run_coach("submit", str(write_job(tmp_path / "other.yaml", name="other",
                                                         **dict(FAST_JOB, batch_size=16))), "--json").stdout)[0]
    assert any(r["phase"] == "tuning" for r in _history(other["job_id"]))


@pytest.mark.parametrize(("cpu", "problem"), [
    # recorded as a failed job before; then it named no field and ended "(--cpu)"; then it blamed the file
    ("0.1", "--cpu: 0.1 cores are too few for {job}: its smallest allocation (1 worker(s), 1 server(s) and a "
            "scheduler) needs 0.85 cores and 1.75 GiB"),
    ("1e400", "--cpu: must be a finite number of cores, got inf"),          # accepted before
])
def test_a_backend_too_small_for_the_job_is_refused_before_anything_is_recorded(tmp_path: Path, coach_home: Path,
                                                                              cpu: str, problem: str) -> None:
    job = write_job(tmp_path / "fast.yaml", name="fast", **FAST_JOB)
    proc = run_coach("submit", str(job), "--cpu", cpu)
    problem = problem.format(job=job)
    assert proc.returncode == 2 and problem in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert "no jobs yet" in run_coach("status", check=True).stderr


def test_a_reader_that_goes_away_does_not_stop_the_jobs(tmp_path: Path, coach_home: Path) -> None:
    """`coach submit job.yaml 2>&1 | head -3`: the progress pipe closes after three lines. Before,
    the watcher's BrokenPipeError tore the backend down under the running job, which then
    'failed 4 times' (retries spent at once on a shut-down backend)."""
    job = write_job(tmp_path / "fast.yaml", name="fast", **FAST_JOB)
    proc = subprocess.Popen([*COACH, "submit", str(job)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines = [proc.stdout.readline() for _ in range(3)]
    proc.stdout.close()   # as `head` does
    assert proc.wait(timeout=600) == 0, lines
    [job_rec] = json.loads(run_coach("status", "--json", check=True).stdout)
    assert job_rec["status"] == "succeeded", job_rec["message"]
    events = json.loads(run_coach("events", job_rec["job_id"], "--json", check=True).stdout)
    assert not [e for e in events if e["kind"] in ("retry", "epoch_failed")], events


def test_a_closed_stdout_leaves_the_progress_on_stderr(tmp_path: Path, coach_home: Path) -> None:
    """`coach submit --json | true`: only the JSON's reader went away; progress and the job go on."""
    job = write_job(tmp_path / "fast.yaml", name="fast", **FAST_JOB)
    proc = subprocess.Popen([*COACH, "submit", str(job), "--json"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert re.search(r"fast-\w+ +succeeded", err), err


def test_jobs_run_concurrently_without_waiting_for_each_others_tuning(tmp_path: Path, coach_home: Path) -> None:
    files = [str(write_job(tmp_path / f"j{i}.yaml", name=f"multi{i}", **FAST_JOB)) for i in range(3)]
    proc = run_coach("submit", *files, "--json", "--cpu", "3")
    assert proc.returncode == 0, proc.stderr
    # more cores than the machine has are allowed (here: room for three jobs' tuning), and said
    assert ("note: --cpu 3 is more than this machine's" in proc.stderr) is ((os.cpu_count() or 1) < 3), proc.stderr
    jobs = json.loads(proc.stdout)
    assert [j["status"] for j in jobs] == ["succeeded"] * 3
    histories = {j["job_id"]: _history(j["job_id"]) for j in jobs}
    for records in histories.values():
        _assert_reached_target(records, FAST_JOB["target_loss"])
        tuning = [r["epoch"] for r in records if r["phase"] == "tuning"]
        assert tuning == list(range(1, len(tuning) + 1)), "tuning numbered as run, even when one was skipped"
    # every job had started tuning before any other job finished its tuning
    first_start = {jid: min(r["started_at"] for r in recs) for jid, recs in histories.items()}
    tuning_end = {jid: max(r["finished_at"] for r in recs if r["phase"] == "tuning")
                  for jid, recs in histories.items()}
    assert max(first_start.values()) < min(tuning_end.values())


def test_static_job_with_tight_budget_stops_as_budget_exhausted(tmp_path: Path, coach_home: Path) -> None:
    job = write_job(tmp_path / "b.yaml", name="tight", **dict(FAST_JOB, allocation="static", workers=1,
                                                                servers=1, target_loss=0.01, budget=0.0001))
    # 0.0001: about 13 of its epochs (7.5e-6 each since session 36; 0.0002 paid for all 25 of max_epochs)
    proc = run_coach("submit", str(job), "--json")
    assert proc.returncode == 1
    [rec] = json.loads(proc.stdout)
    assert rec["status"] == "budget_exhausted" and "budget exhausted" in rec["message"]
    records = _history(rec["job_id"])
    assert records, "epochs before the budget ran out are recorded"
    assert rec["spent"] == pytest.approx(sum(r["cost"] for r in records))
    assert rec["spent"] <= rec["budget"] + max(r["cost"] for r in records)
    # it stops on a prediction of what the next epoch is charged, not of its wall time (which
    # counts the replicas' uncharged `import mxnet`: a next epoch predicted at 4x what any cost)
    predicted = re.search(r"the next epoch would cost ([0-9.e+-]+)", rec["message"])
    if predicted is None:   # the only other way: an epoch cost more than predicted, and the money is gone
        assert rec["spent"] >= rec["budget"] and "spent" in rec["message"], rec["message"]
    else:
        assert float(predicted.group(1)) <= 1.5 * max(r["cost"] for r in records), (rec["message"], records)
    assert (coach_home / "jobs" / rec["job_id"] / "checkpoints").iterdir(), "checkpoint kept"
    # resuming without more money would start the backend only to stop again (and charge for it)
    again = run_coach("resume", rec["job_id"])
    assert again.returncode == 1 and "stopped on its budget" in again.stderr and "larger --budget" in again.stderr
    least = re.search(r"larger --budget, (at least|more than) ([0-9.e+-]+)", again.stderr)   # it named no figure
    assert least and float(least.group(2)) >= rec["budget"], again.stderr
    # what the job's report said to run next names the same least budget
    step = f"`coach resume {rec['job_id']} --budget B` goes on where it stopped, B {least.group(1)} {least.group(2)}"
    assert rec["next_step"].startswith(step), (rec["next_step"], again.stderr)
    assert f"{rec['job_id']}: next: {step}" in run_coach("status", rec["job_id"], check=True).stdout
    if predicted is not None:
        assert least.group(1) == "at least" and float(least.group(2)) >= rec["spent"] + float(predicted.group(1)) * 0.999
    same = run_coach("resume", rec["job_id"], "--budget", str(rec["budget"]))   # no more money than before
    assert same.returncode == 2 and "larger --budget" in same.stderr, same.stderr   # a bad argument
    if predicted is not None:   # nor less than its next epoch is predicted to cost (unrounded, in the store)
        need = rec["spent"] + Store().job(rec["job_id"]).eta["next_epoch_cost"] - rec["budget"]   # > 0: why it stopped
        short = run_coach("resume", rec["job_id"], "--budget", repr(rec["budget"] + need / 2))
        assert short.returncode == 2 and "its next epoch is predicted to cost" in short.stderr, short.stderr
    assert json.loads(run_coach("status", "--json", check=True).stdout)[0]["spent"] == rec["spent"]


def test_a_long_job_alone_measures_the_minimum_tuning_left_out_once(tmp_path: Path, coach_home: Path) -> None:
    """Alone, tuning leaves (1, 1) out (a start-up of its own); a job predicted long enough that
    even at half (2, 1)'s rate an epoch there costs under 2% of the time left measures it by one
    epoch, and then goes back to what reads faster. The target is out of reach, so the job runs
    what max_epochs leaves: 100 epochs, about 50 needed (more where the 8-step (2, 1) read slow)."""
    job = write_job(tmp_path / "long.yaml", name="long", **dict(FAST_JOB, target_loss=1e-9, max_epochs=100))
    proc = run_coach("submit", str(job), "--json")
    [rec] = json.loads(proc.stdout)
    assert rec["status"] == "max_epochs", proc.stderr
    records = _history(rec["job_id"])
    assert [(r["workers"], r["servers"]) for r in records if r["phase"] == "tuning"] == [(2, 1)]
    on = {r["epoch"]: (r["workers"], r["servers"]) for r in records if r["phase"] == "training"}
    events = json.loads(run_coach("events", rec["job_id"], "--json", check=True).stdout)
    explored = [int(m.group(1)) for e in events if e["kind"] == "plan" and (m := re.match(
        r"epoch (\d+): \(1, 1\): 1 worker, 1 server: measured once, which tuning left out", e["message"]))]
    plans = [e["message"][:160] for e in events if e["kind"] == "plan"]
    assert len(explored) == 1 and on[explored[0]] == (1, 1), (explored, plans)
    assert (1, 1) not in list(on.values())[:explored[0] - 1], on   # not before: nothing had measured it


@pytest.mark.parametrize("cpu", [pytest.param([], id="alone"), pytest.param(["--cpu", "1.5"], id="mini-epochs")])
def test_a_tiny_dynamic_budget_is_overspent_by_one_epoch_at_most(tmp_path: Path, coach_home: Path,
                                                                 cpu: list[str]) -> None:
    # 2.5e-5 (a second of (1, 1), the least a job file may give). Alone on the machine, a first
    # submission has no rate to check epoch 1 by: it runs on (2, 2) with (2, 1) measured inside it,
    # unchecked, as a static job's first epoch does. On 1.5 cores (2, 2) never fits: (1, 1) and
    # (2, 1) are mini-epochs of their own, (1, 2) the last; the first mini-epoch (about 5e-6
    # charged here: the replicas' import of MXNet, most of its wall time, is not charged) gives a
    # rate, and each later one is predicted with the start-up charged so far. Where tuning ends
    # depends on the machine's speed, so the test asserts the rule: a tuning cut short says it
    # ended on the budget (counting only the samples, (2, 1) started and overspent; counting the
    # wall-clock start-up, import included, tuning ended after (1, 1) even at 1e-4), the target is
    # out of reach, and the job stops on its budget, over it by one invocation at most.
    job = write_job(tmp_path / "b.yaml", name="tiny", **dict(FAST_JOB, allocation="dynamic", budget=2.5e-5,
                                                             target_loss=0.001))
    proc = run_coach("submit", str(job), "--json", *cpu)
    assert proc.returncode == 1, proc.stderr
    [rec] = json.loads(proc.stdout)
    assert rec["status"] == "budget_exhausted", rec
    records = _history(rec["job_id"])
    tuned = [(r["workers"], r["servers"]) for r in records if r["phase"] == "tuning"]
    assert rec["spent"] == pytest.approx(sum(r["cost"] for r in records))
    # over by one invocation at most: a probe's record and its epoch's are one
    invocations = [r["cost"] + sum(n["cost"] for n in records if n["started_at"] == r["finished_at"]) for r in records]
    assert rec["spent"] <= rec["budget"] + max(invocations), records
    if not cpu:
        assert tuned == [(2, 1)] and records[1]["phase"] == "training", records
        return
    assert tuned[:1] == [(1, 1)] and len(tuned) <= 2, tuned
    events = json.loads(run_coach("events", rec["job_id"], "--json", check=True).stdout)
    said = any(e["kind"] == "tuning_skipped" and ("of the budget is left" in e["message"] or
                                                  "the budget is spent" in e["message"]) for e in events)
    assert said or tuned == [(1, 1), (2, 1)], (tuned, events)


def test_a_probe_group_the_budget_cannot_buy_leaves_the_rest_of_epoch_1_to_what_it_would_measure(
        tmp_path: Path, coach_home: Path) -> None:
    """With a rate from an earlier job's (1, 1), the (2, 2) group that would train epoch 1 and
    measure (2, 1) on its first samples is predicted to cost more than the budget, (2, 1) less:
    (2, 1) trains epoch 1 instead (`JobLoop._run`'s fallback). Servers are made the expensive role
    (memory, priced alone), so that (2, 2) costs 1.95× (2, 1) per second; the budget is set from
    the first job's epoch, as the loop predicts from it (its rate, and its time beyond training),
    halfway between the two on a log scale: either prediction may be 40% off the first job's. A
    long epoch keeps them close: its start-up, the noisiest part, is a small part of it."""
    from coach.data import train_size
    from coach.estimate.cost import Prices, RoleResources, epoch_cost

    memory = {"scheduler": 0.0625, "server": 4.0, "worker": 0.0625}
    data = {"name": "synthetic", "samples": 40000}
    job = dict(FAST_JOB, dataset=data, tuning_samples=1024, max_epochs=1, consecutive=1, target_loss=1e-4,
               prices={"cpu_core_second": 0, "gib_second": 1e-6},
               resources={role: {"memory": gib} for role, gib in memory.items()})
    # one worker and one server: its one epoch measures (1, 1), which later jobs of its speed know
    first = json.loads(run_coach("submit", str(write_job(tmp_path / "first.yaml", name="first",
                                                         **dict(job, max_workers=1, max_servers=1))),
                                 "--json", "--cpu", "2").stdout)[0]
    [ran] = _history(first["job_id"])
    assert (ran["phase"], ran["workers"], ran["servers"]) == ("training", 1, 1), ran
    resources, prices = {r: RoleResources(cpu=0.0, memory_gib=g) for r, g in memory.items()}, Prices(0.0, 1e-6)
    per_second = lambda w, s: epoch_cost(w, s, resources, 1.0, prices)
    overhead = ran["duration_s"] - ran["samples"] / ran["samples_per_s"]
    epoch_s = train_size("synthetic", {"samples": 40000}) / ran["samples_per_s"] + overhead
    gap = per_second(2, 2) / per_second(2, 1)
    assert gap > 1.9
    budget = gap ** 0.5 * epoch_cost(2, 1, resources, epoch_s, prices)
    proc = run_coach("submit", str(write_job(tmp_path / "tight.yaml", name="tight", **dict(job, budget=budget))),
                     "--json", "--cpu", "2")
    assert proc.returncode == 1, proc.stderr   # stopped short of the target
    [rec] = json.loads(proc.stdout)
    records = _history(rec["job_id"])
    events = json.loads(run_coach("events", rec["job_id"], "--json", check=True).stdout)
    assert [(r["phase"], r["workers"], r["servers"], r["first_sample"]) for r in records] == [
        ("training", 2, 1, 0)], (records, events)
    # (2, 1)'s epoch was predicted at (1, 1)'s rate: over the budget by that epoch at most
    assert rec["status"] == "max_epochs" and rec["spent"] <= rec["budget"] + records[-1]["cost"], rec
    [skipped] = [e["message"] for e in events if e["kind"] == "tuning_skipped" and e["message"].startswith("(2, 2)")]
    assert skipped.startswith("(2, 2): training the rest of epoch 1 on it is predicted to cost "), skipped
    assert skipped.endswith("(2, 1), which it was to measure inside it, trains the rest of epoch 1 instead"), skipped


def test_two_submit_processes_share_the_machine_without_oversubscribing(tmp_path: Path, coach_home: Path) -> None:
    # each process may use 1 core; a static (1, 1) epoch holds 0.85: one epoch at a time
    files = [write_job(tmp_path / f"p{i}.yaml", name=f"proc{i}",
                       **dict(FAST_JOB, allocation="static", workers=1, servers=1)) for i in range(2)]
    procs = [subprocess.Popen([*COACH, "submit", str(f), "--json", "--cpu", "1"], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for f in files]
    waited = False
    while any(p.poll() is None for p in procs):
        jobs = json.loads(run_coach("status", "--json", check=True).stdout)
        waited |= any(j["message"].startswith("waiting for capacity") for j in jobs)
        time.sleep(0.3)
    outs = [p.communicate() for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    assert waited, "one process's job must have waited for the other's cores"
    # and `coach events` says so after the fact (it showed only plans)
    said = [e["message"] for out, _ in outs for job in json.loads(out)
            for e in json.loads(run_coach("events", job["job_id"], "--json", check=True).stdout)
            if e["kind"] == "waited"]
    assert said and all(re.match(r"\d+\.\d s for \(1, 1\): needs 0\.85 cores", m) for m in said), said
    spans = sorted((r["started_at"], r["finished_at"], job["job_id"])
                   for out, _ in outs for job in json.loads(out) for r in _history(job["job_id"]))
    for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
        assert start >= end, f"epochs of {a} and {b} overlapped: the 1-core capacity was handed out twice"
    # first come, first served between epochs: neither run keeps the core until it is done
    last_end = {job: max(end for _, end, j in spans if j == job) for _, _, job in spans}
    for job, end in last_end.items():
        assert any(start < end for start, _, j in spans if j != job), f"{job} kept the core to itself"


BROKEN_NETS = {
    "not-a-block": ("def build(num_classes):\n    return 3\n", ": build(10) returned int, not a Gluon Block"),
    # would train and "succeed": the loss clips labels 5..9 to the last output
    "five-outputs": ("from mxnet.gluon import nn\n\ndef build(num_classes):\n    return nn.Dense(5)\n",
                     ": the network outputs shape (5,) per sample; it must output (10,)"),
    "forward-raises": ("from mxnet.gluon import nn\n\nclass Net(nn.Block):\n"
                       "    def forward(self, x):\n        raise RuntimeError('boom')\n\n"
                       "def build(num_classes):\n    return Net()\n",
                       ": the network failed on one sample of shape (1, 8, 8): RuntimeError: boom"),
    # passes the first (inference) forward, fails once training: named by file and line
    "training-forward-raises": ("from mxnet import autograd\nfrom mxnet.gluon import nn\n\n"
                                "class Net(nn.Block):\n    def __init__(self):\n        super().__init__()\n"
                                "        self.out = nn.Dense(10)\n\n    def forward(self, x):\n"
                                "        if autograd.is_training():\n            raise ValueError('only in training')\n"
                                "        return self.out(x)\n\ndef build(num_classes):\n    return Net()\n",
                                " line 11: ValueError: only in training"),
    # a worker that exits looked like one that finished: the epoch waited for it until its deadline
    "exits": ("import sys\n\ndef build(num_classes):\n    sys.exit(3)\n",
              " line 4 called sys.exit(3) in a worker"),
    # held each of the epoch's 4 attempts until its 900 s deadline; the limit is lowered here
    "hangs": ("import time\n\ndef build(num_classes):\n    time.sleep(3600)\n",
              ": build(10) did not finish within 5 s (it was at line 4)"),
    # an operator that never returns: the worker's main thread waits in MXNet, where no signal
    # handler runs; the watchdog answers 10 s after the limit and ends the role process
    "hangs-in-native-code": (HANG_OP.replace("SECONDS", "3600").replace("NAME", "e2e"),
                             ": the first forward pass did not finish within 5 s (it was at line 31); raise "
                             "COACH_USER_CODE_LIMIT_S in the worker function's env if it needs longer "
                             "(stuck in native code)"),
}


@pytest.mark.parametrize("case", list(BROKEN_NETS))
def test_a_model_file_that_cannot_build_fails_once_naming_the_file(case: str, tmp_path: Path, coach_home: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    source, problem = BROKEN_NETS[case]
    monkeypatch.setenv("COACH_USER_CODE_LIMIT_S", "5")   # reaches the worker through the backend's environment
    (tmp_path / "net.py").write_text(source)
    job = write_job(tmp_path / "bad.yaml", name="badnet", **dict(FAST_JOB, model="net.py", allocation="static",
                                                                 workers=1, servers=1))
    proc = run_coach("submit", str(job), "--json")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    [rec] = json.loads(proc.stdout)
    assert rec["status"] == "failed"
    assert f"{tmp_path / 'net.py'}{problem}" in rec["message"], rec["message"]
    events = json.loads(run_coach("events", rec["job_id"], "--json", check=True).stdout)
    assert not [e for e in events if e["kind"] == "retry"], "the same code fails the same way: no retries"
    # the source recorded at submit would fail again: a resume is refused, nothing is charged
    again = run_coach("resume", rec["job_id"])
    assert again.returncode == 1 and "a resume would repeat" in again.stderr, again.stderr
    assert json.loads(run_coach("status", "--json", check=True).stdout)[0]["spent"] == rec["spent"]


SEGFAULTS = """import ctypes
from mxnet.gluon import nn


class Net(nn.HybridBlock):
    def __init__(self):
        super().__init__()
        self.out = nn.Dense(10)
        self.calls = 0

    def hybrid_forward(self, F, x):
        self.calls += 1
        if self.calls > 3:   # in training, after the build's first forward pass
            ctypes.string_at(0)
        return self.out(x)


def build(num_classes):
    return Net()
"""


def test_a_worker_that_dies_in_native_code_says_where(tmp_path: Path, coach_home: Path) -> None:
    """A segfault (here ctypes reading address 0 under the model's forward) read "worker process
    was killed by SIGABRT before answering" and no more: MXNet's own handler only logs
    "Segmentation fault: 11". The role process's faulthandler report names the frames."""
    (tmp_path / "net.py").write_text(SEGFAULTS)
    job = write_job(tmp_path / "crash.yaml", name="crash", **dict(FAST_JOB, model="net.py", allocation="static",
                                                                  workers=1, servers=1, max_retries=0))
    proc = run_coach("submit", str(job), "--json")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    [rec] = json.loads(proc.stdout)
    assert rec["status"] == "failed"
    assert "worker process was killed by SIGABRT before answering: Segmentation fault in string_at (" in rec["message"]
    assert rec["message"].endswith(f"called from hybrid_forward ({tmp_path / 'net.py'} line 14)"), rec["message"]
    log = (coach_home / "logs" / f"{rec['job_id']}-worker.log").read_text()
    assert f'File "{tmp_path / "net.py"}", line 14 in hybrid_forward' in log   # the whole report too


def test_a_small_cifar10_folder_refuses_a_batch_larger_than_it(tmp_path: Path, coach_home: Path) -> None:
    # the folder's batches are counted at submit: refused there, naming the file and field,
    # and nothing is recorded (before, the job was recorded and failed when its loop began)
    from tests.unit.test_datasets import _write_cifar

    _write_cifar(tmp_path / "c", per_batch=10)         # 60 images, 48 for training
    job = write_job(tmp_path / "small.yaml", name="small",
                    **dict(FAST_JOB, model="lenet", dataset={"name": "cifar10", "path": str(tmp_path / "c")},
                           batch_size=64, allocation="static", workers=1, servers=1))
    proc = run_coach("submit", str(job))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{job}: batch_size: 64 is more than the 48 training samples of cifar10" in proc.stderr, proc.stderr
    assert run_coach("status", "--json", check=True).stdout.strip() == "[]"


def test_a_cifar10_folder_that_shrank_before_a_resume_fails_before_any_epoch(tmp_path: Path,
                                                                           coach_home: Path) -> None:
    from tests.unit.test_datasets import _write_cifar

    _write_cifar(tmp_path / "c", per_batch=20)         # 120 images, 96 for training
    job = write_job(tmp_path / "c10.yaml", name="c10",
                    **dict(FAST_JOB, model="lenet", dataset={"name": "cifar10", "path": str(tmp_path / "c")},
                           batch_size=64, target_loss=1e-6, max_epochs=3, consecutive=1, allocation="static",
                           workers=1, servers=1))
    [rec] = json.loads(run_coach("submit", str(job), "--json").stdout)
    assert rec["status"] == "max_epochs", rec
    fewer = run_coach("resume", rec["job_id"], "--max-epochs", "3")   # not above the 3 epochs it ran
    assert fewer.returncode == 2 and "Traceback" not in fewer.stderr, fewer.stderr
    assert "--max-epochs: " in fewer.stderr and "give more than 3, got 3" in fewer.stderr, fewer.stderr
    _write_cifar(tmp_path / "c", per_batch=10)         # now 48 for training
    again = run_coach("resume", rec["job_id"], "--max-epochs", "4")
    assert again.returncode == 1 and "Traceback" not in again.stderr, again.stderr
    [after] = json.loads(run_coach("status", rec["job_id"], "--json", check=True).stdout)
    assert after["status"] == "failed"
    assert "batch_size: 64 is more than the 48 training samples of cifar10" in after["message"], after["message"]
    assert len(_history(rec["job_id"])) == 3   # the epochs already trained stay recorded


def test_a_resubmitted_model_asks_its_earlier_runs(tmp_path: Path, coach_home: Path) -> None:
    job = dict(FAST_JOB, target_loss=0.1, allocation="static", workers=1, servers=1)   # ~9 epochs, no tuning
    first = json.loads(run_coach("submit", str(write_job(tmp_path / "a.yaml", name="a", **job)), "--json",
                                 check=True).stdout)[0]["job_id"]
    again = run_coach("submit", str(write_job(tmp_path / "b.yaml", name="b", seed=1, **job)), "--json", check=True)
    other = run_coach("submit", str(write_job(tmp_path / "c.yaml", name="c", **dict(job, learning_rate=0.03))),
                      "--json", check=True)

    def earlier_events(proc: subprocess.CompletedProcess) -> list[str]:
        job_id = json.loads(proc.stdout)[0]["job_id"]
        events = json.loads(run_coach("events", job_id, "--json", check=True).stdout)
        return [e["message"] for e in events if e["kind"] == "earlier_run"]

    [message] = earlier_events(again)   # another seed: same curve up to its seed
    assert message.startswith(f"the ETA also asks {first} (") and "; same configuration)" in message
    [message] = earlier_events(other)   # another learning rate: the newest run of the configuration a and b share
    second = json.loads(again.stdout)[0]["job_id"]
    assert message.startswith(f"the ETA also asks {second} (") and "; other batch or optimizer settings)" in message
    assert first not in message
    # the first found none, and that is stored: `coach plot` asks no run that finished after it started
    from coach.job.earlier import NONE_FOUND

    assert Store().job(first).earlier_job == NONE_FOUND
    # scripts read a list of job ids (it was the store's text: "-" for none, ids comma-separated)
    assert [j["earlier_jobs"] for j in json.loads(again.stdout)] == [[first]]
    assert json.loads(run_coach("status", first, "--json", check=True).stdout)[0]["earlier_jobs"] == []


def test_a_bad_user_code_limit_is_refused_before_anything_is_recorded(tmp_path: Path, coach_home: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COACH_USER_CODE_LIMIT_S", "soon")
    proc = run_coach("submit", str(write_job(tmp_path / "j.yaml", name="j", **FAST_JOB)))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "environment: COACH_USER_CODE_LIMIT_S: must be a number of seconds > 0 and ≤ 86400, got 'soon'" in proc.stderr
    assert run_coach("status", "--json", check=True).stdout.strip() == "[]"
