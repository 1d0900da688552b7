"""What `coach submit`, `resume` and `status JOB` tell a user to run next for a job that ended
short of its target: the same rules `coach resume` applies, so the hint is never refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from coach.cli.jobs import next_step
from coach.state.records import JobRecord


def _job(status: str, **fields: Any) -> JobRecord:
    return JobRecord(job_id="j-1", name="j", spec_path="/jobs/j.yaml", status=status, target_loss=0.15,
                     budget=0.01, **fields)


@pytest.mark.parametrize("job, kinds, said", [
    (_job("succeeded"), set(), None),
    (_job("training"), set(), None),   # still runs: `coach stop` is its own command
    (_job("stopped"), set(), "`coach resume j-1` goes on where it stopped"),
    (_job("interrupted"), set(), "`coach resume j-1` goes on where it stopped"),
    # the control plane went away under it: a resume once it is back goes on
    (_job("failed"), {"retry", "epoch_failed"}, "`coach resume j-1` goes on where it stopped"),
    (_job("failed"), {"diverged"}, "submit /jobs/j.yaml again with a lower learning_rate"),
    (_job("failed"), {"fails_again"}, "fix the cause and submit /jobs/j.yaml again"),
    (_job("failed"), {"fails_until_fixed"}, "restore the damaged files its message names, then `coach resume j-1`"),
    # kinds of an earlier run of a job that failed later for another reason do not count when it stopped
    (_job("stopped"), {"diverged"}, "`coach resume j-1` goes on where it stopped"),
    (_job("max_epochs", epoch=20), set(), "`coach resume j-1 --max-epochs N` goes on where it stopped, N above 20"),
    # no prediction of the next epoch: more than it had
    (_job("budget_exhausted", spent=0.0102), set(), "`coach resume j-1 --budget B` goes on where it stopped, "
                                                    "B more than 0.0102"),
    # one epoch left: the least a resume accepts pays for it, said once
    (_job("budget_exhausted", spent=0.0095, eta={"next_epoch_cost": 0.001, "epochs_left": 1, "hi": 1}), set(),
     "`coach resume j-1 --budget B` goes on where it stopped, B at least 0.0105"),
    # more left: what pays for the upper end of its ETA's interval too
    (_job("budget_exhausted", spent=0.0095, eta={"next_epoch_cost": 0.001, "epochs_left": 3, "hi": 5}), set(),
     "B at least 0.0105; its ETA said 3–5 epochs to the target at ~0.001 each: B = 0.0145 pays for 5"),
    # an interval open above: "never" is said, and the budget pays for the point prediction
    (_job("budget_exhausted", spent=0.0095, eta={"next_epoch_cost": 0.001, "epochs_left": 40, "hi": None}), set(),
     "its ETA said 40 epochs to the target, maybe never, at ~0.001 each: B = 0.0495 pays for 40"),
    (_job("budget_exhausted", spent=0.0095, eta={"next_epoch_cost": 0.001, "epochs_left": 1, "hi": None}), set(),
     "its ETA said 1 epoch to the target, maybe never, at ~0.001 each: B = 0.0105 pays for 1"),
    # out of reach as far as its ETA sees: the least, and that
    (_job("budget_exhausted", spent=0.0095, eta={"next_epoch_cost": 0.001, "epochs_left": None, "reachable": False}),
     set(), "B at least 0.0105; its ETA did not see it reach the target"),
    (_job("budget_exhausted", spent=0.0095, eta={"next_epoch_cost": 0.001, "epochs_left": None}), set(),
     "B at least 0.0105"),
    # a job whose damaged files were restored and that failed again for another reason later
    (_job("failed"), {"fails_until_fixed", "resumed", "epoch_failed"}, "`coach resume j-1` goes on where it stopped"),
])
def test_the_next_step_follows_the_rules_resume_applies(job: JobRecord, kinds: set[str], said: str | None) -> None:
    # in the order a job records them: a resume comes after what made it stop
    step = next_step(job, [{"kind": k} for k in sorted(kinds, key=lambda k: (k == "epoch_failed", k == "resumed"))])
    if said is None:
        assert step is None
    else:
        assert step is not None and said in step, step
        assert ("its ETA" in step) == ("its ETA" in said), step   # said where it adds something, only there


@pytest.mark.parametrize("status, trained, said", [
    # killed between its last epoch's record and its max_epochs status: a plain resume is refused
    ("interrupted", 2, "`coach resume j-000000 --max-epochs N` goes on where it stopped, N above 2"),
    ("failed", 2, "`coach resume j-000000 --max-epochs N` goes on where it stopped, N above 2"),
    ("budget_exhausted", 2, "`coach resume j-000000 --budget B --max-epochs N` goes on where it stopped, "
                            "B more than 1 and N above 2"),
    ("interrupted", 1, "`coach resume j-000000` goes on where it stopped"),
    ("succeeded", 2, None),
])
def test_a_job_that_ran_its_max_epochs_is_told_to_raise_them_whatever_its_status(
        tmp_path: Path, status: str, trained: int, said: str | None) -> None:
    from coach.cli.jobs import _epochs_full
    from coach.spec import load_spec
    from coach.state.records import EpochRecord
    from coach.state.store import Store
    from tests.conftest import FAST_JOB, write_job

    spec = load_spec(write_job(tmp_path / "j.yaml", name="j", **dict(FAST_JOB, max_epochs=2, consecutive=1)))
    store = Store(tmp_path / "coach.db")
    store.create_job("j-000000", "j", "j.yaml", dataclasses.asdict(spec), spec.target_loss, 1.0)
    for epoch in range(1, trained + 1):
        store.record_epoch(EpochRecord("j-000000", "training", epoch, 1, 1, 1.0, 1.0, 1.0, 10, 10.0, 0.0))
    store.update_job("j-000000", status=status, epoch=trained)
    job = store.job("j-000000")
    assert next_step(job, [], _epochs_full(store, job)) == said


@pytest.mark.parametrize("status, trained, said", [
    ("training", 2, "`coach resume j-000000 --max-epochs N` (N above 2) continues"),
    ("training", 1, "`coach resume j-000000` continues"),   # killed inside epoch 2, its last: it runs it again
    ("tuning", 0, "`coach resume j-000000` continues"),   # a job's epoch counts mini-epochs while it tunes
])
def test_a_job_whose_process_ended_says_how_to_resume_it(tmp_path: Path, status: str, trained: int, said: str) -> None:
    """Its message said a plain resume, which is refused once the job ran its max_epochs; it
    counts the training epochs recorded, as `next_step` does."""
    from coach.state.records import EpochRecord
    from coach.state.store import Store

    store = Store(tmp_path / "coach.db")
    store.create_job("j-000000", "j", "j.yaml", {"max_epochs": 2}, 0.1, 1.0)
    for epoch in range(1, trained + 1):
        store.record_epoch(EpochRecord("j-000000", "training", epoch, 1, 1, 1.0, 1.0, 1.0, 10, 10.0, 0.0))
    store.update_job("j-000000", status=status, epoch=3 if status == "tuning" else trained + 1)   # no live process
    job = store.job("j-000000")
    assert job.status == "interrupted" and said in job.message, job.message


@pytest.mark.parametrize("max_epochs", ["many", None, True, 2.5])
def test_a_damaged_spec_leaves_the_hint_to_what_the_status_says(tmp_path: Path, max_epochs: Any) -> None:
    """`coach status` lists every job: one whose stored max_epochs cannot be read is not why it
    fails (a null one raised a TypeError that hid every job of `status --json`)."""
    from coach.cli.jobs import _epochs_full
    from coach.spec import load_spec
    from coach.state.records import EpochRecord
    from coach.state.store import Store
    from tests.conftest import FAST_JOB, write_job

    spec = dataclasses.asdict(load_spec(write_job(tmp_path / "j.yaml", name="j", **FAST_JOB)))
    store = Store(tmp_path / "coach.db")
    store.create_job("j-000000", "j", "j.yaml", dict(spec, max_epochs=max_epochs), 0.1, 1.0)
    store.record_epoch(EpochRecord("j-000000", "training", 1, 1, 1, 1.0, 1.0, 1.0, 10, 10.0, 0.0))
    store.update_job("j-000000", status="interrupted")
    job = store.job("j-000000")
    assert _epochs_full(store, job) is None
    assert next_step(job, [], None) == "`coach resume j-000000` goes on where it stopped"
