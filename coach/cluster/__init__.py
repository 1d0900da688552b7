"""The local control plane: real etcd, kube-apiserver, default kube-scheduler
and coach-scheduler on loopback, with simulated nodes, for tests, benchmarks,
experiments and users who have no cluster (and no Docker)."""

from coach.cluster.control_plane import (ClusterStatus, bin_dir, down, state_dir, status, up)
from coach.cluster.errors import BinaryMissing, ClusterError
from coach.cluster.kube import Kube
from coach.cluster.nodes import set_nodes

__all__ = ["BinaryMissing", "ClusterError", "ClusterStatus", "Kube", "bin_dir", "down", "set_nodes",
           "state_dir", "status", "up"]
