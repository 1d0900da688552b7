"""The placement policies an experiment compares, each named by the `schedulerName` its pods
ask for: the schedulers `coach cluster up` runs, which simulate.py models too, so a name means
the same policy in both. default-scheduler: kube-scheduler's default profile, pod by pod to the
least allocated node (load balancing, SPREAD); bin-pack: its second profile, NodeResourcesFit
MostAllocated (bin packing, PACK); coach-gang: coach-scheduler, jobs in FIFO order, each
minimum group all or nothing, its pods co-located."""

from __future__ import annotations

from coach.cluster.control_plane import SCHEDULERS
from coach.errors import SpecError

DEFAULT = ("default-scheduler", "coach-gang")   # the thesis' comparison


def parse_schedulers(text: str | None) -> tuple[str, ...]:
    """`--schedulers a,b` (in the order to run them), `all`, or None for the default."""
    if text is None:
        return DEFAULT
    if text.strip() == "all":
        return tuple(SCHEDULERS)
    names = tuple(n.strip() for n in text.split(","))
    for name in names:
        if name not in SCHEDULERS:
            raise SpecError("--schedulers", "", f"unknown scheduler {name!r}; known: {', '.join(SCHEDULERS)}, or all")
    if len(set(names)) < len(names):
        raise SpecError("--schedulers", "", f"names a scheduler twice: {text!r}")
    return names
