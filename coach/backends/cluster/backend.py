"""Role functions as pods of a Kubernetes control plane, placed by its schedulers.

On a real cluster Nuclio's Deployments create the function pods and kubelets run them. Neither
can run here: Nuclio builds container images and the local control plane's nodes have no kubelet
and no container runtime. So this backend does their part and nothing else: one pod per function
replica, with its role's requests and the labels and annotation of Coach's pod contract
(scheduler_plugins/pkg/jobs), handed to the scheduler the job file names (`default-scheduler`
or `coach-gang`); once the scheduler has bound a job's pods, each bound pod's processor runs on
this machine (the local backend's, on loopback) as a kubelet would start its container, and the
pod is marked Running. Placement — which pods start, when, on which node — is the real
schedulers'; only the containers are local processes.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Mapping

from coach import quantities
from coach.backends.base import Capacity, Placement
from coach.backends.local.backend import LocalBackend
from coach.cluster.control_plane import PROCESS_OF, stopped
from coach.cluster.errors import ClusterError
from coach.cluster.kube import Kube, Obj
from coach.cluster.nodes import room_per_node
from coach.errors import BackendError, SpecError
from coach.identity import process_identity, still_running
from coach.roles.protocol import ROLES

NAMESPACE = "coach-jobs"
PLACE_TIMEOUT_S = 60.0    # a partly bound group holds room others may need: give it back soon
WAIT_TIMEOUT_S = 600.0    # a group with nothing bound holds nothing; it waits for room (coach-gang's queue)
POLL_S = 0.1
STALE_CHECK_S = 5.0   # while a group waits, pods of coach processes that ended are deleted this often
NOTICE_S = 2.0            # a group unplaced for this long is said to wait (progress line, `coach status`)
REFRESH_S = 2.0           # the nodes' room is read again at most this often
SCHEDULER_NAMES = {"default": "default-scheduler", "gang": "coach-gang"}   # the job file's `scheduler`
LABEL_JOB, LABEL_ROLE = "coach.io/job", "coach.io/role"
MIN_GROUP = "coach.io/min-group"
MANAGED_BY = ("app.kubernetes.io/managed-by", "coach")   # a label on every pod Coach makes
OWNER = "coach.io/owner"   # process_identity of the coach process that runs the pod's processor


def _serial(pod: Obj) -> int:
    """Creation order of the pods this backend names `<job>-<role>-<serial>`."""
    tail = pod["metadata"]["name"].rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def _on_nodes(nodes: list[tuple[float, float]], total: Capacity | None = None) -> Capacity:
    """The capacity of these nodes' (cores, GiB), summed and node by node."""
    return Capacity(cpu=sum(c for c, _ in nodes), memory_gib=sum(m for _, m in nodes), nodes=tuple(nodes), total=total)


class ClusterBackend(LocalBackend):
    """The local backend's processors, started only for pods a cluster scheduler has bound."""

    name = "cluster"
    keep_warm = False   # a deleted pod's container stops with it

    def __init__(self, kube: Kube, place_timeout_s: float = PLACE_TIMEOUT_S, wait_timeout_s: float = WAIT_TIMEOUT_S,
                 log_dir: Path | None = None, functions_dir: Path | None = None) -> None:
        self.kube = kube
        self.place_timeout_s, self.wait_timeout_s = place_timeout_s, wait_timeout_s
        self._owner = process_identity(os.getpid()) or str(os.getpid())
        self._serials = itertools.count(int(time.time() * 10))   # unique across runs, not only in this one
        self._created: set[str] = set()   # jobs this backend made pods for
        self._plane_gone = False   # read once a close starts: etcd or the apiserver has stopped
        try:
            kube.ensure_namespace(NAMESPACE)
            self._clear_stale()
            room = self._room()
        except ClusterError as e:
            raise BackendError(str(e)) from None
        whole = room.whole   # room that other work holds now is waited for; a cluster with none at all is an error
        if whole.cpu <= 0 or whole.memory_gib <= 0:
            raise BackendError(f"the cluster has no room: {len(whole.nodes)} node(s) with {whole.cpu:g} CPU and "
                               f"{whole.memory_gib:g} GiB allocatable in all"
                               + "; `coach cluster up` makes the local control plane's nodes again" * (not whole.nodes))
        super().__init__(cpu=whole.cpu, memory_gib=whole.memory_gib, functions_dir=functions_dir, log_dir=log_dir)
        self.capacity = room
        for role in ROLES:   # a pod must name its container's image
            if not self._function_config(role)["spec"].get("image"):
                raise SpecError(str(self.functions_dir / role / "function.yaml"), "spec.image",
                                "missing: the cluster backend's pods name the function's image")

    # -- capacity --------------------------------------------------------------------------
    def _room(self) -> Capacity:
        nodes = room_per_node(self.kube, but=NAMESPACE)
        return _on_nodes([r for _, r in nodes], total=_on_nodes([a for a, _ in nodes]))

    @property
    def capacity(self) -> Capacity:
        """The nodes' room for Coach's pods now: other namespaces' pods come and go while jobs
        run (read again at most every REFRESH_S; the last reading if the API server does not answer)."""
        if time.monotonic() - self._read_at >= REFRESH_S:
            try:
                self._capacity = self._room()
            except ClusterError:
                pass
            self._read_at = time.monotonic()
        return self._capacity

    @capacity.setter
    def capacity(self, value: Capacity) -> None:
        self._capacity, self._read_at = value, time.monotonic()

    # -- pods ------------------------------------------------------------------------------
    def _clear_stale(self) -> None:
        """Pods whose coach process has ended hold room no one will use (a run that was killed).
        Only Coach's: another tool's pods in the namespace were deleted without a word."""
        for pod in self.kube.pods(NAMESPACE, "=".join(MANAGED_BY)):
            if not still_running(pod["metadata"].get("annotations", {}).get(OWNER, "")):
                self.kube.delete_pod(NAMESPACE, pod["metadata"]["name"])

    def _pods(self, job_id: str) -> dict[str, list[Obj]]:
        out: dict[str, list[Obj]] = {r: [] for r in ROLES}
        for pod in self.kube.pods(NAMESPACE, f"{LABEL_JOB}={job_id}"):
            role = pod["metadata"]["labels"].get(LABEL_ROLE)
            if pod["metadata"].get("deletionTimestamp") is None and role in out:
                out[role].append(pod)
        for pods in out.values():
            pods.sort(key=_serial)
        return out

    def _pod(self, job_id: str, role: str, group_size: int, placement: Placement) -> Obj:
        requests = {}
        if role in placement.cpu:
            requests["cpu"] = quantities.cpu_text(placement.cpu[role])
        if role in placement.memory_gib:
            requests["memory"] = quantities.memory_text(placement.memory_gib[role])
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{job_id}-{role}-{next(self._serials)}", "namespace": NAMESPACE,
                         "labels": {LABEL_JOB: job_id, LABEL_ROLE: role, MANAGED_BY[0]: MANAGED_BY[1]},
                         "annotations": {MIN_GROUP: str(group_size), OWNER: self._owner}},
            "spec": {"schedulerName": SCHEDULER_NAMES[placement.scheduler], "restartPolicy": "Never",
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": role, "image": self._function_config(role)["spec"]["image"],
                                     "resources": {"requests": requests}}]},
        }

    def _await_binding(self, job_id: str, scheduler: str, size: int, on_wait: Callable[[str], None],
                       should_stop: Callable[[], bool]) -> list[Obj]:
        """The job's pods once every one is bound. A partly bound group that makes no progress
        for `place_timeout_s` is deleted: its bound pods hold room that another group may be
        waiting for (how a deadlock starts). A group with nothing bound holds nothing, so it
        waits for room up to `wait_timeout_s` (in coach-gang's queue, behind older jobs); a
        retry would lose that place."""
        start = since = cleared = time.monotonic()
        bound_before, told = 0, ""
        try:
            while True:
                if time.monotonic() - cleared >= STALE_CHECK_S:   # a run killed meanwhile holds room
                    self._clear_stale()   # that the capacity read leaves out (its namespace is ours)
                    cleared = time.monotonic()
                    if gone := stopped((PROCESS_OF[scheduler],)):   # it read "waiting for room", for 40 min
                        raise BackendError(f"{scheduler}'s process, {gone[0]}, has stopped: nothing places the "
                                           "pods; `coach cluster up` starts what is missing")
                pods = [p for ps in self._pods(job_id).values() for p in ps]
                waiting = [p for p in pods if not p["spec"].get("nodeName")]
                if len(pods) < size:
                    raise BackendError(f"{size - len(pods)} of the job's {size} pods were deleted (not by Coach) "
                                       "while they were being placed")
                if not waiting:
                    return pods
                if self._closed:
                    raise BackendError("the cluster backend is shut down (interrupted)")
                bound = len(pods) - len(waiting)
                if should_stop():   # `coach stop` while the group waits (up to wait_timeout_s)
                    raise BackendError(f"stopped by request while {scheduler} had bound {bound} of the "
                                       f"{len(pods)} pods")
                if bound != bound_before:
                    since, bound_before = time.monotonic(), bound
                why = f"waiting for room on the cluster: {scheduler} has bound {bound} of the {len(pods)} pods"
                if time.monotonic() - start >= NOTICE_S and why != told:
                    told = why
                    on_wait(f"{why} ({_why(waiting[0], 120)})")
                limit = self.place_timeout_s if bound else self.wait_timeout_s
                if time.monotonic() - since > limit:
                    self.kube.delete_pods(NAMESPACE, f"{LABEL_JOB}={job_id}")
                    # groups that deadlocked each other time out together; retried together, they
                    # would deadlock again: a random pause lets one of them go first
                    time.sleep(random.uniform(0, limit / 4))
                    raise BackendError(f"{scheduler} placed {bound} of the {len(pods)} pods"
                                       f"{' and no more' if bound else ''} in {limit:g} s ({_why(waiting[0])}); "
                                       "all were deleted")
                time.sleep(POLL_S)
        finally:
            if told:   # placed or given up: the job's message is its epoch again
                on_wait("")

    def _patch(self, pod: Obj, patch: Obj, subresource: str = "") -> None:
        meta = pod["metadata"]
        self.kube.call("PATCH", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}{subresource}",
                       content=json.dumps(patch), headers={"Content-Type": "application/merge-patch+json"})

    def _mark_running(self, pod: Obj) -> None:
        """What the node's kubelet would report once the container runs: the pod is on loopback."""
        self._patch(pod, {"status": {"phase": "Running", "podIP": "127.0.0.1", "hostIP": "127.0.0.1",
                                     "conditions": [{"type": "Ready", "status": "True"}]}}, "/status")

    # -- Backend -----------------------------------------------------------------------------
    def deploy(self, job_id: str, group: Mapping[str, int], placement: Placement = Placement(),
               on_wait: Callable[[str], None] | None = None,
               should_stop: Callable[[], bool] = lambda: False) -> str | None:
        """Delete the pods the group no longer needs, create the missing ones together (the gang
        scheduler sees the whole group: its minimum group is all of it), wait for the scheduler
        to bind them, then start their processors. Says who placed the new pods where, and how fast."""
        scheduler = SCHEDULER_NAMES[placement.scheduler]
        try:
            pods = self._pods(job_id)
            size = sum(group.values())
            for role in ROLES:
                for pod in pods[role][group.get(role, 0):]:
                    self.kube.delete_pod(NAMESPACE, pod["metadata"]["name"])
                for pod in pods[role][:group.get(role, 0)]:   # a job's minimum group is the largest its pods ask
                    if pod["metadata"].get("annotations", {}).get(MIN_GROUP) != str(size):
                        self._patch(pod, {"metadata": {"annotations": {MIN_GROUP: str(size)}}})
            self._created.add(job_id)
            t0 = time.monotonic()
            # largest first, as the planner's packing lays them out: a scheduler places pods in the
            # order they come, and the default one spreads them; created scheduler first, a worker
            # that needs a node's whole room found the server already there
            largest_first = sorted(ROLES, key=lambda r: (placement.cpu.get(r, 0.0), placement.memory_gib.get(r, 0.0)),
                                   reverse=True)
            new = [self.kube.create_pod(self._pod(job_id, role, size, placement))["metadata"]["name"]
                   for role in largest_first for _ in range(group.get(role, 0) - len(pods[role]))]
            try:
                bound = self._await_binding(job_id, scheduler, size, on_wait or (lambda _: None), should_stop)
            except BaseException:   # on_wait gave up, Ctrl-C: no pod of a group given up may keep room
                self.kube.delete_pods(NAMESPACE, f"{LABEL_JOB}={job_id}")
                raise
            placed_s = time.monotonic() - t0
            for pod in bound:
                if pod.get("status", {}).get("phase") != "Running":
                    self._mark_running(pod)
        except ClusterError as e:
            raise BackendError(str(e)) from None
        super().deploy(job_id, group, placement, should_stop=should_stop)
        if not new:
            return None
        nodes = Counter(p["spec"]["nodeName"] for p in bound if p["metadata"]["name"] in new)
        where = ", ".join(f"{node} ×{n}" for node, n in sorted(nodes.items()))
        return f"{len(new)} pod(s) placed by {scheduler} in {placed_s:.2f} s: {where}"

    def teardown(self, job_id: str) -> None:
        super().teardown(job_id)
        if self._closed and self._plane_gone:
            return   # each request would time out (30 s: a Ctrl-C took 82 s); the next backend clears them
        try:
            self.kube.delete_pods(NAMESPACE, f"{LABEL_JOB}={job_id}")
        except ClusterError as e:
            raise BackendError(str(e)) from None
        self._created.discard(job_id)

    def close(self) -> None:
        """Called twice on Ctrl-C (by the signal handler, then once the jobs have ended), so the
        second call deletes the pods a job thread created in between. The pods of a control plane
        whose etcd or apiserver has stopped are left: the next backend clears them as stale."""
        self._plane_gone = bool(stopped(("etcd", "kube-apiserver")))   # once, not once a job
        super().close()
        if self._plane_gone:
            return
        for job_id in list(self._created):
            try:
                self.kube.delete_pods(NAMESPACE, f"{LABEL_JOB}={job_id}")
            except ClusterError:
                pass   # the apiserver is gone: the next backend clears them as stale


def _why(pod: Obj, limit: int = 1000) -> str:
    """The scheduler's last word on an unbound pod."""
    said = "no scheduling decision yet"
    for c in pod.get("status", {}).get("conditions", []):
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            said = c.get("message") or c.get("reason") or said
    said = said if len(said) <= limit else said[:limit - 1] + "…"
    return f"{pod['metadata']['name']}: {said}"


def connect(log_dir: Path | None = None) -> ClusterBackend:
    """The backend on the local control plane `coach cluster up` started."""
    from coach.cluster import status

    st = status()
    if not st.running or st.kubeconfig is None:
        raise BackendError(f"{st.not_running()} (state in {st.state_dir})")
    return ClusterBackend(Kube(st.kubeconfig), log_dir=log_dir)

