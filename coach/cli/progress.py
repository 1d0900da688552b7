"""Live progress of running jobs, read from the state store (the loops only write to it)."""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Callable

from rich.console import Console
from rich.live import Live
from rich.text import Text

from coach.cli.format import progress_line, silence
from coach.errors import CoachError
from coach.state.store import Store

REFRESH_S = 0.5
TICK_S = 0.02   # how soon the jobs' end is noticed between two refreshes


def watch(store: Store, job_ids: list[str], finished: Callable[[], bool], console: Console) -> None:
    """A live line per job on a terminal; elsewhere (CI, pipes) a line whenever a job changes.

    Returns when `finished()` says so, even if nobody reads any more (`coach submit | head`
    closes the pipe): the jobs go on, unwatched, and end as they would have."""
    try:
        _show(store, job_ids, finished, console)
    except BrokenPipeError:   # the reader went away, not the jobs
        silence(sys.stderr)
    except (OSError, CoachError) as e:   # a full disk, a store locked too long: the jobs go on
        try:
            print(f"progress stopped ({e}); the jobs go on: `coach status` shows them", file=sys.stderr)
        except OSError:
            pass
    while not finished():
        time.sleep(TICK_S)


def _nap(finished: Callable[[], bool]) -> None:
    """Until the next refresh, or until the jobs are over: slept through whole, the refresh held
    `coach submit` 0.25 s on average (up to 0.5 s) after its last job had ended."""
    end = time.monotonic() + REFRESH_S
    while time.monotonic() < end and not finished():
        time.sleep(TICK_S)


def _show(store: Store, job_ids: list[str], finished: Callable[[], bool], console: Console) -> None:
    """Every REFRESH_S: a live line per job on a terminal, else a line per job that changed. A
    job's events (what its elapsed time is counted from) are read again only when it changes:
    a resume or a final status always comes with a new status."""
    last: dict[str, tuple] = {}
    events: dict[str, list] = {}
    live = Live(console=console, refresh_per_second=4, transient=False) if console.is_terminal else None
    with live if live is not None else contextlib.nullcontext():
        while True:
            done = finished()
            lines = []
            jobs = [store.job(j) for j in job_ids]
            width = max([9, *(len(job.status) for job in jobs)])
            for j, job in zip(job_ids, jobs):
                key = (job.status, job.epoch, job.val_loss, job.workers, job.servers, job.message)
                changed = last.get(j) != key
                if changed:
                    last[j], events[j] = key, store.events(j)
                if live is not None or changed:
                    lines.append(progress_line(job, events[j], width))
            if live is not None:   # wrapped, not cut: spent and the ETA come last on a line of ~170
                live.update(Text("\n".join(lines), no_wrap=False, overflow="fold"))
            elif lines:
                print("\n".join(lines), file=sys.stderr, flush=True)
            if done:
                return
            _nap(finished)
