"""A minimal launcher of plain MXNet parameter-server processes: the baseline Coach is measured
against. One scheduler, `s` servers and `w` workers are started once; each worker trains all
epochs in one process (no per-epoch start-up, no checkpoints), on the same shards and batches
that Coach's workers use, and rank 0 evaluates the validation loss after every epoch.

    python bench/plain_ps.py --workers 1 --servers 1 --epochs 3 --dataset mnist-5k --model lenet
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time


def add_workload_args(ap: argparse.ArgumentParser) -> None:
    """The epochs to run, the same for the plain launcher and for Coach."""
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--dataset", default="mnist-5k", help="a name or a JSON mapping with options")
    ap.add_argument("--model", default="lenet")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)


def dataset_spec(text: str) -> dict:
    """A dataset name (`mnist-5k`) or a JSON mapping (`{"name": "synthetic", "samples": 16000}`)."""
    return json.loads(text) if text.lstrip().startswith("{") else {"name": text}


def worker(args: argparse.Namespace) -> None:
    import mxnet as mx
    from mxnet import autograd, gluon

    from coach.data import load_dataset, shard_steps
    from coach.models import build_model
    from coach.training.worker import allreduce, mean_loss, whole

    ds = dataset_spec(args.dataset)
    data = load_dataset(ds["name"], {k: v for k, v in ds.items() if k != "name"})
    net = build_model(args.model, data.num_classes)
    mx.random.seed(42)
    net.initialize(mx.init.Xavier())
    net(mx.nd.zeros((1,) + data.sample_shape))
    kv = mx.kv.create("dist_sync")
    # gradients summed as Coach's workers sum them, updated locally: through the Trainer's own
    # kvstore path (update_on_kvstore=False) 2 workers stopped at a ps-lite barrier for good
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": args.lr, "momentum": 0.9}, kvstore=None)
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    for i, p in enumerate(params):
        kv.init(i, p.data())
    for i, p in enumerate(params):   # every worker starts from rank 0's initial weights
        kv.pull(i, out=p.data())
    grads = [p.grad() for p in params]
    buffers = [mx.nd.zeros_like(g) for g in grads]
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    shard = int(os.environ["BENCH_SHARD"])
    for epoch in range(1, args.epochs + 1):
        t0 = time.monotonic()
        for sel, step_samples in shard_steps(len(data.x_train), epoch, shard, args.workers, args.batch_size):
            xb, yb = mx.nd.array(data.x_train[sel]), mx.nd.array(data.y_train[sel])
            with autograd.record():
                loss = loss_fn(net(xb), yb)
            loss.backward()
            allreduce(kv, whole(grads, buffers), grads, buffers)
            trainer.step(step_samples)
        if kv.rank == 0:
            val = mean_loss(net, data.x_val, data.y_val, mx)
            print(json.dumps({"epoch": epoch, "val_loss": val, "seconds": time.monotonic() - t0}), flush=True)


def launch(args: argparse.Namespace) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = dict(os.environ, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(port),
                DMLC_NUM_SERVER=str(args.servers), DMLC_NUM_WORKER=str(args.workers),
                DMLC_NODE_HOST="127.0.0.1", OMP_NUM_THREADS="1", MXNET_CPU_WORKER_NTHREADS="1")
    me = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:]
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", "import mxnet"], env=dict(base, DMLC_ROLE=role))
             for role in ["scheduler"] + ["server"] * args.servers]
    workers = [subprocess.Popen(me + ["--role", "worker"], env=dict(base, DMLC_ROLE="worker", BENCH_SHARD=str(i)),
                                stdout=subprocess.PIPE, text=True) for i in range(args.workers)]
    lines = []
    for w in workers:
        out, _ = w.communicate()
        lines += [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    for p in procs:
        p.wait()
    return {"wall_s": time.monotonic() - t0, "epochs": lines}


def main() -> None:
    ap = argparse.ArgumentParser()
    add_workload_args(ap)
    ap.add_argument("--role", default="launcher")
    args = ap.parse_args()
    if args.role == "worker":
        worker(args)
    else:
        print(json.dumps(launch(args)))


if __name__ == "__main__":
    main()
