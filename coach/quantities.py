"""Kubernetes resource quantities, as job files and `coach cluster up --cpu/--memory` take them,
and as Coach writes them into pods and nodes (in whole millicores and MiB)."""

from __future__ import annotations

import math
import re

# Kubernetes' grammar (apimachinery resource.Quantity): a signed number, then a binary suffix,
# a decimal one or an exponent: 2, .5, 500m, 250000000n, 8Gi, 1G, 1e3, 1.5E-1. An upper-case K,
# which Kubernetes refuses, is read as k: Coach writes sizes in its own units anyway.
QUANTITY = re.compile(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|K|M|G|T|P|E)|[eE]([+-]?\d+))?",
                      re.ASCII)   # \d: not "１" (fullwidth), which Kubernetes refuses
_FACTOR = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "n": 1e-9, "u": 1e-6,
           "m": 1e-3, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}


def _read(text: str) -> tuple[float, bool] | None:
    """(number × its suffix's factor, whether it had a suffix); None if it is not a finite quantity."""
    m = QUANTITY.fullmatch(text.strip())
    if m is None:
        return None
    value = float(f"{m.group(1)}e{m.group(3) or 0}") * _FACTOR.get(m.group(2), 1)   # 1e400 is inf
    return (value, m.group(2) is not None) if math.isfinite(value) else None


def cores(text: str) -> float | None:
    """Cores in a CPU quantity; None if it is not one."""
    read = _read(text)
    return None if read is None else read[0]


def gib(text: str, plain_is_bytes: bool = False) -> float | None:
    """GiB in a memory quantity; None if it is not one. A number without a suffix counts as GiB,
    as in job files, or as bytes, as Kubernetes writes a node's memory (`plain_is_bytes`)."""
    read = _read(text)
    if read is None:
        return None
    value, suffixed = read
    return value / 2**30 if suffixed or plain_is_bytes else value


def written_cores(cores: float) -> float:
    """A CPU size as Coach writes it into pods and nodes, in whole millicores. Job files and node
    shapes are read as written, so that a fit Coach plans is the fit Kubernetes checks (a 1G
    function rounded up to 954Mi did not fit four times on a 4G node rounded down to 3815Mi)."""
    return round(cores * 1000) / 1000


def written_gib(gib: float) -> float:
    """A memory size as Coach writes it into pods and nodes, in whole MiB."""
    return round(gib * 1024) / 1024


def cpu_text(cores: float) -> str:
    """The text of a CPU size as written: whole cores, else millicores."""
    milli = round(cores * 1000)
    return f"{milli // 1000}" if milli % 1000 == 0 else f"{milli}m"


def memory_text(gib: float) -> str:
    """The text of a memory size as written: whole GiB, else MiB."""
    mib = round(gib * 1024)
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"
