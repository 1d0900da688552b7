"""Which kvstore keys reach which parameter server: what lets a (w, s) group measure (w, 1).

MXNet's dist kvstore (`src/kvstore/kvstore_dist.h`, `EncodeDefaultKey`) sends an array of
fewer than MXNET_KVSTORE_BIGARRAY_BOUND elements whole to server `(key · 9973) mod s`, and cuts
a larger one into s parts, one per server. Pieces under the bound, pushed under keys that are
multiples of s, therefore all reach server 0: the group's other servers stand idle and its
workers train as (w, 1) would, the same bytes through one server. The servers only sum (the
workers update: `update_on_kvstore=False`), so a worker can change its keys between two steps.

Tuning measures (2, 1) that way on the first samples of the (2, 2) group that trains the rest
of epoch 1 (`JobLoop._tune`): one start-up fewer than a mini-epoch of its own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Sequence

DEFAULT_BIGARRAY_BOUND = 1000 * 1000   # MXNet's default
MIN_BIGARRAY_BOUND = 1000
"""Under this bound (MXNet accepts any) a probe would push arrays in thousands of pieces, one
message each, and measure the messages rather than (w, 1): a worker runs no probe then."""


def bigarray_bound(env: Mapping[str, str] = os.environ) -> int:
    """The bound MXNet's kvstore of this process cuts arrays at (it reads the same variable)."""
    try:
        return int(env.get("MXNET_KVSTORE_BIGARRAY_BOUND", DEFAULT_BIGARRAY_BOUND))
    except ValueError:
        return DEFAULT_BIGARRAY_BOUND


def server_of(key: int, size: int, servers: int, bound: int) -> int | None:
    """The server MXNet sends an array of `size` elements to under `key`; None: cut across all."""
    return (key * 9973) % servers if size < bound else None


@dataclass(frozen=True)
class Piece:
    """Elements [start, end) of the flattened array number `array`, pushed under `key`."""

    array: int
    key: int
    start: int
    end: int


def one_server_pieces(sizes: Sequence[int], servers: int, first_key: int, bound: int) -> list[Piece]:
    """The arrays of `sizes` cut into pieces under `bound`, each under its own key from
    `first_key` on, so that MXNet sends every piece to server 0 of `servers`."""
    pieces: list[Piece] = []
    j = -(-first_key // servers)   # keys are servers · j: the first such key at or after first_key
    for a, size in enumerate(sizes):
        n = -(-size // (bound - 1))   # equal pieces of fewer than `bound` elements
        step = max(1, -(-size // max(1, n)))
        for start in range(0, size, step):
            pieces.append(Piece(a, servers * j, start, min(size, start + step)))
            j += 1
    return pieces
