"""How long a job's own model code may run: loading the model file, its build() and the
first forward pass each get `COACH_USER_CODE_LIMIT_S` seconds (300 by default; a worker
function `env` setting). Past it the job fails once with a UserCodeError naming the file and
line, instead of holding every attempt of its first epoch until the epoch's deadline.

Python code (a loop, a sleep, a wait on the network) is interrupted by SIGALRM. Code stuck
in native code (an MXNet operator that never returns) cannot be interrupted from Python: a
role process registers `on_native_hang`, and a watchdog thread calls it when the code is
still running NATIVE_GRACE_S after the limit; the role then answers and exits.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping

from coach.errors import SpecError, UserCodeError

USER_CODE_LIMIT_ENV = "COACH_USER_CODE_LIMIT_S"
DEFAULT_USER_CODE_LIMIT_S = 300.0
MAX_USER_CODE_LIMIT_S = 86_400.0   # setitimer overflows far above; a day is beyond any epoch deadline
NATIVE_GRACE_S = 10.0

_native_hang: Callable[[str], None] | None = None


class _TimeUp(BaseException):
    """Raised inside the user's code at its limit: not an Exception, so that the user's own
    `except Exception` does not swallow it."""


def user_code_limit(env: Mapping[str, str] = os.environ) -> float:
    """The limit in seconds, from the environment (SpecError if it is not a usable number)."""
    raw = env.get(USER_CODE_LIMIT_ENV, "")
    if not raw:
        return DEFAULT_USER_CODE_LIMIT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value <= MAX_USER_CODE_LIMIT_S:
        raise SpecError("environment", USER_CODE_LIMIT_ENV,
                        f"must be a number of seconds > 0 and ≤ {MAX_USER_CODE_LIMIT_S:g}, got {raw!r}")
    return value


def on_native_hang(stop: Callable[[str], None] | None) -> None:
    """Register what a process does when user code is stuck in native code past its limit
    (a role process: answer with the message, then exit)."""
    global _native_hang
    _native_hang = stop


def _too_long(path: Path, what: str, limit: float, line: int | None) -> str:
    at = f" (it was at line {line})" if line is not None else ""
    return (f"{path}: {what} did not finish within {limit:g} s{at}; "
            f"raise {USER_CODE_LIMIT_ENV} in the worker function's env if it needs longer")


class limited:
    """`with limited(path, what):` runs the block (the user's code in `path`) under the limit.
    Another timer already set (ITIMER_REAL) is paused and resumed with the time it had left.
    An alarm that lands in this class's own code (entering or leaving the block) is retried
    a millisecond later while the block runs, and does nothing once it has ended. Signals
    reach only the main thread, where a role process runs its work; elsewhere only the
    native-hang watchdog applies."""

    def __init__(self, path: Path, what: str) -> None:
        self.path, self.what = path, what
        self.armed = False

    def __enter__(self) -> "limited":
        self.limit = user_code_limit()
        self.done = threading.Event()
        self.on_main = threading.current_thread() is threading.main_thread()
        if self.on_main:
            self.previous = signal.getsignal(signal.SIGALRM)
            self.other = signal.setitimer(signal.ITIMER_REAL, 0)   # (left, interval) of a timer set before
            self.t0 = time.monotonic()
            self.armed = True
            signal.signal(signal.SIGALRM, self._time_up)
            signal.setitimer(signal.ITIMER_REAL, self.limit)
        _watch_native(self.done, self.path, self.what, self.limit)   # last: nothing after it can fail
        return self

    def _time_up(self, signum: int, frame: Any) -> None:
        if not self.armed:
            return
        if frame is not None and frame.f_code.co_filename == __file__:
            signal.setitimer(signal.ITIMER_REAL, 0.001)
            return
        raise _TimeUp

    def __exit__(self, kind: Any, error: Any, tb: Any) -> bool:
        self.armed = False
        self.done.set()
        if self.on_main:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous if self.previous is not None else signal.SIG_DFL)
            left, interval = self.other
            if left > 0:
                signal.setitimer(signal.ITIMER_REAL, max(1e-6, left - (time.monotonic() - self.t0)), interval)
        if kind is _TimeUp:
            lines = [n for f, n in traceback.walk_tb(tb) if f.f_code.co_filename == str(self.path)]
            raise UserCodeError(_too_long(self.path, self.what, self.limit, lines[-1] if lines else None)) from None
        return False


def _watch_native(done: threading.Event, path: Path, what: str, limit: float) -> None:
    stop = _native_hang
    if stop is None:
        return
    caller = threading.current_thread().ident

    def watch() -> None:
        if done.wait(limit + NATIVE_GRACE_S):
            return
        frame, line = sys._current_frames().get(caller), None
        while frame is not None and line is None:   # innermost frame of the user's file
            if frame.f_code.co_filename == str(path):
                line = frame.f_lineno
            frame = frame.f_back
        stop(_too_long(path, what, limit, line) + " (stuck in native code)")

    threading.Thread(target=watch, daemon=True, name="user-code-limit").start()
