"""A training epoch's loss and ETA are stored from a thread while the next epoch runs: the
bootstrap of the ETA's interval delayed every epoch by 0.1 s. They are stored together, a job
that ends first stores them before its final status (and its message), and a failure there is
not lost. The job loop runs on a real store; nothing here runs an epoch, so no backend is
needed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from coach.errors import EpochFailed, StateError
from coach.spec import load_spec
from coach.state.records import EpochRecord
from tests.conftest import FAST_JOB, write_job


def _loop(tmp_path: Path):
    from coach.job.loop import JobLoop, JobRun
    from coach.state.store import Store

    spec = load_spec(write_job(tmp_path / "j.yaml", name="j", **dict(FAST_JOB, target_loss=0.3)))
    store = Store()
    store.create_job("j-000000", "j", "j.yaml", {}, spec.target_loss, spec.budget)
    return JobLoop(JobRun(spec, "j-000000", store, backend=None, coordinator=None, work_dir=tmp_path)), store  # type: ignore[arg-type]


def _history(n: int) -> list[EpochRecord]:
    return [EpochRecord(job_id="j-000000", phase="training", epoch=k, workers=1, servers=1, train_loss=1.0,
                        val_loss=1 / (0.5 * k + 1) + 0.1, duration_s=2.0, samples=1000, samples_per_s=1000.0,
                        cost=0.001, started_at=100.0 + 3 * k, finished_at=102.0 + 3 * k) for k in range(1, n + 1)]


def _shown(history: list[EpochRecord]) -> dict:
    return dict(val_loss=history[-1].val_loss, val_epoch=f"training {history[-1].epoch}")


def test_the_loss_is_stored_with_its_eta_and_the_plan_s_epochs(tmp_path: Path, coach_home: Path) -> None:
    loop, store = _loop(tmp_path)
    history = _history(6)
    loop._unshown = (history, 1, 1, _shown(history))
    loop._show_beside()   # as the next epoch starts, or the job waits for room
    assert loop._unshown is None and loop._showing is not None
    loop._shown()
    job = store.job("j-000000")
    assert (job.val_loss, job.val_epoch) == (history[-1].val_loss, "training 6")
    planned = loop._predict(history, 1, 1, interval=False)[0]   # what `_demand` plans the next epoch on
    assert job.eta["epochs_left"] == planned.epochs_left >= 1
    assert job.eta["lo"] <= job.eta["epochs_left"] <= job.eta["hi"]   # the interval, from the bootstrap


@pytest.mark.parametrize("ends", ["stopped", "budget_exhausted"])
@pytest.mark.parametrize("beside", [True, False], ids=["shown-beside", "not-yet-shown"])
def test_a_job_that_ends_stores_the_last_loss_before_its_status(tmp_path: Path, coach_home: Path, ends: str,
                                                                beside: bool) -> None:
    """Shown by `_beside` (the job ends during the next epoch) or still to be shown (it ends before)."""
    loop, store = _loop(tmp_path)
    history = _history(4)
    if beside:
        loop._showing = loop._beside(history, 1, 1, _shown(history))
    else:
        loop._unshown = (history, 1, 1, _shown(history))
    if ends == "stopped":
        loop._finish("stopped", "stopped by request after training epoch 4")
    else:
        loop._budget_exhausted(0.0001, predicted=0.002)
    job = store.job("j-000000")
    assert (job.status, job.val_epoch, job.val_loss) == (ends, "training 4", history[-1].val_loss)
    assert job.eta["epochs_left"] >= 1 and loop._showing is None and loop._unshown is None
    if ends == "budget_exhausted":   # its message names that loss, not the one before it
        assert job.message.endswith(f"validation loss {history[-1].val_loss:.4g}")


def test_the_plan_leaves_the_eta_to_the_thread_but_shows_it_after_tuning_or_on_resume(tmp_path: Path,
                                                                                      coach_home: Path) -> None:
    """Between training epochs the plan takes the point fit and shows nothing (`_beside` will);
    after tuning or on resume nothing runs beside, and the plan fits and shows the ETA itself."""
    loop, store = _loop(tmp_path)
    history = _history(5)
    loop._unshown = (history, 1, 1, _shown(history))
    between = loop._demand(history)
    assert store.job("j-000000").eta == {} and loop._unshown is not None
    loop._unshown = None
    resumed = loop._demand(history)
    assert between.remaining_epochs == resumed.remaining_epochs == store.job("j-000000").eta["epochs_left"] >= 1


@pytest.mark.parametrize("flat_at, left", [(0.8, 25 - 6), (None, None)], ids=["out-of-reach", "reachable"])
def test_a_target_out_of_reach_plans_the_epochs_up_to_max_epochs(tmp_path: Path, coach_home: Path,
                                                                 flat_at: float | None, left: int | None) -> None:
    """Predicted out of reach, the job runs to max_epochs (25): its epochs share the budget and the
    planner weighs what a worker saves over them all, not over one epoch."""
    loop, store = _loop(tmp_path)
    history = _history(6)
    if flat_at is not None:   # stuck: both losses flat, far above the target 0.3
        history = [replace(r, val_loss=flat_at + 0.01 * (-1) ** r.epoch) for r in history]
    demand = loop._demand(history)
    e = store.job("j-000000").eta
    if left is None:
        assert demand.remaining_epochs == e["epochs_left"] < 25 - 6
    else:
        assert e["epochs_left"] is None and not e["reachable"]
        assert demand.remaining_epochs == left
    spent = store.job("j-000000").spent
    assert demand.epoch_budget == pytest.approx((1.0 - spent) / demand.remaining_epochs)
    assert "budget_epochs" not in e   # 1.0 pays for every epoch left
    loop._budget_left = lambda: 1e-9   # and when it does not, the ETA says so, reachable or not
    assert loop._predict(history, 1, 1, interval=False)[1]["budget_epochs"] == 0


@pytest.mark.parametrize("beside", [True, False], ids=["shown-beside", "not-yet-shown"])
@pytest.mark.parametrize("epoch_fails", [False, True], ids=["epoch-ran", "epoch-failed"])
def test_a_failure_to_show_the_loss_is_raised_unless_the_epoch_failed(tmp_path: Path, coach_home: Path,
                                                                      epoch_fails: bool, beside: bool) -> None:
    loop, _ = _loop(tmp_path)

    def broken(*args, **kwargs):
        raise StateError("cannot write the job store: disk full")

    loop._update_eta = broken
    if beside:
        loop._showing = loop._beside(_history(3), 1, 1, {})
    else:
        loop._unshown = (_history(3), 1, 1, {})
    if epoch_fails:   # the epoch's own error is what the job fails with
        with pytest.raises(EpochFailed, match="boom"):
            try:
                raise EpochFailed("boom")
            finally:
                loop._shown()
    else:
        with pytest.raises(StateError, match="disk full"):
            loop._shown()
    assert loop._showing is None and loop._unshown is None


def test_the_eta_beside_the_next_epoch_is_predicted_on_its_allocation(tmp_path: Path, coach_home: Path) -> None:
    """Shown while the next epoch runs, the ETA times the epochs to come and what the budget pays
    for on the next epoch's (w, s), not the last one's."""
    loop, store = _loop(tmp_path)
    history = [replace(r, workers=2, servers=1, duration_s=1.0, samples_per_s=2000.0) if r.epoch <= 3 else r
               for r in _history(6)]   # 3 epochs on (2, 1), then 3 on (1, 1) at half its speed
    seconds = {ws: loop._predict(history, *ws, interval=False)[0].seconds for ws in ((1, 1), (2, 1))}
    assert seconds[(2, 1)] < 0.8 * seconds[(1, 1)], seconds   # the two allocations are told apart
    loop._unshown = (history, 1, 1, _shown(history))
    loop._runs_on(history, 2, 1)   # the planner moved the job back to (2, 1)
    loop._show_beside()
    loop._shown()
    assert store.job("j-000000").eta["seconds"] == pytest.approx(seconds[(2, 1)], rel=0.05)
    # shown while the job waited for room, before the grant: predicted again on the grant
    loop._eta, loop._unshown = None, (history, 2, 1, _shown(history))
    loop._show_beside()   # as `_waiting_beside` does
    loop._runs_on(history, 1, 1)   # granted (1, 1)
    loop._show_beside()   # the epoch's events are sent
    loop._shown()
    assert store.job("j-000000").eta["seconds"] == pytest.approx(seconds[(1, 1)], rel=0.05)
    assert store.job("j-000000").val_epoch == "training 6"   # the loss shown then stays


def test_before_there_is_an_eta_a_budget_that_ends_the_job_first_is_said(tmp_path: Path, coach_home: Path) -> None:
    """One epoch fits no curve, so there is no ETA; a job tight on budget stopped after its
    second epoch without a word before. Now what the budget pays for is shown from epoch 1."""
    loop, store = _loop(tmp_path)
    history = _history(1)
    assert loop._convergence(history, False) is None   # no fit: the case here
    assert loop._predict(history, 1, 1) == (None, {})   # the budget (1.0) pays for every epoch up to max_epochs
    loop._budget_left = lambda: 1.0
    paid_by_one = loop._budget_epochs(history, loop._speed(history), 1, 1, 10**9)   # how many epochs 1.0 pays for
    assert paid_by_one > 100   # so that 2.5 / paid_by_one is 2.5 epochs' cost, to within 1%
    loop._budget_left = lambda: 2.5 / paid_by_one
    e, info = loop._predict(history, 1, 1)
    assert e is None and info["epochs_left"] is None and info["budget_epochs"] == 2, info


def test_a_job_waiting_for_room_shows_its_expected_wait_in_its_eta(tmp_path: Path, coach_home: Path) -> None:
    """The coordinator's expected wait was only in the message's text: `coach status` showed "-"
    in the ETA column and `--json` no figure (review, session 41). It goes once the wait is over,
    and an ETA stored meanwhile (the last epoch's, from its thread) keeps it."""
    from coach.cli.format import eta_text

    loop, store = _loop(tmp_path)
    waiting = lambda: replace(store.job("j-000000"), status="queued")   # noqa: E731 (no process runs it here)
    loop._waiting("waiting for capacity: …; expected wait ~9s", 9.3)
    assert store.job("j-000000").eta["wait_s"] == 9 and eta_text(waiting()).startswith("wait ~")
    history = _history(6)
    loop._update_eta(history, 1, 1, **_shown(history))   # the last epoch's ETA, stored while it waits
    eta = store.job("j-000000").eta
    assert eta["wait_s"] == 9 and eta["epochs_left"] >= 1
    assert ", then " in eta_text(waiting())
    loop._waiting("waiting for capacity: …; expected wait unknown", None)   # unknown, or over
    eta = store.job("j-000000").eta
    assert "wait_s" not in eta and eta["epochs_left"] >= 1
