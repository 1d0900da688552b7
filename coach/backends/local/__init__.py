"""The embedded local backend: role functions served on loopback, on this machine."""

from typing import Any

__all__ = ["LocalBackend"]


def __getattr__(name: str) -> Any:
    # imported on first use: every replica's processor lives in this package, and the backend's
    # imports (httpx above all) were half of a processor's start
    if name == "LocalBackend":
        from coach.backends.local.backend import LocalBackend

        return LocalBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
