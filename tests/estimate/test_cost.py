"""Cost is function-seconds × prices; the epoch budget spreads what is left over the epochs left."""

from __future__ import annotations

import math

import pytest

from coach.estimate import (
    DEFAULT_PRICES,
    Prices,
    RoleResources,
    epoch_budget,
    epoch_cost,
    function_cost,
    measured_cost,
)

RES = {"scheduler": RoleResources(0.1, 0.25), "server": RoleResources(0.5, 0.5), "worker": RoleResources(1.0, 2.0)}
PRICES = Prices(cpu_core_second=0.01, gib_second=0.001)


def test_function_cost_is_seconds_times_reserved_resources():
    assert function_cost(RoleResources(2.0, 4.0), 10.0, PRICES) == pytest.approx(10 * (2 * 0.01 + 4 * 0.001))


@pytest.mark.parametrize(("w", "s"), [(1, 1), (3, 2), (8, 4)], ids=["1+1", "3+2", "8+4"])
def test_epoch_cost_counts_one_scheduler_s_servers_w_workers(w, s):
    per_s = (0.1 * 0.01 + 0.25 * 0.001) + s * (0.5 * 0.01 + 0.5 * 0.001) + w * (1.0 * 0.01 + 2.0 * 0.001)
    assert epoch_cost(w, s, RES, 30.0, PRICES) == pytest.approx(30.0 * per_s)


def test_measured_cost_charges_each_role_its_own_seconds():
    secs = {"scheduler": 31.0, "server": 2 * 30.0, "worker": 3 * 29.0}
    expected = sum(function_cost(RES[r], t, PRICES) for r, t in secs.items())
    assert measured_cost(secs, RES, PRICES) == pytest.approx(expected)


def test_missing_role_is_an_error():
    with pytest.raises(ValueError, match="worker"):
        epoch_cost(1, 1, {"scheduler": RES["scheduler"], "server": RES["server"]}, 1.0)


@pytest.mark.parametrize(
    ("remaining", "epochs", "expected"),
    [
        pytest.param(10.0, 4.0, 2.5, id="spread"),
        pytest.param(10.0, None, 10.0, id="unknown-epochs"),
        pytest.param(10.0, 0.5, 10.0, id="last-epoch"),
        pytest.param(10.0, math.inf, 10.0, id="unreachable"),
        pytest.param(-1.0, 3.0, 0.0, id="overspent"),
    ],
)
def test_epoch_budget(remaining, epochs, expected):
    assert epoch_budget(remaining, epochs) == pytest.approx(expected)


def test_default_prices_are_named_and_positive():
    assert DEFAULT_PRICES.cpu_core_second > 0 and DEFAULT_PRICES.gib_second > 0
    with pytest.raises(ValueError):
        Prices(-1.0, 0.0)
