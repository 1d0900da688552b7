"""The `coach` command: one root app; errors become messages and exit codes here, only here."""

from __future__ import annotations

import os
import sys

import typer

from coach.cli import cluster, jobs
from coach.cli.estimate import estimate
from coach.cli.plot import plot
from coach.errors import CoachError, SpecError

app = typer.Typer(help="Coach: serverless, elastic distributed training of MXNet jobs.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
for command in (jobs.submit, jobs.status, jobs.history, jobs.events, jobs.stop, jobs.resume, estimate, plot):
    app.command()(command)
app.add_typer(cluster.app, name="cluster")


def _under_cluster(name: str) -> None:
    """`coach compare` said "No such command" without naming where the command is."""
    def moved(ctx: typer.Context) -> None:
        raise SpecError(f"coach {name}", "", f"a command of `coach cluster`: "
                                             f"coach cluster {' '.join([name, *ctx.args])}")

    app.command(name, hidden=True, add_help_option=False,
                context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(moved)


for _name in ("compare", "simulate", "up", "down"):
    _under_cluster(_name)


def main() -> None:
    try:
        app()
    except CoachError as e:
        print(f"error: {e}", file=sys.stderr)   # unwrapped: one message per line, easy to grep
        sys.exit(e.exit_code)
    except (KeyboardInterrupt, RuntimeError) as e:
        # a Ctrl-C while a class is created (a lazy import) comes wrapped: __set_name__ failed
        if isinstance(e, RuntimeError) and not isinstance(e.__cause__, KeyboardInterrupt):
            raise
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:   # `coach plot … | head -0`: the reader has gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # the final flush stays quiet
        sys.exit(1)


if __name__ == "__main__":
    main()
