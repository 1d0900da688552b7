"""`coach cluster compare` as an experimenter runs it: one workload through the schedulers
on the real control plane."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from coach.cluster.control_plane import scheduler_metrics

from tests.cluster.test_cli import ROOT, run
from tests.cluster.workload import Workload, job_pod, wait_for

SLIDES = """# the deadlock of the slides: 8 slots (2 nodes × 4 CPU), 4 jobs of 4 pods that must start together
jobs:
  - {name: a, at: 0, pods: 4, run: 3}
  - {name: b, at: 0, pods: 4, run: 3}
  - {name: c, at: 0, pods: 4, run: 3}
  - {name: d, at: 0, pods: 4, run: 3}
"""


def test_the_slides_deadlock_as_an_experiment(workload: Workload, tmp_path: Path) -> None:
    workload.reset(nodes=2, cpu="4", memory="8Gi")
    (tmp_path / "slides.yaml").write_text(SLIDES)
    proc = run("compare", str(tmp_path / "slides.yaml"), "--stall", "10", "--json", "--plot", str(tmp_path / "c"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)   # stdout stays JSON; the plot's path goes to stderr
    default, gang = out["runs"]
    assert default["scheduler"] == "default-scheduler" and gang["scheduler"] == "coach-gang"
    assert_the_slides(default, gang)
    assert gang["held_cpu_s"] < 2 and gang["makespan_s"] >= 2 * 3
    assert f"plot: {tmp_path / 'c.png'}" in proc.stderr and (tmp_path / "c.png").stat().st_size > 0
    assert not workload.kube.pods("coach-experiment"), "a run leaves no pods behind"
    from coach.cluster import state_dir

    assert not (state_dir() / "compare.run").exists(), "`up` and `down` would refuse after it"
    # the simulation of the same workload on the same nodes decides the same
    sim = run("simulate", str(tmp_path / "slides.yaml"), "--stall", "10", "--json")
    assert sim.returncode == 0, sim.stderr
    assert_the_slides(*json.loads(sim.stdout)["runs"])


def assert_the_slides(default: dict, gang: dict) -> None:
    # the default scheduler binds pods of every job, so no job gets its group and nothing moves again
    # (rarely a job's last pods are created before another's first ones, and that one job gets through)
    assert default["finished"] <= 1 and default["deadlocked"] >= 3 and default["ended"] == "stalled", default
    assert default["held_cpu_s"] >= 8 * 10
    # the gang places two whole jobs, then the other two when they end, each on a node of its own
    assert (gang["finished"], gang["deadlocked"], gang["waiting"], gang["ended"]) == (4, 0, 0, "finished")
    assert gang["split_jobs"] == 0, gang


PLACEMENT = """# fragmentation: on 4 nodes × 4 CPU, a job of 3 pods × 1 CPU, then one of 3 pods × 4 CPU (3 whole nodes)
jobs:
  - {name: small, at: 0, pods: 3, run: 4}
  - {name: big, at: 1, pods: 3, cpu: 4, run: 1}
"""


def test_spread_pack_and_gang_place_jobs_differently(workload: Workload, tmp_path: Path) -> None:
    workload.reset(nodes=4, cpu="4", memory="8Gi")
    (tmp_path / "placement.yaml").write_text(PLACEMENT)
    proc = run("compare", str(tmp_path / "placement.yaml"), "--schedulers", "all", "--json")
    assert proc.returncode == 0, proc.stderr
    assert_placement(json.loads(proc.stdout)["runs"])
    sim = run("simulate", str(tmp_path / "placement.yaml"), "--nodes", "4", "--schedulers", "all", "--json")
    assert sim.returncode == 0, sim.stderr
    assert_placement(json.loads(sim.stdout)["runs"])


def assert_placement(runs: list[dict]) -> None:
    assert [r["scheduler"] for r in runs] == ["default-scheduler", "bin-pack", "coach-gang"]
    assert all((r["finished"], r["ended"]) == (2, "finished") for r in runs), runs
    jobs = {r["scheduler"]: {j["name"]: j for j in r["jobs_detail"]} for r in runs}
    # least allocated sends each next pod to an emptier node: the small job takes 3 nodes, and the big one
    # waits for it to end; most allocated and co-location keep it on one node, and the big one starts at once
    assert {s: [j["small"]["nodes"], j["big"]["nodes"]] for s, j in jobs.items()} == \
        {"default-scheduler": [3, 3], "bin-pack": [1, 3], "coach-gang": [1, 3]}, jobs
    assert [r["split_jobs"] for r in runs] == [2, 1, 1]
    wait = {s: j["big"]["started"] - j["big"]["submitted"] for s, j in jobs.items()}
    assert wait["default-scheduler"] > 2.5 and wait["bin-pack"] < 1.5 and wait["coach-gang"] < 1.5, wait


def test_yielding_jobs_do_not_spin(workload: Workload, tmp_path: Path) -> None:
    # a job of 8 pods behind a stream of 3-pod jobs (bench/workloads/stream.yaml, shortened): jobs
    # yield to older ones while those sit out their backoff. Two yielding jobs used to wake each
    # other about 3,400 times a second, so the active queue never emptied and the job they yielded
    # to waited out its backoff with the room idle
    workload.reset(nodes=2, cpu="4", memory="8Gi")
    jobs = ["  - {name: big, at: 0.5, pods: 8, run: 2}"] + \
        [f"  - {{name: small-{i}, at: {i}, pods: 3, run: 3}}" for i in range(15)]
    (tmp_path / "stream.yaml").write_text("jobs:\n" + "\n".join(jobs) + "\n")
    before = coach_gang_attempts()
    proc = run("compare", str(tmp_path / "stream.yaml"), "--schedulers", "coach-gang", "--json")
    assert proc.returncode == 0, proc.stderr
    (gang,) = json.loads(proc.stdout)["runs"]
    assert (gang["finished"], gang["ended"]) == (16, "finished"), gang
    attempts = coach_gang_attempts() - before
    # about 640 now (290,000 before): a bound far from both, as load stretches the run and the retries
    assert attempts <= 50 * (8 + 15 * 3), f"{attempts} scheduling attempts for 53 pods"


def coach_gang_attempts() -> int:
    """coach-scheduler's scheduling attempts so far, from its metrics."""
    return sum(int(float(n)) for n in re.findall(
        r'^scheduler_schedule_attempts_total\{[^}]*profile="coach-gang"[^}]*\} (\S+)$',
        scheduler_metrics("coach-scheduler"), re.M))


def test_other_work_on_the_nodes_is_named_and_not_counted_as_capacity(workload: Workload, tmp_path: Path) -> None:
    # a pod of other work holding 4 of the 8 CPU: the jobs get the other 4, and the share of capacity
    # used was counted against all 8
    workload.reset(nodes=2, cpu="4", memory="8Gi")
    workload.submit([{**job_pod("web", 0, "worker", 3, "default-scheduler", cpu="4", name="web"),
                      "metadata": {"name": "web", "namespace": "coach-test"}}])
    wait_for(lambda: all(p["spec"].get("nodeName") for p in workload.pods()), 30, "the other pod to be bound")
    (tmp_path / "w.yaml").write_text("jobs: [{name: a, pods: 4, run: 3}]\n")
    proc = run("compare", str(tmp_path / "w.yaml"), "--schedulers", "coach-gang", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "warning: other work bound to the nodes holds 4 of the 8 CPU (1 pod: coach-test/web)" \
        in proc.stderr, proc.stderr
    assert "coach-gang: 1 jobs on 2 nodes (4 CPU free)" in proc.stderr
    (gang,) = json.loads(proc.stdout)["runs"]
    # 4 CPU busy for 3 of the run's ~3.3 s: about 0.9 of the free 4 CPU (it was 0.45 of 8)
    assert gang["finished"] == 1 and gang["busy_share"] > 0.6, gang


def test_an_interrupted_comparison_keeps_the_runs_before_it(workload: Workload, tmp_path: Path) -> None:
    """A Ctrl-C (or a failure) in the second scheduler's run exited with "interrupted" alone: the
    first run's minutes were lost."""
    workload.reset(nodes=2, cpu="4", memory="8Gi")
    (tmp_path / "slides.yaml").write_text(SLIDES)
    # a Ctrl-C as at a terminal: run from a script's background job (`bash .ci/run &`), the tests
    # inherit SIGINT ignored, the comparison then never saw it, ran to its end and exited 0
    proc = subprocess.Popen([sys.executable, "-m", "coach.cli.main", "cluster", "compare", str(tmp_path / "slides.yaml"),
                             "--stall", "5", "--json"], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    stderr = ""
    try:
        assert proc.stderr is not None
        for line in proc.stderr:   # the second run has begun: interrupt it (its jobs take 6 s at least)
            stderr += line
            if line.startswith("coach-gang: "):
                time.sleep(1.0)   # past the printing of that line
                proc.send_signal(signal.SIGINT)
                break
        out, rest = proc.communicate(timeout=60)
    finally:
        proc.kill()
        workload.kube.delete_pods("coach-experiment")   # the interrupted run's pods
    stderr += rest
    assert proc.returncode == 130 and "the comparison stopped in its coach-gang run; the 1 run(s) before it:" in stderr, stderr
    result = json.loads(out)
    assert result["setup"]["stopped_in"] == "coach-gang" and result["setup"]["schedulers"] == ["default-scheduler"]
    (default,) = result["runs"]
    assert default["scheduler"] == "default-scheduler" and default["ended"] in ("stalled", "finished"), default
    from coach.cluster import state_dir

    assert not (state_dir() / "compare.run").exists()


def test_compare_refuses_bad_input_before_running(workload: Workload, tmp_path: Path) -> None:
    (tmp_path / "w.yaml").write_text("jobs: [{run: 1, cpu: 64}]\n")
    big = run("compare", str(tmp_path / "w.yaml"))
    assert big.returncode == 2 and "w.yaml: jobs[0].cpu: a pod asks 64 CPU, more than any node has (4 CPU)" in big.stderr, big.stderr
    (tmp_path / "m.yaml").write_text("jobs: [{run: 1, memory: 64Gi}]\n")
    memory = run("compare", str(tmp_path / "m.yaml"))
    assert memory.returncode == 2 and "m.yaml: jobs[0].memory: a pod asks 64 GiB, more than any node has (8 GiB)" \
        in memory.stderr, memory.stderr
    bad = run("compare", "--plot", str(tmp_path / "x.gif"))
    assert bad.returncode == 2 and "--plot: cannot write '.gif' files" in bad.stderr, bad.stderr
    nowhere = run("compare", "--plot", str(tmp_path / "no" / "such" / "c.png"))
    assert nowhere.returncode == 2 and "is not a folder this user can write to" in nowhere.stderr, nowhere.stderr
    unknown = run("compare", "--schedulers", "default-scheduler,tetris")
    assert unknown.returncode == 2 and "--schedulers: unknown scheduler 'tetris'; known: default-scheduler, " \
        "bin-pack, coach-gang, or all" in unknown.stderr, unknown.stderr
    assert "Traceback" not in big.stderr + memory.stderr + bad.stderr + nowhere.stderr + unknown.stderr


def test_compare_without_a_control_plane(tmp_path: Path) -> None:
    proc = run("compare", env={"COACH_CLUSTER_DIR": str(tmp_path / "none")})
    assert proc.returncode == 1 and "no control plane is running: start one with `coach cluster up`" in proc.stderr


def test_a_long_job_is_not_a_stall_and_leftovers_are_cleared(workload: Workload, tmp_path: Path) -> None:
    # a job that runs longer than --stall, with another one waiting for its room, made both runs
    # "stalled" after --stall seconds (then: as soon as it finished); and pods an interrupted
    # comparison left held room in every run
    workload.reset(nodes=2, cpu="4", memory="8Gi")
    workload.kube.ensure_namespace("coach-experiment")
    leftover = job_pod("old", 0, "scheduler", 3, "default-scheduler", cpu="4")
    leftover["metadata"].update(namespace="coach-experiment", labels={"coach.experiment": "interrupted"})
    workload.kube.create_pod(leftover)
    (tmp_path / "long.yaml").write_text("jobs:\n  - {name: long, at: 0, pods: 8, run: 8}\n"
                                        "  - {name: next, at: 1, pods: 3, run: 1}\n")
    proc = run("compare", str(tmp_path / "long.yaml"), "--stall", "4", "--json")   # shorter than the long job
    assert proc.returncode == 0, proc.stderr
    assert "deleting the pods an interrupted comparison left in coach-experiment" in proc.stderr
    for r in json.loads(proc.stdout)["runs"]:
        assert (r["finished"], r["ended"]) == (2, "finished"), r
        assert r["makespan_s"] >= 8 + 1
