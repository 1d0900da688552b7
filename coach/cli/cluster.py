"""`coach cluster up|status|down`: a local control plane on loopback (real etcd,
kube-apiserver, default kube-scheduler and coach-scheduler, simulated nodes)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

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


FIGURES = [("finished", "jobs finished"), ("deadlocked", "jobs deadlocked (partly bound)"),
           ("waiting", "jobs never placed"), ("wait_median_s", "wait for minimum group, median of started (s)"),
           ("wait_p90_s", "wait for minimum group, p90 of started (s)"),
           ("completion_median_s", "completion time, median (s)"), ("makespan_s", "makespan (s)"),
           ("held_cpu_s", "CPU·s held by groups not started"), ("busy_share", "share of capacity used by started jobs")]


@app.command()
def compare(workload: Optional[Path] = typer.Argument(None, help="A workload file (YAML `jobs:` list of name, "
                                                                 "at, pods, min_group, cpu, memory, run); "
                                                                 "default: a random one (--jobs, --seed)."),
            jobs: int = typer.Option(8, "--jobs", min=1, help="Jobs of the random workload."),
            seed: int = typer.Option(1, "--seed", help="Seed of the random workload (same seed, same jobs)."),
            gap: float = typer.Option(1.0, "--gap", min=0.0, help="Mean seconds between random arrivals."),
            stall: float = typer.Option(45.0, "--stall", min=1.0,
                                        help="End a run when nothing has moved for this long (s) after the last "
                                             "arrival and no job runs. Shorter than the schedulers' backoff (up "
                                             "to 10 s) or coach-gang's 30 s barrier timeout, it can end a run "
                                             "that would still move."),
            json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
            plot: Optional[Path] = typer.Option(None, "--plot", help="Also draw the runs into this file "
                                                                     "(.png, .pdf or .svg).")) -> None:
    """Run one workload of Coach jobs through default-scheduler, then coach-gang, on the
    running control plane; compare waits, deadlocks and room held by half-placed groups."""
    import json
    import os
    import sys

    from coach.cli.format import plot_file
    from coach.errors import SpecError
    from coach.experiment import load_workload, random_workload, summarize
    from coach.experiment.compare import compare as run_both

    if plot is not None:   # checked before minutes of runs, not after
        plot = plot_file(plot, "--plot", "compare.png")
        folder = plot.parent.resolve()
        if not folder.is_dir() or not os.access(folder, os.W_OK):
            raise SpecError("--plot", "", f"{folder} is not a folder this user can write to")
    if workload is not None:
        arrivals = load_workload(workload)
    elif gap != gap or gap == float("inf"):
        raise SpecError("--gap", "", f"must be a finite number of seconds, got {gap}")
    else:
        arrivals = random_workload(jobs, seed, mean_gap_s=gap)
    st = cluster.status()
    if not st.running or st.kubeconfig is None:
        raise cluster.ClusterError("no control plane is running: start one with `coach cluster up`")
    kube = cluster.Kube(st.kubeconfig)
    try:
        runs = run_both(kube, arrivals, str(workload) if workload else "random workload", stall,
                        progress=_progress_printer(), announce=lambda text: err.print(text, markup=False))
    finally:
        kube.close()
    summaries = [summarize(r) for r in runs]
    if json_out:
        print(json.dumps({"workload": [j.as_dict() for j in arrivals],
                          "runs": [{**s.as_dict(), "ended": r.ended, "duration_s": round(r.duration, 2),
                                    "jobs_detail": [{"name": o.job.name, "state": o.state, "submitted": o.submitted,
                                                     "started": o.started, "finished": o.finished, "bound": o.bound}
                                                    for o in r.outcomes]}
                                   for s, r in zip(summaries, runs)]}, indent=1), flush=True)
    else:
        table = Table(title=f"{len(arrivals)} jobs, {workload or f'random, seed {seed}'}")
        table.add_column("")
        for s in summaries:
            table.add_column(s.scheduler, justify="right")
        for key, label in FIGURES:
            table.add_row(label, *["—" if getattr(s, key) is None else str(getattr(s, key)) for s in summaries])
        table.add_row("run ended", *[f"{r.ended} after {r.duration:.0f} s" for r in runs])
        Console(soft_wrap=True).print(table)
    if plot is not None:   # after the figures: a failed plot does not lose them
        from coach.report.comparison import plot_comparison

        try:
            plot_comparison(plot, runs)
        except OSError as e:
            raise cluster.ClusterError(f"{plot}: cannot write the plot: {e.strerror or e}") from None
        print(f"plot: {plot}", file=sys.stderr if json_out else sys.stdout)


def _progress_printer():
    """A progress callback that prints a line whenever a run's jobs start or finish."""
    last = {"counts": None}

    def show(run, now: float) -> None:
        counts = (sum(o.started is not None for o in run.outcomes), sum(o.finished is not None for o in run.outcomes))
        if counts != last["counts"]:
            held = run.samples[-1].held_cpu if run.samples else 0.0
            err.print(f"  {run.scheduler}: {counts[0]}/{len(run.outcomes)} jobs started, {counts[1]} finished, "
                      f"{held:g} CPU held by groups not started ({now:.0f} s)")
            last["counts"] = counts

    return show


if __name__ == "__main__":
    from coach.cli.main import main as _main  # errors → messages, as in the root CLI
    import sys
    sys.argv[1:1] = ["cluster"]
    _main()
