"""A user's model file runs as it was submitted, and its tracebacks quote what ran."""

from __future__ import annotations

import linecache
import signal
import time
from pathlib import Path

import pytest

from coach.errors import SpecError, UserCodeError
from coach.models.zoo import USER_CODE_LIMIT_ENV, build_model, user_code_limit


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


@pytest.mark.parametrize("raw", ["abc", "0", "-5", "inf", "nan"])
def test_a_bad_user_code_limit_is_named(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(USER_CODE_LIMIT_ENV, raw)
    with pytest.raises(SpecError, match=f"^environment: {USER_CODE_LIMIT_ENV}: must be a number of seconds > 0, "
                                        f"got '{raw}'$"):
        user_code_limit()
