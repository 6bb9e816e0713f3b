"""The same operator by this package and by the curvature libraries, on solo-learn's cifar recipes.

Per recipe (built as ``profile_record.py`` builds it, batch 32, one batch of random 32 x 32
images, the training step's captured features and loss), H_eff of the head's loss in the
features on two sub-blocks: the monitor's default (``max_samples`` 16 of 32, dim 16,384 for a
512-wide backbone) against a long float64 Lanczos run (tol 1e-10), and a small one (``--small``
samples, dim 1,024 at one sample) against the dense float64 matrix. Each method takes float32
products and stops by its own test:

* ``ours``: ``curvature_operators(...).spectrum()`` at the monitor's defaults (tol 1e-3);
* ``arpack``: ``scipy.sparse.linalg.eigsh(which="BE", k=2, tol=1e-3)`` on our scipy operator;
* ``curvlinops``: its ``ActivationHessianLinearOperator`` (the Hessian in the head's input,
  restricted to the same sub-block) under the same ``eigsh``;
* ``eigenthings``: hessian-eigenthings' Lanczos (full reorthogonalisation, its residual test
  at tol 1e-3 relative to each Ritz value) on its ``HessianOperator`` of a module whose one
  parameter is the sub-block of Z; no restart, so the run is repeated at 16, 32, 64, ...
  steps until its flag says both extremes converged (every run's products counted);
* ``pyhessian``: PyHessian's power iteration (``maxIter=100, tol=1e-3``) on the same module:
  the eigenvalue of largest magnitude only, no convergence flag.

Reported: both extremes, their error relative to the spectral scale max|lambda|, Hessian-vector
products, wall time (construction included), whether the method reports convergence, and
ours / theirs ratios of products and time. On the small block, the SLQ density of ours (3
probes), PyHessian (``iter=100, n_v=1``; its ``torch.eig``, gone from torch 2, is shimmed by
``torch.linalg.eigh``) and hessian-eigenthings (3 runs of 80 steps): the Wasserstein-1 distance
to the dense spectrum over the scale, against products.

Usage::

    PYTHONPATH=. python benchmarks/bench_peers.py --solo-root /work/solo-learn
    PYTHONPATH=. python benchmarks/bench_peers.py --solo-root /work/solo-learn --parts density
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from peers import (
    F32,
    TOL,
    Problem,
    arpack,
    eigenthings_operator,
    peer_curvlinops,
    peer_eigenthings,
    peer_pyhessian,
    pyhessian_hessian,
    torch1_eig,
)

from solo_geometry.geometry import curvature_operators, effective_hessian_spectrum

RECIPES = ("simclr", "byol", "vicreg", "barlow", "mocov2plus", "dino")


@dataclass
class Row:
    """One method's extremes of one operator."""

    recipe: str
    block: str
    method: str
    lambda_min: float | None
    lambda_max: float | None
    hvps: int
    converged: str  # "yes", "no" or "not reported"
    seconds: float
    err_min: float | None = None
    err_max: float | None = None


@dataclass
class DensityRow:
    """One method's SLQ density on the small block."""

    recipe: str
    method: str
    hvps: int
    seconds: float
    w1: float  # Wasserstein-1 distance to the dense spectrum, over max|lambda|


def ours(problem: Problem, samples: int) -> tuple[float, float, int, str, float]:
    """The monitor's own run: extremes, products, convergence, wall time."""
    start = time.perf_counter()
    head_spectrum = (
        curvature_operators(*problem, dtype=F32, max_samples=samples)
        .spectrum(operators=("heff",), tol=TOL)
        .heff
    )
    yes = head_spectrum.converged_min and head_spectrum.converged_max
    return (
        head_spectrum.ritz_min,
        head_spectrum.ritz_max,
        head_spectrum.steps,
        "yes" if yes else "no",
        time.perf_counter() - start,
    )


def ours_arpack(problem: Problem, samples: int) -> Any:
    """ARPACK on our scipy operator (float32 products)."""
    start = time.perf_counter()
    return arpack(
        curvature_operators(*problem, dtype=F32, max_samples=samples).linear_operator("heff"), start
    )


def reference(problem: Problem, samples: int, dense: bool) -> tuple[np.ndarray, int, float]:
    """The float64 spectrum: dense eigenvalues, or a long run's extreme Ritz values."""
    start = time.perf_counter()
    if dense:
        ops = curvature_operators(*problem, max_samples=samples)
        eigs = np.linalg.eigvalsh(ops.dense("heff").numpy())
        return eigs, ops.dim, time.perf_counter() - start
    spectrum = effective_hessian_spectrum(
        *problem, max_steps=400, tol=1e-10, max_samples=samples, operators=("heff",)
    ).heff
    ends = np.array([spectrum.ritz_min, spectrum.ritz_max])
    return ends, spectrum.steps, time.perf_counter() - start


def extremes(
    recipe: str, problem: Problem, samples: int, dense: bool
) -> tuple[list[Row], np.ndarray]:
    """Every method's row on one block, the reference row first; the reference's spectrum."""
    block = f"{samples} of {problem[2].shape[1]}" + (" (dense)" if dense else "")
    eigs, steps, seconds = reference(problem, samples, dense)
    ref = (float(eigs[0]), float(eigs[-1]))
    rows = [Row(recipe, block, "reference f64", *ref, steps, "-", seconds)]
    index = curvature_operators(*problem, max_samples=samples).index
    methods: dict[str, Callable[[], Any]] = {
        "ours": lambda: ours(problem, samples),
        "arpack (our products)": lambda: ours_arpack(problem, samples),
        "curvlinops + eigsh": lambda: peer_curvlinops(problem, index),
        "hessian-eigenthings": lambda: peer_eigenthings(problem, index),
        "pyhessian": lambda: peer_pyhessian(problem, index, ref),
    }
    scale = max(abs(ref[0]), abs(ref[1]))
    for method, run in methods.items():
        try:
            row = Row(recipe, block, method, *run())
        except ImportError as missing:
            print(f"{method}: skipped ({missing})", file=sys.stderr)
            continue
        row.err_min = None if row.lambda_min is None else abs(row.lambda_min - ref[0]) / scale
        row.err_max = None if row.lambda_max is None else abs(row.lambda_max - ref[1]) / scale
        rows.append(row)
    return rows, eigs


def _w1(nodes: np.ndarray, weights: np.ndarray, eigs: np.ndarray) -> float:
    from scipy.stats import wasserstein_distance

    keep = np.isfinite(nodes)
    distance = wasserstein_distance(nodes[keep], eigs, u_weights=np.clip(weights[keep], 0, None))
    return float(distance) / float(np.abs(eigs).max())


def densities(recipe: str, problem: Problem, samples: int, eigs: np.ndarray) -> list[DensityRow]:
    """SLQ densities of ours, PyHessian and hessian-eigenthings against the dense spectrum."""
    import hessian_eigenthings as he

    out, start = [], time.perf_counter()
    ops = curvature_operators(*problem, dtype=F32, max_samples=samples)
    heff = ops.spectrum(operators=("heff",), density_probes=2, tol=TOL).heff
    nodes, weights = heff.density.nodes.numpy(), heff.density.weights.numpy()
    out.append(
        DensityRow(
            recipe,
            "ours (3 probes)",
            3 * heff.steps,
            time.perf_counter() - start,
            _w1(nodes, weights, eigs),
        )
    )
    start = time.perf_counter()
    hess, count = pyhessian_hessian(problem, ops.index)
    removed = torch.eig  # PyHessian 0.1 calls it; torch 2 raises
    torch.eig = torch1_eig  # type: ignore[assignment,unused-ignore]
    try:
        (nodes,), (weights,) = hess.density(iter=min(100, ops.dim), n_v=1)
    finally:
        torch.eig = removed
    out.append(
        DensityRow(
            recipe,
            "pyhessian (iter=100, n_v=1)",
            count[0],
            time.perf_counter() - start,
            _w1(np.array(nodes), np.array(weights), eigs),
        )
    )
    start = time.perf_counter()
    op, count = eigenthings_operator(problem, ops.index)
    steps = min(80, op.size)
    slq = he.spectral_density(op, num_runs=3, lanczos_steps=steps, seed=0, num_grid_points=16)
    runs = slq.raw_eigenvalues.shape[0]
    out.append(
        DensityRow(
            recipe,
            "hessian-eigenthings (3 x 80)",
            count[0],
            time.perf_counter() - start,
            _w1(slq.raw_eigenvalues.numpy().ravel(), slq.raw_weights.numpy().ravel() / runs, eigs),
        )
    )
    return out


def recipe_problem(method: str, solo_root: Path, batch_size: int) -> Problem:
    """The head, loss and features of one training step of ``method``'s cifar recipe."""
    from profile_record import build

    model = build(method, solo_root, batch_size)
    model.train()
    g = torch.Generator().manual_seed(0)
    views = model.num_large_crops + model.num_small_crops
    X = [torch.randn(batch_size, 3, 32, 32, generator=g) for _ in range(views)]
    batch = [torch.arange(batch_size), X, torch.zeros(batch_size, dtype=torch.long)]
    model.geometry_capture(True)
    model.training_step(batch, 0)
    view = model.geometry_view(batch)
    model.geometry_capture(False)
    return view.head, view.loss_of_outputs, view.features.detach()


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table(rows: list[Row]) -> str:
    """Markdown table, with ours / theirs ratios of products and time per recipe and block."""
    lines = [
        "| recipe | block | method | lambda_min | lambda_max | err min | err max | HVPs | "
        "wall s | converged | HVPs ours/theirs | time ours/theirs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    mine = {(r.recipe, r.block): r for r in rows if r.method == "ours"}
    for r in rows:
        base = mine.get((r.recipe, r.block))
        peer = base is not None and r.method not in ("ours", "reference f64")
        ratio_h = f"{base.hvps / r.hvps:.2f}" if peer and base and r.hvps else "-"
        ratio_t = f"{base.seconds / r.seconds:.2f}" if peer and base and r.seconds else "-"
        lines.append(
            f"| {r.recipe} | {r.block} | {r.method} | {_fmt(r.lambda_min, '.4e')} | "
            f"{_fmt(r.lambda_max, '.4e')} | {_fmt(r.err_min, '.1e')} | "
            f"{_fmt(r.err_max, '.1e')} | {r.hvps} | {r.seconds:.2f} | {r.converged} | "
            f"{ratio_h} | {ratio_t} |"
        )
    return "\n".join(lines)


def density_table(rows: list[DensityRow]) -> str:
    """Markdown table, with ours / theirs ratios of products, time and W1 per recipe."""
    lines = [
        "| recipe | method | HVPs | wall s | W1 / scale | HVPs ours/theirs | time ours/theirs "
        "| W1 ours/theirs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    mine = {r.recipe: r for r in rows if r.method.startswith("ours")}
    for r in rows:
        base = mine.get(r.recipe)
        ratios = ["-", "-", "-"]
        if base is not None and r is not base:
            pairs = ((base.hvps, r.hvps), (base.seconds, r.seconds), (base.w1, r.w1))
            ratios = [f"{a / b:.2f}" if b else "-" for a, b in pairs]
        lines.append(
            f"| {r.recipe} | {r.method} | {r.hvps} | {r.seconds:.2f} | {r.w1:.2e} | "
            + " | ".join(ratios)
            + " |"
        )
    return "\n".join(lines)


PARTS = ("all", "extremes", "density")


def run(
    problems: dict[str, Problem], samples: int, small: int, parts: str = "all"
) -> tuple[list, list]:
    """Extremes on both blocks (small skipped at 0) and densities on the small one.

    ``parts="extremes"`` skips the densities; ``parts="density"`` computes only the small
    block's dense spectrum and the densities (no extremes rows).
    """
    rows: list[Row] = []
    dens: list[DensityRow] = []
    for recipe, problem in problems.items():
        if parts != "density":
            rows += extremes(recipe, problem, samples, dense=False)[0]
        if small > 0 and parts == "density":
            dens += densities(recipe, problem, small, reference(problem, small, dense=True)[0])
        elif small > 0:
            more, eigs = extremes(recipe, problem, small, dense=True)
            rows += more
            dens += densities(recipe, problem, small, eigs) if parts == "all" else []
    return rows, dens


def main(argv: list[str] | None = None) -> tuple[list[Row], list[DensityRow]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=RECIPES)
    parser.add_argument("--solo-root", type=Path, required=True)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--samples", type=int, default=16, help="the default block's samples")
    parser.add_argument("--small", type=int, default=1, help="dense block's samples (0: none)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--parts", choices=PARTS, default="all", help="extremes, densities (small block) or all"
    )
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows: list[Row] = []
    dens: list[DensityRow] = []
    for method in args.recipes:
        problem = {method: recipe_problem(method, args.solo_root, args.batch_size)}
        more, more_dens = run(problem, args.samples, args.small, args.parts)
        rows, dens = rows + more, dens + more_dens
        progress = table(more) if more else density_table(more_dens)
        print(progress, file=sys.stderr, flush=True)  # progress; the one table is below
    tables = ([table(rows)] if rows else []) + ([density_table(dens)] if dens else [])
    print("\n" + "\n\n".join(tables), flush=True)
    if args.json:
        found = {"extremes": [asdict(r) for r in rows], "densities": [asdict(d) for d in dens]}
        args.json.write_text(json.dumps(found, indent=1))
    return rows, dens


if __name__ == "__main__":
    main()
