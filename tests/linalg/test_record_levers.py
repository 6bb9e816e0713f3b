"""benchmarks/record_levers.py: the union of side-by-side Krylov spaces, certified without products.

The block lever's step count (``union_steps``) reads A U off the runs' recurrences instead of
taking products; against dense float64 matrices: one run alone stops where the monitor's own
test stops, a union's certified extremes are within the tolerance of the dense spectrum, and a
union never needs more steps than its first run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import Tensor

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import record_levers  # noqa: E402

from solo_geometry.linalg.lanczos import _check, _run, _Runs  # noqa: E402

DIM, TOL = 300, 1e-3


def _matrix(seed: int) -> Tensor:
    """Symmetric (DIM, DIM) with a spread indefinite spectrum, float64."""
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(DIM, DIM, generator=g, dtype=torch.float64))
    eigs = torch.cat(
        [
            torch.linspace(-1.0, 2.0, DIM - 2, dtype=torch.float64),
            torch.tensor([-1.3, 2.4], dtype=torch.float64),
        ]
    )
    return (q * eigs) @ q.T


def _runs(A: Tensor, starts: Tensor, steps: int) -> _Runs:
    return _run(lambda v: (A @ v.T).T, starts, steps, 0.0, 0.0, 1, torch.float64)


def _first_check(runs: _Runs, k_max: int) -> int:
    for k in range(2, k_max + 1):
        c = _check(runs.alpha[0], runs.beta[0], k, TOL, 0.0)
        if c.converged_min and c.converged_max:
            return k
    raise AssertionError("the run never certified")


class TestUnionSteps:
    @pytest.mark.parametrize("seed", [0, 1])
    def test_one_run_stops_where_the_monitor_stops(self, seed: int) -> None:
        A = _matrix(seed)
        g = torch.Generator().manual_seed(seed + 10)
        runs = _runs(A, torch.randn(1, DIM, generator=g, dtype=torch.float64), 80)
        assert record_levers.union_steps(runs, TOL) == _first_check(runs, 79)

    @pytest.mark.parametrize("seed", [0, 1])
    def test_union_certifies_the_dense_extremes(self, seed: int) -> None:
        A = _matrix(seed)
        g = torch.Generator().manual_seed(seed + 20)
        runs = _runs(A, torch.randn(3, DIM, generator=g, dtype=torch.float64), 60)
        k = record_levers.union_steps(runs, TOL)
        assert k is not None and k <= _first_check(runs, 59)
        U = torch.cat([runs.basis[b, :k] for b in range(3)]).T  # (DIM, 3k), explicit products
        Q, _ = torch.linalg.qr(U)
        theta = torch.linalg.eigvalsh(Q.T @ A @ Q)
        dense = torch.linalg.eigvalsh(A)
        scale = float(dense.abs().max())
        assert abs(float(theta[0] - dense[0])) <= TOL * scale
        assert abs(float(theta[-1] - dense[-1])) <= TOL * scale

    def test_none_when_too_short(self) -> None:
        A = _matrix(0)
        runs = _runs(
            A,
            torch.randn(2, DIM, generator=torch.Generator().manual_seed(3), dtype=torch.float64),
            4,
        )
        assert record_levers.union_steps(runs, 1e-12) is None

    def test_fixed_vectors_join_the_span(self) -> None:
        A = _matrix(0)
        _, vectors = torch.linalg.eigh(A)
        ends = vectors[:, [0, -1]].T  # (2, DIM): the exact extreme eigenvectors
        g = torch.Generator().manual_seed(4)
        runs = _runs(A, torch.randn(1, DIM, generator=g, dtype=torch.float64), 30)
        alone = record_levers.union_steps(runs, TOL)
        assert alone is None or alone > 2
        assert record_levers.union_steps(runs, TOL, fixed=(ends, ends @ A)) == 2
        # a wrong image of the fixed vectors is caught by the residuals, never certified at once
        assert record_levers.union_steps(runs, TOL, fixed=(ends, 0.5 * ends @ A)) != 2
