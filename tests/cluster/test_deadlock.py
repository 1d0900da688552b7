"""The gang deadlocks: the slides' (4 jobs × 4 learners on 8 slots) and the
thesis' parameter-server deadlock (2 jobs × 3 roles on room for 3 pods).
The default scheduler must fall into them; coach-gang must not."""

from __future__ import annotations

import pytest

from tests.cluster.workload import Workload, interleave, wait_for

JOBS = ["job1", "job2", "job3", "job4"]


def test_slides_deadlock_default_scheduler(workload: Workload) -> None:
    workload.submit(interleave([workload.job_pods(j, 4, 4, "default-scheduler") for j in JOBS]))
    wait_for(lambda: sum(workload.bound().values()) == 8, 60, "8 bound pods")
    bound = workload.settle()
    assert sum(bound.values()) == 8
    assert not [j for j in JOBS if bound[j] == 4], f"a job could start: {bound}"
    assert len([j for j in JOBS if 0 < bound[j] < 4]) >= 2, f"expected partially bound jobs: {bound}"


def test_slides_deadlock_coach_gang(workload: Workload) -> None:
    workload.submit(interleave([workload.job_pods(j, 4, 4, "coach-gang") for j in JOBS]))
    wait_for(lambda: sum(workload.bound().values()) == 8, 60, "8 bound pods")
    bound = workload.settle()
    full = sorted(j for j in JOBS if bound[j] == 4)
    empty = sorted(j for j in JOBS if bound[j] == 0)
    assert full == ["job1", "job2"], f"the two oldest jobs should be bound whole: {bound}"
    assert empty == ["job3", "job4"], f"the waiting jobs must hold nothing: {bound}"
    for j in full:
        workload.delete_job(j)
    wait_for(lambda: workload.bound() == {"job3": 4, "job4": 4}, 90,
             f"job3 and job4 to bind completely (now {workload.bound()})")


@pytest.mark.parametrize("scheduler", ["default-scheduler", "coach-gang"])
def test_parameter_server_deadlock(workload: Workload, scheduler: str) -> None:
    workload.reset(nodes=1, cpu="3", memory="8Gi")          # room for 3 one-CPU pods
    workload.submit(interleave([workload.job_pods(j, 3, 3, scheduler) for j in ("ps1", "ps2")]))
    wait_for(lambda: sum(workload.bound().values()) == 3, 60, "3 bound pods")
    bound = workload.settle()
    started = [j for j in ("ps1", "ps2") if workload.bound_roles(j) == {"scheduler", "server", "worker"}]
    if scheduler == "default-scheduler":
        assert started == [], f"the default scheduler was expected to deadlock: {bound}"
    else:
        assert started == ["ps1"] and bound["ps2"] == 0, f"coach-gang must start ps1 whole: {bound}"
        workload.delete_job("ps1")
        wait_for(lambda: workload.bound_roles("ps2") == {"scheduler", "server", "worker"}, 90,
                 "ps2 to start after ps1 finished")
