"""The same workload through each scheduler in turn, on one control plane: the nodes must
fit every pod, and each run starts on an empty namespace (leftovers of an interrupted
comparison would hold room in every later run). Other work bound to the nodes is named, and
the room it holds is not counted as capacity."""

from __future__ import annotations

from typing import Callable, Iterator

from coach.cluster import Kube
from coach.cluster.nodes import MAX_PODS, nodes_of, other_work
from coach.errors import SpecError
from coach.experiment.replay import Run, clear, replay
from coach.experiment.schedulers import DEFAULT
from coach.experiment.workload import RANDOM, JobArrival
from coach.plan import describe_nodes

NAMESPACE = "coach-experiment"


def check_fits(workload: list[JobArrival], nodes: list[tuple[float, float]], source: str,
               reshape: str = "`coach cluster up {}`") -> None:
    """A pod that no node can hold, or a minimum group that even empty nodes cannot hold at
    once, would only wait out the stall in every run (read as a deadlock, or as never placed):
    refuse it now. `reshape` names the options that change the nodes (`{}`: which ones)."""
    if not nodes and workload:   # "more than any node has (0 CPU)" asked for bigger nodes, not for any
        raise SpecError(source, "jobs[0]", f"the cluster has no nodes: add some with {reshape.format('--nodes')}")
    cpu, memory = max((c for c, _ in nodes), default=0.0), max((m for _, m in nodes), default=0.0)
    for i, job in enumerate(workload):
        if any(job.cpu <= c and job.memory_gib <= m for c, m in nodes):
            continue
        field, asks, has = (("cpu", f"{job.cpu:g} CPU", f"{cpu:g} CPU") if job.cpu > cpu else
                            ("memory", f"{job.memory_gib:g} GiB", f"{memory:g} GiB") if job.memory_gib > memory else
                            ("cpu", f"{job.cpu:g} CPU and {job.memory_gib:g} GiB", "one or the other"))
        raise SpecError(source, f"jobs[{i}].{field}", f"a pod asks {asks}, more than any node has ({has}): reshape "
                                                      f"the nodes with {reshape.format('--cpu/--memory')}")
    for i, job in enumerate(workload):
        # a job's pods are alike: a node holds as many as its CPU, memory and pod slots allow
        room = sum(min(int(c / job.cpu + 1e-9), int(m / job.memory_gib + 1e-9), MAX_PODS) for c, m in nodes)
        if room < job.min_group:
            raise SpecError(source, f"jobs[{i}].{'pods' if job.min_group == job.pods else 'min_group'}",
                            f"{job.name}'s minimum group of {job.min_group} pods ({job.cpu:g} CPU, {job.memory_gib:g} "
                            f"GiB each) does not fit {describe_nodes(nodes)} (and {MAX_PODS} pods a node) even "
                            f"when they are empty: it could never start; reshape the nodes with "
                            f"{reshape.format('--nodes/--cpu/--memory')}"
                            + ", or make the group smaller" * (source != RANDOM))   # a random one's are drawn


def compare(kube: Kube, workload: list[JobArrival], source: str, stall_s: float,
            schedulers: tuple[str, ...] = DEFAULT, progress: Callable[[Run, float], None] | None = None,
            announce: Callable[[str], None] = lambda _: None) -> Iterator[Run]:
    """Each scheduler's run of `workload`, in order, as it ends: a caller whose later run fails
    or is interrupted keeps the others."""
    nodes = nodes_of(kube)
    check_fits(workload, nodes, source)
    kube.ensure_namespace(NAMESPACE)
    if kube.pods(NAMESPACE, "coach.experiment"):
        announce(f"deleting the pods an interrupted comparison left in {NAMESPACE}")
        clear(kube, NAMESPACE, "coach.experiment")
    capacity = sum(c for c, _ in nodes)
    if others := other_work(kube):
        held = sum(cpu for _, cpu, _ in others)
        names = ", ".join(name for name, _, _ in others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        pods = f"{len(others)} pod{'s' if len(others) > 1 else ''}"
        announce(f"warning: other work bound to the nodes holds {held:g} of the {capacity:g} CPU ({pods}: {names}); "
                 "every run has that much less room, and the share of capacity used counts only the rest")
        capacity = max(capacity - held, 0.001)
    for scheduler in schedulers:
        announce(f"{scheduler}: {len(workload)} jobs on {len(nodes)} nodes ({capacity:g} CPU{' free' if others else ''})")
        yield replay(kube, workload, scheduler, NAMESPACE, capacity, stall_s=stall_s, progress=progress)
