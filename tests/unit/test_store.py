"""The state store: job ids, a damaged file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coach.errors import StateError
from coach.state.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "coach.db")


@pytest.mark.parametrize(
    ("given", "found"),
    [("m-raise-da908e", "m-raise-da908e"), ("m-r", "m-raise-da908e"), ("m_r", None), ("m%", None), ("", None)],
)
def test_job_ids_match_as_plain_prefixes(store: Store, given: str, found: str | None) -> None:
    for jid in ("m-raise-da908e", "mxraise-000000"):
        store.create_job(jid, "m", "x.yaml", {}, 0.1, 1.0)
    if found is None:
        with pytest.raises(StateError):
            store.resolve(given)
    else:
        assert store.resolve(given) == found


def test_a_damaged_store_is_named_not_a_traceback(store: Store) -> None:
    store.create_job("j-000000", "j", "x.yaml", {}, 0.1, 1.0)
    with open(store.path, "r+b") as fh:   # the jobs table's page
        fh.seek(4096)
        fh.write(os.urandom(4096))
    with pytest.raises(StateError, match=f"{store.path}: the state store cannot be used"):
        store.jobs()
