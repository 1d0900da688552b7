"""Looking up a file a user named (a job file, a loss curve), with the error that names it."""

from __future__ import annotations

from pathlib import Path

from coach.errors import SpecError


def looked_up(path: Path, source: str) -> int:
    """The file's mode, or a SpecError naming `source`: stat, not exists() or is_file(), which
    say False for a symlink loop too ("no such file")."""
    try:
        return path.stat().st_mode
    except FileNotFoundError:
        raise SpecError(source, "", "no such file") from None
    except (OSError, ValueError) as e:   # a name too long, a NUL byte, a symlink loop, no permission
        raise SpecError(source, "", f"cannot be looked up: {getattr(e, 'strerror', None) or e}") from None
