"""Commands of a data scientist: submit, status, history, events, stop, resume, plot."""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, List, Optional

import typer
from rich.table import Table
from rich.text import Text

from coach.cli import format as fmt
from coach.cli.format import PipeSafeConsole
from coach.errors import CoachError, SpecError, StateError
from coach.state.records import FINAL_STATUSES, NONE_FOUND, WAIT_KEYS, EpochRecord, JobRecord
from coach.state.store import Store

console = PipeSafeConsole(stderr=True, soft_wrap=True, markup=False)   # messages quote user code: "[/16, /32]"
out = PipeSafeConsole(markup=False)
if not out.is_terminal:   # piped or captured: do not squeeze tables into 80 columns
    out = PipeSafeConsole(width=200, markup=False)

JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON instead of a table.")
CpuOpt = typer.Option(None, "--cpu", help="Cores the local backend may use (default: all).", min=0.1)
BackendOpt = typer.Option("local", "--backend", help="Where role functions run: local (embedded) or cluster "
                                                    "(pods on the control plane of `coach cluster up`).")
ResumeBackendOpt = typer.Option(None, "--backend", help="Where role functions run: local or cluster (default: "
                                                        "where the job ran).")


def _backend(name: str, cpu: float | None, store: Store):
    """The backend to run on, checked before anything is recorded, with the folders it writes."""
    from coach.job import jobs_dir

    if name not in ("local", "cluster"):
        raise SpecError("--backend", "", f"unknown backend {name!r}; available: local, cluster")
    if cpu is not None and not math.isfinite(cpu):
        raise SpecError("--cpu", "", f"must be a finite number of cores, got {cpu}")
    for folder in (jobs_dir(), store.path.parent / "logs"):
        try:   # a file in their place failed the job as an internal error after it was recorded
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StateError(f"{folder}: cannot be used as a folder ({e.strerror}): move what is there away, "
                             "or set COACH_HOME to another folder") from None
    if name == "cluster":
        if cpu is not None:
            raise SpecError("--cpu", "", "applies to the local backend; the cluster's nodes set its capacity "
                                         "(`coach cluster up --nodes N --cpu C`)")
        from coach.backends.cluster import connect

        return connect(log_dir=store.path.parent / "logs")
    from coach.backends.local import LocalBackend

    if cpu is not None and cpu > (cores := os.cpu_count() or 1):   # allowed: an experiment may pack more
        console.print(f"note: --cpu {cpu:g} is more than this machine's {cores} cores: the functions share them, "
                      "so each reads slower than it would alone", style="yellow")
    return LocalBackend(cpu=cpu, log_dir=store.path.parent / "logs")


def _check_fits(spec: Any, capacity: Any, cpu_given: bool = False) -> None:
    """A job whose smallest allocation exceeds the backend's capacity would only be recorded
    to fail: say so before anything is recorded (exit 2). On a cluster, room that other work
    holds now is not counted against the job: it waits for that room. `cpu_given`: the local
    backend's cores are the user's --cpu, which is then named as the cause."""
    from coach.plan import describe_nodes, footprint, functions, packs

    capacity = capacity.whole
    w, s = (spec.workers, spec.servers) if spec.allocation == "static" else (1, 1)
    cpu, mem = footprint(spec.resources, w, s)
    how = "`coach cluster up --nodes/--cpu/--memory` reshapes it" if capacity.nodes else "--cpu sets its cores"
    for role, r in spec.resources.items() if capacity.nodes else ():
        if not packs([(r.cpu, r.memory_gib)], capacity.nodes):
            raise SpecError(spec.source, f"resources.{role}",
                            f"one {role} asks {r.cpu:g} cores and {r.memory_gib:g} GiB; no node has room for it: "
                            f"the cluster has {describe_nodes(capacity.nodes)} ({how})")
    smallest = f"its smallest allocation ({w} worker(s), {s} server(s) and a scheduler) needs {cpu:g} cores and {mem:g} GiB"
    if cpu_given and cpu > capacity.cpu + 1e-9 and mem <= capacity.memory_gib + 1e-9:
        raise SpecError("--cpu", "", f"{capacity.cpu:g} cores are too few for {spec.source}: {smallest}; "
                                     f"give --cpu {cpu:g} or more")
    if cpu > capacity.cpu + 1e-9 or mem > capacity.memory_gib + 1e-9:
        field = "resources, workers, servers" if spec.allocation == "static" else "resources"
        raise SpecError(spec.source, field, f"{smallest}; the {'cluster' if capacity.nodes else 'local'} backend has "
                                            f"{capacity.cpu:g} cores and {capacity.memory_gib:g} GiB ({how})")
    if capacity.nodes and not packs(functions(spec.resources, w, s), capacity.nodes):
        raise SpecError(spec.source, "resources", f"{smallest}: that fits the cluster's {capacity.cpu:g} cores in sum "
                                                  f"but cannot be laid out on its {describe_nodes(capacity.nodes)} ({how})")


def _table(rows: list[dict[str, Any]], title: str | None = None) -> Table:
    t = Table(title=title)
    for col in rows[0] if rows else []:
        t.add_column(col)
    for r in rows:
        t.add_row(*[str(v) for v in r.values()])
    return t


def _job_json(store: Store, job: JobRecord, events: list[dict[str, Any]]) -> dict[str, Any]:
    """A job as `--json` gives it, the same from `submit`, `resume` and `status`: the earlier runs
    its ETA asks as a list of job ids (the store's comma-separated text, or its "-" for none
    found, is not for scripts to parse), the seconds left as of now (`eta.seconds` is as
    predicted at `eta.at`) and the finish time they give (Unix seconds, after any wait)."""
    fields = job.to_dict()
    chosen = fields.pop("earlier_job")
    now = time.time()
    eta_s, lo_s, hi_s = fmt.seconds_left(job, now)   # counted down to now, as the table shows it
    finish = [None if t is None else round(t, 1) for t in fmt.finish_times(job, now)]
    return dict(fields, earlier_jobs=[] if chosen in ("", NONE_FOUND) else chosen.split(","),
                elapsed_s=fmt.elapsed(job, events), eta_s=eta_s, eta_interval_s=[lo_s, hi_s],
                finish_at=finish[0], finish_interval_at=finish[1:], wait_s=fmt.wait_left(job, now),
                next_step=_next_step(store, job, events))


def next_step(job: JobRecord, events: list[dict[str, Any]], full: int | None = None) -> str | None:
    """What to run next for a job that ended short of its target, by the rules `coach resume`
    applies: a user who reads "failed" or "budget_exhausted" should not have to look up whether
    the job can go on, or with what. None for a job that succeeded or still runs. `full`: the
    training epochs it ran, when they reached its max_epochs whatever its status says
    (`_epochs_full`)."""
    if job.status == "succeeded" or job.status not in FINAL_STATUSES:
        return None
    kinds = _last_run_kinds(job, events)
    if instead := _no_resume(job, kinds):
        return instead
    if job.status == "max_epochs":
        full = job.epoch
    flags, values, after = "", [], ""
    if job.status == "budget_exhausted":
        flags, values, after = " --budget B", [f"B {_least_budget(job)}"], _to_target(job)
    if full is not None:
        flags, values = flags + " --max-epochs N", values + [f"N above {full}"]
    goes_on = f"`coach resume {job.job_id}{flags}` goes on where it stopped"
    if values:
        goes_on += f", {' and '.join(values)}{after}"
    if "fails_until_fixed" in kinds:
        return f"restore the damaged files its message names, then {goes_on}"
    return goes_on


def _next_step(store: Store, job: JobRecord, events: list[dict[str, Any]]) -> str | None:
    """`next_step` with what the store knows of the job's training epochs."""
    return next_step(job, events, _epochs_full(store, job))


def _trained(epochs: list[EpochRecord]) -> int:
    return sum(1 for e in epochs if e.phase == "training")


def _epochs_full(store: Store, job: JobRecord) -> int | None:
    """The training epochs a job ran, when they reached its max_epochs though its status is not
    `max_epochs`: a run killed between its last epoch's record and that status ends `interrupted`,
    and its resume needs a larger --max-epochs (None if the store cannot tell: `coach resume` says)."""
    if job.status not in FINAL_STATUSES or job.status in ("succeeded", "max_epochs"):
        return None
    from coach.spec import spec_from_dict

    try:   # a spec edited in the store is not this list's to say: `coach resume` names it
        limit = spec_from_dict(store.spec(job.job_id)).max_epochs
        trained = _trained(store.epochs(job.job_id))
    except StateError:
        return None
    return trained if trained >= limit else None


def _last_run_kinds(job: JobRecord, events: list[dict[str, Any]]) -> set[str]:
    """The kinds of event of a failed job's last run: how it failed (a run that was resumed
    since, after its damaged files were restored, is not why the job failed this time)."""
    if job.status != "failed":
        return set()
    last = max((i for i, e in enumerate(events) if e["kind"] == "resumed"), default=-1)
    return {e["kind"] for e in events[last + 1:]}


def _no_resume(job: JobRecord, kinds: set[str]) -> str | None:
    """What to do instead of a resume that would fail the same way, if it would."""
    if "diverged" in kinds:   # the same computation from the same checkpoint
        return f"resuming would diverge again: submit {job.spec_path} again with a lower learning_rate"
    if "fails_again" in kinds:   # the model's source is the one recorded at submit, the checkpoint the same
        return f"a resume would repeat it: fix the cause and submit {job.spec_path} again"
    return None


def _least_budget(job: JobRecord) -> str:
    """The least budget a resume of a budget-exhausted job accepts: enough for the next epoch as
    it was predicted when the job stopped, or else more than it had (and spent)."""
    cost = job.eta.get("next_epoch_cost")
    if isinstance(cost, (int, float)) and job.spent + cost > job.budget:
        return f"at least {_rounded_up(job.spent + cost)}"
    return f"more than {max(job.budget, job.spent):.6g}"


def _to_target(job: JobRecord) -> str:
    """The budget that pays for the epochs the job's last ETA said were left, at the next epoch's
    predicted cost: one more epoch is seldom what the user wants."""
    e = job.eta
    cost, left = e.get("next_epoch_cost"), e.get("epochs_left")
    if not isinstance(cost, (int, float)):
        return ""
    if e.get("reachable") is False:
        return "; its ETA did not see it reach the target"
    if not isinstance(left, int):
        return ""
    hi = e.get("hi", left)
    upper = "never" if hi is None else hi
    most = upper if isinstance(upper, int) else left
    if upper != "never" and most <= 1:   # the least a resume accepts already pays for it
        return ""
    span = f"{left}" if upper in (left, "never") else f"{left}–{upper}"
    maybe = ", maybe never," if upper == "never" else ""
    return (f"; its ETA said {span} epoch{'s' * (most != 1)} to the target{maybe} at ~{cost:.3g} each: "
            f"B = {_rounded_up(job.spent + most * cost, 3)} pays for {most}")


def _run(specs: dict[str, Any], backend: Any, json_out: bool, store: Store) -> None:
    from coach.cli.progress import watch
    from coach.job.submit import run_jobs

    stop = threading.Event()

    def interrupted(signum: int, frame: Any) -> None:
        """Once, and no store write: a held-down Ctrl-C re-entered the handler inside its own
        write, which then waited 30 s for its own lock and lost the stop."""
        if stop.is_set():
            return
        stop.set()
        console.print("stopping: the running epochs end now, checkpoints are kept", style="yellow")
        backend.close()

    old = signal.signal(signal.SIGINT, interrupted)
    old_term = signal.signal(signal.SIGTERM, interrupted)
    try:
        # progress goes to stderr, so `--json` on stdout stays machine-readable
        run_jobs(specs, backend, store, watch=lambda ids, done: watch(store, ids, done, console), stop=stop)
    finally:
        backend.close()
        if not stop.is_set():   # else a held-down Ctrl-C, still arriving, would end the report with exit 130
            signal.signal(signal.SIGINT, old)
            signal.signal(signal.SIGTERM, old_term)
    jobs = [store.job(j) for j in specs]
    if json_out:
        out.print_json(json.dumps([_job_json(store, j, store.events(j.job_id)) for j in jobs]))
    else:
        for j in jobs:
            colour = "green" if j.status == "succeeded" else "red"
            console.print(Text.assemble((f"{j.job_id}: {j.status}", colour), f" — {j.message}"))
            if step := _next_step(store, j, store.events(j.job_id)):
                console.print(f"{j.job_id}: next: {step}")
    if any(j.status != "succeeded" for j in jobs):
        raise typer.Exit(1)


@contextmanager
def _warming(runner: Any) -> Iterator[None]:
    """Start the functions' import of MXNet now (`Backend.prewarm`), beside what the caller records
    before its jobs run; if that fails, close the backend, so that no zygote is left running."""
    try:
        runner.prewarm()
        yield
    except BaseException:
        runner.close()
        raise


def submit(job_files: List[Path] = typer.Argument(..., metavar="JOB_FILE", help="One or more job files (YAML)."),
           backend: str = BackendOpt, cpu: Optional[float] = CpuOpt,
           json_out: bool = typer.Option(False, "--json", help="Print the jobs' final records as JSON on stdout "
                                                                 "(progress goes to stderr either way).")) -> None:
    """Train the jobs concurrently until each reaches its target (exit 0), or stops short (1)."""
    from coach.spec import load_spec

    errors: list[SpecError] = []
    specs = []
    for f in job_files:
        try:
            specs.append(load_spec(f))
        except SpecError as e:
            errors.append(e)
    if errors:  # nothing starts unless every file is valid
        for e in errors[:-1]:
            print(f"error: {e}", file=sys.stderr)
        raise errors[-1]
    store = Store()
    runner = _backend(backend, cpu, store)   # before anything is recorded
    with _warming(runner):   # beside the job loop's imports (and scipy's: `run_jobs`)
        for s in specs:
            _check_fits(s, runner.capacity, cpu_given=cpu is not None)
        from coach.job.submit import register

        jobs = {register(s, store, runner.name): s for s in specs}
    for jid in jobs:
        console.print(f"submitted {jid}")
    _run(jobs, runner, json_out, store)


def resume(job_id: str = typer.Argument(..., metavar="JOB", help="A stopped, failed, budget-exhausted, max-epochs or "
                                                  "interrupted job."),
           budget: Optional[float] = typer.Option(None, help="Raise the job's budget to this."),
           max_epochs: Optional[int] = typer.Option(None, "--max-epochs", min=1, help=(
               "A new max_epochs for the job (above the training epochs it has run).")),
           backend: Optional[str] = ResumeBackendOpt, cpu: Optional[float] = CpuOpt,
           json_out: bool = JsonOpt) -> None:
    """Continue a job from its last checkpoint and its recorded epochs.

    It runs where it ran unless --backend says otherwise."""
    import dataclasses

    from coach.job import work_dir
    from coach.job.loop import unpaid
    from coach.spec import MAX_NUMBER, spec_from_dict

    if budget is not None and not (0 < budget <= MAX_NUMBER):   # as a job file's budget
        raise SpecError("--budget", "", f"must be a finite number above 0 and at most {MAX_NUMBER:g}, got {budget:g}")
    if max_epochs is not None and max_epochs > MAX_NUMBER:   # as a job file's max_epochs
        raise SpecError("--max-epochs", "", f"must be at most {MAX_NUMBER:g}, got {max_epochs}")
    store = Store()
    job = store.job(job_id)
    if job.status == "succeeded":
        raise CoachError(f"{job.job_id} already succeeded; nothing to resume")
    if job.status not in FINAL_STATUSES:
        raise CoachError(f"{job.job_id} is {job.status} in another coach process; "
                         f"`coach stop {job.job_id}` stops it after its current epoch")
    spec = spec_from_dict(store.spec(job.job_id))
    kinds = _last_run_kinds(job, store.events(job.job_id))
    if instead := _no_resume(job, kinds):
        rate = f" (it is {spec.learning_rate:g})" if "diverged" in kinds else ""
        raise CoachError(f"{job.job_id} {'diverged' if rate else 'failed'} ({job.message}); {instead}{rate}")
    # what its next epoch was predicted to cost, when it stopped on that: the least a raise must pay for
    next_cost = job.eta.get("next_epoch_cost") if job.status == "budget_exhausted" else None
    if job.status == "budget_exhausted" and (budget is None or budget <= spec.budget):
        why = (f"{job.job_id} stopped on its budget of {spec.budget:.4g} ({job.message}); give a larger --budget, "
               f"{_least_budget(job)}")
        raise CoachError(why) if budget is None else SpecError("--budget", "", f"{why}, got {budget:g}")
    if budget is not None:   # what a killed run left unpaid is charged as the run starts
        try:
            owed, left = unpaid(work_dir(job.job_id), store, job.job_id, spec)
        except OSError:   # its folders are being removed by a run starting now: the claim below says so
            owed, left = 0.0, None
        if budget <= job.spent + owed:
            owes = (f" and owes {owed:.4g} for {', '.join(left.epochs)}, which its killed run did not record"
                    if left and owed > 0 else "")
            raise SpecError("--budget", "", f"{job.job_id} has spent {job.spent:.4g}{owes}; give more than "
                                            f"{job.spent + owed:.6g}, got {budget:g}")
        if isinstance(next_cost, (int, float)) and budget < job.spent + owed + next_cost:
            # its run would start the functions only to stop again on the same prediction
            owes = f", owes {owed:.4g}" if owed > 0 else ""
            raise SpecError("--budget", "", f"{job.job_id} has spent {job.spent:.4g}{owes} and its next epoch is "
                                            f"predicted to cost {next_cost:.4g}; give at least "
                                            f"{_rounded_up(job.spent + owed + next_cost)}, got {budget:g}")
    history = store.epochs(job.job_id)
    trained = _trained(history)
    limit = max_epochs or spec.max_epochs
    if trained >= limit and max_epochs is not None:
        raise SpecError("--max-epochs", "", f"{job.job_id} has run {trained} training epochs already; "
                                            f"give more than {trained}, got {max_epochs}")
    if trained >= limit:
        raise CoachError(f"{job.job_id} has run {trained} training epochs, its max_epochs is {limit}; "
                         "give a larger --max-epochs")
    spec = dataclasses.replace(spec, budget=budget if budget is not None else spec.budget, max_epochs=limit)
    runner = _backend(backend or job.backend, cpu, store)   # a cluster job went on locally, unsaid
    with _warming(runner):
        # named by the path recorded at submit (absolute), not as given then, relative to another folder
        _check_fits(dataclasses.replace(spec, source=job.spec_path), runner.capacity, cpu_given=cpu is not None)
        other = store.claim_job(job.job_id)
        if other is not None:   # another `coach resume` of it started meanwhile, or its run is still ending
            raise CoachError(f"{job.job_id} is run by coach process {other} (resumed meanwhile, or still ending)")
        if job.status == "interrupted":   # its killed run ended at its last update: said so before it is overwritten
            store.add_event(job.job_id, "interrupted", "its coach process ended without a word", ts=job.updated_at)
        eta = resumed_eta(job.eta, new_budget=budget is not None)
        # a training epoch's loss is stored with its ETA, after the epoch's record: a run killed
        # between the two showed the epoch before's loss until the resumed job's next epoch ended
        last = dict(val_loss=history[-1].val_loss, val_epoch=f"{history[-1].phase} {history[-1].epoch}") if history else {}
        store.update_job(job.job_id, status="queued", stop_requested=0, message="resumed", budget=spec.budget,
                         spec=dataclasses.asdict(spec), backend=runner.name, eta=eta, **last)
        moved = f" on the {runner.name} backend (it ran on {job.backend})" if runner.name != job.backend else ""
        store.add_event(job.job_id, "resumed", f"from epoch {job.epoch}{moved}")
    _run({job.job_id: spec}, runner, json_out, store)


def _rounded_up(x: float, digits: int = 6) -> str:
    """`x` in `digits` significant digits, rounded up: a budget shown rounded down was refused."""
    if not (0 < x < 1e300):   # 0 has no digits; beyond, the step overflows (any budget above 1e15 is refused)
        return f"{x:g}"
    step = 10.0 ** (math.floor(math.log10(x)) - digits + 1)
    return f"{math.ceil(x / step) * step:.{digits}g}"


def resumed_eta(eta: dict[str, Any], new_budget: bool, now: float | None = None) -> dict[str, Any]:
    """A resumed job's ETA until its next epoch ends: counted down from now, since the time the job
    stood still does not count (a resumed job read "ETA 15 epochs, ~0s"); with a new budget, without
    what the old one paid for (it read "the budget pays for ~0 more epochs")."""
    eta = dict(eta, at=time.time() if now is None else now) if "at" in eta else dict(eta)
    eta.pop("next_epoch_cost", None)   # what stopped its last run: predicted again as it runs
    for key in WAIT_KEYS:   # a wait of its last run ("wait ~0s, then …" once resumed)
        eta.pop(key, None)
    if new_budget:
        eta.pop("budget_epochs", None)
    return eta


def stop(job_id: str = typer.Argument(..., metavar="JOB", help="A job id or a unique prefix of one.")) -> None:
    """Ask a running job to stop after its current epoch (its checkpoint is kept)."""
    store = Store()
    job = store.job(job_id)
    if job.status in FINAL_STATUSES:
        raise CoachError(f"{job.job_id} is not running ({job.status}): {job.message}")
    store.update_job(job.job_id, stop_requested=1)
    console.print(f"{job.job_id}: stop requested")


def status(job_id: Optional[str] = typer.Argument(None, metavar="JOB", help="One job (default: all)."),
           json_out: bool = JsonOpt) -> None:
    """Every job: state, epoch, loss vs target, (w, s), spent, elapsed, ETA."""
    store = Store()
    jobs, unreadable = ([store.job(job_id)], []) if job_id is not None else store.read_jobs()
    rows, unreadable = _with_events(store, jobs, unreadable)
    if json_out:
        out.print_json(json.dumps([_job_json(store, j, events) for j, events in rows]))
    elif not rows and not unreadable:
        console.print(f"no jobs yet in {store.path}")
    elif rows:
        table = [fmt.job_row(j, events) for j, events in rows]
        if len({j.backend for j, _ in rows}) > 1:   # an experimenter's store holds both: say which ran where
            table = [dict(r, backend=j.backend) for r, (j, _) in zip(table, rows)]
        out.print(_table(table))
        for j, events in rows:
            if j.message and j.status in FINAL_STATUSES or j.message.startswith("waiting"):
                out.print(f"{j.job_id}: {j.message}")
            if job_id is not None and (step := _next_step(store, j, events)):   # the list stays one line a job
                out.print(f"{j.job_id}: next: {step}")
    for e in unreadable:   # listed after the readable ones, and the exit code says something is wrong
        print(f"error: {e}", file=sys.stderr)
    if unreadable:
        raise typer.Exit(1)


def _with_events(store: Store, jobs: list[JobRecord], unreadable: list[StateError]
                 ) -> tuple[list[tuple[JobRecord, list[dict[str, Any]]]], list[StateError]]:
    """Each job with its events (its elapsed time is summed from them), and why the jobs whose
    events cannot be read are left out: one damaged event row must not hide the other jobs."""
    rows, problems = [], list(unreadable)
    for j in jobs:
        try:
            rows.append((j, store.events(j.job_id)))
        except StateError as e:
            problems.append(e)
    return rows, problems


def history(job_id: str = typer.Argument(..., metavar="JOB"), json_out: bool = JsonOpt) -> None:
    """One record per epoch (tuning mini-epochs first), each recorded once.

    Its rate is that of the training steps (what the speed model fits), not samples / duration:
    the duration also holds start-up, validation and the checkpoint."""
    store = Store()
    epochs = store.epochs(job_id)
    if json_out:
        out.print_json(json.dumps([e.to_dict() for e in epochs]))
        return
    rows = [{"phase": e.phase, "epoch": e.epoch, "(w, s)": f"({e.workers}, {e.servers})",
             "train loss": f"{e.train_loss:.4g}", "val loss": f"{e.val_loss:.4g}",
             "duration": f"{e.duration_s:.1f}s", "training samples/s": f"{e.samples_per_s:.0f}",
             "cost": f"{e.cost:.4g}", "retries": e.retries} for e in epochs]
    if not rows:   # an empty table prints as a blank line
        job = store.job(job_id)
        console.print(f"{job.job_id} has no recorded epochs{'' if job.status in ('succeeded', 'max_epochs') else ' yet'}")
        return
    out.print(_table(rows, title=store.job(job_id).job_id))


def events(job_id: str = typer.Argument(..., metavar="JOB"), json_out: bool = JsonOpt) -> None:
    """What happened to a job: submissions, plans, retries, failures."""
    store = Store()
    evs = store.events(job_id)
    if json_out:
        out.print_json(json.dumps(evs))
        return
    for ts, e in zip(fmt.clock_times([e["ts"] for e in evs]), evs):
        # one line an event however long, for grep (piped, they wrapped at 200 columns)
        out.print(f"{ts}  {e['kind']:<14} {e['message']}", highlight=False, soft_wrap=True)
