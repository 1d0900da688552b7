"""`coach submit --backend cluster`: a real training job whose role-function pods the session's
real schedulers place (default-scheduler or coach-gang). The pods' containers are the local
backend's processors, started by the backend for each bound pod: the control plane's nodes have
no kubelet and this machine no container runtime (the one part that is not the real thing)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from coach.backends.base import Placement
from coach.backends.cluster import NAMESPACE, ClusterBackend
from coach.backends.cluster.backend import REFRESH_S
from coach.cluster import Kube
from coach.errors import BackendError
from coach.identity import process_identity
from coach.job.coordinator import Coordinator
from coach.plan import JobDemand
from tests.cluster.workload import Workload, job_pod, wait_for
from tests.conftest import COACH, FAST_JOB, ROOT, run_coach, write_job
from tests.e2e.test_failures import _wait_no_processes_of

PLACEMENT = Placement(cpu={"scheduler": 0.1, "server": 0.25, "worker": 0.5},
                      memory_gib={"scheduler": 0.25, "server": 0.5, "worker": 1.0})


def scheduled_by(kube: Kube, job_id: str) -> list[str]:
    """The scheduler that bound each of the job's pods, from the events the schedulers wrote."""
    events = kube.call("GET", f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")["items"]
    return [e.get("reportingController", "") for e in events
            if e.get("reason") == "Scheduled" and e["regarding"]["name"].startswith(f"{job_id}-")]



def hold_room(workload: Workload, cpu: str) -> None:
    """Other work: a pod requesting `cpu` bound on each of the 2 nodes, in another namespace and
    with none of Coach's labels."""
    workload.submit([{**job_pod("web", i, "worker", 1, "default-scheduler", cpu=cpu),
                      "metadata": {"name": f"web-{i}", "namespace": "coach-test"}} for i in range(2)])
    wait_for(lambda: all(p["spec"].get("nodeName") for p in workload.pods()), 30, "the other work to be bound")

@pytest.mark.parametrize("scheduler, name", [("gang", "coach-gang"), ("default", "default-scheduler")])
def test_a_job_trains_on_pods_its_scheduler_placed(workload: Workload, coach_home: Path, tmp_path: Path,
                                                   scheduler: str, name: str) -> None:
    job = write_job(tmp_path / "job.yaml", name=f"on-{scheduler}", scheduler=scheduler, **FAST_JOB)
    proc = run_coach("submit", str(job), "--backend", "cluster", "--json", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [status] = json.loads(run_coach("status", "--json", check=True).stdout)
    assert status["status"] == "succeeded", status
    history = json.loads(run_coach("history", status["job_id"], "--json", check=True).stdout)
    pods_needed = sum(1 + r["servers"] + r["workers"] for r in history)   # at most: pods are kept between epochs
    by = scheduled_by(workload.kube, status["job_id"])
    assert set(by) == {name}, by
    assert 3 <= len(by) <= pods_needed + 7, by   # + the head start of tuning (1 + 2 servers + 2 workers at most)
    assert not workload.kube.pods(NAMESPACE, f"coach.io/job={status['job_id']}"), "pods outlived the job"
    events = json.loads(run_coach("events", status["job_id"], "--json", check=True).stdout)
    placed = [e["message"] for e in events if e["kind"] == "placed"]
    assert placed and all(f"placed by {name} in " in m and "coach-node-" in m for m in placed), placed
    # tuning's head start is kept until tuning ends: no mini-epoch waits for a new pod's cold start
    assert placed[0].startswith("ahead of tuning: 5 pod(s)") and not any(m.startswith("tuning") for m in placed), placed
    assert sum(int(m.split(": ", 1)[1].split(" pod(s)")[0]) for m in placed) == len(by), (placed, by)


def test_ctrl_c_leaves_no_pod_and_no_process(workload: Workload, coach_home: Path, tmp_path: Path) -> None:
    """Interrupted while its pods run, `coach submit` stops the job with its checkpoint and
    deletes every pod it created: a pod left behind would hold its node's room for good."""
    job = write_job(tmp_path / "job.yaml", name="ctrlc", scheduler="gang",
                    **dict(FAST_JOB, allocation="static", workers=2, servers=1, target_loss=0.01))
    proc = subprocess.Popen([*COACH, "submit", str(job), "--backend", "cluster", "--json"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        wait_for(lambda: len([p for p in workload.kube.pods(NAMESPACE)
                              if p.get("status", {}).get("phase") == "Running"]) == 4, 120, "the job's 4 pods to run")
        time.sleep(2)   # into an epoch
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1 and "Traceback" not in err, err
    [rec] = json.loads(out)
    assert rec["status"] == "stopped", rec
    assert not workload.kube.pods(NAMESPACE), "pods outlived the interrupted run"
    assert _wait_no_processes_of(coach_home, timeout=15), "a function process outlived the interrupted run"
    # resumed without --backend, it goes on where it ran: it went on locally, on no pod, unsaid
    bound = len(scheduled_by(workload.kube, rec["job_id"]))
    trained = sum(r["phase"] == "training" for r in json.loads(run_coach("history", rec["job_id"], "--json").stdout))
    again = run_coach("resume", rec["job_id"], "--max-epochs", str(trained + 1), "--json", timeout=600)
    assert json.loads(again.stdout)[0]["status"] == "max_epochs", again.stdout + again.stderr
    assert json.loads(again.stdout)[0]["backend"] == "cluster"
    assert len(scheduled_by(workload.kube, rec["job_id"])) >= bound + 4   # the static (2, 1) group, on pods


def test_a_control_plane_stopped_under_a_job_fails_it_resumably(coach_home: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """`coach cluster down --force` under a running job: the job fails with what happened and what
    to do, keeps every epoch it recorded, and a resume once the control plane is back goes on from
    there. On a control plane of its own: the session's stays up for the other tests."""
    monkeypatch.setenv("COACH_CLUSTER_DIR", str(tmp_path / "own-cluster"))
    run_coach("cluster", "up", check=True)
    job = write_job(tmp_path / "job.yaml", name="cut", **dict(FAST_JOB, allocation="static", workers=1, servers=1,
                                                               target_loss=0.01, max_epochs=6))
    proc = subprocess.Popen([*COACH, "submit", str(job), "--backend", "cluster", "--json"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        wait_for(lambda: (json.loads(run_coach("status", "--json", check=True).stdout) or [{}])[0].get("epoch", 0) >= 2,
                 300, "the job's second training epoch")
        down = run_coach("cluster", "down", "--force")
        assert down.returncode == 0, down.stderr
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
        run_coach("cluster", "down", "--force")
    assert proc.returncode == 1 and "Traceback" not in err, err
    [rec] = json.loads(out)
    assert rec["status"] == "failed" and "the control plane is not running" in rec["message"], rec
    assert "`coach cluster up` starts it" in rec["message"], rec["message"]
    assert rec["next_step"] == f"`coach resume {rec['job_id']}` goes on where it stopped", rec
    before = [(r["phase"], r["epoch"]) for r in json.loads(run_coach("history", rec["job_id"], "--json").stdout)]
    assert ("training", 1) in before, before
    run_coach("cluster", "up", check=True)
    try:
        again = run_coach("resume", rec["job_id"], "--json", timeout=600)
    finally:
        run_coach("cluster", "down", "--force")
    [done] = json.loads(again.stdout)
    assert done["status"] == "max_epochs" and done["backend"] == "cluster", again.stderr
    after = [(r["phase"], r["epoch"]) for r in json.loads(run_coach("history", rec["job_id"], "--json").stdout)]
    assert after[:len(before)] == before and len(set(after)) == len(after), after   # went on, nothing again
    assert [e for p, e in after if p == "training"] == list(range(1, 7)), after

def test_a_stopped_scheduler_or_etcd_is_named_not_waited_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """coach-scheduler killed: a group waited "for room" up to 600 s an attempt, 40 minutes in all;
    etcd killed: each request timed out with "The read operation timed out" and no word of the
    control plane (helper-33). On a control plane of its own: the session's stays whole."""
    from coach import cluster
    from coach.cluster.control_plane import ClusterState

    monkeypatch.setenv("COACH_CLUSTER_DIR", str(tmp_path / "own-cluster"))
    kubeconfig = cluster.up(nodes=2, cpu="4", memory="8Gi")
    try:
        pids = {p.name: p.pid for p in ClusterState.load(cluster.state_dir()).processes}
        os.kill(pids["coach-scheduler"], signal.SIGKILL)
        backend = ClusterBackend(Kube(kubeconfig), wait_timeout_s=600)
        try:
            t0 = time.monotonic()
            with pytest.raises(BackendError, match="coach-gang's process, coach-scheduler, has stopped: nothing "
                                                   "places the pods; `coach cluster up` starts what is missing"):
                backend.deploy("nobody", {"scheduler": 1, "server": 1, "worker": 1},
                               Placement(cpu=PLACEMENT.cpu, memory_gib=PLACEMENT.memory_gib, scheduler="gang"))
            assert time.monotonic() - t0 < 30
            os.kill(pids["etcd"], signal.SIGKILL)
        finally:
            t0 = time.monotonic()
            backend.close()   # a Ctrl-C with etcd gone took 82 s: a 30 s timeout per request
            assert time.monotonic() - t0 < 5
        kube = Kube(kubeconfig, timeout=3.0)
        try:
            with pytest.raises(cluster.ClusterError, match="timed out: etcd, coach-scheduler stopped; `coach cluster "
                                                          "up` starts what is missing"):
                kube.pods("default")
        finally:
            kube.close()
    finally:
        cluster.down()


def test_a_cluster_whose_nodes_were_deleted_says_how_to_make_them_again(workload: Workload) -> None:
    workload.reset(nodes=0, cpu="4", memory="8Gi")   # all nodes deleted by hand: it said "0 node(s)" only
    with pytest.raises(BackendError, match=r"the cluster has no room: 0 node\(s\) with 0 CPU and 0 GiB allocatable "
                                           r"in all; `coach cluster up` makes the local control plane's nodes again"):
        ClusterBackend(workload.kube)


@pytest.mark.parametrize("scheduler, placed, waited", [("gang", "placed 0 of the 4 pods in 8 s", 8),
                                                       ("default", "placed 3 of the 4 pods and no more in 3 s", 3)])
def test_a_group_that_cannot_be_placed_whole_holds_no_room(workload: Workload, scheduler: str, placed: str,
                                                           waited: int) -> None:
    """Two workers of 3.9 CPU fit the 8 CPU of two 4-CPU nodes only without the scheduler and the
    server: coach-gang places none of the 4 pods, the default scheduler 3 (a deadlock in the
    making). Either way the backend gives up, says why and deletes them all: soon when part of
    the group holds room (3 s here), later when none does (8 s: it may be waiting its turn)."""
    backend = ClusterBackend(workload.kube, place_timeout_s=3, wait_timeout_s=8)
    try:
        t0 = time.monotonic()
        with pytest.raises(BackendError) as e:
            backend.deploy("toobig", {"scheduler": 1, "server": 1, "worker": 2},
                           Placement(cpu=dict(PLACEMENT.cpu, worker=3.9), memory_gib=PLACEMENT.memory_gib,
                                     scheduler=scheduler))
        assert waited <= time.monotonic() - t0 < waited + 5
        assert placed in str(e.value), e.value
        assert "Insufficient cpu" in str(e.value) or "do not fit the free capacity" in str(e.value), e.value
        assert not workload.kube.pods(NAMESPACE, "coach.io/job=toobig")
    finally:
        backend.close()


def test_a_gang_group_waits_for_room_and_keeps_its_place(workload: Workload) -> None:
    """Room held by another group: coach-gang keeps the new group out until that room frees, and
    the backend waits (nothing of it is bound, so it holds nothing) instead of giving up."""
    gang = Placement(cpu=dict(PLACEMENT.cpu, worker=3.0), memory_gib=PLACEMENT.memory_gib, scheduler="gang")
    first = ClusterBackend(workload.kube, place_timeout_s=2, wait_timeout_s=60)
    second = ClusterBackend(workload.kube, place_timeout_s=2, wait_timeout_s=60)
    try:
        first.deploy("holder", {"scheduler": 1, "server": 1, "worker": 2}, gang)   # 6.35 of the 8 CPU
        done: list[str | None] = []
        told: list[str] = []
        waiter = threading.Thread(target=lambda: done.append(
            second.deploy("waiter", {"scheduler": 1, "server": 1, "worker": 1}, gang, on_wait=told.append)))
        waiter.start()
        time.sleep(5)   # longer than place_timeout_s: a timeout would have deleted the group by now
        assert not done and len(workload.kube.pods(NAMESPACE, "coach.io/job=waiter")) == 3
        # what the job's progress line and `coach status` show meanwhile
        assert told and told[0].startswith("waiting for room on the cluster: coach-gang has bound 0 of the 3 pods "
                                           "(waiter-"), told
        first.teardown("holder")
        waiter.join(30)
        assert done and "3 pod(s) placed by coach-gang" in str(done[0]), done
        assert told[-1] == "", told   # placed: the job's message is its epoch again

        def give_up(why: str) -> None:   # as the tuning head start does: it must not wait for room
            if why:
                raise BackendError(why)

        second.teardown("waiter")
        first.deploy("holder", {"scheduler": 1, "server": 1, "worker": 2}, gang)
        with pytest.raises(BackendError, match="waiting for room on the cluster"):
            second.deploy("headstart", {"scheduler": 1, "server": 2, "worker": 2}, gang, on_wait=give_up)
        assert not workload.kube.pods(NAMESPACE, "coach.io/job=headstart"), "a group given up keeps no pod"
        # `coach stop` while a group waits for room: it waited out wait_timeout_s (600 s), then retried
        asked = []
        with pytest.raises(BackendError, match="stopped by request while coach-gang had bound 0 of the 4 pods"):
            second.deploy("stopped", {"scheduler": 1, "server": 1, "worker": 2}, gang,
                          should_stop=lambda: asked.append(1) or len(asked) > 3)
        assert not workload.kube.pods(NAMESPACE, "coach.io/job=stopped"), "a group given up keeps no pod"
    finally:
        first.close()
        second.close()


def test_pods_a_run_killed_meanwhile_left_are_deleted_while_a_group_waits(workload: Workload) -> None:
    """Stale pods were deleted only when a backend started: a `coach submit` killed while another
    ran left its pods bound, and the running one's next group waited behind them for its whole
    wait (a reviewer gave it 3 minutes)."""
    backend = ClusterBackend(workload.kube, wait_timeout_s=30)
    dead = f"{process_identity(os.getpid()).split(':')[0]}:999999999:1"
    try:
        for i, node in enumerate(n["metadata"]["name"] for n in workload.kube.nodes()):
            workload.kube.create_pod({   # bound by hand, each filling its node
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"killed-worker-{i}", "namespace": NAMESPACE,
                             "labels": {"coach.io/job": "killed", "coach.io/role": "worker",
                                        "app.kubernetes.io/managed-by": "coach"},   # as Coach labels its pods
                             "annotations": {"coach.io/owner": dead}},
                "spec": {"nodeName": node, "containers": [{"name": "worker", "image": "coach-functions:0.1.0",
                                                           "resources": {"requests": {"cpu": "4"}}}]}})
        asked = time.monotonic()
        backend.deploy("fresh", {"scheduler": 1, "server": 1, "worker": 1},
                       Placement(cpu={"scheduler": 0.5, "server": 0.5, "worker": 1.0}))
        assert time.monotonic() - asked < 20, "placed once the stale pods went, not at the wait's end"
        assert not workload.kube.pods(NAMESPACE, "coach.io/job=killed")
    finally:
        backend.close()
        workload.kube.delete_pods(NAMESPACE)


def test_pods_of_a_coach_process_that_ended_are_deleted_and_others_kept(workload: Workload) -> None:
    """A killed `coach submit` leaves its pods holding room; the next backend deletes those, and
    only those: a pod of a running coach process (here this test's) is not stale, and a pod that
    Coach did not make (another tool's, in Coach's namespace) is not Coach's to delete."""
    workload.kube.ensure_namespace(NAMESPACE)
    mine = process_identity(os.getpid())
    boot = mine.split(":")[0]
    for job, owner, coach in (("dead", f"{boot}:999999999:1", True), ("alive", mine, True), ("garbled", "x", True),
                              ("foreign", "", False)):
        workload.kube.create_pod({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{job}-worker-1", "namespace": NAMESPACE,
                         "labels": {"coach.io/job": job, "coach.io/role": "worker",
                                    **({"app.kubernetes.io/managed-by": "coach"} if coach else {})},
                         "annotations": {"coach.io/owner": owner}},
            "spec": {"containers": [{"name": "worker", "image": "coach-functions:0.1.0"}]}})
    backend = ClusterBackend(workload.kube)
    try:
        wait_for(lambda: {p["metadata"]["name"] for p in workload.kube.pods(NAMESPACE)} ==
                 {"alive-worker-1", "foreign-worker-1"}, 10, "the stale pods to go")
    finally:
        workload.kube.delete_pods(NAMESPACE)
        backend.close()


def test_the_group_shrinks_and_grows_in_place(workload: Workload) -> None:
    """Pods the next epoch still needs are kept (their processors stay warm); every pod then asks
    for the new group's size, since coach-gang takes a job's largest: a kept pod asking for the
    old, larger group would keep a new one gated forever."""
    backend = ClusterBackend(workload.kube, place_timeout_s=30)
    gang = Placement(cpu=PLACEMENT.cpu, memory_gib=PLACEMENT.memory_gib, scheduler="gang")
    try:
        names = []
        for group in ({"scheduler": 1, "server": 2, "worker": 2}, {"scheduler": 1, "server": 1, "worker": 1},
                      {"scheduler": 1, "server": 1, "worker": 2}):
            backend.deploy("grows", group, gang)
            pods = workload.kube.pods(NAMESPACE, "coach.io/job=grows")
            assert len(pods) == sum(group.values())
            assert all(p["spec"].get("nodeName") and p["status"]["phase"] == "Running" for p in pods)
            assert {p["metadata"]["annotations"]["coach.io/min-group"] for p in pods} == {str(len(pods))}
            names.append({p["metadata"]["name"] for p in pods})
        assert names[1] < names[0] and names[1] < names[2], names
    finally:
        backend.close()
    assert not workload.kube.pods(NAMESPACE, "coach.io/job=grows")


def test_room_that_other_work_takes_after_the_start_is_waited_for(workload: Workload) -> None:
    """The nodes' room is read again while jobs run: a job asks for its next epoch's functions
    only once they fit beside other namespaces' pods bound meanwhile. With the room read once at
    the start, it was granted at once, and its pods would have waited on the cluster instead."""
    backend = ClusterBackend(workload.kube)
    coordinator = Coordinator(lambda: backend.capacity)
    demand = JobDemand(job_id="late", speed=None, remaining_epochs=None, samples_per_epoch=1000.0)
    try:
        assert backend.capacity.nodes == ((4.0, 8.0), (4.0, 8.0))
        hold_room(workload, "3800m")
        time.sleep(REFRESH_S)   # the room read at the start is that old now
        told: list[str] = []
        assert coordinator.acquire(demand, told.append, timeout_s=REFRESH_S + 3) is None   # a 0.5-core worker fits nowhere
        assert told and told[-1].startswith("waiting for capacity: needs 0.85 cores / 1.75 GiB, 0.4 cores"), told
        workload.kube.delete_pods("coach-test")
        grant = coordinator.acquire(demand, timeout_s=REFRESH_S + 10)
        assert grant is not None and (grant.workers, grant.servers) == (1, 1), grant
    finally:
        backend.close()



def test_a_job_submitted_while_other_work_holds_the_room_waits_for_it(workload: Workload, coach_home: Path,
                                                                    tmp_path: Path) -> None:
    """Room that other namespaces' pods hold when a job is submitted is waited for: the job is
    recorded, says what holds the room, and trains once that work leaves. Counting only the
    room left, `coach submit` refused it (exit 2: "no node has room" for one server) although the
    cluster fits it, and told the user to reshape the cluster."""
    hold_room(workload, "3800m")
    job = write_job(tmp_path / "job.yaml", **dict(FAST_JOB, name="patient", scheduler="gang"))
    proc = subprocess.Popen([*COACH, "submit", str(job), "--backend", "cluster", "--json"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        def waiting() -> bool:
            assert proc.poll() is None, proc.communicate()
            jobs = json.loads(run_coach("status", "--json", check=True).stdout)
            return bool(jobs) and "other work on the cluster holds 7.6 cores / 2 GiB" in jobs[0]["message"]
        wait_for(waiting, 60, "the job to say what it waits for")
        workload.kube.delete_pods("coach-test")
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    [rec] = json.loads(out)
    assert rec["status"] == "succeeded", rec
    assert not workload.kube.pods(NAMESPACE)


def test_a_group_is_created_largest_first(workload: Workload) -> None:
    """A scheduler places pods in the order they come, and the default one puts each on the least
    allocated node. With 0.5 cores left on each node, (1, 1) fits only with its 0.5-core worker
    alone on a node. Created scheduler first, the server went to the other node and the worker
    fitted nowhere: "placed 2 of the 3 pods and no more" on every retry, and the job failed."""
    hold_room(workload, "3500m")
    backend = ClusterBackend(workload.kube, place_timeout_s=8)
    try:
        placed = backend.deploy("order", {"scheduler": 1, "server": 1, "worker": 1}, PLACEMENT)
        assert placed and placed.startswith("3 pod(s) placed by default-scheduler"), placed
        node = {p["metadata"]["labels"]["coach.io/role"]: p["spec"]["nodeName"]
                for p in workload.kube.pods(NAMESPACE, "coach.io/job=order")}
        assert node["worker"] != node["server"] == node["scheduler"], node
    finally:
        backend.close()


def test_tunings_kept_pods_count_in_its_lease(workload: Workload, coach_home: Path, tmp_path: Path) -> None:
    """Tuning keeps its head start's pods until it ends, and a kept pod holds its node's room: each
    mini-epoch's lease (what other jobs are told is taken) covers every pod the job has then.
    Before, a (1, 1) mini-epoch leased 0.85 cores while its kept (2, 2) group held 1.6, and another
    job granted the difference waited on the cluster; the head start itself was placed unleased. The lease is read from the state store at
    each deploy of the real backend (a subclass that only records). One server at most: tuning then
    measures (1, 1) by a mini-epoch and (2, 1) on the rest of epoch 1 (with (2, 2) allowed, a job
    alone measures (2, 1) inside (2, 2)'s epoch 1 and runs no mini-epoch)."""
    from coach.job.submit import register, run_jobs
    from coach.plan import footprint
    from coach.spec import parse_spec
    from coach.state.store import Store

    store = Store()
    seen: list[tuple[dict, float | None]] = []

    class Recording(ClusterBackend):
        def deploy(self, job_id, group, placement=Placement(), on_wait=None, should_stop=lambda: False):  # type: ignore[no-untyped-def]
            seen.append((dict(group), next((l.cpu for l in store.leases() if l.job_id == job_id), None)))
            return super().deploy(job_id, group, placement, on_wait, should_stop)

    spec = parse_spec(dict(FAST_JOB, name="kept", scheduler="gang", max_servers=1), str(tmp_path / "job.yaml"))
    job_id = register(spec, store)
    backend = Recording(workload.kube)
    try:
        assert run_jobs({job_id: spec}, backend, store)[job_id] == "succeeded", store.job(job_id).message
    finally:
        backend.close()
    head = seen[0][0]
    assert head == {"scheduler": 1, "server": 1, "worker": 2} and any(g == head for g, _ in seen[1:]), seen
    ran = [(e.phase, e.workers, e.servers) for e in store.epochs(job_id)]
    assert ran[:2] == [("tuning", 1, 1), ("training", 2, 1)], ran   # a mini-epoch, with (2, 1)'s pods kept
    for group, lease in seen:   # the head start's included: before, it was placed with no lease at all
        cpu = footprint(spec.resources, group["worker"], group["server"])[0]
        assert lease is not None and lease >= cpu - 1e-9, (group, lease, seen)

# on the test session's 2 nodes × 4 CPU: (1, 1) fits, but a third function of 2.5 cores fits on no node
SPLIT = {"worker": {"cpu": 2.5}, "server": {"cpu": 2.5}}


def test_configurations_that_fit_the_cores_but_not_the_nodes_are_never_asked_for(
        workload: Workload, coach_home: Path, tmp_path: Path) -> None:
    """(2, 1) needs 7.6 of the 8 CPU, but three 2.5-core functions fit on no two 4-CPU nodes:
    tuning skips it at once, saying why (and (2, 2), which needs more than the cores), and the
    planner never grants it. Counting cores only, (2, 1) was asked for, and coach-gang kept its
    group waiting for room that never comes (a 10-minute wait, then retries)."""
    job = write_job(tmp_path / "job.yaml", **dict(FAST_JOB, name="split", scheduler="gang", resources=SPLIT))
    proc = run_coach("submit", str(job), "--backend", "cluster", "--json", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [status] = json.loads(run_coach("status", "--json", check=True).stdout)
    assert status["status"] == "succeeded", status
    history = json.loads(run_coach("history", status["job_id"], "--json", check=True).stdout)
    assert {(r["workers"], r["servers"]) for r in history} == {(1, 1)}, history
    events = json.loads(run_coach("events", status["job_id"], "--json", check=True).stdout)
    kinds = [e["kind"] for e in events]
    assert "retry" not in kinds and "deploy_failed" not in kinds, events
    skipped = [e["message"] for e in events if e["kind"] == "tuning_skipped"]
    assert any(m.startswith("(2, 1): it never fits the backend: ") and "no layout" in m for m in skipped), skipped
    assert any(m.startswith("(2, 2): it never fits the backend: ") for m in skipped), skipped


@pytest.mark.parametrize("args, fields, code, message", [
    (["--cpu", "2"], {}, 2, "--cpu: applies to the local backend"),
    ([], {"resources": {"worker": {"cpu": 5}}}, 2, "resources.worker: one worker asks 5 cores"),
    ([], {"resources": SPLIT, "allocation": "static", "workers": 2, "servers": 1}, 2,
     "resources: its smallest allocation (2 worker(s), 1 server(s) and a scheduler) needs 7.6 cores and 2.75 GiB: "
     "that fits the cluster's 8 cores in sum but cannot be laid out on its 2 nodes with room for 4 cores"),
])
def test_bad_input_for_the_cluster_backend(workload: Workload, coach_home: Path, tmp_path: Path,
                                           args: list[str], fields: dict, code: int, message: str) -> None:
    job = write_job(tmp_path / "job.yaml", **dict(FAST_JOB, name="bad", **fields))
    proc = run_coach("submit", str(job), "--backend", "cluster", *args)
    assert proc.returncode == code and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert json.loads(run_coach("status", "--json", check=True).stdout) == []   # nothing recorded


def test_no_control_plane_is_a_message(coach_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COACH_CLUSTER_DIR", str(tmp_path / "none"))
    job = write_job(tmp_path / "job.yaml", name="nocluster", **FAST_JOB)
    proc = run_coach("submit", str(job), "--backend", "cluster")
    assert proc.returncode == 1 and "no control plane is running: start one with `coach cluster up`" \
        in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


# on the test session's 2 nodes × 4 CPU one (1, 1) group takes 7.1 cores: two such jobs take turns
WHOLE = {"worker": {"cpu": 3.5}, "server": {"cpu": 3.5}}


@pytest.mark.parametrize("scheduler, processes", [("gang", 1), ("default", 1), ("default", 2)])
def test_pods_kept_between_epochs_keep_their_lease(workload: Workload, coach_home: Path, tmp_path: Path,
                                                   scheduler: str, processes: int) -> None:
    """A job's pods stay between its epochs, and so does their room: the job keeps its lease until
    it lets them go. Two jobs that each need the whole cluster, in one run or in two `coach
    submit`s on one COACH_HOME: the first runs to its end, then the second (a job that must wait
    deletes its pods before it gives back its lease). Before, the lease was given
    back at each epoch's end with the pods still bound: the other job was granted their room, its
    pods waited on the cluster, and the first job waited in the coordinator for the second's lease
    — a deadlock until the group's placement timed out, then a retry; in one run (timeouts 20 s)
    a job failed after four tries, in two submits (60 s) after 287 s."""
    from coach.job.submit import register, run_jobs
    from coach.spec import parse_spec
    from coach.state.store import Store

    fields = dict(FAST_JOB, scheduler=scheduler, resources=WHOLE, allocation="static", workers=1, servers=1,
                  max_epochs=3, target_loss=0.01)
    store = Store()
    if processes == 1:
        specs = {}
        for name in ("turn-a", "turn-b"):
            spec = parse_spec(dict(fields, name=name), str(tmp_path / f"{name}.yaml"))
            specs[register(spec, store)] = spec
        backend = ClusterBackend(workload.kube, place_timeout_s=20, wait_timeout_s=20)
        try:
            run_jobs(specs, backend, store)
        finally:
            backend.close()
    else:
        procs = [subprocess.Popen([*COACH, "submit", str(write_job(tmp_path / f"{name}.yaml", **dict(fields, name=name))),
                                   "--backend", "cluster", "--json"], cwd=ROOT, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=dict(os.environ))
                 for name in ("turn-a", "turn-b")]
        try:
            for proc in procs:
                _, err = proc.communicate(timeout=600)
                assert proc.returncode == 1 and "Traceback" not in err, err   # 1: stopped short of the target
        finally:
            for proc in procs:
                proc.kill()
    jobs = store.jobs()
    assert len(jobs) == 2
    for job in jobs:
        events = [(e["kind"], e["message"]) for e in store.events(job.job_id)]
        assert job.status == "max_epochs", (job.message, events)
        assert not any(kind in ("retry", "epoch_failed") for kind, _ in events), events
    assert not workload.kube.pods(NAMESPACE)
