"""A workload: Coach jobs that arrive at given times, each a group of function pods (one
MXNet scheduler, one server, the rest workers) that runs for a given time once its minimum
group is bound. Pods follow Coach's pod contract (scheduler_plugins/README.md)."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from coach import quantities
from coach.backends.cluster.backend import LABEL_JOB, LABEL_ROLE, MIN_GROUP
from coach.cluster.control_plane import MAX_NODE_CPU, MAX_NODE_GIB
from coach.errors import SpecError
from coach.spec import NAME_RE, NUMBER_TEXT, read_yaml, shown

RANDOM = "random workload"   # what messages name a generated workload by
FIELDS = {"name", "at", "pods", "min_group", "cpu", "memory", "run"}
MAX_PODS = 1000
MAX_JOBS = 1000   # of a workload, each a pod group on the real apiserver (100,000 ran for minutes unsaid)
MAX_SECONDS = 86400.0   # a day: arrivals, run times and stalls; the simulation draws every poll up to the last


@dataclass(frozen=True)
class JobArrival:
    name: str
    at: float          # seconds after the run starts
    pods: int          # scheduler + server + workers
    min_group: int     # pods that must start together (all of them: a static job)
    cpu: float         # cores per pod
    memory_gib: float  # per pod
    run: float         # seconds the job runs once its minimum group is bound

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def roles(pods: int) -> list[str]:
    return ["scheduler", "server"] + ["worker"] * (pods - 2)


def pod_objects(job: JobArrival, scheduler: str, namespace: str, label: str) -> list[dict]:
    """The job's pods for `scheduler`, labelled as Coach's cluster backend labels its own (the
    contract coach-gang reads); no processor runs in them, so nothing else of the backend's pods."""
    return [{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{job.name}-{role}-{i}", "namespace": namespace,
                     "labels": {LABEL_JOB: job.name, LABEL_ROLE: role, "coach.experiment": label},
                     "annotations": {MIN_GROUP: str(job.min_group)}},
        "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "fn", "image": "coach/function:experiment",
                                 "resources": {"requests": {"cpu": quantities.cpu_text(job.cpu),
                                                            "memory": quantities.memory_text(job.memory_gib)}}}]},
    } for i, role in enumerate(roles(job.pods))]


def random_workload(jobs: int, seed: int, mean_gap_s: float = 1.0, max_pods: int = 6,
                    run_s: tuple[float, float] = (3.0, 8.0)) -> list[JobArrival]:
    """Poisson arrivals; sizes 3..max_pods; half the jobs static (the whole job is its
    minimum group), half elastic (a minimum group of 3, the rest extras). One CPU and
    1 GiB per pod. The same seed gives the same workload."""
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(jobs):
        pods = rng.randint(3, max(3, max_pods))
        out.append(JobArrival(name=f"job-{i}", at=round(t, 2), pods=pods,
                              min_group=pods if rng.random() < 0.5 else 3, cpu=1.0, memory_gib=1.0,
                              run=round(rng.uniform(*run_s), 2)))
        t += rng.expovariate(1.0 / mean_gap_s) if mean_gap_s > 0 else 0.0
    return out


def load_workload(path: Path) -> list[JobArrival]:
    """Read a workload file: `jobs:` a list of {name, at, pods, min_group, cpu, memory, run}.
    Every problem names the file and the field."""
    raw = read_yaml(path, "workload file")
    extra = sorted(map(str, set(raw) - {"jobs"})) if isinstance(raw, dict) else []
    if extra:   # first: a misspelt `jobs:` is named as such, not as `jobs` missing
        raise SpecError(str(path), extra[0], "unknown field; a workload file holds only `jobs`")
    if not isinstance(raw, dict) or not isinstance(raw.get("jobs"), list) or not raw["jobs"]:
        raise SpecError(str(path), "jobs", "must be a non-empty list of jobs")
    if len(raw["jobs"]) > MAX_JOBS:
        raise SpecError(str(path), "jobs", f"at most {MAX_JOBS} jobs, got {len(raw['jobs'])}")
    out: list[JobArrival] = []
    names: dict[str, int] = {}
    for i, item in enumerate(raw["jobs"]):
        where = f"jobs[{i}]"
        if not isinstance(item, dict):
            raise SpecError(str(path), where, "must be a mapping")
        unknown = sorted(map(str, set(item) - FIELDS))
        if unknown:
            raise SpecError(str(path), f"{where}.{unknown[0]}", f"unknown field; known: {', '.join(sorted(FIELDS))}")
        job = _job(path, where, item, i)
        if job.name in names:
            given = "" if "name" in item else " (this entry's default name: give it a name)"
            raise SpecError(str(path), f"{where}.name", f"{job.name!r} is used twice, by jobs[{names[job.name]}] "
                                                        f"too{given}")
        names[job.name] = i
        out.append(job)
    return out


def _job(path: Path, where: str, item: dict, i: int) -> JobArrival:
    def number(field: str, default: Any, low: float, high: float, integer: bool = False) -> Any:
        value = item.get(field, default)
        if isinstance(value, str) and NUMBER_TEXT.fullmatch(value.strip()):
            value = float(value)   # YAML 1.1 reads 1e3 as text
        ok = (isinstance(value, int) or isinstance(value, float) and value.is_integer()) if integer else \
            isinstance(value, (int, float))
        if isinstance(value, bool) or not ok or value != value or not low <= value <= high:
            kind = "a whole number" if integer else "a number"
            raise SpecError(str(path), f"{where}.{field}", f"must be {kind} from {low:g} to {high:g}, "
                                                           f"got {shown(value)}")
        return int(value) if integer else value

    def quantity(field: str, default: str) -> str:
        value = item.get(field, default)   # a list of anchors' lists: str() of it ran out of memory
        return value if isinstance(value, str) else str(value) if isinstance(value, (int, float)) else ""

    name = item.get("name", f"job-{i}")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):   # `0x1f` was job 31
        raise SpecError(str(path), f"{where}.name", f"must be text of at most 40 lower-case letters, digits "
                                                    f"and '-', with a letter or digit at both ends, got {shown(name)}")
    pods = number("pods", 3, 3, MAX_PODS, integer=True)
    min_group = number("min_group", pods, 3, MAX_PODS, integer=True)
    if min_group > pods:
        raise SpecError(str(path), f"{where}.min_group", f"{min_group} is more than the job's {pods} pods")
    # requests are written in millicores and MiB; at most what a node can be (1e308 was a traceback)
    cpu = quantities.cores(quantity("cpu", "1"))
    if cpu is None or not 0.001 <= cpu <= MAX_NODE_CPU:
        raise SpecError(str(path), f"{where}.cpu", f"must be a CPU quantity from 1m to {MAX_NODE_CPU} cores such as "
                                                   f"1 or 500m, got {shown(item['cpu'])}")
    memory = quantities.gib(quantity("memory", "1Gi"))
    if memory is None or not 1 / 1024 <= memory <= MAX_NODE_GIB:
        raise SpecError(str(path), f"{where}.memory", f"must be a memory quantity from 1Mi to {MAX_NODE_GIB} GiB such "
                                                      f"as 1Gi or 512Mi, got {shown(item['memory'])}")
    if "run" not in item:
        raise SpecError(str(path), f"{where}.run", "missing: seconds the job runs once its minimum group is bound")
    return JobArrival(name=name, at=float(number("at", 0, 0, MAX_SECONDS)), pods=pods, min_group=min_group,
                      cpu=quantities.written_cores(cpu), memory_gib=quantities.written_gib(memory),   # as requested
                      run=float(number("run", None, 0.1, MAX_SECONDS)))
