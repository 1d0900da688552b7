"""The `coach` command (`main.py`: the root app; one module per command group)."""

from __future__ import annotations

import sys


def run() -> None:
    """The console script's entry: a Ctrl-C while the CLI's modules load (typer, rich, numpy:
    a few tenths of a second) ends as quietly as one later, which `main()` handles."""
    try:
        from coach.cli.main import main
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    main()
