"""Another `coach submit` process, as far as capacity leases go (for tests/unit/test_coordinator.py).

Reads commands on stdin, answers one line each:
  take JOB CPU EPOCH_S   → ok | no      (of CAPACITY_CPU cores; memory: 1 GiB of 8)
  drop JOB               → ok
  race JOB CPU N         → "GRANTED DOUBLED": N rounds of take, count the leases held, drop
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from coach.state.store import Store

CAPACITY_CPU = 1.0


def main(db: str) -> None:
    store = Store(Path(db))
    for line in sys.stdin:
        cmd, job, *args = line.split()
        if cmd == "take":
            cpu, epoch_s = map(float, args)
            ok = store.take_lease(job, cpu, 1.0, CAPACITY_CPU, 8.0, time.time())
            if ok:
                store.set_lease_epoch_s(job, epoch_s)
            print("ok" if ok else "no", flush=True)
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


if __name__ == "__main__":
    main(sys.argv[1])
