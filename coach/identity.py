"""Which process a pid names: a pid alone is reused once its process ends, and after a
reboot. Leases in the state store and the control plane's process table both need to know
that a pid still runs the process they recorded."""

from __future__ import annotations

from pathlib import Path


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


_BOOT_ID = _boot_id()


def process_identity(pid: int) -> str | None:
    """'boot:pid:start' of a running process, None if it is not running (or a zombie).

    A pid alone is reused once its process ends and after a reboot; with the boot id and
    the process's start time (field 22 of /proc/PID/stat) a lease cannot outlive its process.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()   # after the command name, which may hold spaces
    if fields[0] in ("Z", "X"):
        return None
    return f"{_BOOT_ID}:{pid}:{fields[19]}"


def still_running(identity: str) -> bool:
    """True if the process an identity of `process_identity` names is still running; a
    garbled identity names no process."""
    parts = identity.split(":")
    return len(parts) == 3 and parts[1].isdigit() and process_identity(int(parts[1])) == identity
