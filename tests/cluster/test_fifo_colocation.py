"""FIFO across jobs and co-location of a job's pods."""

from __future__ import annotations

import time

from tests.cluster.workload import NAMESPACE, Workload, job_pod, wait_for


def test_fifo_earlier_jobs_served_first(workload: Workload) -> None:
    workload.reset(nodes=1, cpu="4", memory="8Gi")
    # a non-Coach pod fills the node; jobs then arrive in order a, b, c
    blocker = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "blocker", "namespace": NAMESPACE},
               "spec": {"schedulerName": "coach-gang", "containers": [
                   {"name": "c", "image": "x", "resources": {"requests": {"cpu": "4"}}}]}}
    workload.submit([blocker])
    wait_for(lambda: any(p["spec"].get("nodeName") for p in workload.pods()), 30, "the blocker to bind")
    # pod names run against arrival order, so sorting by name alone would pick c
    for job, prefix in (("fifo-a", "z"), ("fifo-b", "m"), ("fifo-c", "a")):
        workload.submit([job_pod(job, i, role, 4, "coach-gang", name=f"{prefix}-{job}-{i}")
                         for i, role in enumerate(["scheduler", "server", "worker", "worker"])])
        time.sleep(1.1)       # creation timestamps have one-second resolution
    bound = workload.settle(quiet_s=3)
    assert sum(bound.values()) == 0, f"nothing fits while the blocker runs: {bound}"
    workload.kube.delete_pod(NAMESPACE, "blocker")
    wait_for(lambda: workload.bound() == {"fifo-a": 4}, 60, f"fifo-a first (now {workload.bound()})")
    workload.delete_job("fifo-a")
    wait_for(lambda: workload.bound() == {"fifo-b": 4}, 60, f"fifo-b second (now {workload.bound()})")
    workload.delete_job("fifo-b")
    wait_for(lambda: workload.bound() == {"fifo-c": 4}, 60, f"fifo-c third (now {workload.bound()})")


def test_colocation_packs_a_job_apart_from_others(workload: Workload) -> None:
    workload.reset(nodes=4, cpu="4", memory="8Gi")
    workload.submit(workload.job_pods("co1", 4, 4, "coach-gang"))
    wait_for(lambda: workload.bound()["co1"] == 4, 60, "co1 to bind")
    workload.submit(workload.job_pods("co2", 3, 3, "coach-gang"))
    wait_for(lambda: workload.bound()["co2"] == 3, 60, "co2 to bind")
    workload.submit(workload.job_pods("co3", 6, 6, "coach-gang"))
    wait_for(lambda: workload.bound()["co3"] == 6, 60, "co3 to bind")
    n1, n2, n3 = workload.nodes_of("co1"), workload.nodes_of("co2"), workload.nodes_of("co3")
    assert len(n1) == 1 and len(n2) == 1, f"small jobs fit one node each: {n1} {n2}"
    assert len(n3) == 2, f"6 one-CPU pods fit on two 4-CPU nodes: {n3}"
    assert not (n1 & n2) and not (n1 & n3) and not (n2 & n3), f"jobs must not share nodes: {n1} {n2} {n3}"


def test_default_scheduler_spreads(workload: Workload) -> None:
    """The contrast the co-location score exists for: the default scheduler spreads a job."""
    workload.reset(nodes=4, cpu="4", memory="8Gi")
    workload.submit(workload.job_pods("spread", 4, 4, "default-scheduler"))
    wait_for(lambda: workload.bound()["spread"] == 4, 60, "the job to bind")
    assert len(workload.nodes_of("spread")) > 1
