"""The failure cases reported against kubernetes-sigs/scheduler-plugins'
coscheduling plugin, replayed against coach-gang on the real control plane.

#117  interleaved waiting groups: after running jobs finish, pending groups never start.
#429  fragmentation: the total fits but no packing does; groups loop through Permit forever
      and block other pods.
#713  a group whose last pod cannot pass the filters holds the others' resources forever.
#930  a group is permitted although only some of its pods fit: partially bound.
"""

from __future__ import annotations

import time

from tests.cluster.workload import NAMESPACE, Workload, interleave, job_pod, wait_for


def plain_pod(name: str, cpu: str, node: str | None = None, scheduler: str = "coach-gang") -> dict:
    spec: dict = {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                  "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]}
    if node:
        spec["nodeName"] = node          # placed by hand: it only takes room
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}


def assert_no_partial(w: Workload, sizes: dict[str, int]) -> None:
    bound = w.bound()
    partial = {j: bound[j] for j in sizes if 0 < bound[j] < sizes[j]}
    assert not partial, f"partially bound groups: {partial}"


def test_issue_117_pending_groups_start_when_room_frees(workload: Workload) -> None:
    workload.reset(nodes=2, cpu="8", memory="32Gi")
    sizes = {"g1": 5, "g2": 6, "g3": 4, "g4": 7, "g5": 3, "g6": 8}
    workload.submit(interleave([workload.job_pods(j, n, n, "coach-gang") for j, n in sizes.items()]))
    bound = workload.settle()
    assert_no_partial(workload, sizes)
    assert sum(bound.values()) > 0
    # finish running jobs one by one: whatever fits must start every time
    for _ in range(4):
        running = [j for j in sizes if bound[j] == sizes[j]]
        if not running:
            break
        workload.delete_job(running[0])
        del sizes[running[0]]
        def progressed() -> bool:
            b = workload.bound()
            free = 16 - sum(b.values())
            waiting = [n for j, n in sizes.items() if b[j] == 0]
            return not any(n <= free for n in waiting)
        wait_for(progressed, 60, f"a pending group that fits to start (bound {workload.bound()})")
        bound = workload.settle()
        assert_no_partial(workload, sizes)


def test_issue_429_fragmented_group_neither_loops_nor_blocks(workload: Workload) -> None:
    workload.reset(nodes=4, cpu="8", memory="32Gi")
    for i, used in enumerate(("2", "6", "6", "6")):        # free: 6, 2, 2, 2 CPUs: 12 in total
        workload.submit([plain_pod(f"fill-{i}", used, node=f"coach-node-{i}", scheduler="default-scheduler")])
    # three pods of 4 CPUs: 12 CPUs are free, but only node 0 can hold one of them
    workload.submit([job_pod("frag", i, r, 3, "coach-gang", cpu="4")
                     for i, r in enumerate(("scheduler", "server", "worker"))])
    time.sleep(3)
    workload.submit([plain_pod("other", "1")])              # must not be blocked by the gang
    wait_for(lambda: any(p["metadata"]["name"] == "other" and p["spec"].get("nodeName")
                         for p in workload.pods()), 30, "an unrelated pod to bind")
    workload.settle()
    assert workload.bound()["frag"] == 0
    events = workload.kube.call("GET", f"/api/v1/namespaces/{NAMESPACE}/events")["items"]
    attempts = sum(e.get("count", 1) for e in events
                   if e.get("involvedObject", {}).get("name", "").startswith("frag-"))
    assert attempts < 60, f"the fragmented group keeps cycling: {attempts} scheduling events"


def test_issue_713_group_that_cannot_complete_releases_its_room(workload: Workload) -> None:
    workload.reset(nodes=1, cpu="4", memory="8Gi")
    stuck = workload.job_pods("stuck", 4, 4, "coach-gang")
    stuck[-1]["spec"]["nodeSelector"] = {"no-such-label": "true"}   # can never pass the filters
    workload.submit(stuck)
    time.sleep(2)
    workload.submit(workload.job_pods("next", 4, 4, "coach-gang"))
    wait_for(lambda: workload.bound()["next"] == 4, 90,
             f"the next job to get the room the stuck group held (bound {workload.bound()})")
    assert workload.bound()["stuck"] == 0


def test_issue_930_no_partial_group_when_only_part_fits(workload: Workload) -> None:
    workload.reset(nodes=2, cpu="1", memory="8Gi")
    workload.submit([plain_pod("taken", "1", node="coach-node-0", scheduler="default-scheduler")])
    for attempt in range(5):                                  # it was a race: try it a few times
        job = f"pair{attempt}"
        workload.submit(workload.job_pods(job, 3, 3, "coach-gang"))
        workload.settle(quiet_s=2)
        assert workload.bound()[job] == 0, f"attempt {attempt}: partially bound {workload.bound()}"
        workload.delete_job(job)
    # with room for the whole group it binds whole
    workload.reset(nodes=3, cpu="1", memory="8Gi")
    workload.submit(workload.job_pods("pairok", 3, 3, "coach-gang"))
    wait_for(lambda: workload.bound()["pairok"] == 3, 60, "the group to bind when it fits")
