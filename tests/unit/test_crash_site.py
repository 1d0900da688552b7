"""Where a role process that died of a fatal signal was: read from its faulthandler report."""

from __future__ import annotations

import pytest

from coach.roles.function import crash_site

SEGFAULT = """Fatal Python error: Segmentation fault

Thread 0x00007feaf53676c0 (most recent call first):
  File "/work/coach/roles/runner.py", line 55 in watch
  File "/usr/lib/python3.11/threading.py", line 982 in run

Current thread 0x00007feb19613b80 (most recent call first):
  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at
  File "/jobs/net.py", line 13 in hybrid_forward
  File "/venv/mxnet/gluon/block.py", line 1502 in forward
  File "/work/coach/training/worker.py", line 189 in train

Extension modules: numpy.core._multiarray_umath (total: 1)

Fatal Python error: Aborted
"""


@pytest.mark.parametrize(("report", "model_file", "site"), [
    pytest.param(SEGFAULT, "/jobs/net.py", "Segmentation fault in string_at (/usr/lib/python3.11/ctypes/__init__.py "
                 "line 519), called from hybrid_forward (/jobs/net.py line 13)", id="native-code-under-the-model"),
    pytest.param(SEGFAULT, None, "Segmentation fault in string_at (/usr/lib/python3.11/ctypes/__init__.py line 519)",
                 id="a-built-in-model"),
    pytest.param(SEGFAULT.replace('  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at\n', ""),
                 "/jobs/net.py", "Segmentation fault in hybrid_forward (/jobs/net.py line 13)",
                 id="innermost-in-the-model-named-once"),
    # a crash on a thread that is none of Python's (an MXNet engine thread): every thread reads "Thread"
    pytest.param(SEGFAULT.replace("Current thread", "Thread"), "/jobs/net.py",
                 "Segmentation fault in a thread outside Python; Python was in string_at (/usr/lib/python3.11/ctypes/"
                 "__init__.py line 519), called from hybrid_forward (/jobs/net.py line 13)", id="outside-python-model"),
    pytest.param(SEGFAULT.replace("Current thread", "Thread"), None, "Segmentation fault in a thread outside Python; "
                 "Python was in string_at (/usr/lib/python3.11/ctypes/__init__.py line 519)",
                 id="outside-python-the-last-thread-listed"),
    pytest.param(SEGFAULT.replace('", line 519 in string_at', '", line ??? in string_at'), None,
                 "Segmentation fault in string_at (/usr/lib/python3.11/ctypes/__init__.py line ???)", id="line-unknown"),
    # MXNet's handler aborts after faulthandler's report: the second report's thread is not the crash
    pytest.param("Fatal Python error: Bus error\n\nCurrent thread 0x1 (most recent call first):\n"
                 '  File "/a.py", line 1 in f\n\nFatal Python error: Aborted\n\nCurrent thread 0x1 (most recent '
                 'call first):\n  File "/b.py", line 2 in g\n', None, "Bus error in f (/a.py line 1)",
                 id="the-first-report"),
    pytest.param("Fatal Python error: Aborted\n\nCurrent thread 0x1 (most recent call first):\n  <no Python frame>\n",
                 None, "", id="no-python-frame"),
    pytest.param("", None, "", id="no-report"),   # killed by SIGKILL: nothing was written
])
def test_a_crash_is_placed_at_its_innermost_frame_and_the_models(report: str, model_file: str | None,
                                                                  site: str) -> None:
    assert crash_site(report, model_file) == site
