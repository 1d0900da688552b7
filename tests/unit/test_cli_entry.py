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
@pytest.mark.parametrize("delay", [0.1, 0.15, 0.2, 0.3, 0.5])
def test_ctrl_c_while_the_cli_loads_ends_without_a_traceback(tmp_path: Path, delay: float) -> None:
    """Loading typer, rich and numpy takes a few tenths of a second; a Ctrl-C in that window used
    to print Python's KeyboardInterrupt traceback, because `main()`'s handler was not yet running,
    and in CI once a RuntimeError (the Ctrl-C came inside rich's `class Column`). Not tested: a
    Ctrl-C in the interpreter's own start-up (about 30 ms, before any of Coach's code runs), which
    prints Python's traceback whatever the program."""
    proc = subprocess.Popen([str(COACH_SCRIPT), "status"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={"COACH_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"})
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    # interrupted (130, or killed by the signal before Python's handler exists) or already done (0)
    assert proc.returncode in (0, 130, -signal.SIGINT), (proc.returncode, out, err)


@pytest.mark.parametrize("wrapped", [True, False])
def test_a_ctrl_c_that_python_wrapped_is_still_an_interrupt(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture, wrapped: bool) -> None:
    # a KeyboardInterrupt raised in a class body's __set_name__ reaches main() as a RuntimeError
    from coach.cli import main as cli

    def app() -> None:
        try:
            raise KeyboardInterrupt if wrapped else ValueError("a bug")
        except (KeyboardInterrupt, ValueError) as e:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance '_cells' in 'Column'") from e

    monkeypatch.setattr(cli, "app", app)
    if wrapped:
        with pytest.raises(SystemExit) as exit_:
            cli.main()
        assert exit_.value.code == 130 and capsys.readouterr().err == "interrupted\n"
    else:   # any other RuntimeError is a bug, and stays one
        with pytest.raises(RuntimeError, match="__set_name__"):
            cli.main()


@pytest.mark.parametrize("args", [["compare", "w.yaml", "--json"], ["simulate", "--help"], ["up"]])
def test_a_cluster_command_without_cluster_names_where_it_is(args: list[str]) -> None:
    """`coach compare` said only "No such command 'compare'"."""
    from tests.conftest import run_coach

    proc = run_coach(*args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"coach {args[0]}: a command of `coach cluster`: coach cluster {' '.join(args)}" in proc.stderr, proc.stderr
