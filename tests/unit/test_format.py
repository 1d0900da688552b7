"""What `coach status` and the live progress line say about a job's ETA, loss and elapsed time."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from coach.cli.format import clock_times, elapsed, eta_text, loss_text, seconds_left
from coach.state.records import JobRecord

NOW = 1_800_000_000.0


def job(status: str = "training", target: float = 0.3, val: float | None = 0.5, epoch: int = 0,
        val_epoch: str = "", **eta) -> JobRecord:
    return JobRecord(job_id="j", name="j", spec_path="j.yaml", status=status, target_loss=target, budget=1.0,
                     val_loss=val, epoch=epoch, val_epoch=val_epoch, eta=eta)


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        pytest.param(job(), "-", id="no-fit-yet"),
        pytest.param(job(status="succeeded", epochs_left=3, at=NOW), "-", id="finished"),
        pytest.param(job(reachable=False, asymptote=0.35, epochs_left=None),
                     "target below asymptote 0.35: may never reach it", id="below-asymptote"),
        # the asymptote is below the target, but the crossing is past what max_epochs leaves:
        # it once said "target below asymptote 1e-13"
        pytest.param(job(reachable=False, asymptote=1e-13, epochs_left=None),
                     "not expected within max_epochs", id="beyond-max-epochs"),
        # out of reach, the job runs to max_epochs, unless its budget ends it first
        pytest.param(job(reachable=False, asymptote=0.35, epochs_left=None, budget_epochs=4),
                     "target below asymptote 0.35: may never reach it; the budget pays for ~4 more epochs",
                     id="below-asymptote-budget-first"),
        pytest.param(job(reachable=True, asymptote=0.1, epochs_left=None), "?", id="no-count"),
        # waiting for room: the expected wait, counted down, before what follows it (it was only in
        # the message's text)
        pytest.param(job(status="queued", wait_s=9, wait_at=NOW - 2), "wait ~7s", id="queued-waits"),
        pytest.param(job(reachable=True, asymptote=0.1, epochs_left=3, lo=3, hi=5, seconds=15.0,
                         seconds_lo=15.0, seconds_hi=25.0, at=NOW, wait_s=30, wait_at=NOW),
                     "wait ~30s, then 3 epochs (3–5), ~15s [15s–25s]", id="waits-between-epochs"),
        pytest.param(job(status="stopped", wait_s=9, wait_at=NOW), "-", id="no-wait-once-over"),
        # the epochs come after the wait: their seconds do not count down during it (it read
        # "wait ~15s, then … ~0s" 15 s into a 30 s wait)
        pytest.param(job(reachable=True, asymptote=0.1, epochs_left=3, lo=3, hi=5, seconds=15.0,
                         seconds_lo=15.0, seconds_hi=25.0, at=NOW - 15, wait_s=30, wait_at=NOW - 15),
                     "wait ~15s, then 3 epochs (3–5), ~15s [15s–25s]", id="epochs-after-the-wait"),
        # no fit yet (too few epochs), but a budget that ends the job first: a job stopped after 2
        # epochs without a word
        pytest.param(job(epochs_left=None, budget_epochs=1, at=NOW), "?; the budget pays for ~1 more epoch",
                     id="no-eta-yet-budget-first"),
        pytest.param(job(reachable=True, asymptote=0.1, epochs_left=1, lo=1, hi=None, seconds=30.0,
                         seconds_lo=30.0, seconds_hi=None, at=NOW),
                     "1 epoch (1–?), ~30s", id="maybe-never"),
        # read 12 s after the prediction: the times count down
        pytest.param(job(reachable=True, asymptote=0.1, epochs_left=2, lo=1, hi=4, seconds=30.0,
                         seconds_lo=20.0, seconds_hi=70.0, at=NOW - 12),
                     "2 epochs (1–4), ~18s [8s–58s]", id="counts-down"),
        # it said "ETA 9 epochs" two epochs before the job stopped on its budget
        pytest.param(job(reachable=True, asymptote=0.1, epochs_left=9, lo=3, hi=28, seconds=27.0,
                         seconds_lo=9.0, seconds_hi=85.0, at=NOW, budget_epochs=2),
                     "9 epochs (3–28), ~27s [9s–1m25s]; the budget pays for ~2 more epochs", id="budget-first"),
        # two jobs taking turns on the cores: the seconds count the wait, and the line says so
        pytest.param(job(reachable=True, asymptote=0.1, epochs_left=3, lo=3, hi=5, seconds=45.0,
                         seconds_lo=45.0, seconds_hi=75.0, at=NOW, between_epochs_s=9.6),
                     "3 epochs (3–5), ~45s [45s–1m15s] incl. ~10s between epochs", id="sharing-the-cores"),
        pytest.param(job(reachable=True, asymptote=0.1, epochs_left=3, lo=3, hi=5, seconds=15.0,
                         seconds_lo=15.0, seconds_hi=25.0, at=NOW, between_epochs_s=0.3),
                     "3 epochs (3–5), ~15s [15s–25s]", id="alone: fitting between epochs is not said"),
    ],
)
def test_eta_text(record: JobRecord, expected: str) -> None:
    # a fixed clock: the parameters are built at collection, minutes before a long suite runs this
    assert eta_text(record, now=NOW) == expected


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        pytest.param(job(), (None, None, None), id="no-fit-yet"),
        pytest.param(job(status="succeeded", seconds=30.0, at=NOW), (None, None, None), id="finished"),
        # read 12 s after the prediction: `--json` counts down as the table does (it gave 30 s)
        pytest.param(job(reachable=True, epochs_left=2, seconds=30.0, seconds_lo=20.0, seconds_hi=None, at=NOW - 12),
                     (18.0, 8.0, None), id="counts-down"),
        pytest.param(job(reachable=True, epochs_left=2, seconds=30.0, seconds_lo=20.0, seconds_hi=70.0, at=NOW - 50),
                     (0.0, 0.0, 20.0), id="overdue"),
    ],
)
def test_seconds_left(record: JobRecord, expected: tuple) -> None:
    assert seconds_left(record, now=NOW) == expected


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        pytest.param(job(val=None), "- / 0.3", id="no-epoch-yet"),
        pytest.param(job(val=0.512345), "0.5123 / 0.3", id="usual"),
        # with 4 decimals this read "0.0000 / 0.0001": the loss looked met when it was not
        pytest.param(job(val=0.000123, target=0.0001), "0.000123 / 0.0001", id="tiny-target"),
        # training epoch 1 runs; the loss shown is the last tuning mini-epoch's (it read as epoch 1's)
        pytest.param(job(val=0.4356, epoch=1, val_epoch="tuning 3"), "0.4356 / 0.3 after tuning 3",
                     id="running-first-epoch"),
        pytest.param(job(val=0.2, epoch=4, val_epoch="training 3"), "0.2 / 0.3 after training 3", id="running"),
        pytest.param(job(val=0.2, epoch=4, val_epoch="training 4"), "0.2 / 0.3", id="between-epochs"),
        pytest.param(job(status="succeeded", val=0.2, epoch=4, val_epoch="training 4"), "0.2 / 0.3", id="finished"),
        pytest.param(job(status="stopped", val=0.2, epoch=4, val_epoch="training 3"), "0.2 / 0.3 after training 3",
                     id="stopped-during-epoch-4"),
        pytest.param(job(val=0.2, epoch=4), "0.2 / 0.3", id="store-from-before-the-label"),
        # stopped during training epoch 1, after one tuning mini-epoch: the loss is the tuning one's
        pytest.param(job(status="stopped", val=0.5, epoch=1, val_epoch="tuning 1"), "0.5 / 0.3 after tuning 1",
                     id="stopped-during-first-epoch"),
    ],
)
def test_loss_text(record: JobRecord, expected: str) -> None:
    assert loss_text(record) == expected


def ev(ts: float, kind: str) -> dict:
    return {"ts": NOW + ts, "kind": kind, "message": ""}


@pytest.mark.parametrize(
    ("status", "updated", "events", "now", "expected"),
    [
        pytest.param("training", 5, [ev(0, "submitted"), ev(5, "plan")], 100, 100, id="running"),
        pytest.param("succeeded", 40, [ev(0, "submitted"), ev(40, "succeeded")], 100, 40, id="finished"),
        # stopped at 40 s, resumed at 1000 s, read at 1100 s: the 960 s stopped do not count (it read 1100 s)
        pytest.param("training", 1000, [ev(0, "submitted"), ev(40, "stopped"), ev(1000, "resumed")], 1100, 140,
                     id="resumed"),
        pytest.param("stopped", 1030,
                     [ev(0, "submitted"), ev(40, "stopped"), ev(1000, "resumed"), ev(1030, "stopped")], 1100, 70,
                     id="stopped-twice"),
        # its process was killed after its plan at 30 s and its last update at 35 s; `coach resume` at
        # 1000 s records that end (it read 35 s while interrupted, then 30 s + the rest once resumed)
        pytest.param("training", 1000, [ev(0, "submitted"), ev(30, "plan"), ev(35, "interrupted"),
                                        ev(1000, "resumed")], 1100, 135, id="resumed-after-kill"),
        pytest.param("training", 1000, [ev(0, "submitted"), ev(30, "plan"), ev(1000, "resumed")], 1100, 130,
                     id="resumed-after-kill-recorded-before-the-end-was"),
        # the store reports a job whose process died as interrupted; its last update ends it
        pytest.param("interrupted", 35, [ev(0, "submitted"), ev(30, "plan")], 1100, 35, id="interrupted"),
    ],
)
def test_elapsed_leaves_out_the_time_a_job_sat_stopped(status: str, updated: float, events: list, now: float,
                                                      expected: float) -> None:
    record = JobRecord(job_id="j", name="j", spec_path="j.yaml", status=status, target_loss=0.3, budget=1.0,
                       created_at=NOW, updated_at=NOW + updated)
    assert elapsed(record, events, now=NOW + now) == pytest.approx(expected)


def test_the_live_line_wraps_on_a_narrow_terminal(tmp_path, monkeypatch) -> None:
    """On an 80-column terminal the live line was cut after "(w, ": spent and the ETA, last on a
    line of about 170 characters, never showed."""
    import io

    from rich.console import Console

    from coach.cli.progress import watch
    from coach.state.store import Store

    monkeypatch.setenv("COACH_HOME", str(tmp_path))
    store = Store()
    store.create_job("mlp-digits-9d182a", "mlp-digits", "j.yaml", {}, 0.25, 0.001)
    store.claim_job("mlp-digits-9d182a")   # this process runs it (else it reads "interrupted")
    store.update_job("mlp-digits-9d182a", status="training", epoch=2, workers=2, servers=1, val_loss=0.1958,
                     val_epoch="training 1", eta=dict(reachable=True, asymptote=0.1, epochs_left=2, lo=2, hi=4,
                                                      seconds=12.0, seconds_lo=12.0, seconds_hi=24.0, at=NOW))
    screen = io.StringIO()
    terminal = Console(file=screen, width=80, force_terminal=True, soft_wrap=True, color_system=None)
    watch(store, ["mlp-digits-9d182a"], lambda: True, terminal)
    text = screen.getvalue()
    assert "spent 0 / 0.001" in text and "ETA 2 epochs (2–4)" in text, text


@pytest.mark.parametrize("terminal", [True, False])
def test_the_progress_ends_once_the_jobs_do_not_at_its_next_refresh(tmp_path, monkeypatch, terminal: bool) -> None:
    """It slept whole refreshes: `coach submit` returned up to 0.5 s after its last job had ended.
    With a refresh of an hour, a watcher that sleeps it through would hold this test an hour."""
    import io
    import threading

    from rich.console import Console

    from coach.cli import progress
    from coach.state.store import Store

    monkeypatch.setenv("COACH_HOME", str(tmp_path))
    monkeypatch.setattr(progress, "REFRESH_S", 3600.0)
    store = Store()
    store.create_job("j-000000", "j", "j.yaml", {}, 0.25, 0.001)
    store.claim_job("j-000000")
    ended = threading.Event()
    threading.Timer(0.3, ended.set).start()
    screen = Console(file=io.StringIO(), width=80, force_terminal=terminal, color_system=None)
    watcher = threading.Thread(target=progress.watch, args=(store, ["j-000000"], ended.is_set, screen),
                               daemon=True)
    watcher.start()
    watcher.join(60)
    assert not watcher.is_alive(), "the watcher waited for its next refresh"


@pytest.mark.parametrize(("new_budget", "said"), [
    (False, "3 epochs (2–5), ~30s [20s–50s]; the budget pays for ~0 more epochs"),
    (True, "3 epochs (2–5), ~30s [20s–50s]"),   # it said "~0 more epochs" with the new budget
])
def test_a_resumed_eta_counts_from_the_resume_and_forgets_an_old_budget(new_budget: bool, said: str) -> None:
    from coach.cli.jobs import resumed_eta

    stopped = dict(reachable=True, asymptote=0.1, epochs_left=3, lo=2, hi=5, seconds=30.0, seconds_lo=20.0,
                   seconds_hi=50.0, at=NOW - 3600, budget_epochs=0,   # predicted an hour before the resume
                   next_epoch_cost=0.002,   # what stopped it: predicted again by the resumed run
                   wait_s=20, wait_at=NOW - 3650)   # killed while it waited: "wait ~0s, then …" once resumed
    eta = resumed_eta(stopped, new_budget, now=NOW)
    assert eta_text(job(**eta), now=NOW) == said and "next_epoch_cost" not in eta and "wait_s" not in eta


def test_event_times_carry_their_dates_unless_all_are_of_today() -> None:
    """A job stopped on Friday and resumed on Monday: `coach events` read as one day's hours."""
    import time

    noon = time.mktime((2026, 11, 27, 12, 0, 0, 0, 0, -1))
    assert clock_times([noon, noon + 60], now=noon + 120) == ["12:00:00", "12:01:00"]
    assert clock_times([noon - 3 * 86400, noon], now=noon) == ["2026-11-24 12:00:00", "2026-11-27 12:00:00"]
    assert clock_times([noon], now=noon + 86400) == ["2026-11-27 12:00:00"]   # yesterday's, read today
    assert clock_times([], now=noon) == []


def test_progress_lines_of_every_status_keep_their_columns() -> None:
    """`budget_exhausted` and `max_epochs` pushed the rest of their line out of the columns."""
    from coach.cli.format import progress_line
    from coach.state.records import FINAL_STATUSES

    statuses = sorted(FINAL_STATUSES | {"tuning", "training"})
    width = max(map(len, statuses))   # as the progress view passes it: the longest shown together
    lines = [progress_line(job(status=s, epoch=3), [], width) for s in statuses]
    assert len({line.index(" epoch ") for line in lines}) == 1, lines


def test_a_job_without_functions_yet_shows_no_allocation() -> None:
    from coach.cli.format import job_row

    assert job_row(job(status="queued"), [])["(w, s)"] == "-"   # it read "(0, 0)"
    assert job_row(replace(job(), workers=2, servers=1), [])["(w, s)"] == "(2, 1)"


def test_events_piped_keep_one_line_each(coach_home) -> None:
    """Piped to grep, an event longer than 200 characters wrapped onto a second line."""
    from coach.state.store import Store
    from tests.conftest import run_coach

    store = Store()
    store.create_job("j-000000", "j", "j.yaml", {}, 0.3, 1.0)
    long = "waiting for capacity: " + "x" * 300 + "; expected wait ~9s"
    store.add_event("j-000000", "plan", long)
    proc = run_coach("events", "j-000000", check=True)
    [line] = [ln for ln in proc.stdout.splitlines() if "plan" in ln]
    assert line.endswith(long), proc.stdout


def _clock(ts: float, now: float = NOW) -> str:
    same_day = time.localtime(ts)[:3] == time.localtime(now)[:3]
    return time.strftime("%H:%M" if same_day else "%a %H:%M", time.localtime(ts))


@pytest.mark.parametrize("wait", [None, 600.0])
def test_a_long_eta_names_the_finish_by_the_clock(wait: float | None) -> None:
    """An ETA of an hour was only "~1h00m": the finish time by the clock (after any wait for room),
    with its interval. Under 10 minutes the seconds say it."""
    eta = dict(reachable=True, asymptote=0.1, epochs_left=30, lo=20, hi=50, seconds=3600.0, seconds_lo=2400.0,
               seconds_hi=6000.0, at=NOW) | ({} if wait is None else dict(wait_s=wait, wait_at=NOW))
    start = NOW + (wait or 0.0)
    text = eta_text(job(**eta), now=NOW)
    assert text.endswith(f"30 epochs (20–50), ~1h00m [40m00s–1h40m], done ~{_clock(start + 3600)} "
                         f"[{_clock(start + 2400)}–{_clock(start + 6000)}]"), text
    short = dict(eta, seconds=500.0, seconds_lo=400.0, seconds_hi=900.0)
    assert "done" not in eta_text(job(**short), now=NOW)
    never = dict(eta, hi=None, seconds_hi=None)
    assert eta_text(job(**never), now=NOW).endswith(f", done ~{_clock(start + 3600)}")
    from coach.cli.format import finish_clock

    assert finish_clock(NOW + 86400, NOW) == time.strftime("%a %H:%M", time.localtime(NOW + 86400))
    # a weekday alone is a week off, or 95 years (it read "Tue 06:41"); past the calendar, an OSError
    assert finish_clock(NOW + 3e9, NOW) == time.strftime("%Y-%m-%d %H:%M", time.localtime(NOW + 3e9))
    assert finish_clock(NOW + 1e17, NOW) == "beyond the calendar"


def test_json_gives_the_finish_time_as_unix_seconds(tmp_path) -> None:
    from coach.cli.jobs import _job_json
    from coach.state.store import Store

    store = Store(tmp_path / "coach.db")

    before = time.time()
    eta = dict(reachable=True, asymptote=0.1, epochs_left=3, lo=2, hi=5, seconds=30.0, seconds_lo=20.0,
               seconds_hi=50.0, at=before, wait_s=10.0, wait_at=before)
    rec = _job_json(store, job(**eta), [])
    after = time.time()
    assert before + 40 - 0.1 <= rec["finish_at"] <= after + 40 + 0.1, rec
    assert [round(t - rec["finish_at"]) for t in rec["finish_interval_at"]] == [-10, 20], rec
    over = _job_json(store, job(status="succeeded", **eta), [])
    assert (over["finish_at"], over["finish_interval_at"]) == (None, [None, None])
