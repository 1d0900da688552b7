"""Jobs of Coach function pods for the scheduler tests: create them the way
Coach's kube backend will (the pod contract), and read back what got bound."""

from __future__ import annotations

import time
from collections import Counter
from typing import Callable

from coach.cluster import Kube, set_nodes

NAMESPACE = "coach-test"
ROLES = ("scheduler", "server", "worker")


def job_pod(job: str, index: int, role: str, min_group: int, scheduler: str,
            cpu: str = "1", memory: str = "1Gi", name: str | None = None) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name or f"{job}-{role}-{index}", "namespace": NAMESPACE,
                     "labels": {"coach.io/job": job, "coach.io/role": role},
                     "annotations": {"coach.io/min-group": str(min_group)}},
        "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "fn", "image": "coach/function:test",
                                 "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
    }


def roles_for(size: int) -> list[str]:
    """One scheduler, one server, the rest workers (at least 3 pods)."""
    return ["scheduler", "server"] + ["worker"] * (size - 2)


class Workload:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def reset(self, nodes: int, cpu: str, memory: str) -> None:
        self.kube.ensure_namespace(NAMESPACE)
        self.kube.delete_pods(NAMESPACE)
        wait_for(lambda: not self.kube.pods(NAMESPACE), 30, "the test namespace to empty")
        set_nodes(self.kube, nodes, cpu, memory)

    def submit(self, pods: list[dict]) -> None:
        for p in pods:
            self.kube.create_pod(p)

    def job_pods(self, job: str, size: int, min_group: int, scheduler: str, cpu: str = "1") -> list[dict]:
        return [job_pod(job, i, role, min_group, scheduler, cpu=cpu) for i, role in enumerate(roles_for(size))]

    def pods(self) -> list[dict]:
        return self.kube.pods(NAMESPACE)

    def bound(self) -> Counter:
        """Bound pods per job."""
        c: Counter = Counter()
        for p in self.pods():
            job = p["metadata"].get("labels", {}).get("coach.io/job")
            if job and p["spec"].get("nodeName"):
                c[job] += 1
        return c

    def bound_roles(self, job: str) -> set[str]:
        return {p["metadata"]["labels"]["coach.io/role"] for p in self.pods()
                if p["spec"].get("nodeName") and p["metadata"].get("labels", {}).get("coach.io/job") == job}

    def nodes_of(self, job: str) -> set[str]:
        return {p["spec"]["nodeName"] for p in self.pods()
                if p["spec"].get("nodeName") and p["metadata"].get("labels", {}).get("coach.io/job") == job}

    def delete_job(self, job: str) -> None:
        self.kube.delete_pods(NAMESPACE, selector=f"coach.io/job={job}")

    def settle(self, quiet_s: float = 4.0, timeout: float = 120.0) -> Counter:
        """Waits until no binding has changed for quiet_s seconds; returns bound pods per job."""
        deadline = time.monotonic() + timeout
        last, since = self.bound(), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.5)
            now = self.bound()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return now
        raise AssertionError(f"bindings kept changing for {timeout}s: {last}")


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def interleave(jobs: list[list[dict]]) -> list[dict]:
    """Round-robin across jobs: what 'all submitted at once' looks like to the apiserver."""
    out = []
    for i in range(max(len(j) for j in jobs)):
        out.extend(j[i] for j in jobs if i < len(j))
    return out
