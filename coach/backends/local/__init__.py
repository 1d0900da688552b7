"""The embedded local backend: role functions served on loopback, on this machine."""

from coach.backends.local.backend import LocalBackend

__all__ = ["LocalBackend"]
