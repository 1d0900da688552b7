"""A user's model file runs as it was submitted, and its tracebacks quote what ran."""

from __future__ import annotations

import linecache
import signal
import time
from pathlib import Path

import pytest

from coach.errors import SpecError, UserCodeError
from coach.models.limit import USER_CODE_LIMIT_ENV, limited, user_code_limit
from coach.models.zoo import build_model


def test_a_model_file_runs_and_is_quoted_as_submitted(tmp_path: Path) -> None:
    path = tmp_path / "net.py"
    path.write_text("raise RuntimeError('edited after submit')\n")   # the file now
    submitted = "from mxnet.gluon import nn\n\n\ndef build(num_classes):\n    return nn.Dense(num_classes)\n"
    from mxnet.gluon import Block

    assert isinstance(build_model("", 10, str(path), submitted), Block)
    # a traceback through the network's code shows the submitted line, not the edited file's
    assert linecache.getline(str(path), 5) == "    return nn.Dense(num_classes)\n"
    linecache.checkcache(str(path))   # what traceback printing does first
    assert linecache.getline(str(path), 5) == "    return nn.Dense(num_classes)\n"


HANGS = {
    "build": ("def build(num_classes):\n    while True:\n        pass\n",
              "build(10) did not finish within 0.3 s (it was at line 2)"),
    # the user's own `except Exception` does not swallow the limit
    "build, catching everything": ("import time\n\ndef build(num_classes):\n    while True:\n        try:\n"
                                   "            time.sleep(1)\n        except Exception:\n            pass\n",
                                   "build(10) did not finish within 0.3 s (it was at line 6)"),
    "importing": ("import time\ntime.sleep(60)\n", "importing it did not finish within 0.3 s (it was at line 2)"),
}


@pytest.mark.parametrize("case", list(HANGS))
def test_model_code_that_hangs_is_stopped_naming_file_and_line(case: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    source, problem = HANGS[case]
    monkeypatch.setenv(USER_CODE_LIMIT_ENV, "0.3")
    path = tmp_path / "net.py"
    t0 = time.monotonic()
    with pytest.raises(UserCodeError) as err:
        build_model("", 10, str(path), source)
    assert time.monotonic() - t0 < 5
    assert str(err.value).startswith(f"{path}: {problem}; raise {USER_CODE_LIMIT_ENV}"), str(err.value)


def test_a_model_that_builds_in_time_leaves_no_timer_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(USER_CODE_LIMIT_ENV, "0.3")
    before = signal.getsignal(signal.SIGALRM)
    build_model("", 10, str(tmp_path / "net.py"),
                "from mxnet.gluon import nn\n\ndef build(num_classes):\n    return nn.Dense(num_classes)\n")
    time.sleep(0.5)   # an alarm left running would fire here
    assert signal.getsignal(signal.SIGALRM) is before and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


@pytest.mark.parametrize("raw", ["abc", "0", "-5", "inf", "nan", "1e10"])
def test_a_bad_user_code_limit_is_named(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(USER_CODE_LIMIT_ENV, raw)
    with pytest.raises(SpecError, match=f"^environment: {USER_CODE_LIMIT_ENV}: must be a number of seconds > 0 "
                                        f"and ≤ 86400, got '{raw}'$"):
        user_code_limit()


def test_an_alarm_at_the_end_of_the_block_never_escapes_raw(monkeypatch: pytest.MonkeyPatch) -> None:
    # a limit of microseconds makes the alarm land anywhere, also after the block: it must
    # surface as a UserCodeError or not at all, and leave the handler as it was
    monkeypatch.setenv(USER_CODE_LIMIT_ENV, "0.0001")
    before = signal.getsignal(signal.SIGALRM)
    outcomes = set()
    for i in range(3000):   # blocks of 0 to about 0.3 ms around a 0.1 ms limit
        try:
            with limited(Path("/tmp/m.py"), "build(10)"):
                sum(range(i % 100 * 100))
            outcomes.add("ok")
        except UserCodeError:
            outcomes.add("limit")
        assert signal.getsignal(signal.SIGALRM) is before
    assert outcomes <= {"ok", "limit"} and "limit" in outcomes


def test_another_timer_is_paused_not_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(time.monotonic()))
    try:
        t0 = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        monkeypatch.setenv(USER_CODE_LIMIT_ENV, "10")
        with limited(Path("/tmp/m.py"), "build(10)"):   # and a nested limit inside another
            with limited(Path("/tmp/m.py"), "importing it"):
                time.sleep(0.1)
        assert 0.2 < signal.getitimer(signal.ITIMER_REAL)[0] <= 0.4
        time.sleep(0.6)
        assert len(fired) == 1 and 0.45 < fired[0] - t0 < 0.8
        signal.setitimer(signal.ITIMER_REAL, 1.0, 0.25)   # a periodic timer stays periodic
        with limited(Path("/tmp/m.py"), "build(10)"):
            pass
        assert signal.getitimer(signal.ITIMER_REAL)[1] == 0.25
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


HANG_OP = """import time
import mxnet as mx
from mxnet.gluon import nn


class Hang(mx.operator.CustomOp):   # runs on MXNet's own thread; the caller waits in native code
    def forward(self, is_train, req, in_data, out_data, aux):
        time.sleep(SECONDS)
        self.assign(out_data[0], req[0], in_data[0])


@mx.operator.register("coach_test_hang_NAME")
class HangProp(mx.operator.CustomOpProp):
    def list_arguments(self):
        return ["data"]

    def infer_shape(self, in_shape):
        return in_shape, in_shape, []

    def create_operator(self, ctx, shapes, dtypes):
        return Hang()


class Net(nn.Block):
    def __init__(self, n):
        super().__init__()
        self.d = nn.Dense(n)

    def forward(self, x):
        y = mx.nd.Custom(self.d(x), op_type="coach_test_hang_NAME")
        y.wait_to_read()
        return y


def build(num_classes):
    return Net(num_classes)
"""


def test_code_stuck_in_native_code_is_reported_by_the_watchdog(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # SIGALRM's handler cannot run while the main thread waits in MXNet: the watchdog reports
    # (in a role process it answers and exits); here the operator returns after 3 s
    import mxnet as mx

    from coach.models import limit
    from coach.models.zoo import first_forward

    monkeypatch.setenv(USER_CODE_LIMIT_ENV, "0.3")
    monkeypatch.setattr(limit, "NATIVE_GRACE_S", 0.3)
    reports: list[tuple[float, str]] = []
    limit.on_native_hang(lambda message: reports.append((time.monotonic(), message)))
    try:
        path = tmp_path / "net.py"
        source = HANG_OP.replace("SECONDS", "3").replace("NAME", tmp_path.name)
        net = build_model("", 10, str(path), source)
        net.initialize(ctx=mx.cpu())
        t0 = time.monotonic()
        with pytest.raises(UserCodeError, match="the first forward pass did not finish within 0.3 s"):
            first_forward(net, (4,), 10, str(path), mx.cpu())
    finally:
        limit.on_native_hang(None)
    [(at, message)] = reports
    assert at - t0 < 2.5, "the watchdog reports while the operator still runs"
    assert message == (f"{path}: the first forward pass did not finish within 0.3 s (it was at line 31); raise "
                       f"{USER_CODE_LIMIT_ENV} in the worker function's env if it needs longer (stuck in native code)")


@pytest.mark.parametrize("text, line", [
    ("plain message\nmore", "plain message"),
    # MXNet 1.9's asynchronous errors: the first line is a header, the cause comes later
    ("Traceback (most recent call last):\n  File \"net.py\", line 7, in forward\n    raise ValueError('x')\n"
     "ValueError: bad op\n\n[bt] (0) libmxnet.so", "ValueError: bad op"),
    ("Traceback (most recent call last):\n  [bt] (0) frame\nMXNetError: Check failed: shape", "MXNetError: Check failed: shape"),
    ("", ""),
])
def test_one_line_of_an_error_names_its_cause(text: str, line: str) -> None:
    from coach.errors import one_line

    assert one_line(RuntimeError(text)) == line
