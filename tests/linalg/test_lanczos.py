from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from solo_geometry.linalg.lanczos import CHECK_EVERY, LanczosResult, lanczos, lanczos_side_by_side
from solo_geometry.linalg.slq import FractionEstimate, SpectralDensity, slq_density


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
    f64 = torch.float64
    return {
        "uniform": torch.linspace(-1.0, 3.0, n, dtype=f64),
        "random": torch.randn(n, generator=gen, dtype=f64).sort().values,
        # ten eigenvalues within 1e-3 at each end: clustered extremes
        "clustered": torch.cat(
            [
                torch.linspace(-1.0, -0.999, 10, dtype=f64),
                torch.linspace(0.0, 1.0, n - 20, dtype=f64),
                torch.linspace(2.999, 3.0, 10, dtype=f64),
            ]
        ),
        # magnitudes from 1e-6 to 1 on both sides: a spread of 1e6
        "spread": torch.cat(
            [
                -torch.logspace(-6, 0, n // 4, dtype=f64),
                torch.logspace(-6, 0, n - n // 4, dtype=f64),
            ]
        )
        .sort()
        .values,
        # three distinct values, each repeated: Lanczos hits an invariant subspace
        "degenerate": torch.tensor([-2.0, 0.5, 4.0], dtype=f64).repeat_interleave(
            torch.tensor([n // 4, n - n // 4 - n // 4, n // 4])
        ),
    }


def isolated_minimum(n: int = 400) -> Tensor:
    """One eigenvalue at -1 below a bulk on [0, 300]: its relative gap is 0.3 %."""
    return torch.cat([torch.tensor([-1.0]), torch.linspace(0.0, 300.0, n - 1)]).double()


def run(a: Tensor, **options: object) -> LanczosResult:
    kwargs: dict = dict(max_steps=a.shape[0], tol=1e-6, generator=torch.Generator().manual_seed(0))
    kwargs.update(options)
    return lanczos(lambda v: a @ v, a.shape[0], **kwargs)


class TestLanczos:
    @pytest.mark.parametrize(
        ("n", "kind"),
        [
            *[
                (n, k)
                for n in (50, 400)
                for k in ("uniform", "random", "clustered", "spread", "degenerate")
            ],
            pytest.param(2000, "clustered", marks=pytest.mark.slow),
            pytest.param(2000, "spread", marks=pytest.mark.slow),
            pytest.param(2000, "random", marks=pytest.mark.slow),
        ],
    )
    def test_converged_extremes_within_tol_of_the_scale(self, n: int, kind: str) -> None:
        a = householder_matrix(spectra(n)[kind], seed=n)
        exact = torch.linalg.eigvalsh(a)
        result = run(a, tol=1e-6)
        scale = float(exact.abs().max())
        assert result.converged_min and result.converged_max
        assert abs(float(result.ritz_values[0] - exact[0])) <= 1e-6 * scale
        assert abs(float(result.ritz_values[-1] - exact[-1])) <= 1e-6 * scale
        assert torch.all(result.ritz_values[1:] >= result.ritz_values[:-1])

    @pytest.mark.parametrize("kind", ["uniform", "clustered", "spread"])
    def test_residual_bounds_hold_for_every_ritz_value(self, kind: str) -> None:
        a = householder_matrix(spectra(300)[kind], seed=5)
        exact = torch.linalg.eigvalsh(a)
        result = run(a, max_steps=40, tol=0.0)
        distance = (result.ritz_values[:, None] - exact[None, :]).abs().min(dim=1).values
        assert torch.all(distance <= result.residuals + 1e-12)
        assert result.steps == 40 and not result.invariant

    def test_stops_at_a_check_once_both_extremes_converged(self) -> None:
        a = householder_matrix(spectra(400)["uniform"], seed=6)
        loose = run(a, tol=1e-3)
        tight = run(a, tol=1e-8)
        assert loose.steps % CHECK_EVERY == 0 and tight.steps % CHECK_EVERY == 0
        assert loose.steps < tight.steps < 400
        assert loose.converged and tight.converged
        assert loose.threshold == pytest.approx(1e-3 * 3.0, rel=1e-3)  # tol * max|theta|
        assert float(loose.residuals[0]) <= loose.threshold
        # at the previous check one extreme was still above the threshold
        earlier = run(a, tol=1e-3, max_steps=loose.steps - CHECK_EVERY)
        assert not earlier.converged

    @pytest.mark.parametrize("check_every", [1, 3, 7])
    def test_check_every(self, check_every: int) -> None:
        a = householder_matrix(spectra(200)["random"], seed=7)
        result = run(a, tol=1e-6, check_every=check_every)
        assert result.converged and result.steps % check_every == 0
        every_step = run(a, tol=1e-6, check_every=1)
        assert every_step.steps <= result.steps < every_step.steps + check_every

    def test_too_few_steps_is_flagged_not_converged(self) -> None:
        a = householder_matrix(isolated_minimum(), seed=8)
        result = run(a, max_steps=12, tol=1e-6)
        assert result.steps == 12
        assert not result.converged_min
        assert float(result.ritz_values[0]) > -0.5  # far from the true -1 (here even > 0)
        assert float(result.residuals[0]) > result.threshold
        converged = run(a, tol=1e-6)
        assert converged.converged_min and converged.steps > 12
        assert float(converged.ritz_values[0]) == pytest.approx(-1.0, abs=1e-6 * 300.0)

    def test_early_stop_on_invariant_subspace(self) -> None:
        a = householder_matrix(spectra(200)["degenerate"], seed=1)
        result = run(a, max_steps=50, tol=0.0)
        assert result.steps == 3 and result.invariant and result.converged
        torch.testing.assert_close(
            result.ritz_values, torch.tensor([-2.0, 0.5, 4.0], dtype=torch.float64)
        )
        assert bool(result.converged_values.all())

    def test_atol_makes_a_round_off_operator_converge_at_once(self) -> None:
        noise = 1e-14 * householder_matrix(torch.linspace(-1.0, 1.0, 300), seed=9)
        own = run(noise, max_steps=100, tol=1e-6)
        floored = run(noise, max_steps=100, tol=1e-6, atol=1e-10)
        assert floored.steps == CHECK_EVERY and floored.converged
        assert own.steps > floored.steps  # relative to its own size it is an ordinary operator
        assert floored.threshold == 1e-10
        assert own.threshold == pytest.approx(1e-6 * 1e-14, rel=1e-3)

    def test_vectors_weights_and_whole_spectrum(self) -> None:
        lam = torch.linspace(-3.0, 5.0, 40, dtype=torch.float64)
        a = householder_matrix(lam, seed=2)
        result = run(a, max_steps=100, tol=0.0, return_vectors=True)
        assert isinstance(result, LanczosResult) and result.steps == 40
        torch.testing.assert_close(result.ritz_values, lam, atol=1e-10, rtol=0)
        vecs = result.ritz_vectors
        assert vecs is not None and vecs.shape == (40, 40)
        torch.testing.assert_close(a @ vecs, vecs * result.ritz_values, atol=1e-10, rtol=0)
        assert float(result.weights.sum()) == pytest.approx(1.0, abs=1e-12)

    def test_converged_values_mask(self) -> None:
        a = householder_matrix(spectra(300)["uniform"], seed=10)
        result = run(a, tol=1e-4)
        mask = result.converged_values
        assert bool(mask[0]) and bool(mask[-1])
        torch.testing.assert_close(mask, result.residuals <= result.threshold)
        assert not bool(mask.all())  # the interior has not converged

    def test_float32_and_frozen(self) -> None:
        a = householder_matrix(torch.linspace(-1.0, 2.0, 100), seed=3).float()
        result = run(a, tol=1e-5, dtype=torch.float32)
        assert result.ritz_values.dtype == torch.float64 and result.converged
        assert abs(float(result.ritz_values[-1]) - 2.0) < 1e-5
        assert abs(float(result.ritz_values[0]) + 1.0) < 1e-5
        with pytest.raises(AttributeError):
            result.steps = 3  # type: ignore[misc]

    def test_float32_products_under_float64_recurrences(self) -> None:
        # an isolated minimum 0.3 % below a bulk: float32 products, float64 basis and
        # recurrences; the extremes are right to float32 round-off of the operator's scale
        lam = isolated_minimum()
        a64 = householder_matrix(lam, seed=4)
        a32 = a64.float()
        seen: list[torch.dtype] = []

        def product(v: Tensor) -> Tensor:
            seen.append(v.dtype)
            return a32 @ v

        result = lanczos(
            product,
            a64.shape[0],
            max_steps=400,
            tol=1e-6,
            generator=torch.Generator().manual_seed(0),
            dtype=torch.float64,
            matvec_dtype=torch.float32,
            return_vectors=True,
        )
        assert set(seen) == {torch.float32}  # every product taken in float32
        assert result.ritz_vectors is not None and result.ritz_vectors.dtype == torch.float64
        assert result.converged
        scale = float(lam.abs().max())
        assert abs(float(result.ritz_values[0]) - float(lam.min())) < 1e-5 * scale
        assert abs(float(result.ritz_values[-1]) - float(lam.max())) < 1e-5 * scale
        # the float64 basis stays orthogonal to float64 working precision
        q = result.ritz_vectors
        eye = torch.eye(q.shape[1], dtype=torch.float64)
        assert float((q.T @ q - eye).abs().max()) < 1e-10

    @pytest.mark.parametrize("kind", ["isolated", "few"])
    def test_side_by_side_equals_one_run_after_the_other(self, kind: str) -> None:
        """Extremes' run and two probes with one batched product: the sequential numbers."""
        lam = isolated_minimum(120) if kind == "isolated" else torch.tensor([-2.0, 1, 3, 5] * 30)
        a = householder_matrix(lam.double(), seed=4)
        n, seen = a.shape[0], []

        def product(vs: Tensor) -> Tensor:
            seen.append(vs.shape)
            return vs @ a

        options: dict = dict(max_steps=n, tol=1e-6, check_every=1, dtype=torch.float64)
        gen = torch.Generator().manual_seed(5)
        runs = lanczos_side_by_side(product, n, followers=2, generator=gen, **options)
        gen = torch.Generator().manual_seed(5)
        lead = lanczos(lambda v: a @ v, n, generator=gen, **options)
        options.update(max_steps=lead.steps, tol=0.0)
        alone = [lead, *(lanczos(lambda v: a @ v, n, generator=gen, **options) for _ in "ab")]
        assert all(shape == (3, n) for shape in seen) and len(seen) >= lead.steps
        for got, want in zip(runs, alone, strict=True):
            assert (got.steps, got.invariant) == (want.steps, want.invariant)
            assert (got.converged_min, got.converged_max) == (
                want.converged_min,
                want.converged_max,
            )
            scale = float(lam.abs().max())
            assert float((got.ritz_values - want.ritz_values).abs().max()) <= 1e-10 * scale
            assert torch.allclose(got.weights, want.weights, atol=1e-10)
        if kind == "few":  # 4 distinct eigenvalues: every run stops on an invariant subspace
            assert [r.steps for r in runs] == [4, 4, 4] and all(r.invariant for r in runs)
            for r in runs:
                assert torch.allclose(r.ritz_values, torch.tensor([-2.0, 1, 3, 5]).double())
        else:
            assert runs[0].converged and abs(float(runs[0].ritz_values[0]) + 1.0) < 1e-3 * 300
        with pytest.raises(ValueError, match="followers"):
            lanczos_side_by_side(product, n, followers=-1, max_steps=3, tol=0.0, generator=None)

    def test_deterministic_and_global_rng_untouched(self) -> None:
        a = householder_matrix(torch.linspace(0.0, 1.0, 60), seed=4)
        state = torch.get_rng_state()
        r1 = run(a, max_steps=10, generator=torch.Generator().manual_seed(5))
        r2 = run(a, max_steps=10, generator=torch.Generator().manual_seed(5))
        assert torch.equal(r1.ritz_values, r2.ritz_values)
        assert torch.equal(torch.get_rng_state(), state)

    @pytest.mark.parametrize(
        ("options", "match"),
        [
            ({"max_steps": 0}, "max_steps"),
            ({"check_every": 0}, "check_every"),
            ({"tol": -1.0}, "tol"),
            ({"atol": -1.0}, "atol"),
            ({"v0": torch.ones(4)}, "v0"),
        ],
    )
    def test_rejects_bad_arguments(self, options: dict, match: str) -> None:
        kwargs: dict = dict(max_steps=3, tol=1e-6, generator=None)
        kwargs.update(options)
        with pytest.raises(ValueError, match=match):
            lanczos(lambda v: v, 10, **kwargs)


def diagonal_runs(lam: Tensor, probes: int, steps: int) -> tuple[list[LanczosResult], Tensor]:
    """Runs on diag(lam) from Gaussian v0s; returns them and the exact masses mu_v(lam < 0)."""
    gen = torch.Generator().manual_seed(11)
    runs, masses = [], []
    for _ in range(probes):
        v0 = torch.randn(lam.numel(), generator=gen, dtype=torch.float64)
        u = v0 / v0.norm()
        masses.append(float(u[lam < 0].pow(2).sum()))
        runs.append(
            lanczos(lambda v: lam * v, lam.numel(), max_steps=steps, tol=0.0, generator=None, v0=v0)
        )
    return runs, torch.tensor(masses, dtype=torch.float64)


class TestSpectralDensity:
    def test_moments_match_trace(self) -> None:
        n = 300
        lam = torch.cat([torch.linspace(-1.0, 0.0, 100), torch.linspace(2.0, 3.0, 200)]).double()
        a = householder_matrix(lam, seed=5)
        dens = slq_density(
            lambda v: a @ v, n, steps=40, probes=12, generator=torch.Generator().manual_seed(0)
        )
        assert dens.nodes.shape == dens.weights.shape == dens.probe.shape == (40 * 12,)
        assert dens.probes == 12 and dens.exact is not None and not bool(dens.exact.any())
        assert math.isclose(float(dens.weights.sum()), 1.0, rel_tol=1e-12)
        mean = float((dens.weights * dens.nodes).sum())
        assert abs(mean - float(lam.mean())) < 0.1  # Hutchinson-type estimate of tr(A)/n
        assert float(dens.nodes.min()) == pytest.approx(-1.0, abs=1e-3)

    @pytest.mark.parametrize("threshold", [-0.5, 0.0, 0.3, 1.0])
    def test_chebyshev_markov_stieltjes_bracket_per_probe(self, threshold: float) -> None:
        lam = torch.linspace(-1.0, 3.0, 500, dtype=torch.float64) - threshold
        runs, masses = diagonal_runs(lam, probes=6, steps=15)
        for r, mass in zip(runs, masses, strict=True):
            est = SpectralDensity.from_runs([r]).fraction_below(0.0)
            assert abs(est.value - float(mass)) <= est.quadrature + 1e-12
            assert est.quadrature > 0

    @pytest.mark.parametrize("fraction", [0.0, 0.1, 0.25, 0.6])
    def test_known_negative_fraction_within_its_spread(self, fraction: float) -> None:
        n = 1000
        k = round(fraction * n)
        lam = torch.cat([torch.linspace(-2.0, -1e-3, k), torch.linspace(1e-3, 3.0, n - k)]).double()
        a = householder_matrix(lam, seed=12)
        dens = slq_density(
            lambda v: a @ v, n, steps=60, probes=4, generator=torch.Generator().manual_seed(1)
        )
        est = dens.fraction_below(-1e-10)
        assert abs(est.value - fraction) <= est.quadrature + 3 * est.sampling_std(n) + 1e-12
        assert est.probes == 4 and est.per_probe.shape == (4,)

    def test_sampling_std_is_the_beta_standard_deviation(self) -> None:
        n, negative = 100, 30
        gen = torch.Generator().manual_seed(13)
        u = torch.randn(20000, n, generator=gen, dtype=torch.float64)
        masses = u[:, :negative].pow(2).sum(1) / u.pow(2).sum(1)  # mu_u(lambda < 0), diagonal A
        estimate = FractionEstimate(0.3, 0.0, torch.zeros(4))
        assert estimate.sampling_std(n) == pytest.approx(float(masses.std()) / 2, rel=0.03)

    def test_exact_rule_on_an_invariant_subspace(self) -> None:
        lam = torch.tensor([-2.0, 0.5, 4.0], dtype=torch.float64).repeat_interleave(100)
        runs, masses = diagonal_runs(lam, probes=3, steps=20)
        assert all(r.invariant and r.steps == 3 for r in runs)
        est = SpectralDensity.from_runs(runs).fraction_below(0.0)
        assert est.quadrature == 0.0
        assert est.value == pytest.approx(float(masses.mean()), abs=1e-12)

    def test_certified_bounds_decide_without_error(self) -> None:
        lam = torch.linspace(1e-12, 1.0, 200, dtype=torch.float64)  # all above -1e-10
        runs, _ = diagonal_runs(lam, probes=2, steps=5)
        dens = SpectralDensity.from_runs(runs)
        assert dens.fraction_below(-1e-10).quadrature > 0  # the bracket alone cannot tell
        below = dens.fraction_below(-1e-10, lower=0.0)
        assert (below.value, below.quadrature) == (0.0, 0.0)
        above = dens.fraction_below(2.0, upper=1.0 + 1e-9)
        assert (above.value, above.quadrature) == (1.0, 0.0)

    def test_needs_probe_index(self) -> None:
        dens = SpectralDensity(torch.tensor([0.0, 1.0]), torch.tensor([0.5, 0.5]))
        with pytest.raises(ValueError, match="probe"):
            dens.fraction_below(0.5)
        with pytest.raises(ValueError, match="runs"):
            SpectralDensity.from_runs([])

    def test_smoothed_integrates_to_one(self) -> None:
        a = householder_matrix(torch.linspace(-1.0, 1.0, 50), seed=6)
        dens = slq_density(lambda v: a @ v, 50, steps=20, probes=3, generator=None)
        grid = torch.linspace(-3.0, 3.0, 2001, dtype=torch.float64)
        values = dens.smoothed(grid, sigma=0.1)
        assert values.shape == (2001,)
        assert float(torch.trapezoid(values, grid)) == pytest.approx(1.0, abs=1e-6)
        plain = SpectralDensity(dens.nodes, dens.weights)  # as read back from a record
        torch.testing.assert_close(plain.smoothed(grid, sigma=0.1), values)
