"""`coach cluster up|status|down` as a user runs it, against the session's control plane."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import coach.cluster
from coach.cluster import Kube
from coach.state.store import Store

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "coach.cli.main", "cluster", *args], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                          timeout=300)


def _pids(state_dir: Path) -> list[int]:
    return [p["pid"] for p in json.loads((state_dir / "state.json").read_text())["processes"]]


def test_up_is_idempotent_and_prints_the_kubeconfig_last(control_plane: Path) -> None:
    proc = run("up", "--nodes", "3", "--cpu", "2", "--memory", "4Gi")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == str(control_plane)
    status = run("status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "coach-scheduler  running" in status.stdout
    assert "nodes            3 × (2 CPU, 4 GiB)\n" in status.stdout
    assert "schedulers       default-scheduler, bin-pack, coach-gang" in status.stdout
    as_json = json.loads(run("status", "--json").stdout)   # there was none
    assert as_json["running"] and as_json["problem"] is None and as_json["nodes"] == [[2.0, 4.0]] * 3, as_json
    assert as_json["components"]["coach-scheduler"] and "coach-gang" in as_json["schedulers"]
    # any client with nothing but the kubeconfig
    k = Kube(control_plane)
    try:
        caps = {n["status"]["allocatable"]["cpu"] for n in k.nodes()}
    finally:
        k.close()
    assert caps == {"2"}
    # no flags, as the message of a stopped component advises: the shape stays (it was reset to the defaults)
    again = run("up")
    assert again.returncode == 0 and "control plane already up, unchanged: 3 nodes × (2 CPU, 4 GiB)" in again.stderr, \
        again.stderr


@pytest.mark.parametrize("args, message", [
    (["up", "--cpu", "lots"], "--cpu: must be a Kubernetes quantity"),
    (["up", "--memory", ""], "--memory: must be a Kubernetes quantity"),
])
def test_bad_input_is_a_message_not_a_traceback(control_plane: Path, args: list[str], message: str) -> None:
    proc = run(*args)
    assert proc.returncode != 0
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_missing_binaries_name_the_build_step(tmp_path: Path) -> None:
    proc = run("up", env={"COACH_BIN_DIR": str(tmp_path / "nothing"), "COACH_CLUSTER_DIR": str(tmp_path / "c")})
    assert proc.returncode != 0
    assert "deploy/local/build" in proc.stderr and "Traceback" not in proc.stderr


def test_status_and_down_without_a_cluster(tmp_path: Path) -> None:
    env = {"COACH_CLUSTER_DIR": str(tmp_path / "none")}
    status = run("status", env=env)
    assert status.returncode == 1 and "not running" in status.stdout
    down = run("down", env=env)
    assert down.returncode == 0 and "nothing was running" in down.stdout


def test_down_refuses_while_a_job_runs_on_the_cluster_and_force_overrides(control_plane: Path,
                                                                         tmp_path: Path) -> None:
    assert run("up", "--nodes", "2", "--cpu", "4", "--memory", "8Gi").returncode == 0   # no job yet: reshaped
    store = Store()
    store.create_job("job-on-cluster", "j", "j.yaml", {}, 0.3, 1.0, backend="cluster")
    store.create_job("job-local", "j", "j.yaml", {}, 0.3, 1.0)
    store.create_job("job-done", "j", "j.yaml", {}, 0.3, 1.0, backend="cluster")
    store.update_job("job-done", status="succeeded")
    for job_id in ("job-on-cluster", "job-local", "job-done"):
        store.claim_job(job_id)   # this test's process stands in for their `coach submit`
    store.update_job("job-on-cluster", status="running")
    down = run("down")
    assert down.returncode == 1 and "Traceback" not in down.stderr, down.stderr
    assert ("1 job still runs on the cluster backend: job-on-cluster (running); `coach stop JOB` stops one "
            "after its epoch, `coach cluster down --force` stops the cluster under them") in down.stderr
    assert run("status").returncode == 0   # nothing was stopped
    # a comparison beside it would read its room as the schedulers' failure
    compare = run("compare", "--jobs", "1")
    assert compare.returncode == 1 and ("`coach cluster compare --force` runs beside them, on the room they "
                                        "leave") in compare.stderr, compare.stderr
    # reshaping the nodes deleted the job's pods too; the same shape again only prints the kubeconfig
    before = run("status").stdout
    reshape = run("up", "--nodes", "1", "--cpu", "500m", "--memory", "1Gi")
    assert reshape.returncode == 1 and "`coach cluster up --force` reshapes the nodes under them" in reshape.stderr
    same = run("up", "--nodes", "2", "--cpu", "4", "--memory", "8Gi")
    assert same.returncode == 0 and same.stdout.strip().splitlines()[-1] == str(control_plane), same.stderr
    assert "control plane already up, unchanged: 2 nodes × (4 CPU, 8 GiB)" in same.stderr, same.stderr
    plain = run("up", "--memory", "8", "--cpu", "4000m")   # the same sizes written otherwise
    assert plain.returncode == 0 and "already up, unchanged" in plain.stderr, plain.stderr
    assert run("status").stdout == before
    # --force goes ahead (here on a cluster folder of its own: the session's stays up)
    forced = run("down", "--force", env={"COACH_CLUSTER_DIR": str(tmp_path / "other")})
    assert forced.returncode == 0 and "nothing was running" in forced.stdout, forced.stderr
    store.release_job("job-on-cluster")   # its process is gone: the job reads as interrupted, down goes ahead
    assert run("down", env={"COACH_CLUSTER_DIR": str(tmp_path / "other")}).returncode == 0


def test_up_refuses_to_restart_a_cluster_under_a_running_job(tmp_path: Path) -> None:
    """The same shape again was let through, and `up` then restarted a cluster with a stopped
    component (fresh data: the job's pods gone). Here the whole state is one dead process."""
    store = Store()
    store.create_job("job-on-cluster", "j", "j.yaml", {}, 0.3, 1.0, backend="cluster")
    store.claim_job("job-on-cluster")
    store.update_job("job-on-cluster", status="training")
    cp = coach.cluster.control_plane
    cp.ClusterState(nodes=2, cpu="0.5", memory="8Gi", apiserver_port=1, etcd_port=2,   # as an older coach wrote it
                    kubeconfig=str(tmp_path / "kubeconfig"), processes=[cp.Process("kube-apiserver", 2**22 + 1, "/x")],
                    ).save(tmp_path)
    proc = run("up", "--nodes", "2", "--cpu", "500m", "--memory", "8Gi", env={"COACH_CLUSTER_DIR": str(tmp_path)})
    assert proc.returncode == 1 and "`coach cluster up --force` restarts the cluster with fresh data (a component " \
        "stopped or was rebuilt) under them" in proc.stderr, proc.stderr


ALL_UP = dict.fromkeys(("etcd", "kube-apiserver", "kube-scheduler", "coach-scheduler"), True)


@pytest.mark.parametrize("components, ready, said", [
    ({}, False, "no control plane is running: start one with `coach cluster up`"),
    (dict.fromkeys(ALL_UP, False), False, "no control plane is running"),
    # one scheduler killed: compare and submit said "no control plane is running"
    ({**ALL_UP, "kube-scheduler": False}, True, "the control plane is not whole: kube-scheduler stopped; "
                                                "`coach cluster up` starts what is missing"),
    ({k: v for k, v in ALL_UP.items() if k != "coach-scheduler"}, True, "coach-scheduler stopped"),   # an older up
    (ALL_UP, False, "the control plane's apiserver does not answer"),
])
def test_why_the_control_plane_cannot_be_used(components: dict[str, bool], ready: bool, said: str) -> None:
    kubeconfig = Path("/k") if components else None
    st = coach.cluster.control_plane.ClusterStatus(False, Path("/s"), kubeconfig, components, ready)
    assert said in st.not_running()


def test_public_names() -> None:
    assert sorted(coach.cluster.__all__) == ["BinaryMissing", "ClusterError", "ClusterStatus", "Kube", "bin_dir",
                                             "down", "set_nodes", "state_dir", "status", "up"]


_STATE = {"nodes": 1, "cpu": "2", "memory": "4Gi", "apiserver_port": 1, "etcd_port": 2, "kubeconfig": "/k",
          "processes": [{"name": "etcd", "pid": 1e30, "binary": "x"}]}   # os.kill raised a TypeError on it


@pytest.mark.parametrize("content", ["{garbage", '{"nodes": 1}', "[]", json.dumps(_STATE),
                                     json.dumps(dict(_STATE, processes=[], kubeconfig=5))],
                         ids=["not-json", "partial", "a-list", "a-pid-not-an-integer", "a-kubeconfig-not-a-path"])
def test_a_damaged_state_file_is_named_not_a_traceback(tmp_path: Path, content: str) -> None:
    (tmp_path / "state.json").write_text(content)
    for command in ("status", "down"):
        proc = run(command, env={"COACH_CLUSTER_DIR": str(tmp_path)})
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert f"{tmp_path / 'state.json'}: not a control-plane state" in proc.stderr
        assert "__init__" not in proc.stderr and "pgrep -af" in proc.stderr, proc.stderr   # it read "__init__() missing 5 ..."


@pytest.mark.parametrize("content", [None, "{garbage", "{}", "clusters: 5"],
                         ids=["removed", "not-yaml", "empty", "not-a-list"])
def test_a_kubeconfig_removed_or_damaged_is_named_not_a_traceback(tmp_path: Path, content: str | None) -> None:
    """Removed while the control plane ran, `coach cluster status` and `submit --backend cluster`
    ended in a FileNotFoundError traceback (a KeyError for `{}`)."""
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    with pytest.raises(coach.cluster.ClusterError, match=f"kubeconfig {path} cannot be read .*`coach cluster down`, "
                                                         "then `coach cluster up`, writes a fresh one"):
        Kube(path)


@pytest.mark.parametrize(("option", "value", "problem"), [
    ("--cpu", "4xyz", "must be a Kubernetes quantity"),
    ("--memory", "8Qi", "must be a Kubernetes quantity"),
    ("--cpu", "0", "must be more than 0"),       # accepted before: a control plane of nodes that fit no pod
    ("--memory", "0Gi", "must be more than 0"),
    ("--memory", "512Ki", "must be at least 1Mi"),   # written in MiB: a node of 0Mi
    ("--cpu", "0.0001", "must be at least 1m"),
    ("--cpu", "1e400", "must be a Kubernetes quantity"),
    ("--cpu", "-1", "must be more than 0"),
    ("--nodes", "100000000", "must be between 0 and 5000"),   # exit 1 before
])
def test_up_refuses_bad_sizes_before_starting_anything(tmp_path: Path, option: str, value: str, problem: str) -> None:
    proc = run("up", option, value, env={"COACH_CLUSTER_DIR": str(tmp_path)})
    assert proc.returncode == 2 and f"{option}: {problem}" in proc.stderr, proc.stderr
    assert not (tmp_path / "state.json").exists()


@pytest.mark.parametrize(("cpu", "memory", "said", "cpu_written", "memory_written"), [
    # Kubernetes reads a plain number as bytes: `--memory 8` made nodes of 8 bytes that fit no pod
    ("4", "8", "(4 CPU, 8 GiB)", "4", "8Gi"),
    ("1.5", "1e1", "(1.5 CPU, 10 GiB)", "1500m", "10Gi"),   # an exponent was refused as no quantity
    ("2500m", "2G", "(2.5 CPU, 1.8623 GiB)", "2500m", "1907Mi"),
    ("4", "4096000k", "(4 CPU, 3.81445 GiB)", "4", "3906Mi"),   # lower-case k: refused before
])
def test_node_sizes_are_read_as_kubernetes_quantities_and_written_in_its_units(
        control_plane: Path, cpu: str, memory: str, said: str, cpu_written: str, memory_written: str) -> None:
    proc = run("up", "--nodes", "2", "--cpu", cpu, "--memory", memory)
    assert proc.returncode == 0 and said in proc.stderr, proc.stderr
    k = Kube(control_plane)
    try:
        assert {(n["status"]["allocatable"]["cpu"], n["status"]["allocatable"]["memory"])
                for n in k.nodes()} == {(cpu_written, memory_written)}
    finally:
        k.close()
    assert f"nodes            2 × {said}\n" in run("status").stdout


def test_a_slow_apiserver_does_not_make_up_restart_the_cluster(control_plane: Path) -> None:
    """`up` on a running cluster asked /readyz once (5 s); a loaded apiserver that missed it
    made `up` stop the cluster and delete its data, then start a fresh one."""
    state_dir = control_plane.parent
    before = _pids(state_dir)
    apiserver = before[1]
    os.kill(apiserver, signal.SIGSTOP)    # stands for a machine too loaded to answer in 5 s
    resume = threading.Timer(7.0, os.kill, (apiserver, signal.SIGCONT))
    resume.start()
    try:
        proc = run("up", "--nodes", "2", "--cpu", "4", "--memory", "8Gi")
    finally:
        resume.join()
    assert proc.returncode == 0, proc.stderr
    assert _pids(state_dir) == before


def test_two_ups_at_once_through_a_symlinked_binary_folder(tmp_path: Path) -> None:
    """Two `up`s at once each stopped the other's processes and deleted its data, and both
    failed. And a binary folder reached through a symlink made every process look dead."""
    (tmp_path / "bin").symlink_to(coach.cluster.bin_dir())
    env = {"COACH_BIN_DIR": str(tmp_path / "bin"), "COACH_CLUSTER_DIR": str(tmp_path / "c")}
    try:
        with ThreadPoolExecutor(2) as pool:
            procs = list(pool.map(lambda _: run("up", "--nodes", "1", env=env), range(2)))
        for proc in procs:
            assert proc.returncode == 0, proc.stderr
        assert {p.stdout.strip().splitlines()[-1] for p in procs} == {str(tmp_path / "c" / "kubeconfig")}
        assert run("status", env=env).returncode == 0
    finally:
        down = run("down", env=env)
    assert down.returncode == 0 and "coach-scheduler" in down.stdout, down.stdout + down.stderr


def test_a_cluster_an_older_coach_started_is_restarted_with_every_scheduler(tmp_path: Path) -> None:
    """A control plane started before the bin-pack profile existed has no scheduler for
    bin-pack pods: `compare` says so instead of leaving them pending, and `up` restarts it."""
    env = {"COACH_CLUSTER_DIR": str(tmp_path)}
    try:
        assert run("up", "--nodes", "1", env=env).returncode == 0
        state = json.loads((tmp_path / "state.json").read_text())
        del state["schedulers"]   # as an older coach wrote it
        (tmp_path / "state.json").write_text(json.dumps(state))
        assert "schedulers       default-scheduler, coach-gang\n" in run("status", env=env).stdout
        proc = run("compare", "--schedulers", "bin-pack", env=env)
        assert proc.returncode == 1 and "the running control plane has no bin-pack scheduler (an older coach " \
            "started it): `coach cluster up` restarts it with every scheduler" in proc.stderr, proc.stderr
        assert run("up", "--nodes", "1", env=env).returncode == 0
        assert _pids(tmp_path) != [p["pid"] for p in state["processes"]]
        assert "schedulers       default-scheduler, bin-pack, coach-gang" in run("status", env=env).stdout
    finally:
        assert run("down", env=env).returncode == 0


def test_relative_state_and_binary_folders_are_read_from_the_callers_folder(tmp_path: Path) -> None:
    # the processes run in the state folder: relative paths were read from there
    (tmp_path / "bin").symlink_to(coach.cluster.bin_dir())
    env = {"COACH_BIN_DIR": "bin", "COACH_CLUSTER_DIR": "c"}
    try:
        proc = run("up", "--nodes", "1", env=env, cwd=tmp_path)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stdout.strip().splitlines()[-1] == str(tmp_path / "c" / "kubeconfig")
    finally:
        down = run("down", env=env, cwd=tmp_path)
    assert down.returncode == 0 and "coach-scheduler" in down.stdout, down.stdout + down.stderr


@pytest.mark.parametrize("same_start", [False, True])
def test_down_stops_only_the_process_it_started_not_a_reused_pid(tmp_path: Path, same_start: bool) -> None:
    # after a restart, a pid of the process table may run the same binary again, started by
    # someone else: the binary matched, so `down` killed it. Here `sleep` stands in for that
    # binary, recorded once with its own start time and once with another.
    from coach.identity import process_identity

    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        identity = process_identity(sleeper.pid)
        assert identity is not None
        if not same_start:
            boot, pid, start = identity.split(":")
            identity = f"{boot}:{pid}:{int(start) + 1}"
        binary = os.path.realpath(f"/proc/{sleeper.pid}/exe")
        state = {"nodes": 1, "cpu": "4", "memory": "8Gi", "apiserver_port": 1, "etcd_port": 2,
                 "kubeconfig": str(tmp_path / "kubeconfig"),
                 "processes": [{"name": "etcd", "pid": sleeper.pid, "binary": binary,
                                "mtime": os.stat(binary).st_mtime, "identity": identity}]}
        (tmp_path / "state.json").write_text(json.dumps(state))
        down = run("down", env={"COACH_CLUSTER_DIR": str(tmp_path)})
        assert down.returncode == 0, down.stderr
        if same_start:
            assert down.stdout.strip() == "stopped: etcd"
            assert sleeper.wait(timeout=10) is not None
        else:
            assert down.stdout.strip() == "nothing was running"
            assert sleeper.poll() is None, "a process that only reuses the pid was killed"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_scheduler_metrics_of_no_running_control_plane_say_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COACH_CLUSTER_DIR", str(tmp_path))
    with pytest.raises(coach.cluster.ClusterError, match=f"no coach-scheduler of `coach cluster up` runs "
                                                         f"\\(state in {tmp_path}\\)"):
        coach.cluster.control_plane.scheduler_metrics("coach-scheduler")


def test_scheduler_metrics_are_the_running_schedulers_own(control_plane: Path) -> None:
    for name, profile in (("kube-scheduler", "default-scheduler"), ("coach-scheduler", "coach-gang")):
        assert f'profile="{profile}"' in coach.cluster.control_plane.scheduler_metrics(name)


@pytest.mark.parametrize("listening", [False, True])
def test_an_apiserver_that_is_gone_is_named_with_what_to_do(tmp_path: Path, listening: bool) -> None:
    """A job on the cluster backend after `coach cluster down --force` failed with "[Errno 111]
    Connection refused" and nothing more. No control plane here: a port nobody listens on, or
    one that answers the TLS handshake with garbage (a failed handshake is not a stopped apiserver)."""
    import socket
    import threading

    from coach.cluster import ClusterError

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    if listening:
        def answer() -> None:   # every time: a failed handshake is tried again (`CONNECT_RETRIES`)
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:   # the test is over
                    return
                conn.sendall(b"not TLS\r\n\r\n")
                conn.close()
        threading.Thread(target=answer, daemon=True).start()
    else:
        server.close()
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({"clusters": [{"cluster": {"server": f"https://127.0.0.1:{port}",
                                                            "insecure-skip-tls-verify": True}}],
                                  "users": [{"user": {"token": "t"}}]}))
    k = Kube(config, timeout=5.0)
    try:
        with pytest.raises(ClusterError, match=f"apiserver https://127.0.0.1:{port}: GET ") as err:
            k.pods("default")
    finally:
        k.close()
        server.close()
    said = "the control plane is not running (`coach cluster status` says which part stopped"
    assert (said in str(err.value)) is not listening, str(err.value)


def test_the_running_control_plane_named_where_its_state_is_odd(control_plane: Path, tmp_path: Path) -> None:
    """Three states another tool (or a user) can leave on the cluster, each a traceback or a
    misleading message before (helper-33): a kubeconfig whose token is not this control plane's
    ("the apiserver does not answer"), a namespace being deleted, which nothing on the local
    control plane finishes (every epoch failed 4 times with raw JSON, and so did `resume`), and a
    Node without status (a KeyError traceback in every later `coach submit`)."""
    import yaml

    from coach.cluster import ClusterError
    from coach.cluster.nodes import room_per_node

    wrong = yaml.safe_load(control_plane.read_text())
    wrong["users"][0]["user"]["token"] = "not-this-clusters"
    (tmp_path / "wrong").write_text(yaml.safe_dump(wrong))
    k = Kube(tmp_path / "wrong")
    try:
        with pytest.raises(ClusterError, match=r"refuses the kubeconfig's credentials \(401\)"):
            k.ready()
        with pytest.raises(ClusterError, match=r"refuses the kubeconfig's credentials \(401\).*`coach cluster down`"):
            k.pods("default")
    finally:
        k.close()
    k = Kube(control_plane)
    try:
        k.ensure_namespace("going")
        k.call("DELETE", "/api/v1/namespaces/going", ok=(200, 202))
        with pytest.raises(ClusterError, match="namespace going is being deleted, and no namespace controller runs"):
            k.create_pod({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "going"},
                          "spec": {"containers": [{"name": "c", "image": "x"}]}})
        k.call("POST", "/api/v1/nodes", json={"apiVersion": "v1", "kind": "Node", "metadata": {"name": "bare"}})
        try:
            assert ((0.0, 0.0), (0.0, 0.0)) in room_per_node(k, "coach-jobs")   # read: nothing allocatable
        finally:
            k.call("DELETE", "/api/v1/nodes/bare", ok=(200, 202, 404))
    finally:
        k.close()


def test_a_handshake_that_fails_once_is_tried_again(control_plane: Path, tmp_path: Path) -> None:
    """One TLS handshake with the session's apiserver failed in CI ("TLSV1_ALERT_DECODE_ERROR")
    and took a whole comparison with it. Here a relay in front of the real apiserver answers the
    first connection with garbage and passes the next ones through."""
    import socket

    import yaml

    cfg = yaml.safe_load(control_plane.read_text())
    apiserver = cfg["clusters"][0]["cluster"]["server"].removeprefix("https://").rsplit(":", 1)
    relay = socket.create_server(("127.0.0.1", 0))
    connections: list[str] = []

    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            dst.close()

    def serve() -> None:
        while True:
            try:
                conn, _ = relay.accept()
            except OSError:
                return
            if not connections:
                connections.append("garbage")
                conn.sendall(b"not TLS\r\n\r\n")
                conn.close()
                continue
            connections.append("relayed")
            upstream = socket.create_connection((apiserver[0], int(apiserver[1])))
            threading.Thread(target=pump, args=(conn, upstream), daemon=True).start()
            threading.Thread(target=pump, args=(upstream, conn), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    cfg["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{relay.getsockname()[1]}"
    relayed = tmp_path / "kubeconfig"
    relayed.write_text(yaml.safe_dump(cfg))
    k = Kube(relayed, timeout=10.0)
    try:
        assert len(k.nodes()) >= 1
    finally:
        k.close()
        relay.close()
    assert connections[:2] == ["garbage", "relayed"], connections


@pytest.mark.parametrize("alive", [True, False])
def test_down_refuses_while_a_comparison_runs(tmp_path: Path, alive: bool) -> None:
    """`coach cluster down` during a compare stopped the cluster under it, and the comparison
    ended with "Connection refused" and none of its runs. This process stands in for it."""
    from coach.identity import process_identity

    (tmp_path / "compare.run").write_text(process_identity(os.getpid()) if alive else f"x:{2**22 + 1}:0")
    env = {"COACH_CLUSTER_DIR": str(tmp_path)}
    proc = run("down", env=env)
    if alive:
        assert proc.returncode == 1 and f"a `coach cluster compare` (pid {os.getpid()}) runs on the cluster: " \
            "let it end, or stop it with Ctrl-C (--force goes ahead anyway)" in proc.stderr, proc.stderr
        # nor does a second comparison run beside it, --force or not (it removed the first's marker)
        second = run("compare", "--jobs", "1", "--force", env=env)
        assert second.returncode == 1 and f"a `coach cluster compare` (pid {os.getpid()}) runs on the cluster: " \
            "let it end, or stop it with Ctrl-C" in second.stderr and "--force" not in second.stderr, second.stderr
        proc = run("down", "--force", env=env)
    assert proc.returncode == 0 and "nothing was running" in proc.stdout, proc.stdout + proc.stderr
