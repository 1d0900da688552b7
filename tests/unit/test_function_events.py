"""The role functions over real HTTP (local processor + nuclio_sdk objects): bad events get 400."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from coach.ports import free_port
from coach.roles.attempt_files import WORKERS_DONE
from coach.roles.protocol import READY_PATH
from tests.conftest import ROOT

VALID = dict(job_id="j", epoch=1, attempt="a", role="worker", root_uri="127.0.0.1", root_port=9000,
             workers=2, servers=1, deadline_s=30, shard=0, dataset={"name": "digits"},
             model={"name": "mlp"}, hyper={"batch_size": 32}, checkpoint_out="/tmp/x")


@contextmanager
def fresh_replica(role: str = "worker", env: dict[str, str] | None = None) -> Iterator[tuple[subprocess.Popen, str]]:
    """A role function's replica (the local processor) and its URL, as soon as it listens:
    its fork-server is still importing MXNet. `env` is added to its environment."""
    proc = subprocess.Popen([sys.executable, "-m", "coach.backends.local.processor",
                             str(ROOT / "functions" / role)], stdout=subprocess.PIPE, cwd=ROOT,
                            env=dict(os.environ, **(env or {})))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.startswith("listening "), line
        yield proc, f"http://127.0.0.1:{line.split()[1]}/"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def worker_url() -> Iterator[str]:
    with fresh_replica() as (_, url):
        yield url


CASES = [
    ("empty-body", b"", "body"),
    ("not-json", b"{nope", "body"),
    ("json-list", b"[1, 2]", "body"),
    ("missing-role", {k: v for k, v in VALID.items() if k != "role"}, "role"),
    ("wrong-role-for-function", dict(VALID, role="server"), "role"),
    ("unknown-role", dict(VALID, role="chief"), "role"),
    ("port-as-string", dict(VALID, root_port="9000"), "root_port"),
    ("port-out-of-range", dict(VALID, root_port=70000), "root_port"),
    ("zero-workers", dict(VALID, workers=0), "workers"),
    ("shard-out-of-range", dict(VALID, shard=2), "shard"),
    ("no-dataset", dict(VALID, dataset={}), "dataset.name"),
    # both killed the replica's warm fork-server (500, MXNet imported again for the next event)
    ("unknown-dataset", dict(VALID, dataset={"name": "foo"}), "dataset.name"),
    ("dataset-name-a-number", dict(VALID, dataset={"name": 5}), "dataset.name"),
    ("no-model", dict(VALID, model={}), "model.name"),
    ("tiny-batch", dict(VALID, hyper={"batch_size": 1}), "hyper.batch_size"),
    ("negative-deadline", dict(VALID, deadline_s=-1), "deadline_s"),
    ("unknown-field", dict(VALID, colour="red"), "colour"),
    ("bool-epoch", dict(VALID, epoch=True), "epoch"),
    ("nan-deadline", dict(VALID, deadline_s=float("nan")), "deadline_s"),
    ("nested-too-deep", b"[" * 100_000 + b"]" * 100_000, "body"),
    ("5000-digit-integer", b'{"epoch": ' + b"9" * 5000 + b"}", "body"),
    # each ran as far as the role (500, retried like a crash), or further (helper-31)
    ("deep-inside-hyper", json.dumps(dict(VALID, hyper="H")).replace('"H"', '{"x": ' + "[" * 600 + "]" * 600 + "}")
     .encode(), "hyper"),   # a RecursionError where the task was passed on
    ("unknown-model", dict(VALID, model={"name": "nosuch"}), "model.name"),
    ("model-file-without-source", dict(VALID, model={"file": "/m.py"}), "model.source"),
    ("text-learning-rate", dict(VALID, hyper={"batch_size": 32, "learning_rate": "fast"}), "hyper.learning_rate"),
    ("unknown-optimizer", dict(VALID, hyper={"batch_size": 32, "optimizer": "nosuch"}), "hyper.optimizer"),
    ("hyper-typo", dict(VALID, hyper={"batch_size": 32, "learnig_rate": 0.1}), "hyper.learnig_rate"),   # ignored
    ("negative-seed", dict(VALID, seed=-1), "seed"),
    ("relative-checkpoint", dict(VALID, checkpoint_out="ckpt"), "checkpoint_out"),
    ("root-checkpoint", dict(VALID, checkpoint_out="/"), "checkpoint_out"),
    # a folder that is not a checkpoint: rank 0 deleted it whole to put the epoch's in its place
    ("checkpoint-over-a-folder", dict(VALID, checkpoint_out=str(Path(__file__).parent)), "checkpoint_out"),
    ("checkpoint-over-a-file", dict(VALID, checkpoint_out=__file__), "checkpoint_out"),
]


@pytest.mark.parametrize("body,field", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_event_gets_400_naming_the_field(worker_url: str, body, field: str) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(worker_url, content=content, headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 400, r.text
    answer = r.json()
    assert answer["field"] == field
    assert answer["error"].startswith(f"{field}: ")


def test_dataset_options_that_do_not_load_fail_the_event_not_the_replica() -> None:
    """A job file cannot give these (the spec checks them), an event can: the fork-server died
    loading them, and the next event paid for importing MXNet again."""
    with fresh_replica() as (proc, url):
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        r = httpx.post(url, json=dict(VALID, dataset={"name": "synthetic", "samples": "abc"}), timeout=120)
        assert r.status_code == 500 and r.json()["permanent"] and not r.json()["resumable"], r.text
        assert "dataset" in r.json()["error"] and "fork-server" not in r.json()["error"], r.text
        # a data folder that went away can come back: then `coach resume` goes on (not so the options)
        gone = httpx.post(url, json=dict(VALID, dataset={"name": "cifar10", "path": "/nonexistent/cifar"}),
                          timeout=120)
        assert gone.status_code == 500 and gone.json()["permanent"] and gone.json()["resumable"], gone.text
        assert "missing data_batch_1" in gone.json()["error"], gone.text
        before = children.read_text().split()
        assert len(before) == 1, before   # the fork-server lives on
        again = httpx.post(url, json=dict(VALID, deadline_s=3), timeout=120)
        assert again.status_code == 504 and "deadline" in again.json()["error"], again.text
        assert children.read_text().split() == before, "the same warm fork-server served the next event"


def test_role_group_that_never_forms_is_killed_at_its_deadline(worker_url: str) -> None:
    """No scheduler listens on the root port: ps-lite would wait forever; the deadline ends it."""
    r = httpx.post(worker_url, json=dict(VALID, deadline_s=3), timeout=120)
    assert r.status_code == 504, r.text
    assert "deadline" in r.json()["error"]
    again = httpx.get(worker_url + "__health", timeout=10)   # the replica still serves
    assert again.status_code == 200


def test_event_of_an_abandoned_attempt_is_aborted_not_run(worker_url: str, tmp_path) -> None:
    """The job loop removes an attempt's folder when it is done with it; a late event must not
    start a role that would wait for a group that no longer exists."""
    gone = tmp_path / "attempts" / "gone" / "abort"
    r = httpx.post(worker_url, json=dict(VALID, deadline_s=60, abort_file=str(gone)), timeout=120)
    assert r.status_code == 409, r.text
    assert "abandoned" in r.json()["error"]


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_an_abort_marker_that_is_not_a_file_aborts_and_the_next_event_gets_its_own_answer(
        worker_url: str, tmp_path, kind: str) -> None:
    """A folder raised IsADirectoryError out of the watch after the role was forked: the replica
    answered 500, and every later event got the answer of the event before it. A FIFO blocked
    the replica for good (every later event: 503 busy)."""
    marker = tmp_path / "abort"
    marker.mkdir() if kind == "folder" else os.mkfifo(marker)
    r = httpx.post(worker_url, json=dict(VALID, deadline_s=5, abort_file=str(marker)), timeout=60)
    assert r.status_code == 409 and r.json()["error"] == "worker aborted: the attempt was abandoned", r.text
    nxt = httpx.post(worker_url, json=dict(VALID, deadline_s=3), timeout=60)
    assert nxt.status_code == 504 and "deadline" in nxt.json()["error"], nxt.text


@pytest.mark.parametrize("role,status", [("scheduler", 200), ("server", 200), ("worker", 504)])
def test_once_the_workers_are_done_the_scheduler_and_servers_are_ended(role: str, status: int, tmp_path) -> None:
    """Workers of a group the job loop watches skip ps-lite's shutdown (0.3 s an epoch), so
    nothing stops the scheduler and servers but the loop's marker; it must end them with a
    success, and never end a worker. No group forms here: each would wait forever."""
    folder = tmp_path / "attempt"
    folder.mkdir()
    with fresh_replica(role) as (_, url):
        while httpx.get(url + READY_PATH.lstrip("/"), timeout=10).status_code != 200:
            time.sleep(0.2)
        done = threading.Timer(1.0, lambda: (folder / WORKERS_DONE).touch())
        done.start()
        r = httpx.post(url, timeout=60, json=dict(VALID, role=role, deadline_s=4, root_port=free_port(),
                                                      abort_file=str(folder / "abort")))
        done.join()
    assert r.status_code == status, r.text
    if status == 200:
        # ran until the marker (1 s after the timer, which starts before the event is sent, so its
        # clock can start later: 0.969 and 0.9986 s were read, 0.867 beside a test run), not ended at once
        assert r.json()["ended"] == "every worker had answered" and 0.5 <= r.json()["function_s"] < 3.0, r.json()
    assert not list(folder.glob("*.pid")), "the role process is gone when the function answers"


def test_an_event_is_not_charged_for_the_replica_start_up(tmp_path) -> None:
    """A fresh replica imports MXNet before it can fork a role; an event that arrives meanwhile
    waits. That wait is the replica's start-up, not the event's: charging it made the cost of
    two identical jobs submitted together differ 4×, by which one's first event came first."""
    with fresh_replica() as (proc, url):
        abort = tmp_path / "abort"
        abort.write_text("another role failed")   # the role is killed as soon as it starts
        # the fork-server, importing MXNet, is paused for 2 s: its import may otherwise be all but
        # done by the time the event comes (the replica's own start-up runs beside it)
        [fork_server] = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        os.kill(int(fork_server), signal.SIGSTOP)
        threading.Timer(2.0, os.kill, (int(fork_server), signal.SIGCONT)).start()
        r = httpx.post(url, timeout=120, json=dict(VALID, deadline_s=60, abort_file=str(abort)))
        assert r.status_code == 409, r.text
        waited = r.elapsed.total_seconds()
        assert waited - r.json()["function_s"] > 1.5, (waited, r.json())


def test_a_replica_killed_before_it_could_serve_charges_nothing() -> None:
    """A Ctrl-C reaches a fresh replica's fork-server while it still imports MXNet: the event
    ends at once, and none of the time it waited is charged (before, all of it was: a job
    stopped 4 s after submit was charged 7 times a finished mini-epoch)."""
    with fresh_replica() as (proc, url):
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert len(children) == 1, children   # the fork-server, importing MXNet (1-10 s here)
        answer: list[httpx.Response] = []
        poster = threading.Thread(target=lambda: answer.append(httpx.post(
            url, json=dict(VALID, deadline_s=60), timeout=120)))
        poster.start()
        # killed once the replica serves the event: a kill before it was sent (0.3 s after posting
        # was too soon beside a test run) made it start a fork-server of its own, and the event ran
        # to its deadline. An empty event is answered 400 by an idle replica, 503 by a busy one
        deadline = time.monotonic() + 30
        while httpx.post(url, content=b"", timeout=10).status_code != 503 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.05)   # from taking the event to sending it on: parsing it, milliseconds
        os.kill(int(children[0]), signal.SIGKILL)
        poster.join(60)
        assert answer and answer[0].status_code == 500 and "fork-server" in answer[0].json()["error"], answer
        assert answer[0].json()["function_s"] == 0.0


def test_a_replica_says_when_it_serves_an_event_at_once() -> None:
    """A backend waits for this before invoking (as Nuclio takes events once a replica's handler
    has loaded): 503 while its fork-server imports MXNet, 200 once it has."""
    with fresh_replica() as (_, url):
        first = httpx.get(url + "__ready", timeout=10)
        assert first.status_code == 503 and "importing MXNet" in first.text, first.text
        deadline = time.monotonic() + 120
        while (r := httpx.get(url + "__ready", timeout=10)).status_code == 503 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert r.status_code == 200, r.text


def test_a_replica_whose_fork_server_died_while_importing_says_so() -> None:
    with fresh_replica() as (proc, url):
        [fork_server] = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        os.kill(int(fork_server), signal.SIGKILL)
        deadline = time.monotonic() + 30
        while (r := httpx.get(url + "__ready", timeout=10)).status_code == 503 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert r.status_code == 500 and "worker fork-server was killed by SIGKILL while importing MXNet" in r.text, r.text


@pytest.mark.parametrize(("first", "error"), [(0, None), (768, None), (-1, "first: must be >= 0, got -1"),
                                              ("768", "first: expected integer, got str")])
def test_where_an_epochs_samples_start_is_checked(first, error) -> None:
    """`first`: where in the epoch's permutation a worker's samples start (tuning trains the head
    of training epoch 1, and that epoch the rest)."""
    from coach.roles.protocol import EventError, parse_task

    body = json.dumps(dict(VALID, first=first))
    if error is None:
        assert parse_task(body).first == first
    else:
        with pytest.raises(EventError, match=error):
            parse_task(body)


@pytest.mark.parametrize(("servers", "probe", "error"), [
    (2, 0, None), (2, 768, None), (1, 0, None),
    (1, 768, r"probe: must be >= 0, and 0 with one server \(1\), got 768"),
    (2, -64, r"probe: must be >= 0, and 0 with one server \(2\), got -64"),
    (2, True, "probe: expected integer, got boolean")])
def test_a_probe_needs_a_second_server(servers, probe, error) -> None:
    """`probe`: the first samples train through server 0 alone, measuring (w, 1) inside a (w, s)
    group (`coach.training.keys`); with one server there is nothing to measure."""
    from coach.roles.protocol import EventError, parse_task

    body = json.dumps(dict(VALID, servers=servers, probe=probe))
    if error is None:
        assert parse_task(body).probe == probe
    else:
        with pytest.raises(EventError, match=error):
            parse_task(body)
