"""The pod contract on the real control plane: which pods the gang waits for, and what a
minimum group is made of."""

from __future__ import annotations

from tests.cluster.workload import NAMESPACE, Workload, job_pod, wait_for


def test_pending_pods_of_another_scheduler_do_not_hold_gang_jobs(workload: Workload) -> None:
    # an experimenter runs both schedulers on one cluster: a default-scheduler job that stays
    # pending (no node has its label) made every younger coach-gang job yield to it for good
    workload.reset(nodes=1, cpu="4", memory="8Gi")
    other = [job_pod("other", i, role, 3, "default-scheduler") for i, role in enumerate(["scheduler", "server", "worker"])]
    for pod in other:
        pod["spec"]["nodeSelector"] = {"no-such": "label"}
    workload.submit(other)
    workload.settle(quiet_s=2)
    workload.submit(workload.job_pods("gang", 3, 3, "coach-gang"))
    wait_for(lambda: workload.bound() == {"gang": 3}, 60, f"the gang job to bind (now {workload.bound()})")


def test_a_minimum_group_starts_with_every_role(workload: Workload) -> None:
    # three workers sort before the scheduler and server: they made up a "group of 3" at the
    # barrier, held 3 of the 4 CPUs, and the scheduler never found a node
    workload.reset(nodes=1, cpu="4", memory="8Gi")
    pods = [job_pod("roles", i, "worker", 3, "coach-gang", name=f"roles-a-worker-{i}") for i in range(3)]
    pods += [job_pod("roles", 3, "scheduler", 3, "coach-gang", name="roles-z-scheduler"),
             job_pod("roles", 4, "server", 3, "coach-gang", name="roles-z-server")]
    workload.submit(pods)
    wait_for(lambda: workload.bound_roles("roles") == {"scheduler", "server", "worker"}, 60,
             f"the scheduler, server and a worker to bind (now {workload.bound_roles('roles')})")
    assert workload.settle(quiet_s=3)["roles"] == 4   # and one extra worker beside them


def test_a_job_short_of_its_minimum_group_says_why(workload: Workload) -> None:
    # its pods are kept out of the queue, which gives them no condition: an event says why
    workload.reset(nodes=1, cpu="4", memory="8Gi")
    workload.submit(workload.job_pods("short", 3, 5, "coach-gang"))

    def notes() -> list[str]:
        items = workload.kube.request("GET", f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events").json()["items"]
        return [e.get("note", "") for e in items if e.get("reason") == "WaitingForGang"]

    last = f"job {NAMESPACE}/short has 3 of the 5 pods of its minimum group"
    wait_for(lambda: last in notes(), 30, f"a WaitingForGang event saying {last!r} (now {notes()})")
    assert not workload.bound()


def test_a_group_whose_workers_all_found_no_node_holds_no_room(workload: Workload) -> None:
    # either worker of a group of 3 could be spared, so neither blocked the group alone: its
    # scheduler and server kept coming back to the barrier and held 2 of the 4 CPUs for
    # 30-second rounds, and a younger job that fits the node waited for them
    workload.reset(nodes=1, cpu="4", memory="8Gi")
    stuck = workload.job_pods("stuck", 4, 3, "coach-gang")
    for pod in stuck[2:]:
        pod["spec"]["nodeSelector"] = {"no-such": "label"}
    workload.submit(stuck[2:] + stuck[:2])   # the workers exist before either is tried
    workload.settle(quiet_s=3)
    workload.submit(workload.job_pods("fits", 3, 3, "coach-gang"))
    wait_for(lambda: workload.bound() == {"fits": 3}, 15,
             f"the younger job to bind well within the 30 s barrier timeout (now {workload.bound()})")
