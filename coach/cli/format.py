"""How jobs, epochs and ETAs read in a terminal, and where plots go (one place, shared by
every command)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, TextIO

from rich.console import Console

from coach.errors import SpecError
from coach.state.records import FINAL_STATUSES, WAIT_KEYS, JobRecord

BETWEEN_SHOWN_S = 1.0
"""The ETA names the time between epochs from here: below it is fitting and planning, not waiting."""

FINISH_SHOWN_S = 600.0
"""The ETA names the finish time by the clock from here (10 minutes left): for a shorter wait the
clock time is only noise beside the seconds."""


def clock_times(timestamps: list[float], now: float | None = None) -> list[str]:
    """Times of day for a list of events, with their dates when they are not all of today: a job
    stopped on Friday and resumed on Monday read as one day's hours."""
    days = {time.localtime(t)[:3] for t in timestamps}
    today = time.localtime(time.time() if now is None else now)[:3]
    shape = "%H:%M:%S" if days <= {today} else "%Y-%m-%d %H:%M:%S"
    return [time.strftime(shape, time.localtime(t)) for t in timestamps]


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def elapsed(job: JobRecord, events: Iterable[Mapping[str, Any]], now: float | None = None) -> float:
    """Seconds some process ran the job: from submit to its end, less the time it sat stopped
    between a final status and the `coach resume` that took it up again (a job stopped on Friday
    and resumed on Monday did not train over the weekend). `events` are the job's, in order; a
    killed run's end is the `interrupted` event that `coach resume` records (stamped with the
    job's last update), or else the last event it recorded."""
    total, start, last = 0.0, job.created_at, job.created_at
    for e in events:
        if e["kind"] == "resumed":
            total += max(0.0, last - start) if start is not None else 0.0
            start = e["ts"]
        elif e["kind"] in FINAL_STATUSES and start is not None:
            total += max(0.0, e["ts"] - start)   # a clock stepped back adds nothing
            start = None
        last = e["ts"]
    if start is not None:
        end = job.updated_at if job.status in FINAL_STATUSES else time.time() if now is None else now
        total += max(0.0, end - start)
    return total


def eta_text(job: JobRecord, now: float | None = None) -> str:
    """'3 epochs (2–5), ~45s [30s–1m20s]', or why there is no ETA; 'wait ~9s, then …' while the
    job waits for room (the coordinator's expected wait; only the message said it before).

    The times count down from when the ETA was predicted (`eta["at"]`) to `now`, so a
    status read between epochs shows what is left, not what was left at the last epoch.
    """
    wait = wait_left(job, now)
    e = {k: v for k, v in (job.eta or {}).items() if k not in WAIT_KEYS}
    if job.status in FINAL_STATUSES or not e:
        return "-" if wait is None else f"wait ~{duration(wait)}"
    text = _epochs_left_text(job, e, now)
    return text if wait is None else f"wait ~{duration(wait)}, then {text}"


def wait_left(job: JobRecord, now: float | None = None) -> float | None:
    """The expected wait for room of a job waiting now, counted down from when it was said
    (`eta["wait_at"]`) to `now`, never below 0; None if it does not wait or the wait is unknown."""
    e: dict[str, Any] = job.eta or {}
    if job.status in FINAL_STATUSES or e.get("wait_s") is None:
        return None
    now = time.time() if now is None else now
    return max(0.0, float(e["wait_s"]) - (now - float(e.get("wait_at", now))))


def _epochs_left_text(job: JobRecord, e: dict[str, Any], now: float | None) -> str:
    budget = e.get("budget_epochs")
    paid = f"; the budget pays for ~{budget} more epoch{'' if budget == 1 else 's'}" if budget is not None else ""
    if not e.get("reachable", True):
        asymptote = float(e.get("asymptote", float("nan")))
        if job.target_loss <= asymptote:
            return f"target below asymptote {asymptote:.3g}: may never reach it{paid}"
        return f"not expected within max_epochs{paid}"   # the loop's horizon is what max_epochs leaves
    if e.get("epochs_left") is None:
        return f"?{paid}"
    hi = "?" if e.get("hi") is None else e["hi"]
    secs, lo_s, hi_s = seconds_left(job, now)
    span = f" [{duration(lo_s)}–{duration(hi_s)}]" if hi_s is not None else ""
    n = e["epochs_left"]
    earlier = f" with {e['earlier']} {e.get('earlier_weight', 0):.0%}" if e.get("earlier") else ""
    between = float(e.get("between_epochs_s") or 0.0)   # waiting for cores other jobs hold, mostly
    waits = f" incl. ~{duration(between)} between epochs" if between >= BETWEEN_SHOWN_S else ""
    done = ""
    if secs is not None and secs >= FINISH_SHOWN_S:   # an hour's job is planned by the clock
        now = time.time() if now is None else now
        at, lo_at, hi_at = finish_times(job, now)
        done = f", done ~{finish_clock(at, now)}" + (
            f" [{finish_clock(lo_at, now)}–{finish_clock(hi_at, now)}]" if lo_at is not None and hi_at is not None else "")
    return f"{n} epoch{'' if n == 1 else 's'} ({e.get('lo')}–{hi}), ~{duration(secs)}{span}{waits}{done}{earlier}{paid}"


def finish_times(job: JobRecord, now: float) -> tuple[float | None, float | None, float | None]:
    """When the job is expected to finish, with its interval (Unix seconds; None where unknown):
    after any wait for room, the ETA's seconds left."""
    start = now + (wait_left(job, now) or 0.0)
    return tuple(None if s is None else start + s for s in seconds_left(job, now))   # type: ignore[return-value]


def finish_clock(ts: float, now: float) -> str:
    """When a job is expected to finish, by the clock: '14:05', 'Sat 09:10' within 6 days, else
    '2027-03-01 09:10' (95 years ahead read 'Tue 06:41'; a billion years, an OSError)."""
    try:
        when = time.localtime(ts)
    except (OverflowError, OSError, ValueError):   # beyond the platform's calendar
        return "beyond the calendar"
    if when[:3] == time.localtime(now)[:3]:
        return time.strftime("%H:%M", when)
    return time.strftime("%a %H:%M" if ts - now < 6 * 86400 else "%Y-%m-%d %H:%M", when)


def seconds_left(job: JobRecord, now: float | None = None) -> tuple[float | None, float | None, float | None]:
    """The ETA's seconds and their interval, counted down from when it was predicted
    (`eta["at"]`) to `now`, never below 0; None where unknown (or the job is over)."""
    e: dict[str, Any] = job.eta or {}
    if job.status in FINAL_STATUSES or not e.get("reachable", True):
        return None, None, None
    now = time.time() if now is None else now
    # the epochs come after the wait: they count down from its expected end ("wait ~15s, then … ~0s")
    wait_end = float(e.get("wait_at", 0.0)) + float(e.get("wait_s") or 0.0)
    since = max(0.0, now - max(float(e.get("at", now)), wait_end))
    return tuple(None if e.get(k) is None else max(0.0, e[k] - since)   # type: ignore[return-value]
                 for k in ("seconds", "seconds_lo", "seconds_hi"))


def loss_text(job: JobRecord) -> str:
    """'0.1279 / 0.15', or '0.1279 / 0.15 after training 3' when the loss is not from `job.epoch`:
    while epoch 4 runs (or when a job stopped during it), the loss shown is epoch 3's."""
    val = "-" if job.val_loss is None else f"{job.val_loss:.4g}"   # 4 digits however small the target
    shown = f"{'tuning' if job.status == 'tuning' else 'training'} {job.epoch}"   # the epoch the line names
    return f"{val} / {job.target_loss:g}{f' after {job.val_epoch}' if job.val_epoch not in ('', shown) else ''}"


def job_row(job: JobRecord, events: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    return {
        "job": job.job_id, "status": job.status, "epoch": str(job.epoch),
        "val loss / target": loss_text(job),
        "(w, s)": f"({job.workers}, {job.servers})" if job.workers else "-",   # queued: none yet, not "(0, 0)"
        "spent / budget": f"{job.spent:.4g} / {job.budget:g}", "elapsed": duration(elapsed(job, events)),
        "ETA": eta_text(job),
    }


def progress_line(job: JobRecord, events: Iterable[Mapping[str, Any]], width: int = 9) -> str:
    """`width`: the status column's, the longest status of the jobs shown together, so that their
    lines stay in columns ("budget_exhausted" pushed the rest of its line out of them)."""
    r = job_row(job, events)
    line = (f"{r['job']}  {r['status']:<{width}} epoch {r['epoch']:>3}  val {r['val loss / target']}  "
            f"(w, s)={r['(w, s)']}  spent {r['spent / budget']}  {r['elapsed']}")
    if r["ETA"] != "-":
        line += f"  ETA {r['ETA']}"
    if job.message and job.status not in ("tuning", "training"):
        line += f"  — {job.message}"
    elif job.message.startswith("waiting"):
        line += f"  — {job.message}"
    return line


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


PLOT_FORMATS = (".png", ".pdf", ".svg")


def plot_file(output: Path, option: str, example: str) -> Path:
    """The file a plot goes to: a file name (`.png` added if it has no suffix) in a format
    matplotlib writes, in a folder that exists and can be written; anything else is a SpecError
    naming the option."""
    try:
        folder = output.is_dir()
    except (OSError, ValueError) as e:   # a name too long, a NUL byte
        raise SpecError(option, "", f"{output}: cannot be used: {getattr(e, 'strerror', None) or e}") from None
    if folder or not output.name:
        raise SpecError(option, "", f"{str(output) or repr('')} is a folder; give a file name such as {example}")
    if output.name.endswith("."):   # "x.png." was written as "x.png..png"
        raise SpecError(option, "", f"{output} ends with a dot; give a file name such as {example}")
    if str(output) == "-":   # was written as "-.png"
        raise SpecError(option, "", f"a plot is written to a file, not to standard output; give a file name "
                                    f"such as {example}")
    if output.name.lower() in PLOT_FORMATS:   # ".png" has no suffix to Python: it was written as ".png.png"
        raise SpecError(option, "", f"{output} has no name before its suffix; give a file name such as {example}")

    def regular(path: Path) -> Path:   # `-o /dev/null` wrote a new file /dev/null.png
        if path.exists() and not path.is_file():
            raise SpecError(option, "", f"{path} is not a regular file; give a file name such as {example}")
        return path

    if not regular(output).suffix:
        output = regular(output.with_name(output.name + ".png"))
    if output.suffix.lower() not in PLOT_FORMATS:
        raise SpecError(option, "", f"cannot write {output.suffix!r} files; use one of {', '.join(PLOT_FORMATS)}")
    folder = output.parent.resolve()   # a typo in it is not a folder to create
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise SpecError(option, "", f"{folder} is not a folder this user can write to")
    return output
