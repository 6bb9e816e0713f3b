r"""Our SLQ density at the peers' product counts: is the gap to them steps per probe, or method?

Per recipe (``bench_peers.py``'s operator: H_eff of one training step of solo-learn's cifar
recipe on the dense 1-sample block), the dense float64 spectrum, then this package's Lanczos
(full reorthogonalisation, Gauss quadrature nodes and weights: ``SpectralDensity.from_runs``)
run without a stop for ``probes x steps`` products, each split read as the Wasserstein-1
distance to the dense spectrum over max|lambda| (``bench_peers._w1``). The splits: our default
(3 probes, 17 steps: where the extremes' run stopped on DINO), PyHessian's 100 products and
hessian-eigenthings' 240, in several splits each.

Usage::

    PYTHONPATH=.:benchmarks python benchmarks/bench_density_products.py \
        --solo-root /work/solo-learn --recipes dino simclr
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from bench_peers import RECIPES, _w1, recipe_problem

from solo_geometry.geometry import curvature_operators
from solo_geometry.linalg.lanczos import lanczos
from solo_geometry.linalg.slq import SpectralDensity

# (probes, steps): ours at its default, then at PyHessian's 100 and hessian-eigenthings' 240
SPLITS = ((3, 17), (1, 100), (2, 50), (3, 33), (3, 80), (5, 48), (10, 24))


def rows_of(recipe: str, solo_root: Path, batch_size: int) -> list[tuple[str, int, int, float]]:
    """``(recipe, probes, steps, W1 / scale)`` for each split of :data:`SPLITS`."""
    problem = recipe_problem(recipe, solo_root, batch_size)
    ops = curvature_operators(*problem, dtype=torch.float64, max_samples=1)
    dense = ops.dense("heff")
    dense = (dense + dense.T) / 2
    eigs = np.linalg.eigvalsh(dense.numpy())
    out = []
    for probes, steps in SPLITS:
        g = torch.Generator().manual_seed(0)
        runs = [
            lanczos(lambda v: dense @ v, dense.shape[0], max_steps=steps, tol=0.0, generator=g)
            for _ in range(probes)
        ]
        density = SpectralDensity.from_runs(runs)
        w1 = _w1(density.nodes.numpy(), density.weights.numpy(), eigs)
        out.append((recipe, probes, steps, w1))
    return out


def main(argv: list[str] | None = None) -> list[tuple[str, int, int, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=["dino"], choices=RECIPES)
    parser.add_argument("--solo-root", type=Path, required=True)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for recipe in args.recipes:
        start = time.perf_counter()
        rows += rows_of(recipe, args.solo_root, args.batch_size)
        print(f"{recipe}: {time.perf_counter() - start:.0f} s", flush=True)
    print("| recipe | probes x steps | HVPs | W1 / scale |\n|---|---|---|---|")
    for recipe, probes, steps, w1 in rows:
        print(f"| {recipe} | {probes} x {steps} | {probes * steps} | {w1:.3e} |")
    return rows


if __name__ == "__main__":
    main()
