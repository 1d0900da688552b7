"""One real control plane per test session (etcd, kube-apiserver, default
kube-scheduler, coach-scheduler, simulated nodes), in a state directory of its
own so a user's `coach cluster` is left alone. Each test reshapes the nodes
and starts from an empty namespace."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from coach import cluster
from tests.cluster.workload import NAMESPACE, Workload


@pytest.fixture(autouse=True)
def own_coach_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`coach cluster down` reads the job store: never the user's."""
    monkeypatch.setenv("COACH_HOME", str(tmp_path / "coach-home"))


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    missing = [b for b in ("etcd", "kube-apiserver", "kube-scheduler", "coach-scheduler")
               if not (cluster.bin_dir() / b).exists()]
    if missing:
        pytest.fail(f"control-plane binaries missing in {cluster.bin_dir()}: {', '.join(missing)}; "
                    "run deploy/local/build first")
    old = os.environ.get("COACH_CLUSTER_DIR")
    os.environ["COACH_CLUSTER_DIR"] = str(tmp_path_factory.mktemp("cluster"))
    try:
        kubeconfig = cluster.up(nodes=2, cpu="4", memory="8Gi")
        yield kubeconfig
    finally:
        stopped = cluster.down()
        if old is None:
            os.environ.pop("COACH_CLUSTER_DIR", None)
        else:
            os.environ["COACH_CLUSTER_DIR"] = old
        assert stopped, "the session's control plane was not running at teardown"


@pytest.fixture
def workload(control_plane: Path) -> Iterator[Workload]:
    w = Workload(cluster.Kube(control_plane))
    w.reset(nodes=2, cpu="4", memory="8Gi")
    try:
        yield w
    finally:
        w.kube.delete_pods(NAMESPACE)
        w.kube.close()
