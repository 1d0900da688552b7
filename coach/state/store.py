"""The embedded state store: one SQLite file with jobs, epochs, events, capacity leases and demands.

SQLite in WAL mode lets `coach status` read while `coach submit` writes, from other
processes. Every operation opens its own short connection, so job threads never share one.
An epoch is keyed by (job, phase, epoch): it can be recorded once, never twice. An epoch's
attempt folder (what its functions left, for a run killed before it recorded them) is settled
in the transaction that charges it, so a crash between the charge and the folder's removal
does not charge it twice. A lease is
the capacity a running job's functions hold (for an epoch; on the cluster backend, whose pods
stay between epochs, until the job ends); leases are how separate `coach submit` processes on one
machine avoid handing out the same cores twice. A demand is what the planner needs to know
about a running job; with them every process plans over all jobs on the machine.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import reprlib
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterator

from coach.errors import StateError
from coach.identity import process_identity
from coach.state.records import FINAL_STATUSES, EpochRecord, JobRecord, Lease, SharedDemand

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY, name TEXT NOT NULL, spec_path TEXT NOT NULL, spec_json TEXT NOT NULL,
    status TEXT NOT NULL, target_loss REAL NOT NULL, budget REAL NOT NULL, spent REAL NOT NULL DEFAULT 0,
    workers INTEGER NOT NULL DEFAULT 0, servers INTEGER NOT NULL DEFAULT 0, epoch INTEGER NOT NULL DEFAULT 0,
    val_loss REAL, message TEXT NOT NULL DEFAULT '', checkpoint TEXT, eta_json TEXT NOT NULL DEFAULT '{}',
    stop_requested INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS epochs (
    job_id TEXT NOT NULL REFERENCES jobs(job_id), phase TEXT NOT NULL, epoch INTEGER NOT NULL,
    workers INTEGER NOT NULL, servers INTEGER NOT NULL, train_loss REAL NOT NULL, val_loss REAL NOT NULL,
    duration_s REAL NOT NULL, samples INTEGER NOT NULL, samples_per_s REAL NOT NULL, cost REAL NOT NULL,
    retries INTEGER NOT NULL, started_at REAL NOT NULL, finished_at REAL NOT NULL,
    PRIMARY KEY (job_id, phase, epoch));
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, ts REAL NOT NULL, kind TEXT NOT NULL,
    message TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS leases (
    job_id TEXT PRIMARY KEY, pid INTEGER NOT NULL, owner TEXT NOT NULL, cpu REAL NOT NULL,
    memory_gib REAL NOT NULL, since REAL NOT NULL, epoch_s REAL);
CREATE TABLE IF NOT EXISTS lease_waits (
    job_id TEXT PRIMARY KEY, pid INTEGER NOT NULL, owner TEXT NOT NULL, cpu REAL NOT NULL,
    memory_gib REAL NOT NULL, since REAL NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    job_id TEXT PRIMARY KEY, pid INTEGER NOT NULL, owner TEXT NOT NULL, since REAL NOT NULL);
CREATE TABLE IF NOT EXISTS demands (
    job_id TEXT PRIMARY KEY, pid INTEGER NOT NULL, owner TEXT NOT NULL, since REAL NOT NULL,
    demand TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS settled (
    job_id TEXT NOT NULL, folder TEXT NOT NULL, PRIMARY KEY (job_id, folder));
"""
# columns added after a release: a store made by an older Coach gains them when opened
_ADDED_COLUMNS = {"jobs": [("val_epoch", "TEXT NOT NULL DEFAULT ''"), ("earlier_job", "TEXT NOT NULL DEFAULT ''"),
                          ("backend", "TEXT NOT NULL DEFAULT 'local'")],
                 "epochs": [("first_sample", "INTEGER NOT NULL DEFAULT -1")]}


@functools.cache
def _expected_columns() -> dict[str, frozenset[str]]:
    """Every table's columns as this Coach makes them (SCHEMA and the added columns)."""
    mem = sqlite3.connect(":memory:")
    try:
        mem.executescript(SCHEMA)
        for table, added in _ADDED_COLUMNS.items():
            for name, decl in added:
                mem.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")
        tables = [r[0] for r in mem.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                            "AND name NOT LIKE 'sqlite_%'")]
        return {t: frozenset(r[1] for r in mem.execute(f"PRAGMA table_info({t})")) for t in tables}
    finally:
        mem.close()


_JOB_COLUMNS = ("job_id", "name", "spec_path", "status", "target_loss", "budget", "spent", "workers",
                "servers", "epoch", "val_loss", "val_epoch", "earlier_job", "backend", "message", "created_at",
                "updated_at")
_EPOCH_COLUMNS = tuple(f.name for f in fields(EpochRecord))
_JOB_NUMBERS = ("target_loss", "budget", "spent", "workers", "servers", "epoch", "created_at", "updated_at")
_EPOCH_NUMBERS = tuple(c for c in _EPOCH_COLUMNS if c not in ("job_id", "phase"))
_JOB_TEXTS = ("name", "spec_path", "status", "message", "backend", "val_epoch", "earlier_job")
_TIMES = ("created_at", "updated_at", "ts", "at", "wait_at")
_LATEST = 1e11   # seconds since 1970: the year 5138, far inside what a clock can show
_WHOLE = ("workers", "servers", "epoch", "samples", "retries", "first_sample")
_NOT_NEGATIVE = ("budget", "spent", "workers", "servers", "epoch", "samples", "retries", "cost", "duration_s",
                 "samples_per_s")
_ETA_NUMBERS = ("epochs_left", "lo", "hi", "seconds", "seconds_lo", "seconds_hi", "asymptote", "earlier_weight",
                "at", "between_epochs_s", "budget_epochs", "next_epoch_cost", "wait_s", "wait_at")
_JOB_QUERY = ("SELECT jobs.*, runs.pid AS run_pid, runs.owner AS run_owner, (SELECT COUNT(*) FROM epochs WHERE "
              "epochs.job_id = jobs.job_id AND phase = 'training') AS trained "
              "FROM jobs LEFT JOIN runs USING (job_id)")


def coach_home() -> Path:
    """Where Coach keeps its state: $COACH_HOME, else $XDG_DATA_HOME/coach, else ~/.local/share/coach."""
    try:   # absolute: checkpoint paths are stored, and a resume from another folder must find them
        if os.environ.get("COACH_HOME"):
            return Path(os.environ["COACH_HOME"]).expanduser().absolute()
        return (Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")).expanduser() / "coach").absolute()
    except RuntimeError as e:   # `~someone` for a user this system does not know
        raise StateError(f"COACH_HOME / XDG_DATA_HOME: cannot be used: {e}") from None
    except OSError as e:   # a relative one, from a working folder that was removed
        raise StateError(f"COACH_HOME / XDG_DATA_HOME: cannot be made absolute: {e.strerror or e} "
                         "(the working folder is gone?); give an absolute path") from None


LOCK_TIMEOUT_S = 30.0   # how long a write waits for another coach process's transaction


def what_to_do(e: sqlite3.DatabaseError, path: Path) -> str:
    """The user's next step for a store error: only a damaged file should be moved away (its
    jobs are then forgotten); a busy, read-only or full one is fine once the cause is gone."""
    name = getattr(e, "sqlite_errorname", "") or ""
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return f"another coach process kept it locked for {LOCK_TIMEOUT_S:g} s; try again"
    if name.startswith("SQLITE_READONLY"):
        return f"it cannot be written: check the permissions of {path} and of {path.parent}, or set COACH_HOME"
    if name.startswith("SQLITE_FULL"):
        return f"the disk holding {path.parent} is full: free some space, then `coach resume` any interrupted job"
    if name.startswith("SQLITE_CANTOPEN"):
        if path.is_dir():
            return f"{path} is a folder: move it away, or set COACH_HOME to another folder"
        return f"check that {path.parent} can be written (permissions), or set COACH_HOME to a folder that can"
    if name.startswith("SQLITE_IOERR"):
        return f"the file system failed to read or write it: check the disk holding {path.parent}"
    return "if it is damaged, move it away to start a new one; its jobs are then forgotten"


def _job_values(values: dict[str, Any]) -> dict[str, Any]:
    """A job row's columns for `values`, stamped with the time of the change."""
    if "eta" in values:
        values["eta_json"] = json.dumps(values.pop("eta") or {})
    if "spec" in values:
        values["spec_json"] = json.dumps(values.pop("spec"))
    bad = set(values) - set(_JOB_COLUMNS) - {"eta_json", "spec_json", "checkpoint", "stop_requested"}
    if bad:
        raise ValueError(f"unknown job columns {sorted(bad)}")
    return {**values, "updated_at": time.time()}


def _use_wal(c: sqlite3.Connection) -> None:
    """Switch the store to write-ahead logging (readers never wait for a writer), once. Two
    processes opening a new store together could both ask, and SQLite then refuses one at
    once rather than wait, which said "locked for 30 s" after a few milliseconds."""
    end = time.monotonic() + LOCK_TIMEOUT_S
    while True:
        try:
            c.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if not getattr(e, "sqlite_errorname", "").startswith("SQLITE_BUSY") or time.monotonic() > end:
                raise
            time.sleep(0.02)


class Store:
    """Jobs, epochs and events of every run on this machine."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path else coach_home() / "coach.db"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._connect() as c:
                _use_wal(c)
                c.executescript(SCHEMA)
                for table, want in _expected_columns().items():
                    have = {r["name"] for r in c.execute(f"PRAGMA table_info({table})")}
                    for name, decl in _ADDED_COLUMNS.get(table, []):
                        if name not in have:
                            try:
                                c.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")
                            except sqlite3.OperationalError as e:   # another process added it first
                                if "duplicate column" not in str(e):
                                    raise
                            have.add(name)
                    if missing := sorted(want - have):   # else a read failed later as a traceback
                        raise StateError(f"{self.path}: the state store cannot be used: its table {table} has no "
                                         f"column {', '.join(missing)} (edited, or made by another version of Coach); "
                                         "move it away to start a new one; its jobs are then forgotten")
        except OSError as e:
            try:
                hint = (f"; {self.path.parent} must be a folder (set COACH_HOME to one)"
                        if self.path.parent.exists() and not self.path.parent.is_dir() else "")
            except OSError:   # e.g. a name too long to look up
                hint = ""
            raise StateError(f"{self.path}: cannot create the state store: {e.strerror}{hint}") from None

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        c = None
        try:
            c = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT_S)   # a folder in its place fails here
            c.row_factory = sqlite3.Row
            with c:
                yield c
        except sqlite3.IntegrityError:
            raise   # a constraint (e.g. an epoch recorded twice): the caller says which
        except sqlite3.DatabaseError as e:   # damaged file, foreign schema, locked too long, disk full...
            raise StateError(f"{self.path}: the state store cannot be used: {e} ({what_to_do(e, self.path)})") from None
        finally:
            if c is not None:
                c.close()

    # -- jobs ------------------------------------------------------------------------------
    def create_job(self, job_id: str, name: str, spec_path: str, spec_json: dict[str, Any],
                   target_loss: float, budget: float, backend: str = "local") -> JobRecord:
        now = time.time()
        with self._connect() as c:
            c.execute("INSERT INTO jobs (job_id, name, spec_path, spec_json, status, target_loss, budget, "
                      "backend, created_at, updated_at) VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?)",
                      (job_id, name, spec_path, json.dumps(spec_json), target_loss, budget, backend, now, now))
        return self.job(job_id)

    def update_job(self, job_id: str, **values: Any) -> None:
        values = _job_values(values)
        cols = ", ".join(f"{k} = ?" for k in values)
        with self._connect() as c:
            c.execute(f"UPDATE jobs SET {cols} WHERE job_id = ?", (*values.values(), job_id))

    def charge(self, job_id: str, cost: float, message: str, settles: tuple[str, ...] = ()) -> None:
        """Charge `cost` to the job without an epoch to hold it (attempts that finished none), with
        its `charged` event and the attempt folders it settles, in one transaction: `spent` is the
        history's costs plus these events, whatever moment a kill comes at."""
        now = time.time()
        with self._connect() as c:
            c.execute("UPDATE jobs SET spent = spent + ?, updated_at = ? WHERE job_id = ?", (cost, now, job_id))
            c.execute("INSERT INTO events (job_id, ts, kind, message) VALUES (?, ?, 'charged', ?)",
                      (job_id, now, f"{cost:.4g} {message}"))
            c.executemany("INSERT OR IGNORE INTO settled (job_id, folder) VALUES (?, ?)",
                          [(job_id, f) for f in settles])

    def settled(self, job_id: str) -> set[str]:
        """Attempt folders of the job whose charge is recorded (their removal may not have happened)."""
        with self._connect() as c:
            return {r[0] for r in c.execute("SELECT folder FROM settled WHERE job_id = ?", (job_id,))}

    def unsettle(self, job_id: str, folder: str) -> None:
        """Forget a settled folder once it is removed."""
        with self._connect() as c:
            c.execute("DELETE FROM settled WHERE job_id = ? AND folder = ?", (job_id, folder))

    def _damaged(self, job_id: str, column: str, why: str) -> StateError:
        return StateError(f"{self.path}: job {job_id}: {column}: {why}; the row was edited or damaged "
                          "(the other jobs are not affected)")

    def _numbers(self, row: sqlite3.Row, columns: tuple[str, ...], nullable: tuple[str, ...] = (),
                 finite: bool = False) -> None:
        """Rows are written by Coach only; a value that is not a number was put there by hand or
        by damage, and is named here rather than failing as a traceback wherever it is read."""
        for k in columns:
            v = row[k]
            if not (isinstance(v, (int, float)) or (v is None and k in nullable)):
                raise self._damaged(row["job_id"], k, f"not a number: {str(v)[:40]!r}")
            if finite and v is not None and not math.isfinite(v):   # `--json` printed Infinity, which JSON is not
                raise self._damaged(row["job_id"], k, f"not a finite number: {v}")
            if k in _TIMES and not 0 <= v < _LATEST:   # a clock time of 1e300 failed as an OverflowError
                raise self._damaged(row["job_id"], k, f"not a time: {v}")
            if (k in _WHOLE and v != int(v)) or (k in _NOT_NEGATIVE and v < 0):   # were shown as they were
                raise self._damaged(row["job_id"], k, f"not a {'whole ' * (k in _WHOLE)}number"
                                                      f"{' >= 0' * (k in _NOT_NEGATIVE)}: {v}")

    def _texts(self, row: sqlite3.Row, columns: tuple[str, ...]) -> None:
        for k in columns:   # a BLOB failed as a TypeError in `--json` and in a format string
            if not isinstance(row[k], str):
                raise self._damaged(row["job_id"], k, f"not text: {str(row[k])[:40]!r}")

    def _eta(self, job_id: str, text: str | None) -> dict[str, Any]:
        """The last prediction, with what the CLI reads of it checked: an infinite next_epoch_cost
        failed `coach status` and `resume` as an OverflowError, a text `seconds` as a ValueError."""
        eta = self._json(job_id, "eta_json", text, "{}")
        for k in _ETA_NUMBERS:
            v = eta.get(k)
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                                      and 0 <= v < (_LATEST if k in _TIMES else math.inf)):
                raise self._damaged(job_id, "eta_json", f"{k}: not a number >= 0: {str(v)[:40]!r}")
        if not isinstance(eta.get("reachable", True), bool) or not isinstance(eta.get("earlier") or "", str):
            raise self._damaged(job_id, "eta_json", "reachable or earlier: not the type Coach writes")
        return eta

    def _json(self, job_id: str, column: str, text: str | None, default: str) -> dict[str, Any]:
        try:
            value = json.loads(text or default)
        except ValueError as e:
            raise self._damaged(job_id, column, f"not JSON ({e})") from None
        if not isinstance(value, dict):
            raise self._damaged(job_id, column, f"not a JSON object: {str(text)[:40]!r}")
        return value

    def _row_to_job(self, row: sqlite3.Row) -> JobRecord:
        self._numbers(row, _JOB_NUMBERS + ("val_loss",), nullable=("val_loss",), finite=True)
        self._texts(row, _JOB_TEXTS)
        if row["backend"] not in ("local", "cluster"):   # `coach resume` blamed a --backend never given
            raise self._damaged(row["job_id"], "backend", f"not local or cluster: {row['backend'][:40]!r}")
        job = JobRecord(**{k: row[k] for k in _JOB_COLUMNS})
        job.eta = self._eta(job.job_id, row["eta_json"])
        if job.status not in FINAL_STATUSES and not (row["run_pid"] and _alive(row["run_pid"], row["run_owner"])):
            # nobody runs it: its `coach submit` was killed (or the machine rebooted) mid-job
            pid = f" (pid {row['run_pid']})" if row["run_pid"] else ""
            try:
                limit = self._json(job.job_id, "spec_json", row["spec_json"], "{}").get("max_epochs")
            except StateError:   # not this list's to say: `coach resume` names it
                limit = None
            full = type(limit) is int and row["trained"] >= limit   # a plain resume would be refused
            more = f" --max-epochs N` (N above {row['trained']})" if full else "`"
            job.message = (f"its coach process{pid} ended while it was {job.status}; "
                           f"`coach resume {job.job_id}{more} continues from its last checkpoint")
            job.status = "interrupted"
        return job

    def resolve(self, job_id: str) -> str:
        """The full id of a job given its id or an unambiguous prefix of it."""
        if not job_id:
            raise StateError("a job id is empty; `coach status` lists the jobs")
        with self._connect() as c:   # a plain prefix: LIKE would read '_' and '%' as wildcards
            rows = c.execute("SELECT job_id FROM jobs WHERE substr(job_id, 1, ?) = ? ORDER BY job_id",
                             (len(job_id), job_id)).fetchall()
        ids = [r["job_id"] for r in rows]
        if job_id in ids:
            return job_id
        # a job's name: `tight` is tight-eb8336 beside tight2-448177 (ids are the name and 6 hex digits)
        named = [i for i in ids if re.fullmatch(re.escape(job_id) + r"-[0-9a-f]{6}", i)]
        if len(named) == 1:
            return named[0]
        if not ids:
            # reprlib: a 100,000-character id was echoed whole
            raise StateError(f"no job {reprlib.repr(job_id)} in {self.path}; `coach status` lists the jobs")
        if len(ids) > 1:
            raise StateError(f"job id {reprlib.repr(job_id)} is ambiguous: {', '.join(ids[:5])}")
        return ids[0]

    def job(self, job_id: str) -> JobRecord:
        full = self.resolve(job_id)
        with self._connect() as c:
            row = c.execute(_JOB_QUERY + " WHERE job_id = ?", (full,)).fetchone()
        return self._row_to_job(row)

    def _column(self, job_id: str, column: str) -> Any:
        with self._connect() as c:
            return c.execute(f"SELECT {column} FROM jobs WHERE job_id = ?", (self.resolve(job_id),)).fetchone()[0]

    def spec(self, job_id: str) -> dict[str, Any]:
        """The job's spec as submitted (or as last resumed), for `coach resume` and `coach plot`."""
        return self._json(self.resolve(job_id), "spec_json", self._column(job_id, "spec_json"), "null")

    def checkpoint(self, job_id: str) -> str | None:
        """Where the job's last completed epoch left its model, None before the first one."""
        return self._column(job_id, "checkpoint")

    def stop_requested(self, job_id: str) -> bool:
        return bool(self._column(job_id, "stop_requested"))

    def jobs(self) -> list[JobRecord]:
        """Every readable job, oldest first (`read_jobs` also says why the others are not)."""
        return self.read_jobs()[0]

    def read_jobs(self) -> tuple[list[JobRecord], list[StateError]]:
        """The readable jobs, oldest first, and why each job whose row was edited or damaged
        cannot be read: one such row must not hide the other jobs from `coach status`."""
        with self._connect() as c:
            rows = c.execute(_JOB_QUERY + " ORDER BY created_at, jobs.rowid").fetchall()
        jobs, problems = [], []
        for r in rows:
            try:
                jobs.append(self._row_to_job(r))
            except StateError as e:
                problems.append(e)
        return jobs, problems

    # -- epochs ----------------------------------------------------------------------------
    def record_epoch(self, *recs: EpochRecord, settles: str | None = None, **job: Any) -> None:
        """Record finished epochs of one job (an epoch, or a probe measured inside it and the
        epoch), add their cost to the job's spend, settle their attempt folder and set `job`'s
        values (the checkpoint they wrote), in one transaction: a history holding epoch N beside a
        job that still points at epoch N − 1's checkpoint would resume from older weights, with a
        spend that misses the epoch's cost."""
        marks = ", ".join("?" for _ in _EPOCH_COLUMNS)
        values = _job_values(job)
        cols = "".join(f", {k} = ?" for k in values)
        job_id = recs[0].job_id
        try:
            with self._connect() as c:
                for rec in recs:
                    c.execute(f"INSERT INTO epochs ({', '.join(_EPOCH_COLUMNS)}) VALUES ({marks})",
                              tuple(getattr(rec, k) for k in _EPOCH_COLUMNS))
                c.execute(f"UPDATE jobs SET spent = spent + ?{cols} WHERE job_id = ?",
                          (sum(rec.cost for rec in recs), *values.values(), job_id))
                if settles is not None:
                    c.execute("INSERT OR IGNORE INTO settled (job_id, folder) VALUES (?, ?)", (job_id, settles))
        except sqlite3.IntegrityError as e:
            which = " and ".join(f"{rec.phase} epoch {rec.epoch}" for rec in recs)
            if "UNIQUE" in str(e):
                raise StateError(f"{job_id}: {which}: already recorded") from None
            raise StateError(f"{job_id}: {which} cannot be recorded: {e}") from None

    def epochs(self, job_id: str) -> list[EpochRecord]:
        with self._connect() as c:
            # tuning before training, each by epoch number: the stop rule reads this order, which
            # must not follow the wall clock (a clock stepped back would reorder epochs)
            rows = c.execute("SELECT * FROM epochs WHERE job_id = ? ORDER BY phase = 'training', epoch",
                             (self.resolve(job_id),)).fetchall()
        for r in rows:
            self._numbers(r, _EPOCH_NUMBERS, finite=True)
        return [EpochRecord(**{k: r[k] for k in _EPOCH_COLUMNS}) for r in rows]

    # -- events ----------------------------------------------------------------------------
    def add_event(self, job_id: str, kind: str, message: str, ts: float | None = None) -> None:
        with self._connect() as c:
            c.execute("INSERT INTO events (job_id, ts, kind, message) VALUES (?, ?, ?, ?)",
                      (job_id, time.time() if ts is None else ts, kind, message))

    def events(self, job_id: str) -> list[dict[str, Any]]:
        with self._connect() as c:
            rows = c.execute("SELECT job_id, ts, kind, message FROM events WHERE job_id = ? ORDER BY id",
                             (self.resolve(job_id),)).fetchall()
        for r in rows:
            self._numbers(r, ("ts",), finite=True)
            self._texts(r, ("kind", "message"))
        return [dict(ts=r["ts"], kind=r["kind"], message=r["message"]) for r in rows]

    # -- which process runs a job ----------------------------------------------------------
    def claim_job(self, job_id: str) -> int | None:
        """Make this process the one running `job_id`, unless a live process already is: then
        nothing changes and its pid is returned. One IMMEDIATE transaction, so two
        `coach resume` of one job cannot both run it."""
        with self._connect() as c:
            c.execute("BEGIN IMMEDIATE")
            row = c.execute("SELECT pid, owner FROM runs WHERE job_id = ?", (job_id,)).fetchone()
            if row and row["owner"] != own_identity() and _alive(row["pid"], row["owner"]):
                return int(row["pid"])
            c.execute("INSERT OR REPLACE INTO runs (job_id, pid, owner, since) VALUES (?, ?, ?, ?)",
                      (job_id, os.getpid(), own_identity(), time.time()))
        return None

    def release_job(self, job_id: str) -> None:
        """This process no longer runs `job_id` (best effort: a dead owner counts as none)."""
        try:
            with self._connect() as c:
                c.execute("DELETE FROM runs WHERE job_id = ? AND owner = ?", (job_id, own_identity()))
        except StateError:
            pass

    # -- capacity leases -------------------------------------------------------------------
    def leases(self) -> list[Lease]:
        """Leases of live processes; those of a process that ended (a killed `coach submit`) are dropped."""
        with self._connect() as c:
            c.execute("BEGIN IMMEDIATE")
            rows = [Lease(**dict(r)) for r in c.execute("SELECT * FROM leases").fetchall()]
            dead = [(l.job_id, l.owner) for l in rows if not _alive(l.pid, l.owner)]
            # matched on the owner too: the job may have been leased again by a new process
            c.executemany("DELETE FROM leases WHERE job_id = ? AND owner = ?", dead)
            gone = [(r["job_id"], r["owner"]) for r in c.execute("SELECT * FROM lease_waits").fetchall()
                    if not _alive(r["pid"], r["owner"])]
            c.executemany("DELETE FROM lease_waits WHERE job_id = ? AND owner = ?", gone)
        return [l for l in rows if (l.job_id, l.owner) not in dead]

    def waits(self) -> list[Lease]:
        """Jobs of live processes queued for a lease: what each needs at least, and since when
        (`since`: when it asked; `epoch_s` unused)."""
        with self._connect() as c:
            rows = c.execute("SELECT job_id, pid, owner, cpu, memory_gib, since FROM lease_waits").fetchall()
        return [Lease(**dict(r)) for r in rows if _alive(r["pid"], r["owner"])]

    def take_lease(self, job_id: str, cpu: float, memory_gib: float, capacity_cpu: float,
                   capacity_memory_gib: float, asked_at: float) -> bool:
        """Lease `cpu`/`memory_gib` to this process's `job_id` if it fits the capacity.

        It fits when the live leases of other jobs, this one, and the needs of every job of
        another process that has been waiting since before `asked_at` fit together: a job
        that releases its cores between epochs and asks again at once does not overtake one
        that was waiting for them (first come, first served across processes). A job that
        kept its lease (a cluster's pods stay between epochs) and takes no more than it holds
        is not queued behind them: giving way would mean deleting its pods and waiting for new
        ones at every epoch; it gives way as far as the planner's share shrinks it. Check and
        insert are one IMMEDIATE transaction: two processes cannot both take the last cores.
        """
        pid, owner = os.getpid(), own_identity()
        with self._connect() as c:
            c.execute("BEGIN IMMEDIATE")
            leases = c.execute("SELECT job_id, pid, owner, cpu, memory_gib FROM leases").fetchall()
            held = [r for r in leases if r["job_id"] != job_id and _alive(r["pid"], r["owner"])]
            keeps = any(r["job_id"] == job_id and r["owner"] == owner and cpu <= r["cpu"] + 1e-9
                        and memory_gib <= r["memory_gib"] + 1e-9 for r in leases)
            ahead = [] if keeps else [
                r for r in c.execute("SELECT pid, owner, cpu, memory_gib FROM lease_waits "
                                     "WHERE owner != ? AND since < ?", (owner, asked_at)).fetchall()
                if _alive(r["pid"], r["owner"])]
            if (sum(r["cpu"] for r in held + ahead) + cpu > capacity_cpu + 1e-9
                    or sum(r["memory_gib"] for r in held + ahead) + memory_gib > capacity_memory_gib + 1e-9):
                return False
            c.execute("INSERT OR REPLACE INTO leases (job_id, pid, owner, cpu, memory_gib, since, epoch_s) "
                      "VALUES (?, ?, ?, ?, ?, ?, NULL)", (job_id, pid, owner, cpu, memory_gib, time.time()))
            c.execute("DELETE FROM lease_waits WHERE job_id = ? AND owner = ?", (job_id, owner))
        return True

    def wait_for_lease(self, job_id: str, cpu: float, memory_gib: float, since: float) -> None:
        """Queue `job_id` (needing at least `cpu`/`memory_gib`) for a lease; the first `since` stays."""
        with self._connect() as c:
            c.execute("INSERT OR IGNORE INTO lease_waits (job_id, pid, owner, cpu, memory_gib, since) "
                      "VALUES (?, ?, ?, ?, ?, ?)", (job_id, os.getpid(), own_identity(), cpu, memory_gib, since))

    def set_lease_epoch_s(self, job_id: str, epoch_s: float | None) -> None:
        """How long the leased epoch is predicted to run: others' expected wait."""
        with self._connect() as c:
            c.execute("UPDATE leases SET epoch_s = ? WHERE job_id = ? AND owner = ?",
                      (epoch_s, job_id, own_identity()))

    def drop_lease(self, job_id: str) -> bool:
        """Give back this process's lease and place in the queue for `job_id`.

        Best effort (False if the store could not be written): a lease left behind is
        dropped once this process has ended.
        """
        owner = own_identity()
        try:
            with self._connect() as c:
                c.execute("DELETE FROM leases WHERE job_id = ? AND owner = ?", (job_id, owner))
                c.execute("DELETE FROM lease_waits WHERE job_id = ? AND owner = ?", (job_id, owner))
        except StateError:
            return False
        return True

    # -- planner demands: marginal utility across processes ---------------------------------
    def publish_demand(self, job_id: str, since: float, demand: str) -> None:
        """Publish (or update) this process's job's latest demand, first asked at `since`."""
        with self._connect() as c:
            c.execute("INSERT OR REPLACE INTO demands (job_id, pid, owner, since, demand) VALUES (?, ?, ?, ?, ?)",
                      (job_id, os.getpid(), own_identity(), since, demand))

    def demands(self) -> list[SharedDemand]:
        """Demands of running jobs of live processes, oldest first; a dead process's are dropped."""
        with self._connect() as c:
            rows = c.execute("SELECT * FROM demands ORDER BY since, job_id").fetchall()
            dead = [(r["job_id"], r["owner"]) for r in rows if not _alive(r["pid"], r["owner"])]
            c.executemany("DELETE FROM demands WHERE job_id = ? AND owner = ?", dead)
        return [SharedDemand(r["job_id"], r["owner"], r["since"], r["demand"]) for r in rows
                if (r["job_id"], r["owner"]) not in dead]

    def drop_demand(self, job_id: str) -> bool:
        """The job has ended: withdraw its demand. Best effort, like `drop_lease`."""
        try:
            with self._connect() as c:
                c.execute("DELETE FROM demands WHERE job_id = ? AND owner = ?", (job_id, own_identity()))
        except StateError:
            return False
        return True


def own_identity() -> str | None:
    """This process's identity (read once per process: it never changes)."""
    return _identity_of_pid(os.getpid())


@functools.lru_cache(maxsize=4)
def _identity_of_pid(pid: int) -> str | None:
    return process_identity(pid)


def _alive(pid: int, owner: str) -> bool:
    return process_identity(pid) == owner
