from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from solo_geometry.linalg.lanczos import LanczosResult, lanczos, slq_density


def householder_matrix(eigenvalues: Tensor, seed: int) -> Tensor:
    """Dense symmetric A = Q diag(eigenvalues) Q^T with Q a product of three reflectors."""
    n = eigenvalues.numel()
    gen = torch.Generator().manual_seed(seed)
    a = torch.diag(eigenvalues.double())
    for _ in range(3):
        u = torch.randn(n, 1, generator=gen, dtype=torch.float64)
        u = u / u.norm()
        a = a - 2 * u @ (u.T @ a)  # Q a with Q = I - 2 u u^T, O(n^2)
        a = a - 2 * (a @ u) @ u.T  # (Q a) Q
    return a


def spectra(n: int) -> dict[str, Tensor]:
    gen = torch.Generator().manual_seed(n)
    return {
        "uniform": torch.linspace(-1.0, 3.0, n, dtype=torch.float64),
        "random": torch.randn(n, generator=gen, dtype=torch.float64).sort().values,
        # ten eigenvalues within 1e-3 at each end: clustered extremes
        "clustered": torch.cat(
            [
                torch.linspace(-1.0, -0.999, 10, dtype=torch.float64),
                torch.linspace(0.0, 1.0, n - 20, dtype=torch.float64),
                torch.linspace(2.999, 3.0, 10, dtype=torch.float64),
            ]
        ),
        # three distinct values, each repeated: Lanczos hits an invariant subspace
        "degenerate": torch.tensor([-2.0, 0.5, 4.0], dtype=torch.float64).repeat_interleave(
            torch.tensor([n // 4, n - n // 4 - n // 4, n // 4])
        ),
    }


class TestLanczos:
    @pytest.mark.parametrize(
        ("n", "kind"),
        [
            *[(n, k) for n in (50, 500) for k in ("uniform", "random", "clustered", "degenerate")],
            pytest.param(2000, "clustered", marks=pytest.mark.slow),
            pytest.param(2000, "degenerate", marks=pytest.mark.slow),
            pytest.param(2000, "random", marks=pytest.mark.slow),
        ],
    )
    def test_extremes_match_eigvalsh(self, n: int, kind: str) -> None:
        a = householder_matrix(spectra(n)[kind], seed=n)
        exact = torch.linalg.eigvalsh(a)
        result = lanczos(lambda v: a @ v, n, 300, generator=torch.Generator().manual_seed(0))
        scale = float(exact.abs().max())
        assert abs(float(result.ritz_values[0] - exact[0])) <= 1e-8 * scale
        assert abs(float(result.ritz_values[-1] - exact[-1])) <= 1e-8 * scale
        assert torch.all(result.ritz_values[1:] >= result.ritz_values[:-1])

    def test_early_stop_on_invariant_subspace(self) -> None:
        a = householder_matrix(spectra(200)["degenerate"], seed=1)
        result = lanczos(lambda v: a @ v, 200, 50, generator=torch.Generator().manual_seed(0))
        assert result.steps == 3
        torch.testing.assert_close(
            result.ritz_values, torch.tensor([-2.0, 0.5, 4.0], dtype=torch.float64)
        )

    def test_full_run_gives_whole_spectrum_and_vectors(self) -> None:
        lam = torch.linspace(-3.0, 5.0, 40, dtype=torch.float64)
        a = householder_matrix(lam, seed=2)
        result = lanczos(
            lambda v: a @ v,
            40,
            100,
            generator=torch.Generator().manual_seed(0),
            return_vectors=True,
        )
        assert isinstance(result, LanczosResult) and result.steps == 40
        torch.testing.assert_close(result.ritz_values, lam, atol=1e-10, rtol=0)
        vecs = result.ritz_vectors
        assert vecs is not None and vecs.shape == (40, 40)
        torch.testing.assert_close(a @ vecs, vecs * result.ritz_values, atol=1e-10, rtol=0)

    def test_float32_and_frozen(self) -> None:
        a = householder_matrix(torch.linspace(-1.0, 2.0, 100), seed=3).float()
        result = lanczos(
            lambda v: a @ v,
            100,
            100,
            generator=torch.Generator().manual_seed(0),
            dtype=torch.float32,
        )
        assert result.ritz_values.dtype == torch.float64
        assert abs(float(result.ritz_values[-1]) - 2.0) < 1e-5
        with pytest.raises(AttributeError):
            result.steps = 3  # type: ignore[misc]

    def test_deterministic_and_global_rng_untouched(self) -> None:
        a = householder_matrix(torch.linspace(0.0, 1.0, 60), seed=4)
        state = torch.get_rng_state()
        r1 = lanczos(lambda v: a @ v, 60, 10, generator=torch.Generator().manual_seed(5))
        r2 = lanczos(lambda v: a @ v, 60, 10, generator=torch.Generator().manual_seed(5))
        assert torch.equal(r1.ritz_values, r2.ritz_values)
        assert torch.equal(torch.get_rng_state(), state)

    def test_rejects_bad_arguments(self) -> None:
        with pytest.raises(ValueError, match="steps"):
            lanczos(lambda v: v, 10, 0, generator=None)
        with pytest.raises(ValueError, match="v0"):
            lanczos(lambda v: v, 10, 3, generator=None, v0=torch.ones(4))


class TestSlqDensity:
    def test_moments_match_trace(self) -> None:
        n = 300
        lam = torch.cat([torch.linspace(-1.0, 0.0, 100), torch.linspace(2.0, 3.0, 200)]).double()
        a = householder_matrix(lam, seed=5)
        dens = slq_density(
            lambda v: a @ v, n, steps=40, probes=30, generator=torch.Generator().manual_seed(0)
        )
        assert dens.nodes.shape == dens.weights.shape == (40 * 30,)
        assert math.isclose(float(dens.weights.sum()), 1.0, rel_tol=1e-12)
        mean = float((dens.weights * dens.nodes).sum())
        assert abs(mean - float(lam.mean())) < 0.1  # Hutchinson-type estimate of tr(A)/n
        assert float(dens.nodes.min()) == pytest.approx(-1.0, abs=1e-3)
        mass_negative = float(dens.weights[dens.nodes < 1.0].sum())
        assert abs(mass_negative - 1 / 3) < 0.1

    def test_smoothed_integrates_to_one(self) -> None:
        a = householder_matrix(torch.linspace(-1.0, 1.0, 50), seed=6)
        dens = slq_density(lambda v: a @ v, 50, steps=20, probes=3, generator=None)
        grid = torch.linspace(-3.0, 3.0, 2001, dtype=torch.float64)
        values = dens.smoothed(grid, sigma=0.1)
        assert values.shape == (2001,)
        assert float(torch.trapezoid(values, grid)) == pytest.approx(1.0, abs=1e-6)
