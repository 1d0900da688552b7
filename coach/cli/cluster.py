"""`coach cluster up|status|down`: a local control plane on loopback (real etcd,
kube-apiserver, default kube-scheduler and coach-scheduler, simulated nodes)."""

from __future__ import annotations

import typer
from rich.console import Console

from coach import cluster

app = typer.Typer(help="Start, inspect and stop a local Kubernetes control plane with simulated nodes "
                       "(binaries from deploy/local/build).", no_args_is_help=True)
err = Console(stderr=True, soft_wrap=True)


@app.command()
def up(nodes: int = typer.Option(cluster.control_plane.DEFAULT_NODES, "--nodes", min=0, help="Simulated nodes."),
       cpu: str = typer.Option(cluster.control_plane.DEFAULT_CPU, "--cpu", help="CPU of each node (e.g. 4)."),
       memory: str = typer.Option(cluster.control_plane.DEFAULT_MEMORY, "--memory",
                                  help="Memory of each node (e.g. 8Gi; a plain number is GiB).")) -> None:
    """Start the control plane (or reshape the running one); the last line is the kubeconfig path."""
    kubeconfig = cluster.up(nodes=nodes, cpu=cpu, memory=memory)
    err.print(f"control plane up: {nodes} nodes × ({cpu} CPU, {cluster.control_plane.node_memory(memory)}); "
              "schedulers: default-scheduler, coach-gang")
    print(kubeconfig)


@app.command()
def status() -> None:
    """Show which components run and how many nodes and pods the cluster has."""
    st = cluster.status()
    if not st.components:
        print(f"not running (state in {st.state_dir})")
        raise typer.Exit(1)
    for name, alive in st.components.items():
        print(f"{name:16} {'running' if alive else 'STOPPED'}")
    print(f"{'apiserver':16} {'ready' if st.apiserver_ready else 'not ready'}")
    print(f"{'nodes':16} {st.nodes}")
    print(f"{'pods':16} {st.pods} ({st.bound_pods} bound)")
    print(f"{'kubeconfig':16} {st.kubeconfig}")
    if not st.running:
        raise typer.Exit(1)


@app.command()
def down() -> None:
    """Stop every process of the control plane and remove its data."""
    stopped = cluster.down()
    print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


if __name__ == "__main__":
    from coach.cli.main import main as _main  # errors → messages, as in the root CLI
    import sys
    sys.argv[1:1] = ["cluster"]
    _main()
