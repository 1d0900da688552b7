"""Start, inspect and stop the local control plane: etcd, kube-apiserver, the
unmodified default kube-scheduler, coach-scheduler and simulated nodes, all on
loopback, from binaries that deploy/local/build puts in the binary directory.

Everything lives in one state directory (default ~/.cache/coach/cluster): the
process table, logs, keys, kubeconfigs and etcd's data. `down` stops exactly the
processes in the process table and removes etcd's data, so the next `up`
starts a clean cluster.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import httpx
import yaml

from coach import quantities
from coach.cache import cache_dir
from coach.cluster.errors import BinaryMissing, ClusterError
from coach.errors import SpecError
from coach.identity import process_identity
from coach.ports import free_port
from coach.recorded import check_types
from coach.cluster.kube import Kube, apply_manifest, write_kubeconfig
from coach.cluster.nodes import NODE_LABEL, node_size, set_nodes

REPO = Path(__file__).resolve().parents[2]
SCHEDULER_CONFIG = REPO / "deploy" / "scheduler" / "config.yaml"
SCHEDULER_RBAC = REPO / "deploy" / "scheduler" / "rbac.yaml"
# coach-scheduler runs as the service account of deploy/scheduler/rbac.yaml, so
# every local run checks that the least-privilege RBAC is enough
COACH_SCHEDULER_USER = "system:serviceaccount:kube-system:coach-scheduler"
COMPONENTS = ("etcd", "kube-apiserver", "kube-scheduler", "coach-scheduler")
# the schedulerNames pods can ask for: two profiles of the default kube-scheduler (its default,
# and bin packing: the most allocated node that fits) and coach-scheduler's profile
BIN_PACK = {"schedulerName": "bin-pack", "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {
    "type": "MostAllocated", "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]}}}]}
SCHEDULERS = ("default-scheduler", "bin-pack", "coach-gang")
DEFAULT_NODES = 2
DEFAULT_CPU = "4"
DEFAULT_MEMORY = "8Gi"
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 15.0


def bin_dir() -> Path:
    """Where deploy/local/build puts the binaries (COACH_BIN_DIR overrides; a relative one is
    read from the caller's folder, not from the state folder the processes run in)."""
    return Path(os.environ.get("COACH_BIN_DIR") or cache_dir() / "bin").absolute()


def state_dir() -> Path:
    """Where a running cluster keeps its state (COACH_CLUSTER_DIR overrides)."""
    return Path(os.environ.get("COACH_CLUSTER_DIR") or cache_dir() / "cluster").absolute()


@dataclass
class Process:
    name: str
    pid: int
    binary: str
    mtime: float = 0.0   # of the binary when started: a rebuilt binary means a restart
    identity: str = ""   # boot, pid and start time (coach.identity): a reused pid is not ours


@dataclass
class ClusterState:
    """What `up` wrote and `status`/`down` read back."""
    nodes: int
    cpu: str
    memory: str
    apiserver_port: int
    etcd_port: int
    kubeconfig: str
    processes: list[Process] = field(default_factory=list)
    # a state without them was written before bin-pack existed
    schedulers: list[str] = field(default_factory=lambda: ["default-scheduler", "coach-gang"])

    @classmethod
    def load(cls, directory: Path) -> "ClusterState | None":
        path = directory / "state.json"
        if not path.exists():
            return None
        try:
            raw = json.loads(path.read_text())
            raw["processes"] = [Process(**p) for p in raw.get("processes", [])]
            state = cls(**raw)
            check_types(state)   # a pid of 1e30 failed as a TypeError in os.kill
            return state
        except (ValueError, TypeError, KeyError, AttributeError) as e:   # hand-edited, truncated, foreign
            why = f"not JSON: {e}" if isinstance(e, json.JSONDecodeError) else "its fields are not those it writes"
            raise ClusterError(f"{path}: not a control-plane state written by `coach cluster up` ({why}); stop "
                               "the processes it started (`pgrep -af 'etcd|kube-apiserver|kube-scheduler|"
                               "coach-scheduler'`), then delete the file") from None

    def save(self, directory: Path) -> None:
        (directory / "state.json").write_text(json.dumps(asdict(self), indent=1))


@dataclass
class ClusterStatus:
    """What `status` reports."""
    running: bool
    state_dir: Path
    kubeconfig: Path | None = None
    components: dict[str, bool] = field(default_factory=dict)
    apiserver_ready: bool = False
    node_sizes: list[tuple[float, float]] = field(default_factory=list)   # (CPU, GiB) of each simulated node
    pods: int = 0
    bound_pods: int = 0
    schedulers: list[str] = field(default_factory=list)

    def not_running(self) -> str:
        """Why the control plane cannot be used, with the step that fixes it ("" if it can)."""
        if self.running:
            return ""
        stopped = [name for name in COMPONENTS if not self.components.get(name)]
        if self.kubeconfig is None or len(stopped) == len(COMPONENTS):
            return "no control plane is running: start one with `coach cluster up`"
        if stopped:
            return (f"the control plane is not whole: {', '.join(stopped)} stopped; `coach cluster up` "
                    "starts what is missing")
        return "the control plane's apiserver does not answer; `coach cluster status` says more"


PROCESS_OF = {"default-scheduler": "kube-scheduler", "bin-pack": "kube-scheduler", "coach-gang": "coach-scheduler"}
"""The process that runs each scheduler profile."""


def stopped(names: tuple[str, ...] = COMPONENTS) -> list[str]:
    """Which of these components of the running control plane have stopped: what a timed-out
    request or a group no one places is waiting for (nothing when no control plane was started
    here, or its state cannot be read: `coach cluster status` says that)."""
    try:
        state = ClusterState.load(state_dir())
    except ClusterError:
        return []
    alive = {p.name: _alive(p) for p in state.processes} if state else {}
    return [n for n in names if alive.get(n) is False]


def _alive(p: Process) -> bool:
    """True if pid is the process we started: the same start (a pid reused by another run of
    the same binary, after a restart, is not ours) and the binary we started. The kernel names
    the binary by its real path: a binary folder reached through a symlink is still ours."""
    if p.identity and process_identity(p.pid) != p.identity:
        return False
    try:
        exe = os.readlink(f"/proc/{p.pid}/exe")
    except OSError:
        return False
    return exe.removesuffix(" (deleted)") == os.path.realpath(p.binary)


def _rebuilt(p: Process) -> bool:
    """True if deploy/local/build replaced the binary since the process started."""
    try:
        return Path(p.binary).stat().st_mtime != p.mtime
    except OSError:
        return True


def _binary(name: str) -> Path:
    path = bin_dir() / name
    if not os.access(path, os.X_OK):
        raise BinaryMissing(f"{path} is missing: build the control plane first with deploy/local/build")
    return path


def _start(directory: Path, name: str, args: list[str]) -> Process:
    binary = _binary(name)
    log = open(directory / "logs" / f"{name}.log", "ab")
    proc = subprocess.Popen([str(binary), *args], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, cwd=directory)
    log.close()
    return Process(name=name, pid=proc.pid, binary=str(binary), mtime=binary.stat().st_mtime,
                   identity=process_identity(proc.pid) or "")


def _wait(what: str, check, timeout: float, procs: list[Process], directory: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        dead = [p.name for p in procs if not _alive(p)]
        if dead:
            raise ClusterError(f"{', '.join(dead)} exited while waiting for {what}; "
                               f"see {directory / 'logs' / (dead[0] + '.log')}")
        time.sleep(0.2)
    raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}; logs in {directory / 'logs'}")


def _scheduler_config(directory: Path, kubeconfig: Path, coach: bool) -> Path:
    """The default scheduler gets the stock profile and a bin-packing one (all profiles of one
    binary share its queue, which both use as it is); coach-scheduler gets the profile of
    deploy/scheduler/config.yaml, the one a platform team installs."""
    if coach:
        cfg = yaml.safe_load(SCHEDULER_CONFIG.read_text())
    else:
        cfg = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
               "profiles": [{"schedulerName": "default-scheduler"}, BIN_PACK]}
    cfg["clientConnection"] = {"kubeconfig": str(kubeconfig), "qps": 200, "burst": 400}
    cfg["leaderElection"] = {"leaderElect": False}
    path = directory / ("coach-scheduler.yaml" if coach else "kube-scheduler.yaml")
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


MAX_NODE_CPU = 100_000   # cores: beyond any machine; the schedulers count millicores in 64 bits (1e16 wrapped)
MAX_NODE_GIB = 1 << 20   # 1 PiB, for the same reason in bytes


def node_shape(nodes: int, cpu: str, memory: str, fewest: int = 0) -> tuple[float, float]:
    """A node's (CPU, GiB) from `--cpu` and `--memory` in whole millicores and MiB, after checking
    them and `--nodes` (at least `fewest`). A plain memory number is GiB, as in job files (to
    Kubernetes it would be bytes, and `--memory 8` made nodes that fit no pod)."""
    if not fewest <= nodes <= 5000:   # 0 is a cluster whose pods all stay pending: an experiment too
        raise SpecError("--nodes", "", f"must be between {fewest} and 5000, got {nodes}")
    shape = []
    for flag, value, read, example, least, written, most, most_text in (
            ("--cpu", cpu, quantities.cores, "4 or 500m", 0.001, "1m", MAX_NODE_CPU, f"{MAX_NODE_CPU} cores"),
            ("--memory", memory, quantities.gib, "8Gi", 1 / 1024, "1Mi", MAX_NODE_GIB, f"{MAX_NODE_GIB} GiB (1 PiB)")):
        size = read(value)
        if size is None:
            raise SpecError(flag, "", f"must be a Kubernetes quantity such as {example}, got {value!r}")
        if size <= 0:
            raise SpecError(flag, "", f"must be more than 0: a node without it fits no pod, got {value!r}")
        if size < least:   # nodes are written in millicores and MiB
            raise SpecError(flag, "", f"must be at least {written}, got {value!r}")
        if size > most:
            raise SpecError(flag, "", f"must be at most {most_text}, got {value!r}")
        shape.append(size)
    return quantities.written_cores(shape[0]), quantities.written_gib(shape[1])


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """One `up` or `down` at a time per state folder: two at once each stopped the other's
    processes and deleted its data, and both failed."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def up(nodes: int = DEFAULT_NODES, cpu: str = DEFAULT_CPU, memory: str = DEFAULT_MEMORY) -> Path:
    """Starts the control plane, or reuses the running one, and makes its nodes
    `nodes` × (cpu, memory). Returns the admin kubeconfig. Idempotent: a second
    call with other sizes only reshapes the nodes; after deploy/local/build
    replaced a binary, or when the running one lacks a scheduler of SCHEDULERS, it restarts
    the cluster (with fresh data)."""
    size = node_shape(nodes, cpu, memory)
    cpu, memory = quantities.cpu_text(size[0]), quantities.memory_text(size[1])
    directory = state_dir()
    with _locked(directory):
        state = ClusterState.load(directory)
        if state and _reusable(state):
            kube = Kube(Path(state.kubeconfig))
            try:
                # a loaded machine can keep /readyz waiting; a running cluster and its data are kept
                _wait("the running kube-apiserver's /readyz", kube.ready, START_TIMEOUT_S, state.processes,
                      directory)
                set_nodes(kube, nodes, cpu, memory)
            except ClusterError as e:
                raise ClusterError(f"{e}; `coach cluster down` stops it, and `up` then starts a fresh one") from None
            finally:
                kube.close()
            state.nodes, state.cpu, state.memory = nodes, cpu, memory
            state.save(directory)
            return Path(state.kubeconfig)
        if state:
            _down(directory)
        for name in COMPONENTS:
            _binary(name)
        return _start_all(directory, nodes, cpu, memory)


def _reusable(state: ClusterState) -> bool:
    """Whether `up` keeps the running cluster and its data (else it starts a fresh one)."""
    return len(state.processes) == len(COMPONENTS) and state.schedulers == list(SCHEDULERS) and \
        all(_alive(p) and not _rebuilt(p) for p in state.processes)


def disturbs(nodes: int, cpu: str, memory: str) -> str | None:
    """What `up(nodes, cpu, memory)` would do to pods on the running cluster, or None if it would
    leave them alone (the same shape again only returns the kubeconfig)."""
    state = ClusterState.load(state_dir())
    if state is None:
        return None
    if not _reusable(state):
        return "restarts the cluster with fresh data (a component stopped or was rebuilt)"
    try:   # compared as sizes: an older coach wrote the texts as given (0.5, not 500m)
        same = node_shape(state.nodes, state.cpu, state.memory) == node_shape(nodes, cpu, memory)
    except SpecError:
        same = False
    return None if same and state.nodes == nodes else "reshapes the nodes"


def _start_all(directory: Path, nodes: int, cpu: str, memory: str) -> Path:
    shutil.rmtree(directory / "etcd", ignore_errors=True)   # a clean cluster, whatever a crash left
    (directory / "logs").mkdir(parents=True, exist_ok=True)
    pki = directory / "pki"
    pki.mkdir(exist_ok=True)
    sa_key = pki / "sa.key"
    if not sa_key.exists():
        try:
            subprocess.run(["openssl", "genrsa", "-out", str(sa_key), "2048"], check=True, capture_output=True)
            subprocess.run(["openssl", "rsa", "-in", str(sa_key), "-pubout", "-out", str(pki / "sa.pub")],
                           check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError) as e:
            raise ClusterError(f"cannot make the service-account key with openssl: {e}") from e
    admin, sched, coach = secrets.token_hex(16), secrets.token_hex(16), secrets.token_hex(16)
    (pki / "tokens.csv").write_text(
        f"{admin},admin,admin,system:masters\n"
        f"{sched},system:kube-scheduler,system:kube-scheduler\n"
        f'{coach},{COACH_SCHEDULER_USER},coach-scheduler,"system:serviceaccounts,system:serviceaccounts:kube-system"\n')
    etcd_port, etcd_peer, api_port = free_port(), free_port(), free_port()
    server = f"https://127.0.0.1:{api_port}"
    state = ClusterState(nodes=nodes, cpu=cpu, memory=memory, apiserver_port=api_port, etcd_port=etcd_port,
                         kubeconfig=str(directory / "kubeconfig"), schedulers=list(SCHEDULERS))
    try:
        state.processes.append(_start(directory, "etcd", [
            "--name=coach", f"--data-dir={directory / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
            f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-cluster=coach=http://127.0.0.1:{etcd_peer}",
            "--listen-metrics-urls=", "--log-level=warn", "--quota-backend-bytes=4294967296"]))
        state.save(directory)
        state.processes.append(_start(directory, "kube-apiserver", [
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={api_port}",
            f"--cert-dir={pki}", f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=RBAC", "--anonymous-auth=false",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={sa_key}",
            "--service-cluster-ip-range=10.96.0.0/24",
            # no controller makes default service accounts, and no node-lifecycle
            # controller would lift the not-ready taint that TaintNodesByCondition sets
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            "--endpoint-reconciler-type=none",               # loopback is no valid endpoint address
            # no flow control, and room for bursts of bindings (429s would add 1 s retries)
            "--enable-priority-and-fairness=false", "--max-requests-inflight=2000",
            "--max-mutating-requests-inflight=1000", "--profiling=false", "--v=0"]))
        state.save(directory)
        write_kubeconfig(directory / "kubeconfig", server, admin, pki / "apiserver.crt")
        write_kubeconfig(directory / "scheduler.kubeconfig", server, sched, pki / "apiserver.crt",
                         user="system:kube-scheduler")
        write_kubeconfig(directory / "coach-scheduler.kubeconfig", server, coach, pki / "apiserver.crt",
                         user=COACH_SCHEDULER_USER)
        kube = Kube(directory / "kubeconfig")
        try:
            _wait("kube-apiserver /readyz", kube.ready, START_TIMEOUT_S, state.processes, directory)
            _wait_for_rbac(kube)
            apply_manifest(kube, SCHEDULER_RBAC)
            ports = []
            for name, coach in (("kube-scheduler", False), ("coach-scheduler", True)):
                cfg = _scheduler_config(directory, directory / f"{'coach-' if coach else ''}scheduler.kubeconfig",
                                        coach)
                ports.append(free_port())
                state.processes.append(_start(directory, name, [
                    f"--config={cfg}", "--bind-address=127.0.0.1", f"--secure-port={ports[-1]}",
                    f"--cert-dir={directory / 'pki' / name}", "--v=1",
                    # loopback only: metrics and profiles for benchmarks without tokens
                    "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics,/debug/pprof/*"]))
                state.save(directory)
            set_nodes(kube, nodes, cpu, memory)
            for port in ports:
                _wait(f"the scheduler on port {port} to be healthy", lambda: _healthy(port),
                      START_TIMEOUT_S, state.processes, directory)
        finally:
            kube.close()
    except BaseException:
        state.save(directory)
        _down(directory)
        raise
    state.save(directory)
    return directory / "kubeconfig"


def _wait_for_rbac(kube: Kube) -> None:
    """The apiserver is ready before it has written its bootstrap roles and
    the kube-system namespace; the manifests need both."""
    def ok() -> bool:
        ns = kube.request("GET", "/api/v1/namespaces/kube-system").status_code == 200
        role = kube.request("GET", "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/roles/"
                                   "extension-apiserver-authentication-reader").status_code == 200
        return ns and role
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ok():
        if time.monotonic() > deadline:
            raise ClusterError("the apiserver did not create kube-system and its bootstrap roles in time")
        time.sleep(0.2)


def status() -> ClusterStatus:
    """Reports which components run, whether the apiserver answers, and counts."""
    directory = state_dir()
    state = ClusterState.load(directory)
    if state is None:
        return ClusterStatus(running=False, state_dir=directory)
    st = ClusterStatus(running=False, state_dir=directory, kubeconfig=Path(state.kubeconfig),
                       components={p.name: _alive(p) for p in state.processes}, schedulers=state.schedulers)
    if st.components.get("kube-apiserver"):
        kube = Kube(Path(state.kubeconfig))
        try:
            # a loaded machine can keep /readyz waiting: ask a few times before saying no
            st.apiserver_ready = any(kube.ready() for _ in range(3))
            if st.apiserver_ready:
                st.node_sizes = [node_size(n) for n in kube.nodes() if n["metadata"].get("labels", {}).get(NODE_LABEL)]
                pods = kube.pods()
                st.pods = len(pods)
                st.bound_pods = sum(1 for p in pods if p["spec"].get("nodeName"))
        finally:
            kube.close()
    st.running = st.apiserver_ready and len(st.components) == len(COMPONENTS) and all(st.components.values())
    return st


def down() -> list[str]:
    """Stops every process of the process table (and nothing else), newest
    first, and removes etcd's data. Returns the names of the stopped processes."""
    directory = state_dir()
    if not directory.is_dir():
        return []
    with _locked(directory):
        return _down(directory)


def _down(directory: Path) -> list[str]:
    state = ClusterState.load(directory)
    stopped: list[str] = []
    if state is None:
        return stopped
    for p in reversed(state.processes):
        if not _alive(p):
            continue
        _signal(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while _alive(p) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(p):
            _signal(p.pid, signal.SIGKILL)
            while _alive(p):
                time.sleep(0.05)
        stopped.append(p.name)
    _reap([p.pid for p in state.processes])
    shutil.rmtree(directory / "etcd", ignore_errors=True)
    (directory / "state.json").unlink(missing_ok=True)
    return stopped


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:   # it exited since it was found alive
        pass


def _reap(pids: list[int]) -> None:
    """Collects our exited children (if this process started them) so they leave no zombies."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def scheduler_metrics(name: str) -> str:
    """The Prometheus text of the running `kube-scheduler` or `coach-scheduler` (served on loopback
    without a token), for benchmarks and tests that count or time scheduling attempts."""
    state = ClusterState.load(state_dir())
    pids = [p.pid for p in state.processes if p.name == name and _alive(p)] if state else []
    if not pids:
        raise ClusterError(f"no {name} of `coach cluster up` runs (state in {state_dir()})")
    args = Path(f"/proc/{pids[0]}/cmdline").read_bytes().decode().split("\0")
    (port,) = [a.split("=", 1)[1] for a in args if a.startswith("--secure-port=")]
    return httpx.get(f"https://127.0.0.1:{port}/metrics", verify=False, timeout=10).text
