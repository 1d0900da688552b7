"""Kubernetes resource quantities, as job files and `coach cluster up --cpu/--memory` take them."""

from __future__ import annotations

import re

CPU = re.compile(r"(\d+(?:\.\d+)?)(m)?")                          # 2, 0.5, 500m
MEMORY = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|K|M|G)?")       # 512Mi, 8Gi, 1G
_GIB = {"Ki": 2**-20, "Mi": 2**-10, "Gi": 1.0, "Ti": 2**10, "K": 1e3 / 2**30, "M": 1e6 / 2**30,
        "G": 1e9 / 2**30}


def cores(text: str) -> float | None:
    """Cores in a CPU quantity; None if it is not one."""
    m = CPU.fullmatch(text.strip())
    return None if m is None else float(m.group(1)) / (1000 if m.group(2) else 1)


def gib(text: str, plain_is_bytes: bool = False) -> float | None:
    """GiB in a memory quantity; None if it is not one. A plain number counts as GiB, as in
    job files, or as bytes, as Kubernetes writes a node's memory (`plain_is_bytes`)."""
    m = MEMORY.fullmatch(text.strip())
    if m is None:
        return None
    unit = m.group(2) or ("" if plain_is_bytes else "Gi")
    return float(m.group(1)) * (_GIB[unit] if unit else 2**-30)
