"""The state store: job ids, a damaged, busy, read-only or full file."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from coach.errors import StateError
from coach.state import store as store_module
from coach.state.store import Store, what_to_do


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "coach.db")


@pytest.mark.parametrize(
    ("given", "found"),
    [("m-raise-da908e", "m-raise-da908e"), ("m-r", "m-raise-da908e"), ("m_r", None), ("m%", None), ("", None),
     ("m", None),                       # no job is named m: m-raise and mxraise are both prefixed by it
     ("tight", "tight-eb8336"),         # a job's whole name (tight2's too is prefixed by it)
     ("tight2", "tight2-448177")],
)
def test_job_ids_match_as_plain_prefixes(store: Store, given: str, found: str | None) -> None:
    for jid in ("m-raise-da908e", "mxraise-000000", "tight-eb8336", "tight2-448177"):
        store.create_job(jid, "m", "x.yaml", {}, 0.1, 1.0)
    if found is None:
        with pytest.raises(StateError):
            store.resolve(given)
    else:
        assert store.resolve(given) == found


def test_a_long_job_id_is_shortened_in_the_message(store: Store) -> None:
    with pytest.raises(StateError) as e:   # a 100,000-character id was echoed whole (helper-30)
        store.resolve("x" * 100_000)
    assert str(e.value).startswith("no job 'xxx") and len(str(e.value)) < 300


def test_epochs_come_back_tuning_first_then_by_epoch_whatever_the_clock(store: Store) -> None:
    """The stop rule reads the history in order; a clock stepped back (NTP) between two epochs
    must not reorder them."""
    from coach.state.records import EpochRecord

    store.create_job("j-000000", "j", "x.yaml", {}, 0.1, 1.0)
    clock = {("tuning", 1): 500.0, ("tuning", 2): 100.0, ("training", 1): 400.0, ("training", 2): 50.0,
             ("training", 3): 300.0}
    for (phase, epoch), t in clock.items():
        store.record_epoch(EpochRecord("j-000000", phase, epoch, 1, 1, 1.0, 1.0, 1.0, 10, 10.0, 0.0,
                                       started_at=t, finished_at=t + 1))
    assert [(e.phase, e.epoch) for e in store.epochs("j-000000")] == list(clock)


def test_an_epoch_is_recorded_with_its_spend_and_checkpoint_or_not_at_all(store: Store) -> None:
    """A history holding epoch N beside a job still pointing at epoch N − 1's checkpoint would
    resume from older weights with a spend missing the epoch's cost: the two are one write."""
    from coach.state.records import EpochRecord

    store.create_job("j-000000", "j", "x.yaml", {}, 0.1, 1.0)
    rec = EpochRecord("j-000000", "training", 1, 1, 1, 1.0, 1.0, 1.0, 10, 10.0, 0.25)
    store.record_epoch(rec, checkpoint="/ckpt/training-0001")
    job = store.job("j-000000")
    assert (job.spent, store.checkpoint("j-000000")) == (0.25, "/ckpt/training-0001")
    with sqlite3.connect(store.path) as c:   # the job's half of the write fails, as on a full disk
        c.execute("CREATE TRIGGER full BEFORE UPDATE ON jobs BEGIN SELECT RAISE(ABORT, 'disk full'); END")
    with pytest.raises(StateError, match="training epoch 2 cannot be recorded: disk full"):
        store.record_epoch(dataclasses.replace(rec, epoch=2), checkpoint="/ckpt/training-0002")
    assert [e.epoch for e in store.epochs("j-000000")] == [1]
    assert (store.job("j-000000").spent, store.checkpoint("j-000000")) == (0.25, "/ckpt/training-0001")


def test_a_probe_and_the_epoch_it_was_measured_in_are_one_write(store: Store) -> None:
    """Tuning measures (2, 1) on the first samples of epoch 1's (2, 2) group: two records of one
    checkpoint. The probe alone in the history would start epoch 1 after samples that the
    recorded checkpoint never trained."""
    from coach.state.records import EpochRecord

    store.create_job("j-000000", "j", "x.yaml", {}, 0.1, 1.0)
    probe = EpochRecord("j-000000", "tuning", 2, 2, 1, 1.0, 1.0, 1.0, 10, 10.0, 0.125, first_sample=10)
    rest = EpochRecord("j-000000", "training", 1, 2, 2, 1.0, 1.0, 1.0, 20, 10.0, 0.25, first_sample=20)
    store.record_epoch(probe, rest, settles="training-0001-aaaaaa", checkpoint="/ckpt/training-0001")
    assert [(e.phase, e.epoch) for e in store.epochs("j-000000")] == [("tuning", 2), ("training", 1)]
    assert (store.job("j-000000").spent, store.checkpoint("j-000000")) == (0.375, "/ckpt/training-0001")
    with pytest.raises(StateError, match="tuning epoch 3 and training epoch 1: already recorded"):
        store.record_epoch(dataclasses.replace(probe, epoch=3), rest, checkpoint="/ckpt/other")
    assert [(e.phase, e.epoch) for e in store.epochs("j-000000")] == [("tuning", 2), ("training", 1)]
    assert (store.job("j-000000").spent, store.checkpoint("j-000000")) == (0.375, "/ckpt/training-0001")


def test_a_charge_its_event_and_the_folders_it_settles_are_one_write(store: Store) -> None:
    """Killed between the spend and its event, `spent` no longer matched history + events; between
    the charge and the folder's removal, the next run charged the folder again. One transaction:
    all of it, or (a write that fails, as on a full disk) none."""
    from coach.state.records import EpochRecord

    store.create_job("j-000000", "j", "x.yaml", {}, 0.1, 1.0)
    store.record_epoch(EpochRecord("j-000000", "training", 1, 1, 1, 1.0, 1.0, 1.0, 10, 10.0, 0.25),
                       settles="training-0001-aaaaaa")
    store.charge("j-000000", 0.125, "for attempts that ran but finished no epoch", settles=("training-0002-bbbbbb",))
    assert store.job("j-000000").spent == 0.375
    assert [e["message"] for e in store.events("j-000000") if e["kind"] == "charged"] == \
        ["0.125 for attempts that ran but finished no epoch"]
    assert store.settled("j-000000") == {"training-0001-aaaaaa", "training-0002-bbbbbb"}
    store.unsettle("j-000000", "training-0001-aaaaaa")
    assert store.settled("j-000000") == {"training-0002-bbbbbb"}
    with sqlite3.connect(store.path) as c:
        c.execute("CREATE TRIGGER full BEFORE INSERT ON settled BEGIN SELECT RAISE(ABORT, 'disk full'); END")
    with pytest.raises(sqlite3.IntegrityError):   # the trigger's abort (a full disk is a StateError)
        store.charge("j-000000", 1.0, "for attempts", settles=("training-0003-cccccc",))
    assert store.job("j-000000").spent == 0.375 and len(store.events("j-000000")) == 1


def test_a_damaged_store_is_named_not_a_traceback(store: Store) -> None:
    store.create_job("j-000000", "j", "x.yaml", {}, 0.1, 1.0)
    with open(store.path, "r+b") as fh:   # the jobs table's page
        fh.seek(4096)
        fh.write(os.urandom(4096))
    with pytest.raises(StateError, match=f"{store.path}: the state store cannot be used"):
        store.jobs()
    assert "move it away" in what_to_do(sqlite3.DatabaseError("file is not a database"), store.path)


@pytest.mark.parametrize(("table", "column"), [("epochs", "samples"), ("jobs", "message"), ("events", "kind")])
def test_a_store_without_a_column_is_named_not_a_traceback(store: Store, table: str, column: str) -> None:
    """A column renamed or dropped by hand failed later reads (`coach history`, `status`) with an
    IndexError; the store is refused when opened, naming the table and the column."""
    store.create_job("j-000000", "j", "x.yaml", {}, 0.1, 1.0)
    with sqlite3.connect(store.path) as c:
        c.execute(f"ALTER TABLE {table} RENAME COLUMN {column} TO renamed")
    with pytest.raises(StateError, match=f"{store.path}: the state store cannot be used: its table {table} "
                                         f"has no column {column} "):
        Store(store.path)


def test_a_store_locked_too_long_says_try_again(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "LOCK_TIMEOUT_S", 0.2)
    other = sqlite3.connect(store.path)
    other.execute("BEGIN IMMEDIATE")   # another coach process in the middle of a write
    try:
        with pytest.raises(StateError, match="another coach process kept it locked for 0.2 s; try again"):
            store.create_job("j-000000", "j", "x.yaml", {}, 0.1, 1.0)
    finally:
        other.rollback()
    store.create_job("j-000000", "j", "x.yaml", {}, 0.1, 1.0)   # fine once it is free
    assert [j.job_id for j in store.jobs()] == ["j-000000"]


def _readonly(path: Path) -> sqlite3.Error:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)   # what chmod does, even for root
    try:
        db.execute("INSERT INTO events (job_id, ts, kind, message) VALUES ('j', 0, 'k', 'm')")
    except sqlite3.Error as e:
        return e
    raise AssertionError("a read-only connection wrote")


def _full(_: Path) -> sqlite3.Error:
    db = sqlite3.connect(":memory:")
    db.execute("PRAGMA max_page_count = 2")   # a disk with room for 2 pages
    try:
        db.execute("CREATE TABLE t (x)")
        for _ in range(100):
            db.execute("INSERT INTO t VALUES (?)", ("x" * 1000,))
    except sqlite3.Error as e:
        return e
    raise AssertionError("a 2-page database took 100 kB")


def _open_store(path: str, go: multiprocessing.synchronize.Event, answers: multiprocessing.Queue) -> None:
    go.wait()
    try:
        Store(Path(path))
        answers.put("")
    except StateError as e:
        answers.put(str(e))


def test_processes_opening_a_new_store_together_all_open_it(tmp_path: Path) -> None:
    """Two `coach` commands starting on a fresh COACH_HOME: about 1 open in 150 failed within
    milliseconds with "locked for 30 s" (SQLite refuses a second switch to WAL at once)."""
    fork = multiprocessing.get_context("fork")
    failed = []
    for trial in range(60):
        go, answers = fork.Event(), fork.Queue()
        procs = [fork.Process(target=_open_store, args=(str(tmp_path / str(trial) / "coach.db"), go, answers))
                 for _ in range(6)]
        for p in procs:
            p.start()
        go.set()
        failed += [a for a in (answers.get(timeout=60) for _ in procs) if a]
        for p in procs:
            p.join()
    assert not failed, failed[:3]


@pytest.mark.parametrize(
    ("make_error", "advice"),
    [
        pytest.param(_readonly, "cannot be written: check the permissions of", id="read-only"),
        pytest.param(_full, "is full: free some space", id="disk-full"),
    ],
)
def test_store_errors_say_what_to_do_not_always_move_it_away(store: Store, make_error, advice: str) -> None:
    # errors raised by SQLite itself on a real file: only a damaged store should be moved away
    error = make_error(store.path)
    assert advice in what_to_do(error, store.path)
    assert "move it away" not in what_to_do(error, store.path)


def test_a_store_that_cannot_be_opened_says_why(tmp_path: Path) -> None:
    # SQLite's own words were all the user got: "unable to open database file"
    (tmp_path / "coach.db").mkdir()
    with pytest.raises(StateError, match=r"coach.db is a folder: move it away, or set COACH_HOME"):
        Store(tmp_path / "coach.db")


def test_a_coach_home_too_long_to_look_up_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # a traceback: the hint's own look-up of the folder raised "File name too long"
    monkeypatch.setenv("COACH_HOME", "/tmp/" + "a" * 300)
    with pytest.raises(StateError, match="cannot create the state store: File name too long"):
        Store()


def test_a_relative_coach_home_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Checkpoint paths are stored: a job submitted with COACH_HOME=relhome failed when it was
    resumed from another folder with COACH_HOME=../relhome ("not a complete checkpoint")."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COACH_HOME", "relhome")
    assert store_module.coach_home() == tmp_path / "relhome"


@pytest.mark.parametrize("folder", ["jobs", "logs"])
def test_a_file_where_coach_keeps_a_folder_is_named_before_a_job_is_recorded(coach_home: Path, folder: str) -> None:
    """The job was recorded, then failed as "internal error: NotADirectoryError"."""
    from tests.conftest import ROOT, run_coach

    coach_home.mkdir()
    (coach_home / folder).write_text("")
    proc = run_coach("submit", str(ROOT / "jobs" / "mlp-digits.yaml"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{coach_home / folder}: cannot be used as a folder" in proc.stderr, proc.stderr
    assert Store().jobs() == []


def test_a_store_made_before_a_column_was_added_keeps_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "coach.db"
    old = sqlite3.connect(path)   # the jobs table as Coach made it before `val_epoch`
    old.executescript(store_module.SCHEMA)   # SCHEMA has no val_epoch: it is added on opening
    old.execute("INSERT INTO jobs (job_id, name, spec_path, spec_json, status, target_loss, budget, epoch, "
                "val_loss, created_at, updated_at) VALUES ('j-1', 'j', 'j.yaml', '{}', 'succeeded', 0.1, 1, 4, "
                "0.09, 0, 0)")
    old.execute("INSERT INTO epochs (job_id, phase, epoch, workers, servers, train_loss, val_loss, duration_s, "
                "samples, samples_per_s, cost, retries, started_at, finished_at) "
                "VALUES ('j-1', 'tuning', 1, 1, 1, 2.0, 1.9, 1.0, 1024, 900.0, 0.001, 0, 0, 0)")
    old.commit()
    old.close()
    assert "val_epoch" not in {r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(jobs)")}
    store = Store(path)
    job = store.job("j-1")
    assert (job.status, job.epoch, job.val_loss, job.val_epoch) == ("succeeded", 4, 0.09, "")
    store.update_job("j-1", val_epoch="training 4")
    assert Store(path).job("j-1").val_epoch == "training 4"   # a second open adds nothing twice
    # a mini-epoch of an older Coach drew samples of its own, before training epoch 1
    assert [(r.samples, r.first_sample) for r in store.epochs("j-1")] == [(1024, -1)]


def test_a_coach_home_of_an_unknown_user_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COACH_HOME", "~nosuchuser/coach")
    with pytest.raises(StateError, match="COACH_HOME / XDG_DATA_HOME: cannot be used"):
        store_module.coach_home()


def test_a_relative_coach_home_in_a_removed_folder_is_named(tmp_path: Path) -> None:
    """It was a FileNotFoundError traceback (os.getcwd() fails in a folder that was removed)."""
    from tests.conftest import COACH

    gone = tmp_path / "gone"
    gone.mkdir()
    proc = subprocess.run(["sh", "-c", 'cd "$1" && rmdir "$1" && shift && exec "$@"', "sh", str(gone), *COACH, "status"],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, COACH_HOME="relhome"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "COACH_HOME / XDG_DATA_HOME: cannot be made absolute" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("table", "column", "value", "read", "problem"),
    [
        ("jobs", "eta_json", "garbage", "job", "eta_json: not JSON"),
        ("jobs", "created_at", "x", "job", "created_at: not a number: 'x'"),
        ("jobs", "spec_json", "not json", "spec", "spec_json: not JSON"),
        ("jobs", "spec_json", "[1, 2]", "spec", "spec_json: not a JSON object"),
        ("epochs", "val_loss", "abc", "epochs", "val_loss: not a number: 'abc'"),
        ("events", "ts", "abc", "events", "ts: not a number: 'abc'"),   # a TypeError in status and events
        # each failed somewhere in status, events or resume, as said (helper-30)
        ("events", "ts", 1e300, "events", "ts: not a time: 1e"),   # OverflowError: timestamp out of range
        ("events", "kind", b"hi", "events", "kind: not text: "),   # TypeError in a format string
        ("jobs", "message", b"hi", "job", "message: not text: "),   # TypeError: bytes not JSON serializable
        ("jobs", "spent", float("inf"), "job", "spent: not a finite number: inf"),   # `--json` printed Infinity
        ("jobs", "eta_json", '{"next_epoch_cost": Infinity}', "job", "eta_json: next_epoch_cost: not a number >= 0"),
        ("jobs", "eta_json", '{"next_epoch_cost": -1}', "job", "eta_json: next_epoch_cost: not a number >= 0: '-1'"),
        ("jobs", "eta_json", '{"seconds": "5"}', "job", "eta_json: seconds: not a number >= 0: '5'"),
        ("jobs", "eta_json", '{"wait_s": true}', "job", "eta_json: wait_s: not a number >= 0: 'True'"),
        ("jobs", "eta_json", '{"at": 1e300}', "job", "eta_json: at: not a number >= 0"),
        ("jobs", "eta_json", '{"reachable": "no"}', "job", "eta_json: reachable or earlier: not the type"),
        ("jobs", "backend", "mars", "job", "backend: not local or cluster: 'mars'"),
        # shown as they were (helper-30), or printed as Infinity by `history --json`
        ("jobs", "budget", -5, "job", "budget: not a number >= 0: -5"),
        ("jobs", "workers", 2.5, "job", "workers: not a whole number >= 0: 2.5"),
        ("jobs", "epoch", -3, "job", "epoch: not a whole number >= 0: -3"),
        ("epochs", "val_loss", float("inf"), "epochs", "val_loss: not a finite number: inf"),
        ("epochs", "cost", -1.0, "epochs", "cost: not a number >= 0: -1.0"),
        ("epochs", "first_sample", 0.5, "epochs", "first_sample: not a whole number: 0.5"),
    ],
)
def test_a_row_edited_by_hand_is_named_not_a_traceback(store: Store, table: str, column: str, value: object,
                                                       read: str, problem: str) -> None:
    """Each of these failed as JSONDecodeError, TypeError or ValueError in status, history,
    resume or plot."""
    from coach.state.records import EpochRecord

    store.create_job("j-000000", "j", "x.yaml", {"batch_size": 64}, 0.1, 1.0)
    store.record_epoch(EpochRecord("j-000000", "training", 1, 1, 1, 1.0, 1.0, 1.0, 10, 10.0, 0.0))
    store.add_event("j-000000", "submitted", "from x.yaml")
    with sqlite3.connect(store.path) as c:
        c.execute(f"UPDATE {table} SET {column} = ? WHERE job_id = 'j-000000'", (value,))
    with pytest.raises(StateError, match=f"job j-000000: {problem}"):
        getattr(store, read)("j-000000")


def test_a_recorded_spec_that_cannot_be_rebuilt_is_named() -> None:
    from coach.spec import spec_from_dict

    with pytest.raises(StateError, match="recorded spec cannot be read back .KeyError: 'resources'"):
        spec_from_dict({"foo": 1})


@pytest.mark.parametrize("field, value, said", [
    ("max_epochs", "ten", "max_epochs must be int, got 'ten'"),
    ("max_epochs", 2.5, "max_epochs must be int, got 2.5"),
    ("max_epochs", True, "max_epochs must be int, got True"),
    ("budget", None, "budget must be float, got None"),
    ("model", "mlp", "model must be dict, got 'mlp'"),
    ("retune", 1, "retune must be bool, got 1"),
    ("resources", {"worker": {"cpu": 1, "memory_gib": True}}, "resources.worker: memory_gib must be float, got True"),
    ("resources", {"worker": {"cpu": "1", "memory_gib": 1}}, "resources.worker: cpu must be float, got '1'"),   # "'<' not supported"
    ("prices", {"cpu_core_second": "1", "gib_second": 0.0}, "prices: cpu_core_second must be float, got '1'"),
    # of the right type, but not a value a job file may give
    ("model", {"name": "nope"}, "model must be one of lenet, mlp, resnet18 or a file with its source"),
    ("optimizer", "weird", "optimizer must be one of sgd, nag, adam, rmsprop, adagrad, got 'weird'"),
    ("max_epochs", 0, "max_epochs must be >= 1, got 0"),
    ("momentum", 5.0, "momentum must be < 1, got 5.0"),
    ("resources", {}, "resources must give scheduler, server, worker, got []"),
])
def test_resume_names_a_recorded_spec_value_it_cannot_run(coach_home: Path, tmp_path: Path, field: str,
                                                          value: object, said: str) -> None:
    """A stored max_epochs edited to text rebuilt the spec without a word, and `coach resume`
    ended in a TypeError traceback where it compared it with the epochs run; resources without a
    role ended in a KeyError; an unknown model ran, and every attempt of its epoch was charged."""
    from coach.spec import load_spec
    from tests.conftest import FAST_JOB, run_coach, write_job

    spec = dataclasses.asdict(load_spec(write_job(tmp_path / "j.yaml", name="j", **FAST_JOB)))
    store = Store()
    store.create_job("j-000000", "j", "j.yaml", dict(spec, **{field: value}), 0.25, 1.0)
    store.update_job("j-000000", status="stopped")
    proc = run_coach("resume", "j-000000")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "recorded spec cannot be read back (" in proc.stderr and said in proc.stderr, proc.stderr
    assert "submit its job file again" in proc.stderr, proc.stderr
    assert store.job("j-000000").status == "stopped"   # nothing recorded changed


def test_one_damaged_job_does_not_hide_the_others(store: Store) -> None:
    for jid in ("a-000000", "b-000000"):
        store.create_job(jid, jid[0], "x.yaml", {}, 0.1, 1.0)
    with sqlite3.connect(store.path) as c:
        c.execute("UPDATE jobs SET eta_json = 'garbage' WHERE job_id = 'a-000000'")
    assert [j.job_id for j in store.jobs()] == ["b-000000"]
    [problem] = store.read_jobs()[1]
    assert "job a-000000: eta_json: not JSON" in str(problem)


@pytest.mark.parametrize("json_out", [False, True], ids=["table", "json"])
def test_one_job_with_a_damaged_event_does_not_hide_the_others_from_status(coach_home: Path, json_out: bool) -> None:
    """An event's time edited by hand made `coach status` print no table at all, and say "the
    other jobs are not affected"."""
    from tests.conftest import run_coach

    store = Store()   # the test's own COACH_HOME, which the CLI below opens too
    for jid in ("a-000000", "b-000000"):
        store.create_job(jid, jid[0], "x.yaml", {}, 0.1, 1.0)
        store.add_event(jid, "submitted", "from x.yaml")
    with sqlite3.connect(store.path) as c:
        c.execute("UPDATE events SET ts = 'abc' WHERE job_id = 'a-000000'")
    proc = run_coach("status", *(["--json"] if json_out else []))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "job a-000000: ts: not a number: 'abc'" in proc.stderr, proc.stderr
    assert "b-000000" in proc.stdout and "a-000000" not in proc.stdout, proc.stdout


def test_status_names_the_backend_when_the_jobs_ran_on_more_than_one(coach_home: Path) -> None:
    """An experimenter comparing the backends keeps both kinds of job in one COACH_HOME; the table
    said which (w, s) each ran, not where. With one backend only, the column would say nothing."""
    from tests.conftest import run_coach

    store = Store()
    store.create_job("a-000000", "a", "x.yaml", {}, 0.1, 1.0)
    header = run_coach("status").stdout.splitlines()[1]
    assert "backend" not in header, header
    store.create_job("b-000000", "b", "x.yaml", {}, 0.1, 1.0, backend="cluster")
    lines = run_coach("status").stdout.splitlines()
    assert "backend" in lines[1], lines
    assert "local" in next(x for x in lines if "a-000000" in x) and "cluster" in next(x for x in lines if "b-000000" in x)
