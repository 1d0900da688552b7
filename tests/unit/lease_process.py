"""Another `coach submit` process, as far as capacity leases go (for tests/unit/test_coordinator.py).

Reads commands on stdin, answers one line each:
  take JOB CPU EPOCH_S   → ok | no      (of CAPACITY_CPU cores; memory: 1 GiB of 8)
  drop JOB               → ok
  wait JOB CPU           → ok: JOB is queued for CPU cores (and 1 GiB), as a waiting job is
  queue JOB              → ok: the same for `scaling_demand(JOB)`'s smallest allocation, its demand published
  race JOB CPU N         → "GRANTED DOUBLED": N rounds of take, count the leases held, drop
  ask JOB                → "W S": one epoch's grant to `scaling_demand(JOB)` through a Coordinator
                           on SHARED_CAPACITY (its demand stays published, as between epochs)
  done JOB               → ok: the job ended (its demand is withdrawn)
  claim JOB              → ok | PID of the live process that runs JOB
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from coach.backends.base import Capacity
from coach.estimate.cost import DEFAULT_RESOURCES
from coach.estimate.speed import SpeedModel
from coach.job.coordinator import Coordinator
from coach.plan import JobDemand, demand_to_json, min_resources
from coach.state.store import Store

CAPACITY_CPU = 1.0
SHARED_CAPACITY = Capacity(cpu=4.0, memory_gib=64.0)


def scaling_demand(job_id: str) -> JobDemand:
    """A job that gains from more workers and servers: +9% for a 2nd worker, +3.5% for a 2nd server."""
    speed = SpeedModel(form="quadratic", coef=(10.0, 8.0, 10.0, 4.0, 2000.0), global_batch=64.0, mape=0.01,
                       n_configs=6)
    return JobDemand(job_id=job_id, speed=speed, remaining_epochs=10.0, samples_per_epoch=4000.0,
                     resources=DEFAULT_RESOURCES)


def main(db: str) -> None:
    store = Store(Path(db))
    coordinator = Coordinator(SHARED_CAPACITY, store)
    for line in sys.stdin:
        cmd, job, *args = line.split()
        if cmd == "take":
            cpu, epoch_s = map(float, args)
            ok = store.take_lease(job, cpu, 1.0, CAPACITY_CPU, 8.0, time.time())
            if ok:
                store.set_lease_epoch_s(job, epoch_s)
            print("ok" if ok else "no", flush=True)
        elif cmd == "wait":
            store.wait_for_lease(job, float(args[0]), 1.0, since=time.time())
            print("ok", flush=True)
        elif cmd == "queue":   # as a job waiting between its epochs: measured, and in line
            d = scaling_demand(job)
            store.publish_demand(job, time.time(), demand_to_json(d))
            store.wait_for_lease(job, *min_resources(d), since=time.time())
            print("ok", flush=True)
        elif cmd == "drop":
            store.drop_lease(job)
            print("ok", flush=True)
        elif cmd == "race":
            cpu, rounds = float(args[0]), int(args[1])
            granted = doubled = 0
            for _ in range(rounds):
                if store.take_lease(job, cpu, 1.0, CAPACITY_CPU, 8.0, time.time()):
                    granted += 1
                    doubled += len(store.leases()) > 1
                    store.drop_lease(job)
            print(granted, doubled, flush=True)
        elif cmd == "ask":
            grant = coordinator.acquire(scaling_demand(job), timeout_s=10)
            coordinator.release(job)
            print("none" if grant is None else f"{grant.workers} {grant.servers}", flush=True)
        elif cmd == "claim":
            other = store.claim_job(job)
            print("ok" if other is None else other, flush=True)
        elif cmd == "done":
            coordinator.release(job, done=True)
            print("ok", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
