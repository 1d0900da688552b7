"""Simulated nodes: Node objects that the tooling creates and keeps Ready.

There is no kubelet: a Node object with capacity and a Ready condition is all
the schedulers look at, and without a node-lifecycle controller nothing marks
it NotReady. Pods bound to these nodes stay Pending with spec.nodeName set,
which is what scheduling tests and benchmarks measure; only the cluster backend
(coach/backends/cluster) runs its own bound pods and marks them Running.
"""

from __future__ import annotations

from datetime import datetime, timezone

from coach.cluster.kube import Kube, Obj
from coach.quantities import cores, gib

NODE_PREFIX = "coach-node-"
NODE_LABEL = "coach.io/simulated-node"
MAX_PODS = 110
# taints a node-lifecycle controller would lift once a kubelet reports Ready
LIFECYCLE_TAINTS = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}


def node_name(i: int) -> str:
    return f"{NODE_PREFIX}{i}"


def node_object(name: str, cpu: str, memory: str) -> Obj:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    capacity = {"cpu": cpu, "memory": memory, "pods": str(MAX_PODS)}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {NODE_LABEL: "true", "kubernetes.io/hostname": name,
                                              "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
        "status": {"capacity": capacity, "allocatable": capacity,
                   "conditions": [{"type": "Ready", "status": "True", "reason": "Simulated",
                                   "message": "simulated by coach cluster", "lastHeartbeatTime": now,
                                   "lastTransitionTime": now}],
                   "phase": "Running"},
    }


def set_nodes(kube: Kube, count: int, cpu: str, memory: str) -> None:
    """Makes the simulated nodes exactly `count` nodes of the given capacity.

    Pods bound to a node that goes away are deleted first: with no pod garbage
    collector they would otherwise keep pointing at a node that does not exist.
    """
    wanted = {node_name(i) for i in range(count)}
    existing = {n["metadata"]["name"]: n for n in kube.nodes()
                if n["metadata"].get("labels", {}).get(NODE_LABEL) == "true"}
    doomed = set(existing) - wanted
    if doomed:
        for pod in kube.pods():
            if pod["spec"].get("nodeName") in doomed:
                kube.delete_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
        for name in doomed:
            kube.call("DELETE", f"/api/v1/nodes/{name}", ok=(200, 404))
    for name in sorted(wanted):
        obj = node_object(name, cpu, memory)
        if name not in existing:
            kube.call("POST", "/api/v1/nodes", json=obj)
        current = kube.call("GET", f"/api/v1/nodes/{name}")
        taints = current.get("spec", {}).get("taints") or []
        kept = [t for t in taints if t.get("key") not in LIFECYCLE_TAINTS]
        if kept != taints:
            current["spec"]["taints"] = kept
            current = kube.call("PUT", f"/api/v1/nodes/{name}", json=current)
        # status is a subresource: set it explicitly, on create and on change of capacity
        if current.get("status", {}).get("allocatable") != obj["status"]["allocatable"] or \
                not any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in current.get("status", {}).get("conditions", [])):
            current["status"] = obj["status"]
            kube.call("PUT", f"/api/v1/nodes/{name}/status", json=current)


def nodes_of(kube: Kube) -> list[tuple[float, float]]:
    """(CPU, GiB) allocatable on each node."""
    return [node_size(n) for n in kube.nodes()]


def room_per_node(kube: Kube, but: str) -> list[tuple[tuple[float, float], tuple[float, float]]]:
    """Each node's allocatable (CPU, GiB) and the part of it that pods of namespace `but` may use
    now: less what the other pods bound to it request."""
    allocatable = {n["metadata"]["name"]: node_size(n) for n in kube.nodes()}
    room = {name: list(size) for name, size in allocatable.items()}
    for _, node, cpu, mem in _bound(kube, but):
        if node in room:
            room[node][0] -= cpu
            room[node][1] -= mem
    return [(allocatable[name], (max(cpu, 0.0), max(mem, 0.0))) for name, (cpu, mem) in room.items()]


def node_size(node: dict) -> tuple[float, float]:
    """A Node object's allocatable (CPU, GiB); a memory without a unit is bytes, as Kubernetes
    writes a size that is no whole number of a unit (a node that others created)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}   # none yet: a KeyError traceback
    return (cores(str(allocatable.get("cpu", "0"))) or 0.0,
            gib(str(allocatable.get("memory", "0")), plain_is_bytes=True) or 0.0)


def other_work(kube: Kube, but: str | None = None) -> list[tuple[str, float, float]]:
    """Pods bound to the nodes that have not finished, as (namespace/name, CPU, GiB requested),
    except those of namespace `but`: room that the caller's own pods cannot use."""
    return [(name, cpu, mem) for name, _, cpu, mem in _bound(kube, but)]


def _bound(kube: Kube, but: str | None) -> list[tuple[str, str, float, float]]:
    """(namespace/name, node, CPU, GiB requested) of each unfinished bound pod outside `but`."""
    out = []
    for pod in kube.pods():
        if pod["metadata"]["namespace"] == but or not pod["spec"].get("nodeName") or \
                pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        requests = [c.get("resources", {}).get("requests", {}) for c in pod["spec"].get("containers", [])]
        out.append((f"{pod['metadata']['namespace']}/{pod['metadata']['name']}", pod["spec"]["nodeName"],
                    sum(cores(str(r.get("cpu", "0"))) or 0.0 for r in requests),
                    sum(gib(str(r.get("memory", "0")), plain_is_bytes=True) or 0.0 for r in requests)))
    return out
