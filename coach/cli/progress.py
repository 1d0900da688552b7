"""Live progress of running jobs, read from the state store (the loops only write to it)."""

from __future__ import annotations

import sys
import time
import os
from typing import Callable, TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text

from coach.cli.format import progress_line
from coach.state.store import Store

REFRESH_S = 0.5


def watch(store: Store, job_ids: list[str], finished: Callable[[], bool], console: Console) -> None:
    """A live line per job on a terminal; elsewhere (CI, pipes) a line whenever a job changes.

    Returns when `finished()` says so, even if nobody reads any more (`coach submit | head`
    closes the pipe): the jobs go on, unwatched, and end as they would have."""
    try:
        _show(store, job_ids, finished, console)
    except OSError:   # BrokenPipeError and the like: the reader went away, not the jobs
        silence(sys.stderr)
        while not finished():
            time.sleep(REFRESH_S)


def silence(stream: TextIO) -> None:
    """Send what is still written to `stream` to /dev/null, so a closed pipe breaks nothing
    else (nor the interpreter's final flush)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


class PipeSafeConsole(Console):
    """A rich Console that goes quiet when its reader goes away (`coach submit | head`),
    instead of rich's SystemExit(1): the jobs still end as they would, with their exit code."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        silence(self.file)


def _show(store: Store, job_ids: list[str], finished: Callable[[], bool], console: Console) -> None:
    if console.is_terminal:
        with Live(console=console, refresh_per_second=4, transient=False) as live:
            while True:
                done = finished()
                live.update(Text("\n".join(progress_line(store.job(j)) for j in job_ids)))
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
                print(progress_line(job), file=sys.stderr, flush=True)
        if done:
            return
        time.sleep(REFRESH_S)
