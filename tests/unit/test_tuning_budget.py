"""What the job loop predicts a (mini-)epoch costs before it starts one (the budget guards)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from coach.estimate.cost import epoch_cost
from coach.estimate import SpeedSample, fit_speed
from coach.job.loop import (_charged_overheads, _median, tuning_configs, _mini_epoch_cost, between_epochs_s,
                            tuned_head, tuning_chunk)
from coach.plan import JobDemand, predicted_epoch_cost
from coach.spec import load_spec
from coach.state.records import EpochRecord
from tests.conftest import FAST_JOB, write_job


def mini(spec, w: int, s: int, charged_s: float, wall_s: float, rate: float = 6000.0, samples: int = 256,
         phase: str = "tuning") -> EpochRecord:
    """A record of `samples` that ran `wall_s` and was charged `charged_s` of each function."""
    return EpochRecord(job_id="j", phase=phase, epoch=1, workers=w, servers=s, train_loss=2.0, val_loss=1.9,
                       duration_s=wall_s, samples=samples, samples_per_s=rate,
                       cost=epoch_cost(w, s, spec.resources, charged_s, spec.prices))


@pytest.mark.parametrize(
    ("history", "seconds"),
    [
        pytest.param([], None, id="nothing-measured"),
        # the first mini-epoch: 9 s of wall time, most of it every replica's `import mxnet`, which
        # is not charged; its charged start-up is what the next one is judged by (it once was 9 s)
        pytest.param([(1, 1, 1.5, 9.0, 6000.0)], 1.5, id="after-the-cold-one"),
        # a warm start-up charged: the smallest so far, with the last rate (it once counted 256/6000 s only)
        pytest.param([(1, 1, 1.5, 9.0, 6000.0), (2, 1, 1.2, 1.3, 4000.0)], 256 / 4000 + (1.2 - 256 / 4000),
                     id="after-a-warm-one"),
        pytest.param([(1, 1, 1.5, 9.0, 0.0)], None, id="no-rate"),
    ],
)
def test_a_mini_epoch_is_predicted_with_its_charged_start_up(tmp_path: Path, history: list[tuple],
                                                             seconds: float | None) -> None:
    spec = load_spec(write_job(tmp_path / "j.yaml", name="j", **FAST_JOB))
    got = _mini_epoch_cost([mini(spec, *h) for h in history], 2, 2, spec)
    if seconds is None:
        assert got is None
    else:
        assert got == pytest.approx(epoch_cost(2, 2, spec.resources, seconds, spec.prices))


@pytest.mark.parametrize(
    ("history", "seconds"),
    [
        pytest.param([], None, id="nothing-measured"),
        # a static job's first epoch: 3.5 s of wall time, most of it the replicas' `import mxnet`,
        # charged 1.0 s. The next is predicted at 1.0 s of each function; at the wall time it was
        # predicted at 3.5 s, and a job with 3.6 such epochs of budget left stopped `budget_exhausted`
        pytest.param([(1.0, 3.5)], 1.0, id="after-the-cold-one"),
        # the median of the charged overheads, not the cold epoch's
        pytest.param([(1.0, 3.5), (0.80, 0.85), (0.75, 0.80)], 1400 / 20000 + (0.80 - 1400 / 20000),
                     id="after-warm-ones"),
    ],
)
def test_a_training_epoch_is_predicted_with_its_charged_overhead(tmp_path: Path, history: list[tuple],
                                                                 seconds: float | None) -> None:
    spec = load_spec(write_job(tmp_path / "j.yaml", name="j", **FAST_JOB))
    records = [mini(spec, 1, 1, charged, wall, rate=20000.0, samples=1400, phase="training")
               for charged, wall in history]
    speed = fit_speed([SpeedSample(1, 1, 20000.0, spec.batch_size)]) if history else None
    demand = JobDemand(job_id="j", speed=speed, remaining_epochs=None, samples_per_epoch=1400,
                       resources=spec.resources, prices=spec.prices,
                       overhead_s=_median(_charged_overheads(records, spec)))   # as the job loop asks
    got = predicted_epoch_cost(demand, 1, 1)
    if seconds is None:
        assert got is None
    else:
        assert got == pytest.approx(epoch_cost(1, 1, spec.resources, seconds, spec.prices))


def timed(phase: str, started: float, finished: float) -> EpochRecord:
    return EpochRecord(job_id="j", phase=phase, epoch=1, workers=1, servers=1, train_loss=2.0, val_loss=1.9,
                       duration_s=finished - started, samples=256, samples_per_s=1000.0, cost=0.0,
                       started_at=started, finished_at=finished)


@pytest.mark.parametrize(
    ("spans", "since", "between"),
    [
        pytest.param([], 0.0, 0.0, id="nothing-run"),
        pytest.param([("training", 10, 20)], 0.0, 0.0, id="one-epoch: no gap yet"),
        # two jobs taking turns: each waits an epoch of the other's (the ETA was 2-3x short)
        pytest.param([("training", 0, 10), ("training", 20, 30), ("training", 41, 51)], 0.0, 11.0,
                     id="taking-turns"),
        # tuning's gaps (the head start, its deploys) say nothing of training's
        pytest.param([("tuning", 0, 1), ("tuning", 30, 31), ("training", 31.5, 40), ("training", 40.5, 50)],
                     0.0, 0.5, id="tuning-left-out"),
        # stopped on Friday, resumed on Monday: no wait of this run's
        pytest.param([("training", 0, 10), ("training", 10.2, 20), ("training", 1e6, 1e6 + 10)], 5e5, 0.0,
                     id="a-resume-is-no-wait"),
        # the median of the last 3: one long wait that ended does not stick
        pytest.param([("training", 0, 1), ("training", 61, 62), ("training", 62.5, 63),
                      ("training", 63.5, 64), ("training", 64.5, 65)], 0.0, 0.5, id="recent-only"),
    ],
)
def test_the_eta_counts_the_time_between_this_runs_epochs(spans: list[tuple], since: float, between: float) -> None:
    assert between_epochs_s([timed(*span) for span in spans], since) == pytest.approx(between)


def test_the_eta_counts_each_epoch_with_its_overhead_and_the_time_between_epochs(tmp_path: Path,
                                                                                 coach_home: Path) -> None:
    """What `coach status` says is left: (epochs left) × (training at the measured rate + the
    epochs' wall-clock overhead + the wait between this run's epochs); the waits were left out and
    two jobs taking turns on the cores read 2-3× too few seconds."""
    from coach.data import train_size
    from coach.job.loop import JobLoop, JobRun
    from coach.state.store import Store

    spec = load_spec(write_job(tmp_path / "j.yaml", name="j", **dict(FAST_JOB, target_loss=0.2)))
    store = Store()
    store.create_job("j-000000", "j", "j.yaml", {}, spec.target_loss, spec.budget)
    loop = JobLoop(JobRun(spec, "j-000000", store, backend=None, coordinator=None, work_dir=tmp_path))  # type: ignore[arg-type]
    n, rate, overhead, gap = train_size("digits", {}), 1000.0, 1.0, 9.0
    epoch_s = n / rate + overhead
    history = [EpochRecord(job_id="j-000000", phase="training", epoch=k, workers=1, servers=1, train_loss=1.0,
                           val_loss=1 / (0.5 * k + 1) + 0.1, duration_s=epoch_s, samples=n, samples_per_s=rate,
                           cost=0.001, started_at=loop._started + (k - 1) * (epoch_s + gap),
                           finished_at=loop._started + (k - 1) * (epoch_s + gap) + epoch_s)
               for k in range(1, 7)]
    _, info = loop._predict(history, 1, 1)
    assert info["between_epochs_s"] == pytest.approx(gap)
    assert info["epochs_left"] >= 1 and info["seconds"] == pytest.approx(info["epochs_left"] * (epoch_s + gap))


@pytest.mark.parametrize(
    ("fields", "n_train", "chunk"),
    [
        pytest.param({}, 1438, 256, id="tuning_samples-fits"),
        # mnist-5k, (1, 1), (2, 1) and (2, 2): 4000 // 3 = 1333 → whole batches of 64
        pytest.param(dict(dataset="mnist-5k", batch_size=64, tuning_samples=2048, max_workers=4), 4000, 1280,
                     id="a-share-of-epoch-1"),
        # (1, 1) and (2, 1) only: two shares
        pytest.param(dict(max_servers=1, tuning_samples=1024), 1438, 704, id="fewer-configurations"),
        # one worker: (1, 1) and (1, 2)
        pytest.param(dict(max_workers=1, tuning_samples=1024), 1438, 704, id="one-worker"),
        # (1, 1) alone: epoch 1 is its own
        pytest.param(dict(max_workers=1, max_servers=1, tuning_samples=2048), 1438, 1408, id="one-configuration"),
        # less than a batch per share: the share itself (each step of it is then a short one)
        pytest.param(dict(dataset="synthetic", batch_size=64, tuning_samples=64), 150, 50, id="below-a-batch"),
    ],
)
def test_tuning_gives_each_configuration_a_share_of_epoch_1_in_whole_batches(tmp_path: Path, fields: dict, n_train: int,
                                                                 chunk: int) -> None:
    spec = load_spec(write_job(tmp_path / "j.yaml", name="j", **dict(FAST_JOB, **fields)))
    assert tuning_chunk(spec, n_train) == chunk


@pytest.mark.parametrize(("fields", "never", "path"), [
    pytest.param({}, set(), [(1, 1), (2, 1), (2, 2)], id="two-servers-measured-with-two-workers"),
    pytest.param(dict(max_servers=1), set(), [(1, 1), (2, 1)], id="one-server"),
    pytest.param(dict(max_workers=1), set(), [(1, 1), (1, 2)], id="one-worker"),
    # (2, 2) fits no node layout: a second server is measured with one worker, where it fits
    pytest.param({}, {(2, 2)}, [(1, 1), (2, 1), (1, 2)], id="two-by-two-never-fits"),
    pytest.param({}, {(2, 1), (2, 2), (1, 2)}, [(1, 1)], id="only-the-minimum-fits"),
])
def test_tuning_measures_a_second_server_with_two_workers_where_it_can(tmp_path: Path, fields: dict,
                                                                       never: set, path: list) -> None:
    spec = load_spec(write_job(tmp_path / "j.yaml", name="j", **dict(FAST_JOB, **fields)))
    assert tuning_configs(spec, usable=lambda c: c not in never) == path


def test_training_epoch_1_starts_where_tuning_ended_unless_tuning_drew_its_own_samples(tmp_path: Path) -> None:
    spec = load_spec(write_job(tmp_path / "j.yaml", name="j", **FAST_JOB))
    tuned = [EpochRecord(job_id="j", phase="tuning", epoch=i, workers=1, servers=1, train_loss=2.0, val_loss=1.9,
                         duration_s=1.0, samples=256, samples_per_s=500.0, cost=0.0, first_sample=256 * (i - 1))
             for i in (1, 2, 3)]
    assert tuned_head(tuned) == 768
    assert tuned_head([]) == 0
    older = [mini(spec, 1, 1, 1.0, 1.0)] + tuned   # first_sample -1: recorded by a Coach before 2026-11-26
    assert tuned_head(older) == 0


def test_tuning_begun_by_an_older_coach_is_not_continued_on_epoch_1s_samples(tmp_path: Path, coach_home: Path) -> None:
    """Its mini-epochs drew samples of their own (`first_sample` -1), and epoch 1 trains all of
    its own: continued in-stream, each new mini-epoch would start at sample 0 of epoch 1, which
    then trains that head again. Training goes on from what the older tuning measured."""
    from coach.job.loop import JobLoop, JobRun
    from coach.state.store import Store

    spec = load_spec(write_job(tmp_path / "j.yaml", name="j", **FAST_JOB))
    store = Store()
    store.create_job("j-000000", "j", "j.yaml", {}, spec.target_loss, spec.budget)
    loop = JobLoop(JobRun(spec, "j-000000", store, backend=None, coordinator=None, work_dir=tmp_path))  # type: ignore[arg-type]
    history = [EpochRecord(job_id="j-000000", phase="tuning", epoch=1, workers=1, servers=1, train_loss=2.0,
                           val_loss=1.9, duration_s=1.0, samples=1024, samples_per_s=900.0, cost=0.001)]
    assert loop._tune(history) == (None, None, 0)
    assert len(history) == 1
    [event] = [e for e in store.events("j-000000") if e["kind"] == "tuning_skipped"]
    assert event["message"].startswith("(2, 1), (2, 2): this job's tuning began under an older Coach")


def test_a_retune_with_nothing_to_measure_says_nothing_of_tuning(tmp_path: Path, coach_home: Path) -> None:
    """`retune: true` on a backend where no tuning configuration fits: no `retune` event saying
    that tuning measures its own speeds (it once was written before the configurations were
    checked). The backend is never asked (None here)."""
    from coach.backends.base import Capacity
    from coach.job.coordinator import Coordinator
    from coach.job.loop import JobLoop, JobRun
    from coach.state.store import Store

    spec = load_spec(write_job(tmp_path / "j.yaml", name="j", **dict(FAST_JOB, retune=True)))
    store = Store()
    store.create_job("j-000000", "j", "j.yaml", {}, spec.target_loss, spec.budget)
    tiny = Coordinator(Capacity(cpu=0.1, memory_gib=64.0))
    loop = JobLoop(JobRun(spec, "j-000000", store, backend=None, coordinator=tiny, work_dir=tmp_path))  # type: ignore[arg-type]
    loop._before = []
    history: list[EpochRecord] = []
    assert loop._tune(history) == (None, None, 0)
    assert history == []
    assert [e["kind"] for e in store.events("j-000000") if e["kind"] == "retune"] == []


MEASURED = "earlier job(s) of the same model, data, batch, resources and scheduler on this backend"


def tuned(rates: dict) -> list[tuple]:
    """An earlier job's tuning mini-epochs: (phase, w, s, samples/s) each."""
    return [("tuning", w, s, rate) for (w, s), rate in rates.items()]


def trained(w: int, s: int, rate: float, epochs: int = 1) -> list[tuple]:
    return [("training", w, s, rate)] * epochs


ALL_THREE = {(1, 1): 500.0, (2, 1): 1000.0, (2, 2): 1500.0}


@pytest.mark.parametrize(("fields", "earlier", "said"), [
    pytest.param({}, [tuned(ALL_THREE)], [f"(1, 1), (2, 1), (2, 2): measured by j-0, {MEASURED}"], id="all-measured"),
    # (2, 2) measured by an epoch 1 (tuning's last configuration trains it)
    pytest.param({}, [tuned({(1, 1): 500.0, (2, 1): 1000.0}) + trained(2, 2, 1400.0)],
                 [f"(1, 1), (2, 1), (2, 2): measured by j-0, {MEASURED}"], id="the-last-by-epoch-1"),
    pytest.param(dict(max_workers=1), [tuned({(1, 1): 500.0, (1, 2): 600.0})],
                 [f"(1, 1), (1, 2): measured by j-0, {MEASURED}"], id="one-worker"),
    # three resubmissions trained on (2, 1) only: the job that tuned still counts for the others
    pytest.param({}, [tuned(ALL_THREE)] + [trained(2, 1, 1000.0)] * 3,
                 [f"(1, 1), (2, 1), (2, 2): measured by j-3, j-2, j-1, j-0, {MEASURED}"],
                 id="a-chain-of-resubmissions"),
    # a job that ran only a configuration beyond this one's max_workers is not named
    pytest.param({}, [tuned(ALL_THREE), trained(3, 1, 1200.0)],
                 [f"(1, 1), (2, 1), (2, 2): measured by j-0, {MEASURED}"], id="only-who-measured-them"),
])
def test_a_resubmitted_job_skips_tuning_what_earlier_jobs_measured(tmp_path: Path, coach_home: Path, fields: dict,
                                                                   earlier: list[list], said: list[str]) -> None:
    """Earlier jobs of the same model, data, batch, resources and scheduler measured every
    tuning configuration: the new job tunes none (the backend and coordinator, None here, are never asked), and its speed model is
    fitted before its first epoch, so the planner chooses epoch 1's (w, s) from them."""
    from dataclasses import asdict

    from coach.job.earlier import speeds_before
    from coach.job.loop import JobLoop, JobRun
    from coach.state.store import Store

    spec = load_spec(write_job(tmp_path / "j.yaml", name="j", **dict(FAST_JOB, **fields)))
    store = Store()
    for n, epochs in enumerate(earlier):
        store.create_job(f"j-{n}", "j", "j.yaml", asdict(spec), spec.target_loss, spec.budget)
        for i, (phase, w, s, rate) in enumerate(epochs, start=1):
            store.record_epoch(EpochRecord(job_id=f"j-{n}", phase=phase, epoch=i, workers=w, servers=s,
                                           train_loss=2.0, val_loss=1.9, duration_s=1.0, samples=256,
                                           samples_per_s=rate, cost=0.001, first_sample=256 * (i - 1)))
        store.update_job(f"j-{n}", status="succeeded")
        time.sleep(0.01)   # distinct created_at
    store.create_job("j-new", "j", "j.yaml", asdict(spec), spec.target_loss, spec.budget)
    loop = JobLoop(JobRun(spec, "j-new", store, backend=None, coordinator=None, work_dir=tmp_path))  # type: ignore[arg-type]
    loop._before = speeds_before(store, store.job("j-new"), asdict(spec))
    speed = loop._speed([])
    assert speed is not None
    # epoch 1 is predicted with their start-up too (each record: 1 s, of which 0.17–0.51 s training)
    assert loop._charged_overhead([]) >= 0.48
    assert loop._epoch_seconds([], speed, 1, 1) == pytest.approx(speed.epoch_seconds(1, 1, loop.n_train)
                                                                 + loop._charged_overhead([]))
    history: list[EpochRecord] = []
    assert loop._tune(history) == (None, None, 0)
    assert history == []
    assert [e["message"] for e in store.events("j-new") if e["kind"] == "tuning_skipped"] == said
