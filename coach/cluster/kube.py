"""A minimal Kubernetes API client on httpx: what the tooling, the tests and the
benchmark need (create, list, delete, patch), with no extra dependency."""

from __future__ import annotations

import base64
import ssl
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from coach.cluster.errors import ClusterError

Obj = dict[str, Any]
CONNECT_RETRIES = 2     # more tries of a request whose connection failed (not refused) before it was sent
CONNECT_RETRY_S = 0.2   # after this, then twice this


class Kube:
    """Talks to one apiserver with the bearer token of a kubeconfig."""

    def __init__(self, kubeconfig: Path, timeout: float = 30.0) -> None:
        try:   # removed or edited while the control plane runs
            cfg = yaml.safe_load(Path(kubeconfig).read_text())
            cluster = cfg["clusters"][0]["cluster"]
            user = cfg["users"][0]["user"]
            self.server: str = cluster["server"]
            token = user["token"]
        except (OSError, UnicodeDecodeError, yaml.YAMLError, LookupError, TypeError) as e:
            why = getattr(e, "strerror", None) or f"{type(e).__name__}: {e}".splitlines()[0]
            raise ClusterError(f"kubeconfig {kubeconfig} cannot be read ({why}); `coach cluster down`, then "
                               "`coach cluster up`, writes a fresh one") from None
        verify: ssl.SSLContext | bool = True
        if cluster.get("insecure-skip-tls-verify"):
            verify = False
        elif "certificate-authority-data" in cluster:
            ctx = ssl.create_default_context()
            ctx.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
            verify = ctx
        self.http = httpx.Client(base_url=self.server, verify=verify, timeout=timeout,
                                 headers={"Authorization": f"Bearer {token}"})

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        retries = 0
        while True:
            try:
                return self.http.request(method, path, **kw)
            except httpx.HTTPError as e:
                # a connection that failed before the request was sent, other than a refused one (the
                # apiserver is not there), is tried again: one TLS handshake with the session's
                # apiserver failed under load in CI ("TLSV1_ALERT_DECODE_ERROR"), and a whole
                # comparison with it
                if isinstance(e, httpx.ConnectError) and not _refused(e) and retries < CONNECT_RETRIES:
                    retries += 1
                    time.sleep(CONNECT_RETRY_S * retries)
                    continue
                # a refused connection read "[Errno 111] Connection refused" only; a timeout (etcd
                # killed) "The read operation timed out", minutes on end
                down = (": the control plane is not running (`coach cluster status` says which part stopped; "
                        "`coach cluster up` starts it)") if _refused(e) else _stopped_note()
                raise ClusterError(f"apiserver {self.server}: {method} {path}: {e}{down}") from e

    def call(self, method: str, path: str, ok: tuple[int, ...] = (200, 201), **kw: Any) -> Obj:
        r = self.request(method, path, **kw)
        if r.status_code not in ok:
            self._refused_credentials(r)
            if r.status_code == 403 and "being terminated" in r.text:   # 4 retries of raw JSON, then resume did the same
                namespace = path.split("/namespaces/")[-1].split("/")[0]
                raise ClusterError(f"apiserver: namespace {namespace} is being deleted, and no namespace controller "
                                   "runs on the local control plane to finish it: `coach cluster down`, then `coach "
                                   "cluster up`")
            raise ClusterError(f"apiserver: {method} {path}: {r.status_code} {r.text[:300]}")
        return r.json() if r.content else {}

    def ready(self, timeout: float = 5.0) -> bool:
        try:
            r = self.http.get("/readyz", timeout=timeout)
        except httpx.HTTPError:
            return False
        self._refused_credentials(r)
        return r.status_code == 200

    def _refused_credentials(self, r: httpx.Response) -> None:
        if r.status_code == 401:   # it read "the apiserver does not answer"
            raise ClusterError(f"apiserver {self.server} refuses the kubeconfig's credentials (401): the "
                               "kubeconfig is not this control plane's; `coach cluster down`, then `coach cluster "
                               "up`, writes a fresh one")

    # pods -------------------------------------------------------------
    def create_pod(self, pod: Obj) -> Obj:
        ns = pod["metadata"].get("namespace", "default")
        return self.call("POST", f"/api/v1/namespaces/{ns}/pods", json=pod)

    def pods(self, namespace: str | None = None, selector: str | None = None) -> list[Obj]:
        path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
        params = {"labelSelector": selector} if selector else {}
        return self.call("GET", path, params=params)["items"]

    def delete_pod(self, namespace: str, name: str) -> None:
        """Deletes at once (grace 0): simulated nodes have no kubelet to finish a graceful delete."""
        self.call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", ok=(200, 202, 404),
                  json={"gracePeriodSeconds": 0})

    def delete_pods(self, namespace: str, selector: str | None = None) -> None:
        params = {"gracePeriodSeconds": "0"}
        if selector:
            params["labelSelector"] = selector
        self.call("DELETE", f"/api/v1/namespaces/{namespace}/pods", params=params)

    # nodes and namespaces ----------------------------------------------
    def nodes(self) -> list[Obj]:
        return self.call("GET", "/api/v1/nodes")["items"]

    def ensure_namespace(self, name: str) -> None:
        self.call("POST", "/api/v1/namespaces", ok=(201, 409),
                  json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def _stopped_note() -> str:
    from coach.cluster.control_plane import stopped   # it imports this module

    gone = stopped()
    return f": {', '.join(gone)} stopped; `coach cluster up` starts what is missing" if gone else ""


_RESOURCES = {  # kind -> (API prefix, plural, namespaced): the kinds deploy/ manifests use
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
}


def apply_manifest(kube: Kube, path: Path) -> list[str]:
    """Creates or replaces the objects of a YAML manifest (the kinds above);
    returns 'Kind/name' of each. Lets the local control plane run with the
    same RBAC that deploy/scheduler installs on a real cluster."""
    done = []
    for obj in yaml.safe_load_all(Path(path).read_text()):
        if not obj:
            continue
        kind, meta = obj["kind"], obj["metadata"]
        if kind not in _RESOURCES:
            raise ClusterError(f"{path}: cannot apply kind {kind}")
        prefix, plural, namespaced = _RESOURCES[kind]
        base = f"{prefix}/namespaces/{meta.get('namespace', 'default')}/{plural}" if namespaced \
            else f"{prefix}/{plural}"
        r = kube.request("POST", base, json=obj)
        if r.status_code == 409:
            current = kube.call("GET", f"{base}/{meta['name']}")
            obj["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            kube.call("PUT", f"{base}/{meta['name']}", json=obj)
        elif r.status_code not in (200, 201):
            raise ClusterError(f"apply {path}: {kind}/{meta['name']}: {r.status_code} {r.text[:300]}")
        done.append(f"{kind}/{meta['name']}")
    return done


def write_kubeconfig(path: Path, server: str, token: str, ca_file: Path | None, user: str = "admin") -> None:
    """Writes a kubeconfig for kubectl and any client; the CA is the apiserver's own self-signed one."""
    cluster: Obj = {"server": server}
    if ca_file is not None and ca_file.exists():
        cluster["certificate-authority-data"] = base64.b64encode(ca_file.read_bytes()).decode()
    else:
        cluster["insecure-skip-tls-verify"] = True
    cfg = {"apiVersion": "v1", "kind": "Config",
           "clusters": [{"name": "coach-local", "cluster": cluster}],
           "users": [{"name": user, "user": {"token": token}}],
           "contexts": [{"name": "coach-local", "context": {"cluster": "coach-local", "user": user}}],
           "current-context": "coach-local"}
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))


def _refused(e: BaseException) -> bool:
    """Whether nothing listened where the apiserver should: a ConnectionRefusedError in the chain
    of causes that httpx wraps."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, ConnectionRefusedError):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False
