"""The `coach` command (`main.py`: the root app; one module per command group)."""

from __future__ import annotations

import signal
import sys


def run() -> None:
    """The console script's entry: a Ctrl-C while the CLI's modules load (typer, rich, numpy:
    a few tenths of a second) ends as quietly as one later, which `main()` handles. It is held
    until they are loaded: raised inside an import, Python may wrap it in another error (a
    class body's `__set_name__` turns it into a RuntimeError), which no handler would know."""
    interrupted: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: interrupted.append(signum))
    try:
        from coach.cli.main import main
    finally:
        signal.signal(signal.SIGINT, previous)
    if interrupted:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    main()
