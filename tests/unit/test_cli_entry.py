"""The installed `coach` console script, as a user's shell starts it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

COACH_SCRIPT = Path(sys.executable).parent / "coach"


@pytest.mark.skipif(not COACH_SCRIPT.exists(), reason="needs the console script that `pip install -e .` writes")
@pytest.mark.parametrize("delay", [0.05, 0.1, 0.2, 0.3, 0.5])
def test_ctrl_c_while_the_cli_loads_ends_without_a_traceback(tmp_path: Path, delay: float) -> None:
    """Loading typer, rich and numpy takes a few tenths of a second; a Ctrl-C in that window used
    to print Python's KeyboardInterrupt traceback, because `main()`'s handler was not yet running."""
    proc = subprocess.Popen([str(COACH_SCRIPT), "status"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={"COACH_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"})
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    # interrupted (130, or killed by the signal before Python's handler exists) or already done (0)
    assert proc.returncode in (0, 130, -signal.SIGINT), (proc.returncode, out, err)
