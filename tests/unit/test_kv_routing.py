"""Which parameter server a worker's pushes reach (`coach.training.keys`): tuning measures
(w, 1) inside a (w, s) group by pushing every array, in pieces under the bigarray bound, under
keys that MXNet sends to server 0 alone.

The rule is checked on its own (tables), and against MXNet itself: a real ps-lite group of a
scheduler, 2 servers and 2 workers, whose servers log every message they receive (PS_VERBOSE=2),
and whose workers check the sums they pull back through the pieces.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from coach.training.keys import DEFAULT_BIGARRAY_BOUND, bigarray_bound, one_server_pieces, server_of
from coach.training.worker import steps_within

# (case, sizes of the arrays, servers, first key, bound)
PIECES = [
    ("lenet-on-mnist", [20 * 1 * 5 * 5, 20, 50 * 20 * 5 * 5, 50, 500 * 2450, 500, 10 * 500, 10], 2, 8, 10**6),
    ("three-servers", [7, 3_000_001, 5], 3, 4, 10**6),
    ("first-key-not-a-multiple", [10, 10], 4, 5, 10**6),
    ("exactly-the-bound", [10**6, 10**6 - 1], 2, 2, 10**6),
    ("tiny-bound", [9, 1, 4], 5, 0, 2),
]


@pytest.mark.parametrize("sizes, servers, first_key, bound", [c[1:] for c in PIECES], ids=[c[0] for c in PIECES])
def test_every_piece_reaches_server_0_and_each_array_is_covered_once(sizes: list[int], servers: int,
                                                                     first_key: int, bound: int) -> None:
    pieces = one_server_pieces(sizes, servers, first_key, bound)
    assert all(server_of(p.key, p.end - p.start, servers, bound) == 0 for p in pieces)
    keys = [p.key for p in pieces]
    assert len(set(keys)) == len(keys) and min(keys) >= first_key
    for a, size in enumerate(sizes):   # in order, end to end, nothing twice
        spans = [(p.start, p.end) for p in pieces if p.array == a]
        assert spans[0][0] == 0 and spans[-1][1] == size
        assert all(end == start for (_, end), (start, _) in zip(spans, spans[1:]))
        assert len(spans) == -(-size // (bound - 1))   # no more pieces than the bound asks for


def test_whole_arrays_under_the_bound_are_spread_and_larger_ones_cut() -> None:
    assert [server_of(k, 10, 2, 10**6) for k in range(4)] == [0, 1, 0, 1]
    assert server_of(3, 10**6, 2, 10**6) is None


@pytest.mark.parametrize("env, bound", [({}, DEFAULT_BIGARRAY_BOUND), ({"MXNET_KVSTORE_BIGARRAY_BOUND": "4096"}, 4096),
                                        ({"MXNET_KVSTORE_BIGARRAY_BOUND": "0"}, 0),
                                        ({"MXNET_KVSTORE_BIGARRAY_BOUND": "lots"}, DEFAULT_BIGARRAY_BOUND)],
                         ids=["default", "set", "zero", "not-a-number"])
def test_the_bound_is_the_one_mxnet_reads(env: dict[str, str], bound: int) -> None:
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
import mxnet as mx
from coach.training.worker import allreduce, to_server_0, whole
kv = mx.kv.create("dist_sync")
shapes = [(20, 1, 5, 5), (20,), (500, 2450), (500,)]
# worker r pushes r + 1 + (element index): each element's sum over the 2 workers is known
grads = [mx.nd.arange(0, mx.nd.zeros(shape).size).reshape(shape) + kv.rank + 1 for shape in shapes]
buffers = [mx.nd.zeros_like(g) for g in grads]
route = to_server_0(grads, buffers, 2, len(grads)) if sys.argv[1] == "one" else whole(grads, buffers)
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


def _pushes_per_server(route: str, tmp_path: Path) -> list[int]:
    """Push messages each server of a real (2 workers, 2 servers) group received."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(port), DMLC_NUM_WORKER="2",
               DMLC_NUM_SERVER="2", OMP_NUM_THREADS="1")
    env.pop("MXNET_KVSTORE_BIGARRAY_BOUND", None)
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
    return [len(re.findall(r"=> \d+\. Meta: request=1.*push=1", log.read_text())) for log in logs]


@pytest.mark.parametrize("route, one_server", [("one", True), ("whole", False)])
def test_mxnet_sends_a_probes_pushes_to_one_server_and_others_to_both(route: str, one_server: bool,
                                                                       tmp_path: Path) -> None:
    pushes = sorted(_pushes_per_server(route, tmp_path))
    # 2 workers, 3 steps of 4 arrays: the 1,225,000-element one in 2 pieces, by the probe's keys or MXNet's cut
    assert sum(pushes) >= 2 * 3 * 5
    assert (pushes[0] == 0) == one_server
