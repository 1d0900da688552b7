"""Coach's exception tree: every error a user can cause or meet derives from CoachError.

    CoachError                  anything Coach reports to a user (exit code 1 unless said otherwise)
    ├── SpecError               a job file or CLI argument is invalid (exit 2); names file, field, problem
    ├── StateError              the state store is missing a job/epoch, or is unreadable
    ├── BackendError            a backend could not deploy, invoke or tear down a role function
    │   └── EpochFailed         an epoch failed for good: retries ran out, a stop was requested
    │       ├── FailsAgain      a retry would fail the same way (own code, damaged checkpoint)
    │       │   └── Diverged    the loss became NaN or infinite
    │       └── OverBudget      another attempt would pass the budget
    ├── UserCodeError           a job's own model file failed (build, forward)
    ├── CheckpointError         a checkpoint on disk cannot be read
    ├── EstimateError           not enough (or unusable) data to fit a model
    └── ClusterError            the local control plane cannot start, answer or stop (coach/cluster/errors.py)
        └── BinaryMissing       a control-plane binary is not built yet

The CLI maps these to messages and exit codes in one place (coach/cli/main.py), so no
traceback reaches a user.
"""

from __future__ import annotations


def one_line(e: BaseException, limit: int = 300) -> str:
    """What an exception says, in one line. MXNet's errors begin with a "Traceback" header
    and say what failed further down, so for them the line that names the error is taken."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("Traceback"):
        named = [line for line in lines if line.startswith(("MXNetError", "Check failed")) or
                 ("Error:" in line and not line.startswith("File "))]
        lines = named[-1:] or lines[-1:]
    return (lines or [""])[0][:limit]


class CoachError(Exception):
    """Base of every error Coach reports to a user."""

    exit_code: int = 1


class SpecError(CoachError):
    """Raised when a job file or a CLI argument is invalid; the message names file, field and problem."""

    exit_code = 2

    def __init__(self, source: str, field: str, problem: str) -> None:
        self.source, self.field, self.problem = source, field, problem
        where = f"{source}: {field}: " if field else f"{source}: "
        super().__init__(where + problem)


class StateError(CoachError):
    """Raised when the state store cannot answer (unknown job id, unreadable file)."""


class BackendError(CoachError):
    """Raised when a backend cannot deploy, invoke or tear down a role function."""


class EpochFailed(BackendError):
    """Raised when an epoch failed for good: its retries ran out, it diverged, or a stop was
    requested. `function_s` holds the function-seconds its attempts used (they are charged), and
    `folder` the attempt folder that charge settles."""

    function_s: dict[str, float] | None = None
    folder: str | None = None


class OverBudget(EpochFailed):
    """Raised when an epoch's failed attempts leave too little of the budget for another: each
    attempt is paid in full, and three retries of one epoch spent twice a job's budget."""


class FailsAgain(EpochFailed):
    """Raised when an epoch failed in a way a retry would repeat: the job's own code (recorded
    at submit: `coach resume` refuses it) or a damaged checkpoint or data folder (`resumable`:
    once the files are restored, a resume can load them)."""

    resumable: bool = False


class Diverged(FailsAgain):
    """Raised when an epoch's losses are not finite: the same computation from the same
    checkpoint diverges again, so neither a retry nor a resume can help."""


class UserCodeError(CoachError):
    """Raised when the job's own code (a model file) fails: retrying the epoch cannot help."""


class CheckpointError(CoachError):
    """Raised when a checkpoint cannot be read (damaged on disk): every retry would load it again."""


class EstimateError(CoachError):
    """Raised when a model cannot be fitted from the data given (too few points, bad values)."""


class TaskError(CoachError):
    """Raised when a role cannot run the epoch task it was given (its samples do not exist):
    the same task fails again, so it is not retried."""
