"""Random stress: jobs of random sizes (some with elastic extras beyond the
minimum group) arrive in random order on a small cluster while finished jobs
go away. At every quiet point: no partially bound minimum group, and no
pending group (or extra) that would fit the free room, but for those behind a
job that has waited past coach-gang's starvation bound (its room is held)."""

from __future__ import annotations

import os
import random
import time
from collections import Counter

import yaml

from coach.cluster.control_plane import SCHEDULER_CONFIG
from tests.cluster.workload import Workload, interleave, wait_for

NODES, CPU = 3, 4
SLOTS = NODES * CPU          # every pod asks for one CPU
STARVATION_S = next(p["args"]["starvationSeconds"] for p in yaml.safe_load(SCHEDULER_CONFIG.read_text())
                    ["profiles"][0]["pluginConfig"] if p["name"] == "CoachGang")


def test_random_jobs_never_partial_never_stuck(workload: Workload) -> None:
    seed = int(os.environ.get("COACH_STRESS_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"stress seed {seed} (COACH_STRESS_SEED to replay)")
    workload.reset(nodes=NODES, cpu=str(CPU), memory="64Gi")
    jobs: dict[str, tuple[int, int]] = {}        # job -> (size, min group), in arrival order (the queue's)
    born: dict[str, float] = {}
    serial = 0

    def check(bound: Counter) -> None:
        for j, (size, mg) in jobs.items():
            assert bound[j] == 0 or bound[j] >= mg, f"seed {seed}: {j} partially bound {bound[j]}/{mg}"

    def stuck() -> list[str]:
        bound = workload.bound()
        free = SLOTS - sum(bound.values())
        out = []
        for j, (size, mg) in jobs.items():
            # (creation times are whole seconds and pods are made before `born`: the scheduler may see the bound passed early)
            if bound[j] == 0 and mg > free and time.monotonic() - born[j] > STARVATION_S - 3:
                break   # its room is held as it frees: the jobs behind it wait
            if bound[j] == 0 and mg <= free:
                out.append(f"{j} needs {mg}, {free} free")
            elif mg <= bound[j] < size and free > 0:
                out.append(f"{j} has extras pending, {free} free")
        return out

    for round_ in range(4):
        batch = []
        for _ in range(rng.randint(3, 6)):
            serial += 1
            name = f"s{serial}"
            mg = rng.randint(3, 6)
            size = mg + rng.choice([0, 0, 1, 2])
            pods = workload.job_pods(name, size, mg, "coach-gang")
            rng.shuffle(pods)
            batch.append((name, size, mg, pods))
        rng.shuffle(batch)
        # the queue orders jobs by their first pod's arrival, which is the shuffled order, not
        # the names' (s6 before s1: s1 fitting 5 free slots behind a starved s6 rightly waited)
        jobs.update((name, (size, mg)) for name, size, mg, _ in batch)
        groups = [pods for *_, pods in batch]
        workload.submit(interleave(groups) if rng.random() < 0.5 else [p for g in groups for p in g])
        born.update((name, time.monotonic()) for name in jobs if name not in born)
        wait_for(lambda: not stuck(), 90, f"seed {seed} round {round_}: progress ({stuck()})")
        check(workload.settle())
        assert not stuck(), f"seed {seed}: stuck after settling: {stuck()}"
        bound = workload.bound()
        done = [j for j, (size, mg) in jobs.items() if bound[j] >= mg]
        for j in rng.sample(done, k=max(1, len(done) // 2)) if done else []:
            workload.delete_job(j)
            del jobs[j]
        wait_for(lambda: not stuck(), 90, f"seed {seed} round {round_}: progress after deletes ({stuck()})")
        check(workload.settle())
