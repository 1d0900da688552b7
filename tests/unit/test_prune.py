"""Which checkpoints a job keeps when it ends: the recorded one, however its path is spelt."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from coach.job.loop import JobLoop
from coach.state.store import Store


@pytest.mark.parametrize(("recorded", "left"), [
    ("training-0003", {"training-0003"}),   # the epoch a stop cut short and a killed save go
    (None, set()),                          # nothing recorded: nothing to resume from
    ("training-0009", {"training-0002", "training-0003", ".training-0004.tmp-77"}),   # names none: keep all
])
def test_only_the_recorded_checkpoint_stays_whatever_the_homes_spelling(tmp_path: Path, recorded: str | None,
                                                                         left: set[str]) -> None:
    """A resume through a symlinked COACH_HOME compared paths as text, matched none, and deleted the
    recorded checkpoint: the job could never be resumed again ("not a complete checkpoint")."""
    home = tmp_path / "home"
    checkpoints = home / "jobs" / "j-1" / "checkpoints"
    for name in ("training-0002", "training-0003", ".training-0004.tmp-77"):
        (checkpoints / name).mkdir(parents=True)
    (tmp_path / "link").symlink_to(home)
    store = Store(tmp_path / "coach.db")
    store.create_job("j-1", "j", "j.yaml", {}, 0.1, 1.0)
    if recorded:   # as the run that recorded it spelt the home
        store.update_job("j-1", checkpoint=str(tmp_path / "link" / "jobs" / "j-1" / "checkpoints" / recorded))
    loop = SimpleNamespace(run=SimpleNamespace(work_dir=home / "jobs" / "j-1", job_id="j-1"), store=store)
    JobLoop._prune_checkpoints(loop)   # type: ignore[arg-type]
    assert {p.name for p in checkpoints.iterdir()} == left
