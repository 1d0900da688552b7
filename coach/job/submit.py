"""Run several jobs at once on one backend: one loop thread per job, one shared Coordinator."""

from __future__ import annotations

import dataclasses
import sys
import threading
import uuid
from pathlib import Path
from typing import Callable

from coach.backends.base import Backend
from coach.errors import CoachError, StateError
from coach.estimate import preload
from coach.job import work_dir
from coach.job.coordinator import Coordinator
from coach.job.loop import JobLoop, JobRun
from coach.spec import JobSpec
from coach.state.store import Store


def new_job_id(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:6]}"


def register(spec: JobSpec, store: Store, backend: str = "local") -> str:
    """Record a new job (status queued, run by this process, on `backend`) and return its id."""
    job_id = new_job_id(spec.name)
    store.claim_job(job_id)   # before it exists: `coach status` never sees it unowned
    source = Path(spec.source)   # absolute: `coach resume` may run from another folder and name it
    spec_path = str(source.absolute()) if source.is_file() else spec.source
    store.create_job(job_id, spec.name, spec_path, dataclasses.asdict(spec), spec.target_loss, spec.budget, backend)
    store.add_event(job_id, "submitted", f"from {spec.source}")
    return job_id


def run_jobs(jobs: dict[str, JobSpec], backend: Backend, store: Store,
             watch: Callable[[list[str], Callable[[], bool]], None] | None = None,
             stop: threading.Event | None = None) -> dict[str, str]:
    """Run every job to a final status, concurrently; `watch` renders progress meanwhile, and
    `stop` (a Ctrl-C) stops them all after their running epochs, as `coach stop` does.

    The caller has claimed the jobs (`Store.claim_job`): no other process runs them.
    """
    preload()   # before the jobs' threads, which would import scipy side by side, and during `Backend.prewarm`
    # a cluster's room is read again as jobs ask, and its pods keep their leases between epochs
    coordinator = Coordinator(lambda: backend.capacity, store, kept=not backend.keep_warm)
    stop = stop or threading.Event()
    statuses: dict[str, str] = {}

    def one(job_id: str, spec: JobSpec) -> None:
        try:
            try:
                loop = JobLoop(JobRun(spec, job_id, store, backend, coordinator, work_dir(job_id), stop))
            except Exception as e:  # the loop could not even start (e.g. dataset unreadable)
                coordinator.release(job_id, done=True)   # no longer expected (`expect`): the others may be alone
                message = f"could not start: {e if isinstance(e, CoachError) else f'{type(e).__name__}: {e}'}"
                store.update_job(job_id, status="failed", message=message)
                store.add_event(job_id, "failed", message)
                statuses[job_id] = "failed"
                return
            statuses[job_id] = loop.run_job()
        except StateError as e:   # the store cannot record the end (a full disk): what it holds stays
            print(f"error: {job_id}: {e}", file=sys.stderr)
            statuses[job_id] = "failed"
        finally:
            store.release_job(job_id)

    coordinator.expect(list(jobs))
    threads = [threading.Thread(target=one, args=(jid, spec), name=f"job-{jid}", daemon=True)
               for jid, spec in jobs.items()]
    for t in threads:
        t.start()
    try:
        if watch is not None:
            watch(list(jobs), lambda: all(not t.is_alive() for t in threads))
    finally:   # whatever happened to the watcher, the caller tears the backend down only after the jobs end
        for t in threads:
            t.join()
    return statuses
