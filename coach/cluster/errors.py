"""Errors of the local control plane, under Coach's common base.

    CoachError
    └── ClusterError        the local control plane cannot start, answer or stop
        └── BinaryMissing   a binary is not built yet (run deploy/local/build)
"""

from __future__ import annotations

from coach.errors import CoachError


class ClusterError(CoachError):
    """Raised when the local control plane cannot start, answer or stop, or input is invalid."""


class BinaryMissing(ClusterError):
    """Raised when a control-plane binary has not been built yet."""
