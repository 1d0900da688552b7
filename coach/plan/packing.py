"""Does a group of functions fit on the nodes, not only in their sum?

Capacity summed over a cluster's nodes hides its fragments: three 1.2-core workers fit the
4 cores of two 2-core nodes in sum, but no node has room for the third. A planner that only
counts cores grants such a group, and the group then waits for a place that never comes
(seen on the cluster backend: coach-gang bound 3 of the 4 pods, held them 60 s, released
them, and the group waited again). So the planner also asks whether the functions it grants
can be laid out on the nodes.

First-fit decreasing in two dimensions (cores first, then GiB): the largest function goes
first, each to the first node with room for it. It may refuse a layout that only a search
would find; the schedulers place pod by pod and search no more than this. The cluster backend
creates a group's pods in the same order, largest first, so that a scheduler placing them as
they come fills a node with a big function before small ones are spread over every node.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Size = tuple[float, float]   # (cores, GiB)


def packs(functions: Iterable[Size], nodes: Sequence[Size]) -> bool:
    """Whether every function fits on some node, first-fit decreasing."""
    room = [list(n) for n in nodes]
    for cpu, mem in sorted(functions, reverse=True):
        for r in room:
            if cpu <= r[0] + 1e-9 and mem <= r[1] + 1e-9:
                r[0] -= cpu
                r[1] -= mem
                break
        else:
            return False
    return True


def describe(nodes: Sequence[Size]) -> str:
    """`2 nodes with room for 2 cores and 4 GiB each`, or each node's room when they differ."""
    if len(set(nodes)) == 1:
        (cpu, mem), n = nodes[0], len(nodes)
        return f"{n} node{'s' * (n != 1)} with room for {cpu:g} cores and {mem:.3g} GiB{' each' * (n != 1)}"
    return "nodes with room for " + ", ".join(f"{cpu:g} cores/{mem:.3g} GiB" for cpu, mem in nodes)
