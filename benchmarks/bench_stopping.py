"""How many products each stopping test needs for the extremes' true error to be under tol.

Per recipe (the operator of ``bench_peers.py``: H_eff on the monitor's default sub-block,
float32 products under float64 recurrences, as the monitor runs it), one Lanczos run of
``--steps`` steps without a stop, read at every step k as the monitor's check reads it
(``lanczos._check`` on the first k steps of the tridiagonal). Against a long float64 run
(tol 1e-10), at each k: the true error of both extreme Ritz values over the scale
max|lambda|, and when each test would have stopped:

* ``true``: both true errors under ``tol`` (what a test should certify; needs the reference);
* ``residual``: the monitor's test, both residual bounds under tol * max|theta| (an eigenvalue
  lies within the residual of each Ritz value);
* ``r2/gap``: the residual squared over the gap to the next Ritz value under tol * max|theta|
  (an error estimate that assumes no eigenvalue beyond the extreme Ritz value is missed).

Reported per recipe: each test's stopping step and the true error there (``holds``: under
tol). A test is a candidate default only if it holds in every case.

Usage::

    PYTHONPATH=. python benchmarks/bench_stopping.py --solo-root /work/solo-learn
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from bench_peers import RECIPES, recipe_problem, reference
from peers import F32, Problem

from solo_geometry.geometry import curvature_operators
from solo_geometry.linalg.lanczos import _check, _run, _start_vector

TESTS = ("true", "residual", "r2/gap")


def tridiagonal(problem: Problem, samples: int, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """alpha, beta (float64, CPU) of one unstopped run from the monitor's first start vector."""
    ops = curvature_operators(*problem, dtype=F32, max_samples=samples)
    gen = torch.Generator().manual_seed(0)
    v0 = _start_vector(ops.dim, gen, torch.float64, None).reshape(1, -1)
    runs = _run(
        lambda v: ops.matvec("heff")(v[0]).reshape(1, -1), v0, min(steps, ops.dim), 0.0, 0.0, 1, F32
    )
    return runs.alpha[0, : runs.k], runs.beta[0, : runs.k]


def stops(alpha: torch.Tensor, beta: torch.Tensor, ref: tuple[float, float], tol: float) -> dict:
    """Each test's first stopping step and the true errors (over the scale) there."""
    scale = max(abs(ref[0]), abs(ref[1]))
    found: dict[str, Any] = {}
    for k in range(2, alpha.numel() + 1):
        check = _check(alpha, beta, k, tol, 0.0)
        theta, r = check.theta, check.residuals
        errors = (abs(float(theta[0]) - ref[0]) / scale, abs(float(theta[-1]) - ref[1]) / scale)
        gaps = (float(theta[1] - theta[0]), float(theta[-1] - theta[-2]))
        estimate = max(float(r[0]) ** 2 / gaps[0], float(r[-1]) ** 2 / gaps[1])
        bound = tol * float(theta.abs().max())
        passed = {
            "true": max(errors) <= tol,
            "residual": check.converged_min and check.converged_max,
            "r2/gap": estimate <= bound,
        }
        for test in TESTS:
            if passed[test] and test not in found:
                found[test] = {
                    "steps": k,
                    "err_min": errors[0],
                    "err_max": errors[1],
                    "holds": max(errors) <= tol,
                }
        if len(found) == len(TESTS):
            break
    return found


def table(results: dict[str, dict]) -> str:
    """Markdown: per recipe, each test's steps, its true error and whether it held."""
    head = " | ".join(f"{t}: steps / true error" for t in TESTS)
    lines = [f"| recipe | {head} |", "|---" * (1 + len(TESTS)) + "|"]
    for recipe, found in results.items():
        cells = []
        for test in TESTS:
            f = found.get(test)
            cells.append(
                "not reached"
                if f is None
                else f"{f['steps']} / {max(f['err_min'], f['err_max']):.1e}"
                + ("" if f["holds"] else " (fails)")
            )
        lines.append(f"| {recipe} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=RECIPES)
    parser.add_argument("--solo-root", type=Path, required=True)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--tols", type=float, nargs="+", default=[1e-3])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    results: dict[str, dict] = {}
    for method in args.recipes:
        problem = recipe_problem(method, args.solo_root, args.batch_size)
        ends, _, _ = reference(problem, args.samples, dense=False)
        alpha, beta = tridiagonal(problem, args.samples, args.steps)
        for tol in args.tols:
            key = method if len(args.tols) == 1 else f"{method} (tol {tol:g})"
            results[key] = stops(alpha, beta, (float(ends[0]), float(ends[-1])), tol)
            print(json.dumps({key: results[key]}), flush=True)
    print(table(results))
    return results


if __name__ == "__main__":
    main()
