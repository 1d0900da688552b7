"""Live progress of running jobs, read from the state store (the loops only write to it)."""

from __future__ import annotations

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
        time.sleep(REFRESH_S)


def _show(store: Store, job_ids: list[str], finished: Callable[[], bool], console: Console) -> None:
    if console.is_terminal:
        with Live(console=console, refresh_per_second=4, transient=False) as live:
            while True:
                done = finished()
                live.update(Text("\n".join(progress_line(store.job(j), store.events(j)) for j in job_ids)))
                if done:
                    return
                time.sleep(REFRESH_S)
    last: dict[str, tuple] = {}
    while True:
        done = finished()
        for j in job_ids:
            job = store.job(j)
            key = (job.status, job.epoch, job.val_loss, job.workers, job.servers, job.message)
            if last.get(j) != key:
                last[j] = key
                print(progress_line(job, store.events(j)), file=sys.stderr, flush=True)
        if done:
            return
        time.sleep(REFRESH_S)
