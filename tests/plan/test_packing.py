"""Laying a group of functions out on a cluster's nodes: cores summed over nodes hide fragments."""

from __future__ import annotations

import pytest

from coach.plan import describe_nodes, packs

TWO_2CPU = [(2.0, 4.0), (2.0, 4.0)]


@pytest.mark.parametrize("functions, nodes, fits", [
    ([(1.2, 1.0)] * 3, TWO_2CPU, False),                          # 3.6 of 4 cores in sum, 1 per node
    ([(1.2, 1.0)] * 2 + [(0.1, 0.25)], TWO_2CPU, True),
    ([(1.0, 1.0)] * 4, TWO_2CPU, True),                           # exactly full
    ([(1.5, 1.0), (0.5, 3.5)], TWO_2CPU, True),                   # the small one goes where its memory fits
    ([(0.1, 3.0)] * 3, TWO_2CPU, False),                          # memory, not cores, is fragmented
    ([(0.5, 0.5), (1.5, 0.5), (1.5, 0.5), (0.5, 0.5)], TWO_2CPU, True),   # needs largest first
    ([], [], True),
    ([(0.1, 0.1)], [], False),
    ([(2.0, 1.0)], [(1.0, 8.0), (2.0, 1.0)], True),               # the second node, not the first
])
def test_packs(functions: list[tuple[float, float]], nodes: list[tuple[float, float]], fits: bool) -> None:
    assert packs(functions, nodes) is fits


@pytest.mark.parametrize("nodes, text", [
    (TWO_2CPU, "2 nodes with room for 2 cores and 4 GiB each"),
    ([(2.0, 4.0)], "1 node with room for 2 cores and 4 GiB"),
    ([(2.0, 4.0), (1.5, 4.0)], "nodes with room for 2 cores/4 GiB, 1.5 cores/4 GiB"),
])
def test_describe(nodes: list[tuple[float, float]], text: str) -> None:
    assert describe_nodes(nodes) == text
