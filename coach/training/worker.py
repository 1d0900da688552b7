"""One worker's part of one synchronous parameter-server epoch.

Runs inside a fresh role process (ps-lite membership is fixed per process). Each synchronous
step trains on the same samples whatever the number of workers (`coach.data.shard_steps`), so
the loss curve per epoch does not depend on (w, s) and the convergence model stays valid when
the planner changes them.
"""

from __future__ import annotations

import gc
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from coach.data import load_dataset, shard_steps
from coach.errors import TaskError
from coach.models import build_model, first_forward
from coach.roles.protocol import EpochTask
from coach.training import checkpoint
from coach.training.keys import UNCUT, Piece, as_mxnet_splits, bigarray_bound, whole_to_server_0

EVAL_BATCH = 500
WARM_STEPS = 2
"""Steps left out of the throughput measurement: the first steps of a fresh process allocate
memory and set up operators and ps-lite connections. Counting them made a tuning mini-epoch
of 16 steps per worker look slower with 2 workers than with 1 on LeNet, while whole epochs
were 40% faster: the warm-up belongs to the epoch's fixed overhead, the speed model wants
the steady rate (only for epochs of more than 2·WARM_STEPS steps)."""


MINI_VAL_SAMPLES = 250   # a tuning mini-epoch validates on at least this many samples (or all of them)


def validation_stride(n_val: int, n_train: int, limit: int | None) -> int:
    """Which held-out samples an epoch's validation loss is measured on: every `stride`-th.

    A training epoch measures all of them. A tuning mini-epoch is there to measure a speed,
    so it validates on the share of them that its samples are of the training set, but on
    MINI_VAL_SAMPLES at least. LeNet's (1, 1) mini-epoch, 1,024 of 4,000 samples, spent 0.27 to
    0.44 s of its 1.7 to 2.6 s validating all 1,000, on every first submission, where a static
    job on (2, 2) never pays for a mini-epoch; a quarter of them took 0.07 s.
    """
    if limit is None or not 0 < limit < n_train:
        return 1
    return max(1, min(round(n_train / limit), n_val // MINI_VAL_SAMPLES))


def _optimizer(hyper: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    name = str(hyper.get("optimizer", "sgd"))
    params: dict[str, Any] = {"learning_rate": float(hyper.get("learning_rate", 0.1))}
    if name in ("sgd", "nag"):
        params["momentum"] = float(hyper.get("momentum", 0.9))
    if hyper.get("weight_decay"):
        params["wd"] = float(hyper["weight_decay"])
    return name, params


def allreduce(kv: Any, route: list[tuple[int, Any, Any]], arrays: list[Any], buffers: list[Any]) -> None:
    """Replace each of `arrays` by its sum over all workers, in one round trip per (key, part of
    an array, part of its buffer) of `route` (dist_sync: the servers answer once every worker's
    share is merged).

    Into separate buffers, not in place: Trainer.allreduce_grads' in-place pushpull raced in
    MXNet 1.9 — one LeNet epoch gave a validation loss of 0.742 instead of 0.252 in the
    fork-server's processes, and plain launcher runs differed from run to run. Out of place,
    an epoch through Coach equals single-process training (tests/e2e/test_exactness.py) and
    repeated runs agree to the last digit.
    """
    for i, (key, part, out) in enumerate(route):
        kv.pushpull(key, part, out=out, priority=-i)
    for a, buf in zip(arrays, buffers):
        buf.copyto(a)


def whole(arrays: list[Any], buffers: list[Any], first_key: int = 0) -> list[tuple[int, Any, Any]]:
    """A route of whole arrays under consecutive keys from `first_key`: MXNet spreads them
    over the servers."""
    return [(first_key + i, a, buf) for i, (a, buf) in enumerate(zip(arrays, buffers))]


def routed(arrays: list[Any], buffers: list[Any], pieces: list[Piece]) -> list[tuple[int, Any, Any]]:
    """A route of the arrays' `pieces` under their own keys (`coach.training.keys`): views, so
    that a step's gradients and sums need no copies."""
    flat = [(a.reshape((-1,)), buf.reshape((-1,))) for a, buf in zip(arrays, buffers)]
    return [(p.key, flat[p.array][0][p.start:p.end], flat[p.array][1][p.start:p.end]) for p in pieces]


def probe_routes(arrays: list[Any], buffers: list[Any], servers: int, first_key: int,
                 bound: int) -> tuple[list[tuple[int, Any, Any]], list[tuple[int, Any, Any]]]:
    """The probe's route, every array whole to server 0, and the rest's, split as MXNet splits
    them at `bound`, under keys from `first_key` on; for a kvstore that cuts nothing (`UNCUT`)."""
    sizes = [a.size for a in arrays]
    one = whole_to_server_0(sizes, servers, first_key)
    spread = as_mxnet_splits(sizes, servers, max((p.key for p in one), default=first_key - 1) + 1, bound)
    return routed(arrays, buffers, one), routed(arrays, buffers, spread)


def summed_loss(net: Any, x: Any, y: Any, mx: Any) -> float:
    """Summed softmax cross-entropy of `net` on (x, y), in batches."""
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    total = 0.0
    for i in range(0, len(x), EVAL_BATCH):
        out = net(mx.nd.array(x[i:i + EVAL_BATCH]))
        total += float(loss_fn(out, mx.nd.array(y[i:i + EVAL_BATCH])).sum().asscalar())
    return total


def mean_loss(net: Any, x: Any, y: Any, mx: Any) -> float:
    """Mean softmax cross-entropy of `net` on (x, y)."""
    return summed_loss(net, x, y, mx) / len(x)


def run_worker(task: EpochTask) -> dict[str, Any]:
    """Train one epoch on this worker's shard with a dist_sync kvstore; answer its measurements."""
    import mxnet as mx
    from mxnet import autograd, gluon

    t0 = time.monotonic()
    # ps-lite's rendezvous (`Van::Start` polls every 100 ms until the scheduler has answered)
    # goes on beside the dataset's load (a replica's first event; numpy only): ctypes lets go of
    # the GIL while it waits. Beside the model's construction, MXNet operators, a race inside
    # MXNet crashed about 1 worker process in 40 (SIGSEGV in `MXKVStoreCreate` and `_copyto`;
    # retried, so only an attempt was lost). If what follows fails, the kvstore is kept until the
    # process ends (`runner._keep`)
    bound = bigarray_bound()
    if task.probe:   # the kvstore cuts no array: the worker routes them (`probe_routes`)
        os.environ["MXNET_KVSTORE_BIGARRAY_BOUND"] = str(UNCUT)
    rendezvous = ThreadPoolExecutor(1, thread_name_prefix="rendezvous").submit(mx.kv.create, "dist_sync")
    ds_opts = {k: v for k, v in task.dataset.items() if k != "name"}
    data = load_dataset(task.dataset["name"], ds_opts)
    kv = rendezvous.result()
    ctx = mx.cpu()
    net = build_model(task.model.get("name", ""), data.num_classes, task.model.get("file"), task.model.get("source"))
    mx.random.seed(int(task.hyper.get("init_seed", 42)))
    net.initialize(mx.init.Xavier(), ctx=ctx)
    first_forward(net, data.sample_shape, data.num_classes, task.model.get("file"), ctx)
    # that forward pass may leave weights in MKL-DNN's own layout (ResNet's convolutions do),
    # which the kvstore cannot send ("can't generate TBlob for MKLDNN data"): back to default
    net.collect_params().reset_ctx(ctx)   # fresh arrays, copied out in the default layout

    opt_name, opt_params = _optimizer(task.hyper)
    # The Trainer updates locally; gradients are summed across workers by the kvstore below,
    # one explicit push and pull per parameter (what update_on_kvstore=False means), so that
    # optimizer state lives in the worker and can be checkpointed.
    trainer = gluon.Trainer(net.collect_params(), opt_name, opt_params, kvstore=None)
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    # state outside the gradients (BatchNorm running statistics): each worker updates its own
    # copy from its own batches; averaged at the end of the epoch (keys after the params')
    state = [p for p in net.collect_params().values() if p.grad_req == "null"]
    grads = [p.grad() for p in params]
    buffers = [mx.nd.zeros_like(g) for g in grads]
    if task.first + task.workers > len(data.x_train):
        raise TaskError(f"the epoch's samples start at {task.first}, but {task.dataset['name']} has only "
                        f"{len(data.x_train)} training samples for {task.workers} worker(s)")
    plan = shard_steps(len(data.x_train), task.seed, task.shard, task.workers, int(task.hyper["batch_size"]),
                       task.limit, task.first)
    probe_steps = steps_within(plan, task.probe)
    if task.probe and not 0 < probe_steps < len(plan):
        raise TaskError(f"probe: {task.probe} samples must be one global batch at least and leave one for the "
                        f"rest of the epoch, which has {sum(n for _, n in plan)} samples")
    one, spread = (probe_routes(grads, buffers, task.servers, len(params) + len(state), bound) if task.probe
                   else ([], whole(grads, buffers)))
    values = [p.data() for p in params + state]
    routes = one + spread if task.probe else []
    # one call: each waits at a barrier of the whole group
    kv.init(list(range(len(values))) + [k for k, _, _ in routes], values + [part for _, part, _ in routes])
    meta: dict[str, Any] = {}
    if task.checkpoint_in:
        meta = checkpoint.load(task.checkpoint_in, net, trainer, ctx)
    else:
        for i, p in enumerate(params):   # every worker starts from rank 0's initial weights
            kv.pull(i, out=p.data())
        mx.nd.waitall()

    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def train(steps: list[tuple[Any, int]], route: list[tuple[int, Any, Any]]) -> dict[str, Any]:
        warm = WARM_STEPS if len(steps) > 2 * WARM_STEPS else 0
        t1 = t_steady = time.monotonic()
        loss_sum = mx.nd.zeros((1,), ctx=ctx)
        for i, (sel, step_samples) in enumerate(steps):
            if i == warm and warm:
                mx.nd.waitall()
                t_steady = time.monotonic()
            xb, yb = mx.nd.array(data.x_train[sel], ctx=ctx), mx.nd.array(data.y_train[sel], ctx=ctx)
            with autograd.record():
                loss = loss_fn(net(xb), yb)
            loss.backward()
            allreduce(kv, route, grads, buffers)
            trainer.step(step_samples)   # the mean gradient of the whole synchronous step
            loss_sum += loss.sum()
        samples = sum(len(sel) for sel, _ in steps)
        train_loss = float(loss_sum.asscalar()) / max(1, samples)
        if state:   # the mean over the workers: the checkpoint and every worker's validation agree
            states = [p.data() for p in state]
            copies = [a.copy() for a in states]
            allreduce(kv, whole(states, copies, first_key=len(params)), states, copies)
            for p in state:
                p.data()[:] = p.data() / task.workers
        t2 = time.monotonic()
        return {"train_loss": train_loss, "samples": samples, "steps": len(steps), "duration_s": t2 - t1,
                "steady_samples": samples - sum(len(sel) for sel, _ in steps[:warm]), "steady_s": t2 - t_steady}

    def validate(limit: int | None) -> dict[str, Any]:
        # every worker evaluates its own slice of the held-out split (the group waits for the
        # slowest anyway); the caller adds the sums up: the same mean loss, in 1/w of the time
        stride = validation_stride(len(data.x_val), len(data.x_train), limit)
        x_val, y_val = data.x_val[::stride][kv.rank::task.workers], data.y_val[::stride][kv.rank::task.workers]
        return {"val_sum": summed_loss(net, x_val, y_val, mx), "val_count": int(len(x_val))}

    startup_s = time.monotonic() - t0
    probe: dict[str, Any] = {}
    if probe_steps:   # as a mini-epoch of its own on (w, 1) would: trained, then validated on its share
        probe = train(plan[:probe_steps], one)
        probe.update(validate(task.probe))
        probe_end = time.monotonic()
    result: dict[str, Any] = {"role": "worker", "rank": kv.rank, "shard": task.shard,
                              **train(plan[probe_steps:], spread), "startup_s": startup_s, "checkpoint": None}
    if probe:
        result["probe"] = probe
    if kv.rank == 0:
        seen = int(meta.get("samples_seen", 0)) + sum(n for _, n in plan)
        checkpoint.save(task.checkpoint_out, net, trainer,
                        {"job_id": task.job_id, "epoch": task.epoch, "samples_seen": seen})
        result["checkpoint"] = task.checkpoint_out
    result.update(validate(task.limit))
    if probe:   # how long the group went on after it: the caller's clock gives its wall time
        probe["after_s"] = time.monotonic() - probe_end
    if task.abort_file:
        # the job loop ends this group once every worker has answered (`attempt_files.WORKERS_DONE`)
        # and the process exits without freeing the kvstore, whose destructor would wait at
        # ps-lite's exit barrier for workers that have left without it. It is freed by the
        # cycle collector, not on return (its gc.collect took the 0.3 s), so that collector must
        # not run from here on
        gc.disable()
    return result


def steps_within(plan: list[tuple[Any, int]], samples: int) -> int:
    """How many of the plan's first steps together train at most `samples` samples."""
    n = total = 0
    for _, step_samples in plan:
        if total + step_samples > samples:
            break
        total, n = total + step_samples, n + 1
    return n
