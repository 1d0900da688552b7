"""Which parameter server a worker's pushes reach (`coach.training.keys`): tuning measures
(w, 1) inside a (w, s) group by pushing every array whole under keys that MXNet sends to
server 0 alone, with MXNet cutting no array; the rest of the epoch splits them as MXNet would.

The rules are checked on their own (tables), and against MXNet itself: a real ps-lite group of
a scheduler, 2 servers and 2 workers, whose servers log every message they receive
(PS_VERBOSE=2), and whose workers check the sums they pull back through the pieces.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from coach.training.keys import (DEFAULT_BIGARRAY_BOUND, UNCUT, as_mxnet_splits, bigarray_bound, server_of,
                                 whole_to_server_0)
from coach.training.worker import steps_within

LENET = [20 * 1 * 5 * 5, 20, 50 * 20 * 5 * 5, 50, 500 * 2450, 500, 10 * 500, 10]
# (case, sizes of the arrays, servers, first key, bound)
SPLITS = [
    ("lenet-on-mnist", LENET, 2, 8, 10**6),
    ("three-servers", [7, 3_000_001, 5], 3, 4, 10**6),
    ("first-key-not-a-multiple", [10, 10], 4, 5, 10**6),
    ("exactly-the-bound", [10**6, 10**6 - 1], 2, 2, 10**6),
    ("a-bound-of-one", [1, 3, 4], 2, 0, 1),
    ("an-empty-first-part", [1], 4, 0, 1),
    ("a-double-rounding-below-a-half", [1_000_005], 14, 0, 10**6),   # 500002.49999999994 at part 7
]


def _mxnet_parts(size: int, servers: int) -> list[tuple[int, int, int]]:
    """`EncodeDefaultKey`'s parts, written out as its C++ computes them: (start, end, server)."""
    def c_round(x: float) -> int:   # C's round() of a non-negative double: halves up
        return int(x) + (x - int(x) >= 0.5)
    bounds = [c_round(size / servers * i) for i in range(servers + 1)]
    return [(bounds[i], bounds[i + 1], i) for i in range(servers) if bounds[i + 1] > bounds[i]]


def _covered_once(pieces, sizes: list[int]) -> bool:
    for a, size in enumerate(sizes):   # in order, end to end, nothing twice
        spans = [(p.start, p.end) for p in pieces if p.array == a]
        if spans[0][0] != 0 or spans[-1][1] != size or any(e != s for (_, e), (s, _) in zip(spans, spans[1:])):
            return False
    return True


@pytest.mark.parametrize("sizes, servers, first_key, bound", [c[1:] for c in SPLITS], ids=[c[0] for c in SPLITS])
def test_the_rests_pieces_reach_the_servers_mxnet_would_send_them_to(sizes: list[int], servers: int,
                                                                     first_key: int, bound: int) -> None:
    pieces = as_mxnet_splits(sizes, servers, first_key, bound)
    keys = [p.key for p in pieces]
    assert len(set(keys)) == len(keys) and min(keys) >= first_key and _covered_once(pieces, sizes)
    for a, size in enumerate(sizes):
        mine = [p for p in pieces if p.array == a]
        if size < bound:   # whole, where its index as a key goes
            assert [(server_of(p.key, servers), p.end - p.start) for p in mine] == [(server_of(a, servers), size)]
        else:   # part i on server i, bounds as MXNet's
            assert [(p.start, p.end, server_of(p.key, servers)) for p in mine] == _mxnet_parts(size, servers)


@pytest.mark.parametrize("sizes, servers, first_key", [(c[1], c[2], c[3]) for c in SPLITS], ids=[c[0] for c in SPLITS])
def test_the_probes_arrays_go_whole_to_server_0(sizes: list[int], servers: int, first_key: int) -> None:
    pieces = whole_to_server_0(sizes, servers, first_key)
    assert [(p.array, p.start, p.end) for p in pieces] == [(a, 0, size) for a, size in enumerate(sizes)]
    assert all(server_of(p.key, servers) == 0 for p in pieces)
    assert len({p.key for p in pieces}) == len(pieces) and min(p.key for p in pieces) >= first_key


@pytest.mark.parametrize("env, bound", [({}, DEFAULT_BIGARRAY_BOUND), ({"MXNET_KVSTORE_BIGARRAY_BOUND": "4096"}, 4096),
                                        ({"MXNET_KVSTORE_BIGARRAY_BOUND": "-1"}, UNCUT),
                                        ({"MXNET_KVSTORE_BIGARRAY_BOUND": "lots"}, DEFAULT_BIGARRAY_BOUND)],
                         ids=["default", "set", "negative", "not-a-number"])
def test_the_bound_is_the_one_mxnet_reads(env: dict[str, str], bound: int) -> None:
    """(A negative one, read into an unsigned size, cuts nothing.)"""
    assert bigarray_bound(env) == bound


# (case, each step's samples, samples asked, steps within)
STEPS = [("whole-steps", [64] * 5, 128, 2), ("between-steps", [64] * 5, 130, 2), ("none", [64] * 5, 0, 0),
         ("all", [64, 64, 10], 500, 3)]


@pytest.mark.parametrize("steps, samples, within", [c[1:] for c in STEPS], ids=[c[0] for c in STEPS])
def test_a_probe_covers_the_whole_steps_within_its_samples(steps: list[int], samples: int, within: int) -> None:
    assert steps_within([(None, n) for n in steps], samples) == within


WORKER = """
import os
import sys
route = sys.argv[1]
if route != "mxnet":   # as a probing worker does: MXNet cuts nothing, the worker routes
    os.environ["MXNET_KVSTORE_BIGARRAY_BOUND"] = str(2**31 - 1)
import mxnet as mx
from coach.training.worker import allreduce, probe_routes, whole
kv = mx.kv.create("dist_sync")
shapes = [(20, 1, 5, 5), (20,), (500, 2450), (500,)]
# worker r pushes r + 1 + (element index): each element's sum over the 2 workers is known
grads = [mx.nd.arange(0, mx.nd.zeros(shape).size).reshape(shape) + kv.rank + 1 for shape in shapes]
buffers = [mx.nd.zeros_like(g) for g in grads]
one, spread = probe_routes(grads, buffers, 2, len(grads), 10**6)
route = {"probe": one, "rest": spread, "mxnet": whole(grads, buffers)}[route]
kv.init([k for k, _, _ in route], [part for _, part, _ in route])
allreduce(kv, route, grads, buffers)
for g, shape in zip(grads, shapes):
    expected = 2 * mx.nd.arange(0, mx.nd.zeros(shape).size).reshape(shape) + 3
    assert (g == expected).min().asscalar() == 1, shape
for _ in range(2):
    allreduce(kv, route, grads, buffers)
mx.nd.waitall()
kv._barrier()   # every push has been served; ps-lite's shutdown is skipped, as Coach's roles skip it
os._exit(0)
"""


def _pushes_per_server(route: str, tmp_path: Path) -> dict[int, int]:
    """Push messages each server of a real (2 workers, 2 servers) group received, by server rank
    (ps-lite's node id of server r is 8 + 2r)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(port), DMLC_NUM_WORKER="2",
               DMLC_NUM_SERVER="2", OMP_NUM_THREADS="1")
    env.pop("MXNET_KVSTORE_BIGARRAY_BOUND", None)   # MXNet's default: the test counts its split
    tmp_path.mkdir(parents=True, exist_ok=True)
    logs = [tmp_path / f"server{i}.log" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, "-c", "import mxnet"], env=dict(env, DMLC_ROLE="scheduler"),
                              stderr=subprocess.DEVNULL)]
    procs += [subprocess.Popen([sys.executable, "-c", "import mxnet"], env=dict(env, DMLC_ROLE="server", PS_VERBOSE="2"),
                               stderr=log.open("w")) for log in logs]
    try:
        workers = [subprocess.Popen([sys.executable, "-c", WORKER, route], env=dict(env, DMLC_ROLE="worker"),
                                    stderr=subprocess.PIPE, text=True) for _ in range(2)]
        procs += workers
        for w in workers:
            _, err = w.communicate(timeout=120)
            assert w.returncode == 0, err[-2000:]
    finally:
        for p in procs:
            p.kill()
    # a message to a server, logged as it arrives: "<worker id> => <server id>. Meta: ... push=1"
    ids = [int(i) for log in logs for i in re.findall(r"=> (\d+)\. Meta: request=1.*push=1", log.read_text())]
    return {rank: ids.count(8 + 2 * rank) for rank in range(2)}


def test_mxnet_sends_a_probe_to_one_server_and_the_rest_as_it_splits_arrays(tmp_path: Path) -> None:
    """Messages per server, init included (rank 0 pushes each key once): the probe's 4 arrays in
    4 messages a step and worker, all to one server; the rest's exactly as MXNet's own split
    (the 1,225,000-element array in one part per server)."""
    pushes = {route: _pushes_per_server(route, tmp_path / route) for route in ("probe", "rest", "mxnet")}
    assert pushes["probe"] == {0: 4 + 2 * 3 * 4, 1: 0}, pushes
    assert pushes["rest"] == pushes["mxnet"] and min(pushes["mxnet"].values()) > 0, pushes
    assert sum(pushes["mxnet"].values()) == 5 + 2 * 3 * 5, pushes
