"""`coach cluster up|status|down`: a local control plane on loopback (real etcd,
kube-apiserver, default kube-scheduler and coach-scheduler, simulated nodes); `compare` runs
a workload through its schedulers on it, `simulate` models the same without it."""

from __future__ import annotations

import json
import os
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from coach import cluster
from coach.errors import CoachError
from coach.estimate.cost import DEFAULT_RESOURCES
from coach.identity import process_identity, still_running
from coach.state.records import FINAL_STATUSES
from coach.state.store import Store, coach_home

app = typer.Typer(help="Start, inspect and stop a local Kubernetes control plane with simulated nodes "
                       "(binaries from deploy/local/build).", no_args_is_help=True)
err = Console(stderr=True, soft_wrap=True, markup=False)


@app.command()
def up(nodes: Optional[int] = typer.Option(None, "--nodes", min=0, help=(
           f"Simulated nodes (default: the running cluster's, else {cluster.control_plane.DEFAULT_NODES}).")),
       cpu: Optional[str] = typer.Option(None, "--cpu", help=(
           f"CPU of each node, e.g. 4 (default: the running cluster's, else {cluster.control_plane.DEFAULT_CPU}).")),
       memory: Optional[str] = typer.Option(None, "--memory", help=(
           "Memory of each node, e.g. 8Gi; a plain number is GiB (default: the running cluster's, else "
           f"{cluster.control_plane.DEFAULT_MEMORY}).")),
       force: bool = typer.Option(False, "--force",
                                  help="Reshape the nodes even while jobs of this machine's store run on them.")) -> None:
    """Start the control plane (or reshape the running one); the last line is the kubeconfig path.

    Options left out keep the running cluster's shape."""
    # a plain `coach cluster up`, as a stopped component's message advises, reset the nodes to the defaults
    cp = cluster.control_plane
    running = cp.ClusterState.load(cp.state_dir())
    kept = (running.nodes, running.cpu, running.memory) if running else (cp.DEFAULT_NODES, cp.DEFAULT_CPU,
                                                                           cp.DEFAULT_MEMORY)
    nodes, cpu, memory = (given if given is not None else old for given, old in zip((nodes, cpu, memory), kept))
    size = cluster.control_plane.node_shape(nodes, cpu, memory)
    change = cluster.control_plane.disturbs(nodes, cpu, memory)   # None: nothing to do but print the kubeconfig
    if change and not force:
        _refuse_while_jobs_run(f"`coach cluster up --force` {change} under them")
    same = running is not None and change is None
    kubeconfig = cluster.up(nodes=nodes, cpu=cpu, memory=memory)
    err.print(f"control plane {'already up, unchanged' if same else 'up'}: {_shape(nodes, size)}; "
              f"schedulers: {', '.join(cluster.control_plane.SCHEDULERS)}")
    print(kubeconfig)


@app.command()
def status(json_out: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Show which components run and how many nodes and pods the cluster has (exit 1 if it cannot
    be used)."""
    st = cluster.status()
    if json_out:
        print(json.dumps(dict(running=st.running, problem=st.not_running() or None, state_dir=str(st.state_dir),
                              kubeconfig=None if st.kubeconfig is None else str(st.kubeconfig),
                              components=st.components, apiserver_ready=st.apiserver_ready,
                              nodes=[list(n) for n in st.node_sizes], schedulers=st.schedulers, pods=st.pods,
                              bound_pods=st.bound_pods)))
        if not st.running:
            raise typer.Exit(1)
        return
    if not st.components:
        print(f"not running (state in {st.state_dir})")
        raise typer.Exit(1)
    for name, alive in st.components.items():
        print(f"{name:16} {'running' if alive else 'STOPPED'}")
    print(f"{'apiserver':16} {'ready' if st.apiserver_ready else 'not ready'}")
    print(f"{'nodes':16} {_nodes(st.node_sizes)}")
    print(f"{'schedulers':16} {', '.join(st.schedulers)}")
    print(f"{'pods':16} {st.pods} ({st.bound_pods} bound)")
    print(f"{'kubeconfig':16} {st.kubeconfig}")
    if not st.running:
        raise typer.Exit(1)


def _shape(nodes: int, size: tuple[float, float]) -> str:
    """`3 nodes × (4 CPU, 8 GiB)`; `no nodes` where a size would describe nothing (`--nodes 0`)."""
    if nodes == 0:
        return "no nodes (no pod can be placed: add some with `coach cluster up --nodes N`)"
    shape = f"{nodes} node{'s' * (nodes != 1)} × ({_size(*size)})"
    least = min(DEFAULT_RESOURCES.values(), key=lambda r: (r.cpu, r.memory_gib))
    if size[0] < least.cpu or size[1] < least.memory_gib:   # `--cpu 1m` was taken without a word
        shape += (f" (no pod fits: the smallest function asks {_size(least.cpu, least.memory_gib)} by default; "
                  "`--cpu`/`--memory` make bigger nodes)")
    return shape


def _nodes(sizes: list[tuple[float, float]]) -> str:
    """`3 × (4 CPU, 8 GiB)`; a term per shape if someone made the nodes unequal by hand."""
    return " + ".join(f"{n} × ({_size(cpu, mem)})" for (cpu, mem), n in sorted(Counter(sizes).items())) or "0"


def _size(cpu: float, memory_gib: float) -> str:
    """`4 CPU, 8 GiB`; a million GiB without an exponent (`:g` wrote `1e+06 GiB`)."""
    return f"{_plain(cpu)} CPU, {_plain(memory_gib)} GiB"


def _plain(x: float) -> str:
    return f"{x:.5f}".rstrip("0").rstrip(".")   # no exponent; nodes are whole millicores and MiB


@app.command()
def down(force: bool = typer.Option(False, "--force",
                                    help="Stop it even while jobs of this machine's store run on it.")) -> None:
    """Stop every process of the control plane and remove its etcd data (the cluster's objects); its
    logs and keys stay in the state folder for a look afterwards and for the next `up`."""
    if not force:
        _refuse_while_jobs_run("`coach cluster down --force` stops the cluster under them")
    stopped = cluster.down()
    print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


COMPARING = "compare.run"
"""In the cluster's state folder while a `coach cluster compare` runs: its process identity."""


def _refuse_while_jobs_run(override: str) -> None:
    """A job whose pods vanish under it fails its epoch and leaves its spend charged, and a
    comparison loses its runs: say which would, and how to stop them, before taking the cluster
    away or reshaping it (`override`: what --force does instead)."""
    _refuse_while_comparing(" (--force goes ahead anyway)")
    _refuse_beside_jobs(override)


def _refuse_while_comparing(force: str = "") -> None:
    try:
        comparing = (cluster.state_dir() / COMPARING).read_text()
    except OSError:
        comparing = ""
    if still_running(comparing):   # `down` during a compare lost its runs to "Connection refused"
        raise CoachError(f"a `coach cluster compare` (pid {comparing.split(':')[1]}) runs on the cluster: let it "
                         f"end, or stop it with Ctrl-C{force}")


def _refuse_beside_jobs(override: str) -> None:
    if not (coach_home() / "coach.db").exists():   # no job ever ran here: do not create a store
        return
    running = [j for j in Store().jobs() if j.backend == "cluster" and j.status not in FINAL_STATUSES]
    if running:
        names = ", ".join(f"{j.job_id} ({j.status})" for j in running)
        one = len(running) == 1
        raise CoachError(f"{len(running)} job{'' if one else 's'} still run{'s' if one else ''} on the cluster "
                         f"backend: {names}; `coach stop JOB` stops one after its epoch, {override}")


FIGURES = [("finished", "jobs finished"), ("deadlocked", "jobs deadlocked (partly bound)"),
           ("waiting", "jobs never placed"), ("wait_median_s", "wait for minimum group, median of started (s)"),
           ("wait_p90_s", "wait for minimum group, p90 of started (s)"),
           ("wait_max_s", "wait for minimum group, longest (s)"),
           ("completion_median_s", "completion time, median (s)"), ("makespan_s", "makespan (s)"),
           ("held_cpu_s", "CPU·s held by groups not started"), ("busy_share", "share of capacity used by started jobs"),
           ("split_jobs", "jobs started across more than one node")]
WORKLOAD = typer.Argument(None, metavar="WORKLOAD.yaml",
                          help="A workload file (YAML `jobs:` list of name, at, pods, min_group, cpu, memory, "
                               "run); default: a random one (--jobs, --seed).")
RANDOM_JOBS, RANDOM_GAP_S, RANDOM_SEED = 8, 1.0, 1
JOBS = typer.Option(None, "--jobs", min=1, show_default=False,
                    help=f"Jobs of the random workload (default {RANDOM_JOBS}; not with a workload file).")
GAP = typer.Option(None, "--gap", min=0.0, show_default=False,
                   help=f"Mean seconds between random arrivals (default {RANDOM_GAP_S:g}; not with a workload file).")
STALL = typer.Option(45.0, "--stall", min=1.0,
                     help="End a run when nothing has moved for this long (s) after the last arrival and no job "
                          "runs. Shorter than the schedulers' backoff (up to 10 s) or coach-gang's 30 s barrier "
                          "timeout, it can end a run that would still move.")
JSON = typer.Option(False, "--json", help="Print JSON instead of a table.")
PLOT = typer.Option(None, "--plot", help="Also draw the runs into this file (.png, .pdf or .svg).")
SCHEDULERS = typer.Option(None, "--schedulers", show_default=False,
                          help="The schedulers to run, in order, comma-separated, or `all`: default-scheduler "
                               "(spread), bin-pack, coach-gang. Default: default-scheduler,coach-gang.")


@app.command()
def compare(workload: Optional[Path] = WORKLOAD, jobs: Optional[int] = JOBS,
            seed: Optional[int] = typer.Option(None, "--seed", show_default=False,
                                               help=f"Seed of the random workload (same seed, same jobs; default "
                                                    f"{RANDOM_SEED}; not with a workload file)."),
            gap: Optional[float] = GAP, stall: float = STALL, schedulers: Optional[str] = SCHEDULERS,
            json_out: bool = JSON, plot: Optional[Path] = PLOT,
            force: bool = typer.Option(False, "--force", help="Run even beside this machine's Coach jobs on the "
                                                              "cluster, whose room the runs then lack.")) -> None:
    """Run one workload of Coach jobs through each scheduler in turn (default-scheduler, then
    coach-gang, unless --schedulers says otherwise) on the running control plane; compare
    waits, deadlocks, room held by half-placed groups and jobs split across nodes."""
    from coach.experiment.compare import compare as run_all
    from coach.experiment.schedulers import parse_schedulers
    from coach.experiment.workload import RANDOM

    names = parse_schedulers(schedulers)
    plot = _plot_path(plot)
    _check_stall(stall)
    _refuse_while_comparing()   # a second one read its runs wrong, and removed the first's marker
    st = cluster.status()
    arrivals = _workload(workload, jobs, gap, seed, nodes=st.node_sizes)
    seed = RANDOM_SEED if seed is None else seed
    if not st.running or st.kubeconfig is None:
        raise cluster.ClusterError(st.not_running())
    if not force:   # beside a training job both runs read "stalled after 6 s" (review, session 41)
        _refuse_beside_jobs("`coach cluster compare --force` runs beside them, on the room they leave")
    missing = [n for n in names if n not in st.schedulers]
    if missing:
        raise cluster.ClusterError(f"the running control plane has no {', '.join(missing)} scheduler (an older coach "
                                   "started it): `coach cluster up` restarts it with every scheduler")
    setup = dict(workload=str(workload) if workload else None, seed=None if workload else seed, stall_s=stall,
                 schedulers=list(names), nodes=[list(n) for n in st.node_sizes], simulated=False)
    title = f"{_jobs(arrivals)}, {workload or f'random, seed {seed}'}, on nodes {_nodes(st.node_sizes)}"
    kube = cluster.Kube(st.kubeconfig)
    marker = cluster.state_dir() / COMPARING   # `up` and `down` refuse while it names this process
    marker.write_text(process_identity(os.getpid()) or "")
    runs: list = []
    try:
        with _runs_kept(runs, names, arrivals, title, setup, json_out, plot):
            for run in run_all(kube, arrivals, str(workload) if workload else RANDOM, stall, names,
                               progress=_progress_printer(stall), announce=err.print):
                runs.append(run)   # one by one: a later run that fails or is interrupted keeps it
    finally:
        kube.close()
        marker.unlink(missing_ok=True)
    _report(arrivals, runs, title, setup, json_out, plot)


@contextmanager
def _runs_kept(runs: list, names: tuple[str, ...], arrivals: list, title: str, setup: dict, json_out: bool,
               plot: Optional[Path]) -> Iterator[None]:
    """A run that fails or is interrupted keeps the runs before it: they are reported, then its error."""
    try:
        yield
    except BaseException:
        if 0 < len(runs) < len(names):
            err.print(f"the comparison stopped in its {names[len(runs)]} run; the {len(runs)} run(s) before it:")
            try:
                _report(arrivals, runs, f"{title} (stopped in the {names[len(runs)]} run)",
                        dict(setup, schedulers=list(names[:len(runs)]), stopped_in=names[len(runs)]), json_out, plot)
            except Exception:   # noqa: BLE001 (a failed plot: the stop's own error is the one to see)
                pass
        raise


@app.command()
def simulate(workload: Optional[Path] = WORKLOAD, jobs: Optional[int] = JOBS,
             seed: int = typer.Option(RANDOM_SEED, "--seed", help="Seed of the random workload, and of the "
                                                                  "simulation's random choices (same seed, same runs)."),
             gap: Optional[float] = GAP,
             nodes: int = typer.Option(cluster.control_plane.DEFAULT_NODES, "--nodes", min=1, help="Nodes."),
             cpu: str = typer.Option(cluster.control_plane.DEFAULT_CPU, "--cpu", help="CPU of each node (e.g. 4)."),
             memory: str = typer.Option(cluster.control_plane.DEFAULT_MEMORY, "--memory",
                                        help="Memory of each node (e.g. 8Gi; a plain number is GiB)."),
             stall: float = STALL, schedulers: Optional[str] = SCHEDULERS, json_out: bool = JSON,
             plot: Optional[Path] = PLOT) -> None:
    """The same comparison as `compare`, simulated: no control plane, seconds instead of the
    workload's real time; a model of the schedulers (docs/gang-scheduler.md says how close)."""
    from coach.errors import SpecError
    from coach.experiment.compare import check_fits
    from coach.experiment.schedulers import parse_schedulers
    from coach.experiment.simulate import MAX_POD_NODES
    from coach.experiment.simulate import simulate as run_one
    from coach.experiment.workload import RANDOM

    names = parse_schedulers(schedulers)
    plot = _plot_path(plot)
    _check_stall(stall)
    shape = cluster.control_plane.node_shape(nodes, cpu, memory, fewest=1)
    # seed_given=False: the simulation's own choices use the seed too
    arrivals = _workload(workload, jobs, gap, seed, nodes=[shape] * nodes, seed_given=False)
    source = str(workload) if workload else RANDOM
    check_fits(arrivals, [shape] * nodes, source, reshape="{}")
    if (pods := sum(a.pods for a in arrivals)) * nodes > MAX_POD_NODES:
        raise SpecError(source, "", f"{pods:,} pods on {nodes:,} nodes: a simulation weighs every node for every "
                                    f"pod, and takes at most {MAX_POD_NODES:,} pods × nodes (a minute or two a "
                                    f"scheduler); simulate fewer nodes or pods")
    setup = dict(workload=str(workload) if workload else None, seed=seed, stall_s=stall, schedulers=list(names),
                 nodes=[list(shape)] * nodes, simulated=True)
    title = (f"{_jobs(arrivals)}, {workload or f'random, seed {seed}'}, simulated on {nodes} "
             f"node{'s' * (nodes != 1)} × ({_size(*shape)})")
    runs: list = []
    with _runs_kept(runs, names, arrivals, title, setup, json_out, plot):
        for name in names:   # 1,000 jobs took 5 s a scheduler without a word: a spinner on a terminal
            with err.status(Text(f"simulating {_jobs(arrivals)} with {name}…")):   # Text: not read as markup
                runs.append(run_one(arrivals, [shape] * nodes, name, stall_s=stall, seed=seed))
    _report(arrivals, runs, title, setup, json_out, plot)


def _plot_path(plot: Optional[Path]) -> Optional[Path]:
    """Checked before the runs, not after."""
    from coach.cli.format import plot_file

    return None if plot is None else plot_file(plot, "--plot", "compare.png")


def _check_stall(stall: float) -> None:
    from coach.errors import SpecError
    from coach.experiment.workload import MAX_SECONDS

    if not 1.0 <= stall <= MAX_SECONDS:   # typer's min lets inf by
        raise SpecError("--stall", "", f"must be from 1 to {MAX_SECONDS:g} seconds, got {stall}")


def _workload(workload: Optional[Path], jobs: Optional[int], gap: Optional[float], seed: Optional[int],
              nodes: list[tuple[float, float]], seed_given: bool = True) -> list:
    """The workload file's jobs, or a random workload; the random workload's options with a
    file are refused (they were ignored without a word)."""
    from coach.errors import SpecError
    from coach.experiment import load_workload, random_workload
    from coach.experiment.workload import MAX_JOBS, MAX_SECONDS

    if workload is not None:
        given = [o for o, v in (("--jobs", jobs), ("--gap", gap), ("--seed", seed if seed_given else None))
                 if v is not None]
        if given:
            raise SpecError(given[0], "", f"shapes a random workload; {workload} gives the jobs: leave "
                                          f"{' and '.join(given)} out, or the file")
        return load_workload(workload)
    jobs, gap, seed = (RANDOM_JOBS if jobs is None else jobs, RANDOM_GAP_S if gap is None else gap,
                       RANDOM_SEED if seed is None else seed)
    if jobs > MAX_JOBS:
        raise SpecError("--jobs", "", f"must be at most {MAX_JOBS}, got {jobs}")
    if gap != gap or gap == float("inf"):
        raise SpecError("--gap", "", f"must be a finite number of seconds, got {gap}")
    # a random job's pods (1 CPU, 1 GiB each) fit the nodes together: the README's 2 nodes × 2 CPU
    # refused the random workload for a 5-pod group ("make the group smaller")
    room = sum(min(int(cpu), int(memory)) for cpu, memory in nodes)
    arrivals = random_workload(jobs, seed, mean_gap_s=gap, max_pods=room if 3 <= room < 6 else 6)
    if arrivals[-1].at > MAX_SECONDS:
        raise SpecError("--gap", "", f"{jobs} jobs {gap:g} s apart arrive over {arrivals[-1].at:.3g} s, more than "
                                     f"a day ({MAX_SECONDS:g} s): give a smaller --gap or fewer --jobs")
    return arrivals


def _jobs(arrivals: list) -> str:
    return f"{len(arrivals)} job{'s' * (len(arrivals) != 1)}"


def _report(arrivals: list, runs: list, title: str, setup: dict, json_out: bool, plot: Optional[Path]) -> None:
    """The runs' figures as a table or JSON (with `setup`: what reruns the experiment), then the
    plot (after the figures: a failed plot does not lose them)."""
    import sys

    from coach.experiment import summarize

    summaries = [summarize(r) for r in runs]
    if json_out:
        print(json.dumps({"setup": setup, "workload": [j.as_dict() for j in arrivals],
                          "runs": [{**s.as_dict(), "ended": r.ended, "duration_s": round(r.duration, 2),
                                    "jobs_detail": [{"name": o.job.name, "state": o.state, "submitted": o.submitted,
                                                     "started": o.started, "finished": o.finished, "bound": o.bound,
                                                     "nodes": o.nodes}
                                                    for o in r.outcomes]}
                                   for s, r in zip(summaries, runs)]}, indent=1), flush=True)
    else:
        table = Table(title=title)
        table.add_column("")
        for s in summaries:
            table.add_column(s.scheduler, justify="right")
        for key, label in FIGURES:
            table.add_row(label, *["—" if getattr(s, key) is None else str(getattr(s, key)) for s in summaries])
        table.add_row("run ended", *[f"{r.ended} after {r.duration:.0f} s" for r in runs])
        Console(soft_wrap=True, markup=False).print(table)
    if plot is not None:
        from coach.report.comparison import plot_comparison

        try:
            plot_comparison(plot, runs)
        except OSError as e:
            raise cluster.ClusterError(f"{plot}: cannot write the plot: {e.strerror or e}") from None
        print(f"plot: {plot}", file=sys.stderr if json_out else sys.stdout)


HELD_EVERY_S = 2.0    # a change of the room held alone prints at most this often
QUIET_EVERY_S = 10.0  # while nothing changes, a line this often


def _progress_printer(stall_s: float):
    """A progress callback: a line when a run's jobs start or finish, when the room held by
    groups not started changes, and every 10 s while nothing does, saying when a run that waits
    out --stall will end (it went silent for 80 s with a stale held figure)."""
    last: dict = {"run": None}

    def show(run, now: float) -> None:
        started = sum(o.started is not None for o in run.outcomes)
        finished = sum(o.finished is not None for o in run.outcomes)
        held = run.samples[-1].held_cpu if run.samples else 0.0
        since = now - last.get("at", -1e9)
        if last["run"] is run and (started, finished) == last["counts"] and not (
                held != last["held"] and since >= HELD_EVERY_S or since >= QUIET_EVERY_S):
            return
        line = (f"  {run.scheduler}: {started}/{len(run.outcomes)} jobs started, {finished} finished, "
                f"{held:g} CPU held by groups not started ({now:.0f} s)")
        quiet = now - run.moved_at
        arrived = all(o.submitted is not None for o in run.outcomes)
        if arrived and quiet >= QUIET_EVERY_S and not any(o.state == "running" for o in run.outcomes):
            line += f"; nothing moved for {quiet:.0f} s: the run ends after {stall_s:g} s of that (--stall)"
        err.print(line)
        last.update(run=run, counts=(started, finished), held=held, at=now)

    return show


if __name__ == "__main__":
    from coach.cli.main import main as _main  # errors → messages, as in the root CLI
    import sys
    sys.argv[1:1] = ["cluster"]
    _main()
