"""Workload files and random workloads for `coach cluster compare`, and the figures of a run."""

from __future__ import annotations

from pathlib import Path

import pytest

from coach.errors import SpecError
from coach.experiment import JobArrival, load_workload, random_workload, summarize
from coach.experiment.replay import JobOutcome, Run, Sample

BAD = {
    "not yaml": ("jobs: [", "not valid YAML"),
    "not text": (b"\xff\xfe\x00jobs", "line 1: not UTF-8 text (byte 0xff)"),
    # a latin-1 comment was "not a text file"; a second document "but found another document"
    "latin-1": ("jobs: [{run: 1}]\n# caf\xe9\n".encode("latin-1"), "line 2: not UTF-8 text (byte 0xe9)"),
    "two documents": ("jobs: [{run: 1}]\n---\njobs: [{run: 2}]\n", "line 2: not valid YAML: a second YAML document"),
    "no jobs": ("{}\n", "jobs: must be a non-empty list of jobs"),
    "jobs misspelt": ("jobz: [{run: 1}]\n", "jobz: unknown field"),   # it said "jobs: must be a non-empty list"
    "empty list": ("jobs: []\n", "jobs: must be a non-empty list of jobs"),
    "not a mapping": ("jobs: [3]\n", "jobs[0]: must be a mapping"),
    "unknown field": ("jobs: [{run: 1, workers: 3}]\n", "jobs[0].workers: unknown field"),
    "too few pods": ("jobs: [{run: 1, pods: 2}]\n", "jobs[0].pods: must be a whole number from 3 to 1000, got 2"),
    "fractional pods": ("jobs: [{run: 1, pods: 3.5}]\n", "jobs[0].pods: must be a whole number from 3 to 1000, got 3.5"),
    "group larger than the job": ("jobs: [{run: 1, pods: 4, min_group: 5}]\n",
                                  "jobs[0].min_group: 5 is more than the job's 4 pods"),
    "negative arrival": ("jobs: [{run: 1, at: -1}]\n", "jobs[0].at: must be a number from 0 to 86400, got -1"),
    "bad cpu": ("jobs: [{run: 1, cpu: lots}]\n", "jobs[0].cpu: must be a CPU quantity from 1m"),
    "cpu under a millicore": ("jobs: [{run: 1, cpu: 0.0001}]\n", "jobs[0].cpu: must be a CPU quantity from 1m"),
    "bad memory": ("jobs: [{run: 1, memory: 0}]\n", "jobs[0].memory: must be a memory quantity from 1Mi"),
    "too many jobs": ("jobs:\n" + "  - {run: 1}\n" * 1001, "jobs: at most 1000 jobs, got 1001"),
    # tracebacks (OverflowError writing the requests)
    "cpu of 1e308": ("jobs: [{run: 1, cpu: 1e308}]\n", "jobs[0].cpu: must be a CPU quantity from 1m to 100000 cores"),
    "memory of 1e308": ("jobs: [{run: 1, memory: 1e308}]\n", "jobs[0].memory: must be a memory quantity from 1Mi"),
    "memory under a MiB": ("jobs: [{run: 1, memory: 1Ki}]\n", "jobs[0].memory: must be a memory quantity from 1Mi"),
    "too many pods": ("jobs: [{run: 1, pods: 100000000}]\n", "jobs[0].pods: must be a whole number from 3 to 1000, got 100000000"),
    "unknown keys of mixed types": ("jobs: [{run: 1, 1: 2, x: 3}]\n", "jobs[0].1: unknown field"),
    "unknown top-level key": ("jobs: [{run: 1}]\nworkers: 3\n", "workers: unknown field"),
    "a key twice": ("jobs: [{run: 1, run: 2}]\n", "line 1"),
    "a list as a key": ("jobs: [{run: 1, ? [a, b] : 3}]\n", "a key must be a plain value, not a list or mapping"),
    "no run time": ("jobs: [{pods: 3}]\n", "jobs[0].run: missing"),
    "boolean run time": ("jobs: [{run: true}]\n", "jobs[0].run: must be a number from 0.1 to 86400, got true"),
    # the simulation draws the replay's polls up to the last time: at 1.7e308 it ended in an OverflowError
    "arrival past a day": ("jobs: [{run: 1, at: 1.7e+308}]\n", "jobs[0].at: must be a number from 0 to 86400, got 1.7e+308"),
    "run time past a day": ("jobs: [{run: 1e6}]\n", "jobs[0].run: must be a number from 0.1 to 86400, got 1000000.0"),
    "bad name": ("jobs: [{run: 1, name: Big_Job}]\n", "jobs[0].name: must be text of at most 40 lower-case letters, "
                                                     "digits and '-', with a letter or digit at both ends, got 'Big_Job'"),
    # float() and a regular expression's \\d read fullwidth digits: both ran as 3 (helper-32)
    "fullwidth run time": ("jobs: [{run: '\uff13'}]\n", "jobs[0].run: must be a number from 0.1 to 86400, got '\uff13'"),
    "fullwidth cpu": ("jobs: [{run: 1, cpu: '\uff11'}]\n", "jobs[0].cpu: must be a CPU quantity from 1m"),
    "name as a number": ("jobs: [{run: 1, name: 0x1f}]\n", "jobs[0].name: must be text"),   # was job 31
    # a 600-byte file of anchors: str() of the expanded list ran out of memory (helper-32)
    "nested anchors": ("jobs: [{run: 1, cpu: [" + ", ".join(f"&l{k} [" + ", ".join([f"*l{k - 1}" if k else "a"] * 10)
                                                             + "]" for k in range(9)) + "]}]\n",
                       "jobs[0].cpu: must be a CPU quantity from 1m to 100000 cores such as 1 or 500m, got [["),
    # ValueError tracebacks: Python reads at most 4,300 digits of an int
    "a number of 5000 digits": ("jobs: [{run: 1, pods: " + "9" * 5000 + "}]\n",
                                "line 1: not valid YAML: a number written with 5000 digits; at most 100"),
    "a hexadecimal number of 5000 digits": ("jobs: [{run: 1, pods: 0x" + "f" * 4998 + "}]\n",
                                            "a number written with 5000 digits; at most 100"),
    "name twice": ("jobs: [{run: 1, name: a}, {run: 1, name: a}]\n", "jobs[1].name: 'a' is used twice, by jobs[0] too"),
    # an unnamed entry is job-<index>: blamed without a word of why, it has no name to change
    "default name taken": ("jobs: [{run: 1, name: job-1}, {run: 1}]\n",
                           "jobs[1].name: 'job-1' is used twice, by jobs[0] too (this entry's default name: give it a name)"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_workload_file_names_file_and_field(case: str, tmp_path: Path) -> None:
    text, problem = BAD[case]
    path = tmp_path / "w.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(SpecError) as err:
        load_workload(path)
    assert str(err.value).startswith(f"{path}: ") and problem in str(err.value), str(err.value)


def test_a_workload_file_with_defaults(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("jobs:\n  - {run: 5}\n  - {name: big, at: 2.5, pods: 6, min_group: 3, cpu: 500m, memory: 512Mi, run: 1}\n"
                    "  - {name: odd, run: 1, cpu: 1.5m, memory: 1.4Mi}\n"
                    "  - {name: exp, run: 1e3, pods: 4.0}\n")   # YAML 1.1 reads 1e3 as text (it was refused as '1e3')
    assert load_workload(path) == [JobArrival("job-0", 0.0, 3, 3, 1.0, 1.0, 5.0),
                                   JobArrival("big", 2.5, 6, 3, 0.5, 0.5, 1.0),
                                   JobArrival("odd", 0.0, 3, 3, 0.002, 1 / 1024, 1.0),   # as the pods request
                                   JobArrival("exp", 0.0, 4, 4, 1.0, 1.0, 1000.0)]


def test_a_random_workload_depends_on_its_seed_only() -> None:
    a, b, c = random_workload(20, seed=7), random_workload(20, seed=7), random_workload(20, seed=8)
    assert a == b and a != c
    assert all(3 <= j.pods <= 6 and j.min_group in (3, j.pods) and 3 <= j.run <= 8 for j in a)
    assert [j.at for j in a] == sorted(j.at for j in a) and a[0].at == 0
    assert {j.at for j in random_workload(5, seed=1, mean_gap_s=0)} == {0.0}


def test_the_figures_of_a_run() -> None:
    # two jobs on 4 CPU: one waits 1 s and runs 2 s; the other holds 2 CPU half-placed and never starts
    fast = JobOutcome(JobArrival("fast", 0.0, 3, 3, 1.0, 1.0, 2.0), submitted=0.1, started=1.1, finished=3.1)
    stuck = JobOutcome(JobArrival("stuck", 0.0, 4, 4, 1.0, 1.0, 2.0), submitted=0.1, bound=2)
    samples = [Sample(0.0, 0.0, 2.0), Sample(1.0, 3.0, 2.0), Sample(3.0, 0.0, 2.0)]
    s = summarize(Run("x", 4.0, [fast, stuck], samples, duration=5.0, ended="stalled"))
    assert (s.finished, s.deadlocked, s.waiting) == (1, 1, 0)
    assert (s.wait_median_s, s.wait_max_s, s.completion_median_s, s.makespan_s) == (1.0, 1.0, 3.0, None)
    assert s.held_cpu_s == 10.0                 # 2 CPU for the whole 5 s
    assert s.busy_share == round(3 * 2 / (4 * 5), 3)


@pytest.mark.parametrize("memory, gib", [("8Gi", 8.0), ("7838315316", 7838315316 / 2**30), ("8G", 8e9 / 2**30),
                                         ("16318412Ki", 16318412 / 2**20)])
def test_a_nodes_memory_reads_as_kubernetes_writes_it(memory: str, gib: float) -> None:
    # a plain number is bytes to Kubernetes (in job files it is GiB): read as GiB, a node of
    # 7.3Gi looked like 7.8 billion GiB and every pod "fit" it
    from coach.cluster.nodes import node_size

    assert node_size({"status": {"allocatable": {"cpu": "4", "memory": memory}}}) == (4.0, pytest.approx(gib))


def test_a_cluster_without_nodes_is_named_as_such() -> None:
    """`coach cluster up --nodes 0`, then compare: "a pod asks 1 CPU, more than any node has (0 CPU):
    reshape the nodes with --cpu/--memory" asked for bigger nodes where there were none."""
    from coach.errors import SpecError
    from coach.experiment.compare import check_fits

    with pytest.raises(SpecError, match=r"^w.yaml: jobs\[0\]: the cluster has no nodes: add some with "
                                        r"`coach cluster up --nodes`$"):
        check_fits(random_workload(2, seed=1), [], "w.yaml")


def test_a_folder_given_as_workload_is_named_a_workload_file(tmp_path) -> None:
    from coach.errors import SpecError

    with pytest.raises(SpecError, match="a folder, not a workload file$"):   # it said "not a job file"
        load_workload(tmp_path)


@pytest.mark.parametrize("nodes, text", [
    (3, "3 nodes × (4 CPU, 8 GiB)"),
    (1, "1 node × (4 CPU, 8 GiB)"),
    (0, "no nodes (no pod can be placed: add some with `coach cluster up --nodes N`)"),   # was "0 nodes × (4 CPU, …)"
])
def test_cluster_up_names_the_shape_it_made(nodes: int, text: str) -> None:
    from coach.cli.cluster import _shape

    assert _shape(nodes, (4.0, 8.0)) == text
    # nodes too small for any function (`--cpu 1m`) were taken without a word
    assert _shape(1, (0.001, 4.0)) == ("1 node × (0.001 CPU, 4 GiB) (no pod fits: the smallest function asks "
                                       "0.1 CPU, 0.25 GiB by default; `--cpu`/`--memory` make bigger nodes)")
