"""The cluster backend: role functions as pods that a Kubernetes scheduler places."""

from coach.backends.cluster.backend import NAMESPACE, ClusterBackend, connect

__all__ = ["ClusterBackend", "NAMESPACE", "connect"]
