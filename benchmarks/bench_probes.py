"""Benchmark: ``linear_probe`` against scikit-learn's LogisticRegression (lbfgs).

Both sides do the same job on the same cached features and the same splits: pick the L2
strength on the same validation part of train over the same grid (scikit-learn with warm starts
along the path, C = 1 / (lam * N_fit)), refit on the whole train split at the chosen strength,
score the held-out split. Cases: the digits (N = 1,797) through fixed random ReLU features, and a
synthetic 10-class mixture (N = 50,000), each at d = 512 and 2,048. Runs are paired: both
solvers see each case in the same process, alternating, ``--repeats`` times; the table shows
median times, because scikit-learn's own time varies by 30% from run to run on 2 cores.

Usage:
    python benchmarks/bench_probes.py            # full table (about 5 minutes on 2 cores)
    python benchmarks/bench_probes.py --quick    # N = 50,000 reduced to 10,000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from solo_geometry.analysis.probes import linear_probe, standardise
from solo_geometry.config import LinearProbeConfig
from solo_geometry.inputs.datasets import stratified_split

L2_GRID = tuple(LinearProbeConfig().l2_grid)


def digits_features(d: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Digits pixels (1797, 64) through a fixed random ReLU layer: features (1797, d)."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    gen = torch.Generator().manual_seed(seed)
    x_t = torch.tensor(x, dtype=torch.float32) / 16.0  # (N, 64)
    w = torch.randn(64, d, generator=gen) / 8.0
    b = torch.randn(d, generator=gen)
    return torch.relu(x_t @ w + b), torch.tensor(y)


def synthetic_features(n: int, d: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Ten Gaussian classes in a 32-dim subspace plus isotropic noise: (n, d), (n,)."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=gen)
    means = torch.randn(10, 32, generator=gen) * 0.6
    basis = torch.linalg.qr(torch.randn(d, 32, generator=gen)).Q  # (d, 32)
    signal = (means[y] + torch.randn(n, 32, generator=gen)) @ basis.T  # (n, d)
    return signal + 0.3 * torch.randn(n, d, generator=gen), y


def sklearn_probe(
    x_tr: torch.Tensor, y_tr: torch.Tensor, x_te: torch.Tensor, y_te: torch.Tensor, seed: int
) -> float:
    """The same procedure as ``linear_probe`` with scikit-learn; held-out accuracy."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    xtr, xte = (t.double().numpy() for t in standardise(x_tr.double(), x_te.double()))
    ytr, yte = y_tr.numpy(), y_te.numpy()
    fit, val = (i.numpy() for i in stratified_split(y_tr, 0.2, torch.Generator().manual_seed(seed)))
    clf = LogisticRegression(max_iter=1000, warm_start=True)
    scores = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for lam in sorted(L2_GRID, reverse=True):
            clf.set_params(C=1.0 / (lam * len(fit)))
            clf.fit(xtr[fit], ytr[fit])
            scores[lam] = clf.score(xtr[val], ytr[val])
        best = max(scores, key=lambda lam: (scores[lam], lam))
        final = LogisticRegression(C=1.0 / (best * len(ytr)), max_iter=1000).fit(xtr, ytr)
    return float(final.score(xte, yte))


def _timed(fn: Callable[[], float]) -> tuple[float, float, float]:
    """(result, wall seconds, process CPU seconds) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def run_case(name: str, x: torch.Tensor, y: torch.Tensor, cache: Path, repeats: int) -> str:
    """Cache the features, split 80/20, time both probes ``repeats`` times, alternating.

    One table row: accuracies of the first run (both are deterministic), median times.
    """
    torch.save({"x": x, "y": y}, cache)
    data = torch.load(cache, weights_only=True)
    x, y = data["x"], data["y"]
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(1))
    tr, te = perm[: int(0.8 * len(y))], perm[int(0.8 * len(y)) :]
    runs: dict[str, list[tuple[float, float, float]]] = {"ours": [], "skl": []}
    for _ in range(repeats):
        runs["ours"].append(
            _timed(lambda: linear_probe(x[tr], y[tr], x[te], y[te], seed=0).accuracy)
        )
        runs["skl"].append(_timed(lambda: sklearn_probe(x[tr], y[tr], x[te], y[te], seed=0)))
    acc, acc_sk = runs["ours"][0][0], runs["skl"][0][0]
    w_ours, c_ours = (statistics.median(r[i] for r in runs["ours"]) for i in (1, 2))
    w_sk, c_sk = (statistics.median(r[i] for r in runs["skl"]) for i in (1, 2))
    return (
        f"| {name:<18} | {len(y):>6} | {x.shape[1]:>5} | {100 * acc:6.2f} | "
        f"{100 * acc_sk:6.2f} | {100 * (acc - acc_sk):+5.2f} | {w_ours:7.2f} | "
        f"{w_sk:7.2f} | {w_sk / w_ours:5.1f}x | {c_ours:7.2f} | {c_sk:7.2f} | "
        f"{c_sk / c_ours:5.1f}x |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N=10,000 instead of 50,000")
    parser.add_argument(
        "--only", choices=("digits", "synthetic"), default=None, help="run only one data set"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="paired runs per case; times are medians (default 3)"
    )
    args = parser.parse_args()
    n_big = 10_000 if args.quick else 50_000
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, numpy {np.__version__}")
    print(
        f"s: median wall-clock seconds of {args.repeats} alternating runs; cpu: process CPU "
        "seconds (all threads); ratios skl / ours"
    )
    print(
        "| case               |      N |     d | ours % |  skl % | diff  | ours s  |  skl s  |"
        " wall  | ours cpu| skl cpu |  cpu  |"
    )
    print("|" + "|".join("-" * w for w in (20, 8, 7, 8, 8, 7, 9, 9, 8, 9, 9, 8)) + "|")
    x, y = digits_features(64)  # warm-up: first-call costs (autograd, BLAS, imports) of both
    linear_probe(x[:300], y[:300], x[300:400], y[300:400])
    sklearn_probe(x[:300], y[:300], x[300:400], y[300:400], seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        for d in (512, 2048) if args.only != "synthetic" else ():
            x, y = digits_features(d)
            row = run_case("digits random-ReLU", x, y, Path(tmp) / "f.pt", args.repeats)
            print(row, flush=True)
        for d in (512, 2048) if args.only != "digits" else ():
            x, y = synthetic_features(n_big, d)
            row = run_case("synthetic mixture", x, y, Path(tmp) / "f.pt", args.repeats)
            print(row, flush=True)


if __name__ == "__main__":
    main()
