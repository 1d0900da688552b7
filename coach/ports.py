"""A free TCP port on loopback, for the processes Coach starts (ps-lite's scheduler, etcd, the
kube-apiserver). Free when asked: the caller binds it soon after, and a clash shows as a start-up
error that names the port."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
