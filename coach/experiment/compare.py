"""The same workload through each scheduler in turn, on one control plane: the nodes must
fit every pod, and each run starts on an empty namespace (leftovers of an interrupted
comparison would hold room in every later run)."""

from __future__ import annotations

from typing import Callable

from coach.cluster import Kube
from coach.errors import SpecError
from coach.experiment.replay import Run, clear, replay
from coach.experiment.schedulers import DEFAULT
from coach.experiment.workload import JobArrival
from coach.quantities import cores, gib

NAMESPACE = "coach-experiment"


def nodes_of(kube: Kube) -> list[tuple[float, float]]:
    """(CPU, GiB) allocatable on each node."""
    return [node_size(n) for n in kube.nodes()]


def node_size(node: dict) -> tuple[float, float]:
    """A Node object's allocatable (CPU, GiB); Kubernetes writes memory without a unit in bytes
    (e.g. `--memory 7.3Gi` comes back as 7838315316)."""
    allocatable = node["status"]["allocatable"]
    return (cores(str(allocatable.get("cpu", "0"))) or 0.0,
            gib(str(allocatable.get("memory", "0")), plain_is_bytes=True) or 0.0)


def check_fits(workload: list[JobArrival], nodes: list[tuple[float, float]], source: str) -> None:
    """A pod that no node can hold would only wait out the stall in both runs: refuse it now."""
    cpu, memory = max((c for c, _ in nodes), default=0.0), max((m for _, m in nodes), default=0.0)
    for i, job in enumerate(workload):
        if any(job.cpu <= c and job.memory_gib <= m for c, m in nodes):
            continue
        field, asks, has = (("cpu", f"{job.cpu:g} CPU", f"{cpu:g} CPU") if job.cpu > cpu else
                            ("memory", f"{job.memory_gib:g} GiB", f"{memory:g} GiB") if job.memory_gib > memory else
                            ("cpu", f"{job.cpu:g} CPU and {job.memory_gib:g} GiB", "one or the other"))
        raise SpecError(source, f"jobs[{i}].{field}", f"a pod asks {asks}, more than any node has ({has}): reshape "
                                                      "the nodes with `coach cluster up --cpu/--memory`")


def compare(kube: Kube, workload: list[JobArrival], source: str, stall_s: float,
            schedulers: tuple[str, ...] = DEFAULT, progress: Callable[[Run, float], None] | None = None,
            announce: Callable[[str], None] = lambda _: None) -> list[Run]:
    nodes = nodes_of(kube)
    check_fits(workload, nodes, source)
    kube.ensure_namespace(NAMESPACE)
    if kube.pods(NAMESPACE, "coach.experiment"):
        announce(f"deleting the pods an interrupted comparison left in {NAMESPACE}")
        clear(kube, NAMESPACE, "coach.experiment")
    capacity = sum(c for c, _ in nodes)
    runs = []
    for scheduler in schedulers:
        announce(f"{scheduler}: {len(workload)} jobs on {len(nodes)} nodes ({capacity:g} CPU)")
        runs.append(replay(kube, workload, scheduler, NAMESPACE, capacity, stall_s=stall_s, progress=progress))
    return runs
