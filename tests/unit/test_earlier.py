"""Which earlier jobs a job asks about its stop epoch: of every configuration of the same model and data,
the newest one submitted before it, finished, with enough epochs — the same answer for the job loop and
`coach plot`. And whose measured speeds it starts from: those that train at its speed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from coach.job.earlier import MAX_EARLIER, NONE_FOUND, SPEED_JOBS, describe, find_earlier, speeds_before
from coach.state.records import EpochRecord
from coach.state.store import Store

SPEC = {"model": {"name": "mlp"}, "dataset": {"name": "digits"}, "batch_size": 32, "optimizer": "sgd",
        "learning_rate": 0.05, "momentum": 0.9, "weight_decay": 0.0, "scheduler": "default",
        "resources": {"worker": {"cpu": 0.5, "memory_gib": 0.5}, "server": {"cpu": 0.25, "memory_gib": 0.25}}}
CURVE = [2.0, 1.2, 0.8, 0.6, 0.5, 0.45, 0.42]


def add(store: Store, job_id: str, status: str, spec: dict | None = None, epochs: int = len(CURVE)) -> None:
    store.create_job(job_id, job_id, f"{job_id}.yaml", dict(SPEC, **(spec or {})), 0.1, 1.0)
    for i, v in enumerate(CURVE[:epochs], start=1):
        store.record_epoch(EpochRecord(job_id, "training", i, 1, 1, v, v, 1.0, 100, 100.0, 0.0))
    store.update_job(job_id, status=status)
    time.sleep(0.01)   # distinct created_at


@pytest.mark.parametrize(
    ("before", "after", "found"),
    [
        pytest.param([("a", "succeeded", None, 7)], [], ["a"], id="one-finished"),
        pytest.param([("a", "succeeded", None, 7), ("b", "max_epochs", None, 7)], [], ["b"],
                     id="newest-of-a-configuration-wins"),
        pytest.param([("a", "succeeded", None, 7), ("b", "succeeded", {"learning_rate": 0.01}, 7)], [], ["b", "a"],
                     id="other-learning-rate-counts-too"),
        pytest.param([("a", "succeeded", {"optimizer": "adam"}, 7), ("b", "succeeded", {"batch_size": 64}, 7)], [],
                     ["b", "a"], id="other-optimizer-and-batch-count-too"),
        pytest.param([("a", "succeeded", {"dataset": {"name": "mnist"}}, 7),
                      ("b", "succeeded", {"model": {"name": "lenet"}}, 7)], [], [], id="other-data-or-model-never"),
        pytest.param([("a", "succeeded", None, 7), ("b", "succeeded", None, 4)], [], ["a"], id="too-short-skipped"),
        pytest.param([("a", "succeeded", None, 7)], [("z", "succeeded", None, 7)], ["a"],
                     id="submitted-later-never-counts"),
        pytest.param([], [("z", "succeeded", None, 7)], [], id="none-before"),
    ],
)
def test_find_earlier(tmp_path: Path, before, after, found) -> None:
    store = Store(tmp_path / "coach.db")
    for job_id, status, spec, n in before:
        add(store, job_id, status, spec, n)
    store.create_job("me", "me", "me.yaml", SPEC, 0.1, 1.0)
    time.sleep(0.01)
    for job_id, status, spec, n in after:
        add(store, job_id, status, spec, n)
    result = find_earlier(store, store.job("me"), SPEC, None)
    assert [e.job.job_id for e in result] == found
    assert [e.same for e in result] == [store.spec(j) == SPEC for j in found]


def test_at_most_max_earlier_configurations_newest_first(tmp_path: Path) -> None:
    store = Store(tmp_path / "coach.db")
    for i in range(MAX_EARLIER + 2):
        add(store, f"j{i}", "succeeded", {"learning_rate": 0.001 * (i + 1)})
    store.create_job("me", "me", "me.yaml", SPEC, 0.1, 1.0)
    found = find_earlier(store, store.job("me"), SPEC, None)
    assert [e.job.job_id for e in found] == [f"j{i}" for i in range(MAX_EARLIER + 1, 1, -1)]
    assert "j9 (7 training epochs, succeeded; other batch or optimizer settings)" in describe(found)


def test_the_job_s_own_configuration_is_asked_even_after_a_sweep_of_others(tmp_path: Path) -> None:
    store = Store(tmp_path / "coach.db")
    add(store, "mine", "succeeded")
    for i in range(MAX_EARLIER + 1):
        add(store, f"j{i}", "succeeded", {"learning_rate": 0.001 * (i + 1)})
    store.create_job("me", "me", "me.yaml", SPEC, 0.1, 1.0)
    found = find_earlier(store, store.job("me"), SPEC, None)
    assert [e.job.job_id for e in found] == [f"j{i}" for i in range(MAX_EARLIER, 0, -1)] + ["mine"]
    assert [e.same for e in found] == [False] * MAX_EARLIER + [True]


def test_the_earlier_run_chosen_when_the_job_started_stays_chosen(tmp_path: Path) -> None:
    store = Store(tmp_path / "coach.db")
    add(store, "a", "succeeded")
    add(store, "b", "succeeded")
    store.create_job("me", "me", "me.yaml", SPEC, 0.1, 1.0)
    store.update_job("me", earlier_job="a")   # chosen when "b" was still running, say
    assert [e.job.job_id for e in find_earlier(store, store.job("me"), SPEC, None)] == ["a"]
    store.update_job("me", earlier_job="b,gone,a")   # a job deleted since is skipped
    assert [e.job.job_id for e in find_earlier(store, store.job("me"), SPEC, None)] == ["b", "a"]


def test_a_job_that_found_none_when_it_started_asks_none_later(tmp_path: Path) -> None:
    store = Store(tmp_path / "coach.db")
    add(store, "a", "succeeded")   # finished only after "me" started, say
    store.create_job("me", "me", "me.yaml", SPEC, 0.1, 1.0)
    store.update_job("me", earlier_job=NONE_FOUND)
    assert find_earlier(store, store.job("me"), SPEC, None) == []


@pytest.mark.parametrize(("column", "table"), [("spec_json", "jobs"), ("val_loss", "epochs")])
@pytest.mark.parametrize("chosen", [False, True], ids=["searched", "chosen-at-start"])
def test_a_damaged_earlier_job_is_skipped_not_fatal(tmp_path: Path, column: str, table: str, chosen: bool) -> None:
    """One row edited by hand made every later job fail to start (StateError while searching)."""
    import sqlite3

    store = Store(tmp_path / "coach.db")
    add(store, "a", "succeeded")
    add(store, "b", "succeeded")
    with sqlite3.connect(store.path) as c:
        c.execute(f"UPDATE {table} SET {column} = 'garbage' WHERE job_id = 'b'")
    store.create_job("me", "me", "me.yaml", SPEC, 0.1, 1.0)
    if chosen:
        store.update_job("me", earlier_job="b,a")
    assert [e.job.job_id for e in find_earlier(store, store.job("me"), SPEC, None)] == ["a"]


@pytest.mark.parametrize(
    ("before", "found"),
    [
        pytest.param([("a", "succeeded", None)], ["a"], id="same-job"),
        pytest.param([("a", "failed", None), ("b", "budget_exhausted", None)], ["b", "a"],
                     id="any-final-status-newest-first"),
        pytest.param([("a", "succeeded", {"learning_rate": 0.01, "optimizer": "adam", "seed": 3})], ["a"],
                     id="optimizer-and-seed-do-not-change-speed"),
        pytest.param([("a", "succeeded", {"batch_size": 64})], [], id="other-batch-never"),
        pytest.param([("a", "succeeded", {"resources": {"worker": {"cpu": 1.0, "memory_gib": 0.5},
                                                        "server": {"cpu": 0.25, "memory_gib": 0.25}}})], [],
                     id="other-resources-never"),
        pytest.param([("a", "succeeded", {"scheduler": "gang"})], [], id="other-scheduler-never"),
        pytest.param([("a", "succeeded", {"model": {"name": "lenet"}})], [], id="other-model-never"),
        pytest.param([("a", "training", None)], ["a"], id="whatever-its-status"),
        pytest.param([(f"j{i}", "succeeded", None) for i in range(SPEED_JOBS + 2)],
                     [f"j{i}" for i in range(SPEED_JOBS + 1, 1, -1)], id="at-most-SPEED_JOBS-newest"),
    ],
)
def test_speeds_before(tmp_path: Path, before, found) -> None:
    store = Store(tmp_path / "coach.db")
    for job_id, status, spec in before:
        add(store, job_id, status, spec)
    store.create_job("me", "me", "me.yaml", SPEC, 0.1, 1.0)
    time.sleep(0.01)
    add(store, "later", "succeeded")   # submitted after it: never
    epochs = speeds_before(store, store.job("me"), SPEC)
    assert [e.job_id for e in epochs] == [j for j in found for _ in CURVE]


def test_speeds_before_count_measured_epochs_recorded_before_the_submission(tmp_path: Path) -> None:
    """An epoch that measured nothing (a failed attempt's record) takes no job's place, and one
    recorded after the job was submitted (a resumed earlier job) is not asked: the loop, its
    resumption and `coach plot` find the same epochs."""
    store = Store(tmp_path / "coach.db")
    add(store, "measured", "succeeded")
    store.create_job("nothing", "nothing", "n.yaml", SPEC, 0.1, 1.0)
    store.record_epoch(EpochRecord("nothing", "training", 1, 1, 1, 1.0, 1.0, 1.0, 0, 0.0, 0.0))
    time.sleep(0.01)
    store.create_job("me", "me", "me.yaml", SPEC, 0.1, 1.0)
    store.record_epoch(EpochRecord("measured", "training", 8, 2, 1, 1.0, 1.0, 1.0, 100, 100.0, 0.0,
                                   started_at=time.time(), finished_at=time.time()))
    epochs = speeds_before(store, store.job("me"), SPEC)
    assert {e.job_id for e in epochs} == {"measured"} and len(epochs) == len(CURVE)
    assert {(e.workers, e.servers) for e in epochs} == {(1, 1)}


def test_speeds_before_are_of_the_same_backend_only(tmp_path: Path) -> None:
    store = Store(tmp_path / "coach.db")
    store.create_job("a", "a", "a.yaml", SPEC, 0.1, 1.0, backend="cluster")
    store.record_epoch(EpochRecord("a", "training", 1, 2, 1, 1.0, 1.0, 1.0, 100, 100.0, 0.0))
    store.update_job("a", status="succeeded")
    time.sleep(0.01)
    store.create_job("me", "me", "me.yaml", SPEC, 0.1, 1.0)
    assert speeds_before(store, store.job("me"), SPEC) == []


def test_a_job_that_retunes_starts_from_no_earlier_speeds_and_later_jobs_from_its_own(tmp_path: Path) -> None:
    """`retune: true` (the machine changed, or was busy): no earlier speeds, so it tunes; the jobs
    after it start from what it and newer jobs measured, not from the jobs before it."""
    store = Store(tmp_path / "coach.db")
    add(store, "a", "succeeded")
    add(store, "me", "succeeded", {"retune": True})
    assert speeds_before(store, store.job("me"), dict(SPEC, retune=True)) == []
    add(store, "b", "succeeded")
    store.create_job("next", "next", "next.yaml", SPEC, 0.1, 1.0)
    assert {e.job_id for e in speeds_before(store, store.job("next"), SPEC)} == {"b", "me"}
