"""The discrete-event simulation of the schedulers (`coach cluster simulate`): what each one
decides for workloads whose outcome is known; tests/cluster/test_compare.py checks it against
the real control plane on the slides' deadlock, and bench/simulator.py on random workloads."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coach.experiment import JobArrival, random_workload, summarize
from coach.experiment.simulate import POLL_S, simulate
from coach.report.comparison import NAMED_JOBS

ROOT = Path(__file__).resolve().parents[2]
NODES = [(4.0, 8.0)] * 2   # 8 slots of one CPU and 1 GiB
POLL_GAP = 0.1             # how far a poll is from the mean period (drawn: 0.25 s + the API calls)


def job(name: str, at: float = 0.0, pods: int = 4, min_group: int | None = None, run: float = 3.0,
        cpu: float = 1.0, memory: float = 1.0) -> JobArrival:
    return JobArrival(name, at, pods, min_group or pods, cpu, memory, run)


SLIDES = [job(n) for n in "abcd"]


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("pod_by_pod", ["default-scheduler", "bin-pack"])
def test_the_slides_deadlock(seed: int, pod_by_pod: str) -> None:
    default = simulate(SLIDES, NODES, pod_by_pod, stall_s=10, seed=seed)
    # created side by side, the first pods to come are the schedulers and servers of the 4 jobs: the
    # 8 slots are held by groups that never start (a late creation may leave one job with none)
    s = summarize(default)
    assert (s.finished, s.deadlocked + s.waiting) == (0, 4) and s.deadlocked >= 3
    assert sum(o.bound for o in default.outcomes) == 8
    assert default.ended == "stalled" and default.duration == pytest.approx(10, abs=0.2)
    assert s.held_cpu_s == pytest.approx(8 * 10, abs=2)
    gang = simulate(SLIDES, NODES, "coach-gang", stall_s=10, seed=seed)
    s = summarize(gang)
    assert (s.finished, s.deadlocked, s.held_cpu_s) == (4, 0, 0.0)
    first = min(gang.outcomes, key=lambda o: o.started)
    # two groups of 4 at once (the first two whose pods all exist), then the other two as room comes free
    assert sorted(o.started for o in gang.outcomes)[:2] == pytest.approx([POLL_S, POLL_S], abs=POLL_GAP)
    assert sorted(o.started for o in gang.outcomes)[2] >= first.finished
    # two runs of 3 s, each seen at the poll after it started and ended after the poll at its end
    assert gang.ended == "finished" and 6 + 2 * POLL_S - POLL_GAP <= s.makespan_s <= 6 + 4 * POLL_S


def test_the_gang_keeps_fifo_and_backfills() -> None:
    # a and z fill the 8 slots; b, then c, wait for 4; a's room comes free pod by pod, and b takes it
    jobs = [job("a", run=5), job("z", run=6), job("b", 0.5), job("c", 1)]
    a, z, b, c = simulate(jobs, NODES, "coach-gang").outcomes
    assert b.started == pytest.approx(a.finished + POLL_S, abs=POLL_GAP)
    assert c.started == pytest.approx(z.finished + POLL_S, abs=POLL_GAP)
    # backfill: a small job behind one that cannot fit yet starts at once
    jobs = [job("big", pods=5, run=5), job("huge", 0.5, pods=8), job("small", 1, pods=3, run=1)]
    big, huge, small = simulate(jobs, NODES, "coach-gang").outcomes
    assert small.started == pytest.approx(1, abs=2 * POLL_S) and huge.started >= big.finished


@pytest.mark.parametrize("seed", range(5))
def test_bin_packing_leaves_whole_nodes_for_a_big_job(seed: int) -> None:
    # 3 pods × 1 CPU, then 3 pods × 4 CPU on 4 nodes × 4 CPU: spread, the small job takes 3 nodes and
    # the big one waits for it; packed (or co-located), it takes one node and the big one starts at once
    jobs = [job("small", pods=3, run=4), job("big", 1, pods=3, cpu=4, run=1)]
    runs = {s: simulate(jobs, [(4.0, 8.0)] * 4, s, seed=seed) for s in ("default-scheduler", "bin-pack", "coach-gang")}
    assert {s: [o.nodes for o in r.outcomes] for s, r in runs.items()} == \
        {"default-scheduler": [3, 3], "bin-pack": [1, 3], "coach-gang": [1, 3]}
    small, big = runs["default-scheduler"].outcomes
    assert big.started >= small.finished
    for packed in ("bin-pack", "coach-gang"):
        small, big = runs[packed].outcomes
        assert big.started - big.submitted <= 2 * POLL_S
    assert [summarize(r).split_jobs for r in runs.values()] == [2, 1, 1]


def test_a_starved_job_is_overtaken_only_until_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # a job of 8 pods behind a stream of 3-pod jobs (one a second, 3 s each): some always run, so the 8
    # slots are never free at once; backfill alone lets the stream by until it ends
    import coach.experiment.simulate as sim

    jobs = [job("small-0", pods=3), job("big", 0.5, pods=8)] + [job(f"small-{i}", i, pods=3) for i in range(1, 41)]
    big = next(o for o in simulate(jobs, NODES, "coach-gang").outcomes if o.job.name == "big")
    assert sim.STARVATION_S < big.started - big.submitted <= sim.STARVATION_S + 3 + 2
    monkeypatch.setattr(sim, "STARVATION_S", math.inf)
    run = simulate(jobs, NODES, "coach-gang")
    big = next(o for o in run.outcomes if o.job.name == "big")
    assert big.started >= max(o.finished for o in run.outcomes if o.job.name != "big")


def test_elastic_extras_come_after_the_group_and_need_not_all_fit() -> None:
    # 10 pods, a minimum group of 3, on 8 slots: the job starts, takes 8, and finishes without the other 2
    run = simulate([job("e", pods=10, min_group=3)], NODES, "coach-gang")
    (e,) = run.outcomes
    assert e.state == "finished" and max(s.busy_cpu for s in run.samples) == 8
    default = simulate([job("e", pods=10, min_group=3)], NODES, "default-scheduler")
    assert default.outcomes[0].state == "finished"


@pytest.mark.parametrize("scheduler", ["coach-gang", "default-scheduler", "bin-pack"])
def test_a_job_that_ends_while_its_extras_are_queued_leaves_an_empty_queue(scheduler: str) -> None:
    # 200 pods of which 3 must start: the job's 0.1 s run ends while most are still queued, and an
    # attempt already due found the queue empty (IndexError from heappop, helper-32)
    run = simulate([job("a", pods=200, min_group=3, cpu=0.01, memory=0.01, run=0.1)], [(64.0, 64.0)] * 2, scheduler)
    assert [o.state for o in run.outcomes] == ["finished"] and run.ended == "finished"
    jobs = [job("a", pods=120, min_group=3, cpu=0.01, memory=0.001, run=0.5),
            job("b", at=0.1, pods=120, min_group=3, cpu=0.5, memory=0.001, run=0.5),
            job("c", at=2.0, pods=5, min_group=3, cpu=1.0, memory=0.001, run=0.5)]
    run = simulate(jobs, [(4.0, 8.0)] * 2, scheduler, seed=2)
    assert run.ended == "finished"


@pytest.mark.parametrize(("pods", "nodes", "refused"), [(110, 1, False), (111, 1, True), (200, 2, False)])
def test_a_group_larger_than_the_nodes_pod_slots_is_refused(pods: int, nodes: int, refused: bool) -> None:
    # 200 tiny pods on 1 node were run and read as "deadlocked" or "never placed" (helper-32)
    from coach.errors import SpecError
    from coach.experiment.compare import check_fits

    workload = [job("a", pods=pods, cpu=0.01, memory=0.01)]
    if refused:
        with pytest.raises(SpecError, match=r"jobs\[0\].pods: a's minimum group of 111 pods .* \(and 110 pods a node\)"):
            check_fits(workload, [(64.0, 64.0)] * nodes, "w.yaml")
    else:
        check_fits(workload, [(64.0, 64.0)] * nodes, "w.yaml")
        assert simulate(workload, [(64.0, 64.0)] * nodes, "coach-gang").outcomes[0].state == "finished"


def test_a_default_bound_group_without_every_role_does_not_start() -> None:
    # room for 2 of the 3 pods: whichever 2, the job lacks a role; nothing ever frees room
    run = simulate([job("x", pods=3)], [(2.0, 8.0)], "default-scheduler", stall_s=5)
    assert [o.state for o in run.outcomes] == ["deadlocked"] and run.outcomes[0].bound == 2
    assert run.ended == "stalled" and run.duration == pytest.approx(5, abs=0.1)
    assert all(s.t <= run.duration for s in run.samples)


def test_memory_limits_placement_too() -> None:
    # 8 CPU but only 2 pods of 3 GiB per 8 GiB node: the 5-pod group never fits, the 4-pod one does
    jobs = [job("fat", pods=5, memory=3.0), job("slim", pods=4, memory=3.0, at=0.1)]
    fat, slim = simulate(jobs, NODES, "coach-gang", stall_s=2).outcomes
    assert fat.state == "waiting" and slim.state == "finished"


@pytest.mark.parametrize(("slots", "younger", "yields"), [
    # b (5 pods, older) and c (4): 8 free slots hold either, not both; c would take b's room
    pytest.param(8, 1, True, id="both-fit-alone-not-together"),
    pytest.param(9, 1, False, id="both-fit-together"),
    pytest.param(4, 1, False, id="the-older-cannot-fit-anyway"),   # backfill: c goes on
    pytest.param(8, 0, False, id="nobody-older-waits"),
])
def test_a_group_yields_the_room_an_older_group_that_fits_needs(slots: int, younger: int, yields: bool) -> None:
    # CoachGang's PreFilter (`ahead`, `yieldTo`): the room of older unplaced groups is set aside, and
    # the older groups that fit are woken from their backoff
    from coach.experiment.simulate import _Item, _Pod, _Simulation

    run = _Simulation([job("b", pods=5), job("c", 0.1, pods=4)], [(float(slots), 64.0)], "coach-gang", seed=0)
    run.unplaced = {0, 1}
    older = _Item([_Pod(0, "b-scheduler-0", "scheduler")], queued=(0.0, 0), failures=4, fifo=(0, 0))
    run.queue.failed.append(older)
    assert run._yields(younger, 1.0) is yields
    assert older.active is yields and (older in [e[-1] for e in run.queue.active]) is yields


@pytest.mark.parametrize(("failures", "queued", "expiry"), [
    (0, 3.2, 0.0),
    (1, 3.2, 5.0),    # 4.2 truncated to 4: backing off until the clock is past that second
    (2, 3.9, 6.0),
    (5, 3.2, 14.0),   # 16 s capped at 10
])
def test_backoff_ends_past_the_whole_second_after_its_truncated_expiry(failures: int, queued: float,
                                                                       expiry: float) -> None:
    from coach.experiment.simulate import _Item

    assert _Item([], queued=(queued, 0), failures=failures).backoff_expiry() == expiry


def test_the_replay_polls_are_drawn_per_run() -> None:
    # on a fixed grid every seed made the same call on whether two jobs end at one poll
    from coach.experiment.simulate import _Simulation

    runs = [_Simulation([job("a")], NODES, "coach-gang", seed=s) for s in (1, 1, 2)]
    polls = [[r._poll(t) for t in range(0, 300, 3)] for r in runs]
    assert polls[0] == polls[1] and polls[0] != polls[2]
    gaps = sorted(b - a for a, b in zip(runs[0].polls, runs[0].polls[1:]))
    assert gaps[0] > 0.25 and gaps[len(gaps) // 2] == pytest.approx(0.255, abs=0.002)   # measured: 0.255 s


def test_the_same_seed_gives_the_same_run_and_seeds_differ() -> None:
    workload = random_workload(12, 1, mean_gap_s=0.5)
    one, again = (simulate(workload, NODES, "default-scheduler", seed=3) for _ in range(2))
    assert [(o.started, o.finished, o.bound) for o in one.outcomes] == \
           [(o.started, o.finished, o.bound) for o in again.outcomes]
    outcomes = {tuple(o.state for o in simulate(workload, NODES, "default-scheduler", seed=s).outcomes)
                for s in range(10)}
    assert len(outcomes) > 1   # the race for room freed piecemeal goes different ways
    with pytest.raises(ValueError, match="unknown scheduler 'volcano'"):
        simulate(workload, NODES, "volcano")


def test_a_thousand_jobs_in_seconds() -> None:
    workload = random_workload(1000, 2, mean_gap_s=0.2)
    run = simulate(workload, [(4.0, 8.0)] * 50, "default-scheduler")
    assert run.ended == "finished" and summarize(run).finished == 1000


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "coach.cli.main", "cluster", "simulate", *args], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)


def test_the_cli(tmp_path: Path) -> None:
    (tmp_path / "slides.yaml").write_text("jobs:\n" + "".join(f"  - {{name: {n}, pods: 4, run: 3}}\n" for n in "abcd"))
    proc = cli(str(tmp_path / "slides.yaml"), "--stall", "10", "--json", "--plot", str(tmp_path / "s.svg"))
    assert proc.returncode == 0, proc.stderr
    default, gang = json.loads(proc.stdout)["runs"]
    assert (default["finished"], default["deadlocked"], default["ended"]) == (0, 4, "stalled")
    assert (gang["finished"], gang["ended"]) == (4, "finished")
    assert (tmp_path / "s.svg").stat().st_size > 0
    table = cli("--jobs", "5", "--nodes", "3")
    assert table.returncode == 0 and "5 jobs, random, seed 1, simulated on 3 nodes × (4 CPU, 8 GiB)" in table.stdout
    # what reruns it is in the JSON too: a saved file named neither the nodes nor --stall nor the seed
    setup = json.loads(cli("--jobs", "5", "--nodes", "3", "--stall", "20", "--seed", "4", "--json").stdout)["setup"]
    assert setup == {"workload": None, "seed": 4, "stall_s": 20.0, "schedulers": ["default-scheduler", "coach-gang"],
                     "nodes": [[4.0, 8.0]] * 3, "simulated": True}


def test_the_random_workloads_options_are_refused_with_a_workload_file(tmp_path: Path) -> None:
    """They were ignored without a word: `--jobs 5 --gap 2` ran the file's one job."""
    (tmp_path / "one.yaml").write_text("jobs:\n  - {name: a, at: 0, pods: 3, cpu: 1, memory: 1, run: 1}\n")
    proc = cli(str(tmp_path / "one.yaml"), "--jobs", "5", "--gap", "2")
    assert proc.returncode == 2, proc.stderr
    assert f"--jobs: shapes a random workload; {tmp_path / 'one.yaml'} gives the jobs: leave --jobs and --gap out" \
        in proc.stderr, proc.stderr
    ran = cli(str(tmp_path / "one.yaml"), "--seed", "3")   # the simulation's own choices use the seed
    assert ran.returncode == 0 and f"1 job, {tmp_path / 'one.yaml'}" in ran.stdout, ran.stdout + ran.stderr


def test_the_random_workload_fits_small_nodes() -> None:
    """2 nodes × 2 CPU (4 pods at once) refused the default random workload for a 5-pod group,
    "make the group smaller", which a random workload's user cannot do: its groups now fit."""
    proc = cli("--nodes", "2", "--cpu", "2", "--memory", "4Gi")
    assert proc.returncode == 0 and "random, seed" in proc.stdout, proc.stderr


def test_a_simulation_stopped_in_its_second_run_reports_the_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """As `compare` does: a Ctrl-C (or a failure) in the coach-gang run lost the finished default-scheduler run."""
    import io

    from rich.console import Console
    from typer.testing import CliRunner

    import coach.cli.cluster
    import coach.experiment.simulate

    def simulate_until_gang(workload, nodes, scheduler, **kw):
        if scheduler == "coach-gang":
            raise KeyboardInterrupt
        return simulate(workload, nodes, scheduler, **kw)

    monkeypatch.setattr(coach.experiment.simulate, "simulate", simulate_until_gang)
    screen = io.StringIO()
    monkeypatch.setattr(coach.cli.cluster, "err", Console(file=screen, width=100))
    result = CliRunner().invoke(coach.cli.cluster.app, ["simulate", "--jobs", "4", "--json"])
    assert result.exit_code == 130   # interrupted, as Ctrl-C ends any command
    assert "the comparison stopped in its coach-gang run; the 1 run(s) before it:" in screen.getvalue()
    report = json.loads(result.stdout)
    assert report["setup"]["stopped_in"] == "coach-gang" and [r["scheduler"] for r in report["runs"]] == \
        ["default-scheduler"]


def test_a_simulation_shows_what_it_runs_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """1,000 jobs ran 5 s a scheduler without a word."""
    import io

    from rich.console import Console
    from typer.testing import CliRunner

    import coach.cli.cluster

    screen = io.StringIO()
    monkeypatch.setattr(coach.cli.cluster, "err", Console(file=screen, force_terminal=True, width=100))
    result = CliRunner().invoke(coach.cli.cluster.app, ["simulate", "--jobs", "4", "--json"])
    assert result.exit_code == 0, result.output
    shown = screen.getvalue()
    assert "simulating 4 jobs with default-scheduler…" in shown and "with coach-gang…" in shown, shown


def test_node_sizes_are_shown_without_exponents() -> None:
    proc = cli("--jobs", "3", "--nodes", "2", "--memory", "1000000")   # read "(4 CPU, 1e+06 GiB)"
    assert proc.returncode == 0 and "simulated on 2 nodes × (4 CPU, 1000000 GiB)" in proc.stdout, proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--cpu", "0"], "--cpu: must be more than 0"),
    # 1e16 cores were written as is: 1e19 millicores, past what the schedulers' 64-bit counts hold
    (["--cpu", "1e16"], "--cpu: must be at most 100000 cores, got '1e16'"),
    (["--memory", "2Pi"], "--memory: must be at most 1048576 GiB (1 PiB), got '2Pi'"),
    (["--memory", "lots"], "--memory: must be a Kubernetes quantity such as 8Gi, got 'lots'"),
    (["--cpu", "500m"], "random workload: jobs[0].cpu: a pod asks 1 CPU, more than any node has (0.5 CPU): "
                        "reshape the nodes with --cpu/--memory"),   # it named `coach cluster up`'s options
    # every pod fits a node, but no 3 of them fit the nodes at once: the run only stalled, "0 finished"
    (["--jobs", "3", "--cpu", "2", "--memory", "1"],
     "random workload: jobs[0].min_group: job-0's minimum group of 3 pods (1 CPU, 1 GiB each) does not fit 2 nodes "
     "with room for 2 cores and 1 GiB each (and 110 pods a node) even when they are empty: it could never start; "
     "reshape the nodes with --nodes/--cpu/--memory\n"),   # not "or make the group smaller": a random one's are drawn
    # --stall inf was run: "stalled after inf s" and JSON with Infinity and NaN; --gap 1e308 an OverflowError
    (["--stall", "inf"], "--stall: must be from 1 to 86400 seconds, got inf"),
    (["--stall", "nan"], "Invalid value for '--stall'"),
    (["--gap", "1e308", "--jobs", "3"], "--gap: 3 jobs 1e+308 s apart arrive over"),
    (["--jobs", "100000", "--gap", "0"], "--jobs: must be at most 1000, got 100000"),   # ran for minutes unsaid
    (["--nodes", "0"], "Invalid value for '--nodes'"),
    (["--nodes", "100000"], "--nodes: must be between 1 and 5000, got 100000"),   # said "between 0 and"
    (["--plot", "x.gif"], "--plot: cannot write '.gif' files"),
    (["--schedulers", "nope"], "--schedulers: unknown scheduler 'nope'; known: default-scheduler, bin-pack, "
                               "coach-gang, or all"),
    (["--schedulers", "bin-pack,bin-pack"], "--schedulers: names a scheduler twice: 'bin-pack,bin-pack'"),
])
def test_bad_input_is_refused_before_running(args: list[str], message: str) -> None:
    proc = cli(*args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_workload_too_large_to_simulate_soon_is_refused(tmp_path: Path) -> None:
    # 1,000 jobs of 1,000 pods on 5,000 nodes, each within its own limit, ran for hours (helper-32)
    path = tmp_path / "w.yaml"
    path.write_text("jobs:\n" + "".join(f"  - {{name: j{i}, pods: 1000, min_group: 3, cpu: 1m, memory: 1Mi, run: 1}}\n"
                                         for i in range(7)))
    proc = cli(str(path), "--nodes", "5000")
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: {path}: 7,000 pods on 5,000 nodes: a simulation "
                                                           "weighs every node for every pod"), proc.stderr


@pytest.mark.parametrize("jobs, named", [(8, True), (200, False)])
def test_the_wait_panel_names_jobs_only_while_they_can_be_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               jobs: int, named: bool) -> None:
    """300 jobs drew 300 names and rotated "never" words over each other: past NAMED_JOBS a
    job is its arrival index, and a job that never started a mark."""
    from coach.report import comparison

    arrivals = random_workload(jobs, seed=1)
    runs = [simulate(arrivals, [(4.0, 8.0)] * 2, s, stall_s=30, seed=1) for s in ("default-scheduler", "coach-gang")]
    figures: list = []
    monkeypatch.setattr(comparison.plt, "close", figures.append)
    comparison.plot_comparison(tmp_path / "c.png", runs)
    waits = figures[0].axes[-1]
    labels = [t.get_text() for t in waits.get_xticklabels()]
    assert (labels[0] == arrivals[0].name) is named, labels[:3]
    assert (len(waits.texts) > 0) is named and len(waits.texts) <= NAMED_JOBS
    # the bars are the waits the table and the JSON give (they measured from the job's `at`)
    for run, bars in zip(runs, waits.containers):
        assert max(b.get_height() for b in bars) == pytest.approx(summarize(run).wait_max_s, abs=0.01)


def test_compare_progress_speaks_while_a_run_waits_out_its_stall(monkeypatch: pytest.MonkeyPatch) -> None:
    """It printed only when jobs started or finished: a stalled run went silent for 80 s with
    the CPU held by its half-placed groups stale at 5 while 8 were held."""
    from coach.cli import cluster as cli_cluster
    from coach.experiment.replay import JobOutcome, Run, Sample

    lines: list[str] = []
    monkeypatch.setattr(cli_cluster.err, "print", lines.append)
    run = Run("default-scheduler", 8.0, [JobOutcome(job("a"), submitted=0.0), JobOutcome(job("b"), submitted=0.0)])
    show = cli_cluster._progress_printer(stall_s=45)

    def at(t: float, held: float, moved: float) -> None:
        run.samples.append(Sample(t, 0.0, held))
        run.moved_at = moved
        show(run, t)

    at(0.0, 0.0, 0.0)
    at(1.0, 5.0, 1.0)    # within 2 s of the last line: not yet
    at(2.5, 8.0, 2.5)    # the held room changed
    at(5.0, 8.0, 2.5)    # nothing new
    at(12.6, 8.0, 2.5)   # 10 s of silence: a line, with the stall's countdown
    assert len(lines) == 3, lines
    assert "8 CPU held" in lines[1] and "(2 s)" in lines[1]
    assert "nothing moved for 10 s: the run ends after 45 s of that (--stall)" in lines[2], lines[2]
