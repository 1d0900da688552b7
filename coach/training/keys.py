"""Which kvstore keys reach which parameter server: what lets a (w, s) group measure (w, 1).

MXNet's dist kvstore (`src/kvstore/kvstore_dist.h`, `EncodeDefaultKey`) sends an array of
fewer than MXNET_KVSTORE_BIGARRAY_BOUND elements whole to server `(key · 9973) mod s`, and cuts
a larger one into s near-equal parts, part i to server i. A (w, 1) group therefore sends every
array whole, in one message, to its one server.

A worker that probes (w, 1) inside a (w, s) group raises that bound above every array, so that
MXNet cuts nothing, and routes its arrays itself under keys of its own:
- the probe (`whole_to_server_0`): every array whole to server 0, as (w, 1) sends them; the
  other servers stand idle;
- the rest (`as_mxnet_splits`): MXNet's own split over the s servers, one key per part.
Cutting the probe's arrays into pieces instead, under the bound, made it as fast as (w, s): LeNet's
1,225,000-element dense weight went to server 0 in two messages that were summed side by side,
where (2, 1) sends one (a probe read 1,341–1,409 samples/s, (2, 2) 1,309–1,391, (2, 1)
1,223–1,325). The servers only sum (the workers update: `update_on_kvstore=False`), so a worker
can change its keys between two steps.

Tuning measures (2, 1) that way on the first samples of the (2, 2) group that trains the rest
of epoch 1 (`JobLoop._tune`): one start-up fewer than a mini-epoch of its own.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Mapping, Sequence

DEFAULT_BIGARRAY_BOUND = 1000 * 1000   # MXNet's default
UNCUT = 2**31 - 1   # a bound above any array's size: MXNet then cuts none


def bigarray_bound(env: Mapping[str, str] = os.environ) -> int:
    """The bound the environment sets MXNet's kvstore to cut arrays at (it reads the same
    variable, into an unsigned size: a negative one cuts nothing)."""
    try:
        bound = int(env.get("MXNET_KVSTORE_BIGARRAY_BOUND", DEFAULT_BIGARRAY_BOUND))
    except ValueError:
        return DEFAULT_BIGARRAY_BOUND
    return UNCUT if bound < 0 else bound


def server_of(key: int, servers: int) -> int:
    """The server MXNet sends an uncut array to under `key`."""
    return (key * 9973) % servers


@dataclass(frozen=True)
class Piece:
    """Elements [start, end) of the flattened array number `array`, pushed under `key`."""

    array: int
    key: int
    start: int
    end: int


class _Keys:
    """Fresh keys from `first` on, each the first unused one that reaches a given server."""

    def __init__(self, servers: int, first: int) -> None:
        if servers % 9973 == 0:   # every key would reach server 0
            raise ValueError(f"{servers} servers: MXNet's keys reach only server 0 of a multiple of 9973")
        self.servers, self.next = servers, first

    def to(self, server: int) -> int:
        if not 0 <= server < self.servers:
            raise ValueError(f"server {server} of {self.servers}")
        key = self.next
        while server_of(key, self.servers) != server:   # at most `servers` steps: 9973 is prime
            key += 1
        self.next = key + 1
        return key


def whole_to_server_0(sizes: Sequence[int], servers: int, first_key: int) -> list[Piece]:
    """Every array whole under its own key from `first_key` on, all reaching server 0 of
    `servers`: what a (w, 1) group sends, with MXNet cutting nothing (`UNCUT`)."""
    keys = _Keys(servers, first_key)
    return [Piece(a, keys.to(0), 0, size) for a, size in enumerate(sizes)]


def as_mxnet_splits(sizes: Sequence[int], servers: int, first_key: int, bound: int) -> list[Piece]:
    """The arrays split over `servers` as MXNet splits them at `bound`, under keys of their own
    from `first_key` on: an array under the bound whole to the server its index would reach, a
    larger one in `servers` near-equal parts, part i to server i (empty parts left out)."""
    keys, pieces = _Keys(servers, first_key), []
    for a, size in enumerate(sizes):
        if size < bound:
            pieces.append(Piece(a, keys.to(server_of(a, servers)), 0, size))
            continue
        for i in range(servers):
            start, end = _c_round(size / servers * i), _c_round(size / servers * (i + 1))
            if end > start:
                pieces.append(Piece(a, keys.to(i), start, end))
    return pieces


def _c_round(x: float) -> int:
    """C's round() of a non-negative double, as MXNet computes its parts' bounds: halves up
    (Python's round() halves to even), on the same double (`size / servers * i`)."""
    f = math.floor(x)
    return int(f) + (x - f >= 0.5)
