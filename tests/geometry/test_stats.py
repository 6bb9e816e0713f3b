from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from precision_cases import (
    KNOWN_RANK,
    LOW_DTYPES,
    centred_svals,
    known_rank,
    simsiam_bn_head_outputs,
    unit_rows,
    weyl_cond_bounds,
)

from solo_geometry.geometry.precision import rank_tolerance, round_off_eps
from solo_geometry.geometry.quality import alpha_req, rankme
from solo_geometry.geometry.stats import (
    RANKME_EPS,
    MetricSpectrum,
    RepresentationStats,
    metric_spectrum,
    normalized_std,
    representation_stats,
    stats_record,
    whitening_score,
)


def low_rank(n: int, d: int, rank: int, seed: int = 0, shift: float = 2.0) -> np.ndarray:
    gen = np.random.default_rng(seed)
    return gen.normal(size=(n, rank)) @ gen.normal(size=(rank, d)) + shift


def numpy_stats(x: np.ndarray, eps: float = RANKME_EPS) -> dict:
    """Reference: NumPy's cov, eigvalsh and matrix_rank on the L2-normalised rows."""
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    cov = np.cov(xn, rowvar=False)  # centred, divided by N - 1
    eig = np.sort(np.linalg.eigvalsh(cov))[::-1]
    rank = np.linalg.matrix_rank(xn - xn.mean(axis=0))
    s = np.linalg.svd(xn, compute_uv=False)
    p = s / s.sum() + eps
    return {
        "normalized_std": xn.std(axis=0, ddof=1).mean(),
        "cov_eigenvalues": eig,
        "rank": rank,
        "cond": eig[0] / eig[rank - 1],
        "rankme_l2": np.exp(-(p * np.log(p)).sum()),
    }


def paper_cond(z: np.ndarray) -> float:
    """The paper's code (experiments.py, hessian_tracker.py) in NumPy, float64."""
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    zc = z - z.mean(axis=0, keepdims=True)
    eigenvalues = np.linalg.eigvalsh(zc.T @ zc / (z.shape[0] - 1))  # ascending
    return eigenvalues[-1] / max(eigenvalues[0], 1e-7)


class TestRepresentationStats:
    @pytest.mark.parametrize(("n", "d", "true_rank"), [(64, 8, 8), (20, 32, 19), (50, 10, 3)])
    def test_matches_numpy(self, n: int, d: int, true_rank: int) -> None:
        x = low_rank(n, d, true_rank)
        got = representation_stats(torch.from_numpy(x))
        ref = numpy_stats(x)
        assert isinstance(got, RepresentationStats)
        assert got.rank == ref["rank"]
        assert got.eps == RANKME_EPS and got.n_samples == n
        for key in ("normalized_std", "cond", "rankme_l2"):
            assert getattr(got, key) == pytest.approx(ref[key], rel=1e-9), key
        np.testing.assert_allclose(
            got.cov_eigenvalues, ref["cov_eigenvalues"], rtol=1e-9, atol=1e-15
        )
        assert len(got.cov_eigenvalues) == d

    @pytest.mark.parametrize(("n", "d", "true_rank"), [(64, 8, 8), (20, 32, 19), (200, 6, 6)])
    def test_cond_paper_matches_the_papers_code(self, n: int, d: int, true_rank: int) -> None:
        x = low_rank(n, d, true_rank, shift=0.5)
        got = representation_stats(torch.from_numpy(x))
        assert got.cond_paper == pytest.approx(paper_cond(x), rel=1e-8)
        if n <= d:  # rank-deficient: the clamp decides, the default does not
            assert got.cond_paper == pytest.approx(got.cov_eigenvalues[0] / 1e-7, rel=1e-12)
            assert got.cond < 1e6

    def test_views_are_pooled(self) -> None:
        x = torch.from_numpy(low_rank(2 * 15, 8, 8)).reshape(2, 15, 8)
        got = representation_stats(x)
        ref = numpy_stats(x.reshape(30, 8).numpy())
        assert got.n_samples == 30 and got.rank == ref["rank"] == 8
        assert got.rankme_l2 == pytest.approx(ref["rankme_l2"], rel=1e-9)

    def test_collapse(self) -> None:
        x = torch.ones(10, 4) + 1e-20 * torch.randn(10, 4)
        s = representation_stats(x)
        assert s.normalized_std == pytest.approx(0.0, abs=1e-12)
        assert s.rankme_l2 == pytest.approx(1.0, abs=1e-5)

    @pytest.mark.parametrize("shape", [(1, 3), (3,), (1, 1, 3), (2, 2, 2, 2)])
    def test_rejects_bad_shape(self, shape: tuple[int, ...]) -> None:
        with pytest.raises(ValueError, match="X must"):
            representation_stats(torch.zeros(shape))


class TestNormalizedStd:
    @pytest.mark.parametrize("shape", [(32, 16), (2, 16, 16)])
    def test_matches_numpy(self, shape: tuple[int, ...]) -> None:
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        rows = x.reshape(-1, shape[-1]).numpy()
        rows = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        assert normalized_std(x) == pytest.approx(rows.std(axis=0, ddof=1).mean(), rel=1e-12)

    def test_isotropic_and_collapsed(self) -> None:
        x = torch.randn(4000, 16, generator=torch.Generator().manual_seed(0))
        assert normalized_std(x) == pytest.approx(16**-0.5, rel=0.02)
        assert normalized_std(torch.ones(10, 16)) == pytest.approx(0.0, abs=1e-12)


class TestStatsRecord:
    def test_keys_and_pooled_views(self) -> None:
        x = torch.randn(2, 30, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        record = stats_record("z", x)
        assert set(record) == {
            f"z/{k}"
            for k in (
                "normalized_std",
                "cond",
                "cond_paper",
                "rank",
                "rankme_l2",
                "n_samples",
                "rankme_eps",
            )
        }
        ref = numpy_stats(x.reshape(60, 6).numpy())
        assert record["z/rankme_l2"] == pytest.approx(ref["rankme_l2"], rel=1e-9)
        assert record["z/n_samples"] == 60.0 and record["z/rankme_eps"] == RANKME_EPS
        assert all(isinstance(v, float) and math.isfinite(v) for v in record.values())
        assert stats_record("h", x[0])["h/rank"] == 6.0


class TestWhiteningScore:
    def test_matches_numpy_on_shared_rank(self) -> None:
        z, h = low_rank(40, 12, 12, seed=1), low_rank(40, 20, 5, seed=2)
        got = whitening_score(torch.from_numpy(z), torch.from_numpy(h))
        rz, rh = numpy_stats(z), numpy_stats(h)
        k = min(rz["rank"], rh["rank"])
        assert got.rank == k < rz["rank"]
        cz = rz["cov_eigenvalues"][0] / rz["cov_eigenvalues"][k - 1]
        ch = rh["cov_eigenvalues"][0] / rh["cov_eigenvalues"][k - 1]
        assert got.cond_z == pytest.approx(cz, rel=1e-9)
        assert got.cond_h == pytest.approx(ch, rel=1e-9)
        assert got.score == pytest.approx(ch / cz, rel=1e-9)
        assert set(got.as_record()) == {
            "whitening/score",
            "whitening/rank",
            "whitening/cond_z",
            "whitening/cond_h",
        }

    def test_whitening_map_scores_below_one(self) -> None:
        gen = np.random.default_rng(3)
        z = gen.normal(size=(500, 6)) * np.array([10.0, 5, 2, 1, 0.5, 0.2])
        h = np.linalg.svd(z - z.mean(0), full_matrices=False)[0]  # whitened z
        got = whitening_score(torch.from_numpy(z), torch.from_numpy(h))
        assert got.score < 0.5 < whitening_score(torch.from_numpy(z), torch.from_numpy(z)).score


class TestMetricSpectrum:
    @pytest.mark.parametrize(("d", "p"), [(8, 8), (8, 3), (5, 12)])
    def test_matches_numpy(self, d: int, p: int) -> None:
        gen = np.random.default_rng(d + p)
        w = gen.normal(size=(p, d)) * np.linspace(0.1, 3.0, d)
        eig = np.linalg.eigvalsh(w.T @ w)
        got = metric_spectrum(torch.from_numpy(eig))
        s = np.linalg.svd(w, compute_uv=False)  # singular values of W, the reference
        rank = np.linalg.matrix_rank(w.T @ w, hermitian=True)
        assert isinstance(got, MetricSpectrum)
        assert got.rank == rank == min(d, p)
        assert got.max == pytest.approx(s[0] ** 2, rel=1e-10)
        assert got.min == pytest.approx(eig.min(), rel=1e-10, abs=1e-12)
        assert got.cond == pytest.approx(s[0] ** 2 / s[rank - 1] ** 2, rel=1e-8)
        ps = np.concatenate([s, np.zeros(d - len(s))])
        ps = ps / ps.sum() + RANKME_EPS
        assert got.effective_rank == pytest.approx(np.exp(-(ps * np.log(ps)).sum()), rel=1e-6)

    def test_identity_is_perfectly_conditioned(self) -> None:
        got = metric_spectrum(torch.ones(7, dtype=torch.float32))
        assert (got.cond, got.rank) == (1.0, 7)
        assert got.effective_rank == pytest.approx(7.0, rel=1e-5)

    def test_rejects_bad_input(self) -> None:
        with pytest.raises(ValueError, match="eigenvalues"):
            metric_spectrum(torch.ones(2, 2))


class TestRankAtFeaturesPrecision:
    """Rank, condition number and effective rank at the dtype the features were captured in."""

    @pytest.mark.parametrize("dtype", LOW_DTYPES)
    @pytest.mark.parametrize(("m", "d", "rank", "centred"), KNOWN_RANK)
    def test_known_rank_reads_its_rank(
        self, dtype: torch.dtype, m: int, d: int, rank: int, centred: int
    ) -> None:
        x64 = known_rank(m, d, rank)
        ref = numpy_stats(x64.numpy())  # the float64 copy, NumPy's matrix_rank
        assert ref["rank"] == centred
        got = representation_stats(x64.to(dtype))
        assert got.rank == centred
        # Weyl: rounding moves each normalised row by <= 2u = eps, so every singular value of
        # the centred rows by <= eps * ||X_n||_F = eps * sqrt(M)
        s = centred_svals(x64.numpy())
        low, high = weyl_cond_bounds(s, centred, torch.finfo(dtype).eps * math.sqrt(m))
        assert low <= got.cond <= high
        if dtype == torch.float32:
            assert got.cond == pytest.approx(ref["cond"], rel=0.02)
            assert got.rankme_l2 == pytest.approx(ref["rankme_l2"], rel=1e-6)
        # RankMe of the normalised rows: the cast's own top-`rank` singular values, no round-off
        xc = unit_rows(x64.to(dtype).double().numpy())
        sv = np.linalg.svd(xc, compute_uv=False)
        p = np.where(np.arange(sv.size) < rank, sv, 0.0)
        p = p / p.sum() + RANKME_EPS
        assert got.rankme_l2 == pytest.approx(np.exp(-(p * np.log(p)).sum()), rel=1e-10)

    @pytest.mark.parametrize("dtype", [torch.float64, *LOW_DTYPES])
    def test_small_true_singular_values_above_round_off_are_kept(self, dtype: torch.dtype) -> None:
        # centred orthonormal U, singular values 1 down to 4x the tolerance (whatever the dtype)
        m, d, r = 128, 512, 20
        gen = np.random.default_rng(5)
        g = gen.normal(size=(m, r))
        u, _ = np.linalg.qr(g - g.mean(axis=0))
        v, _ = np.linalg.qr(gen.normal(size=(d, r)))
        eps_c, eps_w = round_off_eps(dtype)
        s = np.geomspace(1.0, 1e-3, r)
        for _ in range(30):  # s_r = 4 tol(s), a fixed point (tol depends on ||s||)
            floor = max(max(m, d) * eps_w, eps_c * float(np.linalg.norm(s)))
            s = np.geomspace(1.0, 4 * floor, r)
        x = torch.from_numpy((u * s) @ v.T)
        tol = rank_tolerance(torch.from_numpy(s), (m, d), dtype)
        assert s[-1] == pytest.approx(4 * tol, rel=1e-6)
        # raw rows (no normalisation): alpha-ReQ's rank is the centred matrix's
        assert alpha_req(x.to(dtype)).n_fit == r

    @pytest.mark.parametrize("dtype", LOW_DTYPES)
    def test_explicit_dtype_when_the_caller_has_cast(self, dtype: torch.dtype) -> None:
        x = known_rank(128, 512, 20).to(dtype)
        cast = x.float() if dtype != torch.float32 else x.double()
        assert representation_stats(cast, features_dtype=dtype).rank == 20
        record = stats_record("h", cast, features_dtype=dtype)
        assert record["h/rank"] == 20.0
        assert representation_stats(x.double()).rank == 127  # at float64's eps: round-off counted
        z = known_rank(128, 64, 10, seed=1).to(dtype)
        assert whitening_score(z.double(), cast, features_dtype=dtype).rank == 10

    def test_round_off_eps(self) -> None:
        f32, f64 = torch.finfo(torch.float32).eps, torch.finfo(torch.float64).eps
        assert round_off_eps(torch.float64) == (f64, f64)
        assert round_off_eps(torch.float32) == (f32, f32)
        assert round_off_eps(torch.bfloat16) == (2.0**-7, f32)
        assert round_off_eps(torch.float16) == (2.0**-10, f32)
        assert round_off_eps(torch.int64) == (f64, f64)  # integers are held exactly


class TestSimSiamBatchNormHead:
    """2 x 64 rows of a BN-ended projector: each view centred by BN, so rank <= M - 2 = 126."""

    def test_true_centred_rank_and_cond(self) -> None:
        H, H64 = simsiam_bn_head_outputs()
        x64 = H64.reshape(128, -1).numpy()
        s = centred_svals(x64)
        # the float64 reference: 126 singular values of order 0.1-1, two at round-off; with L2-
        # normalised rows the null space is span{1, s_2 n_1 - s_1 n_2} (n_v the row norms of view
        # v on its block, s_v their sums), one more than the pooled centring's
        assert s[125] > 0.1 and s[126] < 1e-12 * s[0]
        ref = numpy_stats(x64)
        assert ref["rank"] == 126
        got = representation_stats(H)
        assert got.rank == 126 and got.n_samples == 128
        assert got.cond == pytest.approx(ref["cond"], rel=0.02)
        assert got.rankme_l2 == pytest.approx(ref["rankme_l2"], rel=1e-6)
        assert representation_stats(H.double()).rank == 127  # float64's eps counts round-off
        # alpha-ReQ and RankMe of the raw rows against NumPy on the float64 reference
        raw = x64 - x64.mean(axis=0)
        lam = np.linalg.svd(raw, compute_uv=False)[:126] ** 2 / 127
        slope = np.polyfit(np.log(np.arange(1, 127)), np.log(lam), 1)[0]
        fit = alpha_req(H)
        assert fit.n_fit == 126 and fit.alpha == pytest.approx(-slope, rel=1e-4)
        sv = np.linalg.svd(x64, compute_uv=False)
        p = np.where(sv > 1e-10 * sv[0], sv, 0.0)
        p = p / p.sum() + RANKME_EPS
        assert rankme(H) == pytest.approx(np.exp(-(p * np.log(p)).sum()), rel=1e-6)


class TestMetricSpectrumPrecision:
    def test_float32_eigenvalues_cast_to_float64(self) -> None:
        gen = torch.Generator().manual_seed(4)
        w = torch.randn(3, 8, generator=gen)  # rank 3 of 8
        eig32 = torch.linalg.eigvalsh(w.T @ w)  # float32: 5 round-off eigenvalues
        at32 = metric_spectrum(eig32.double(), dtype=torch.float32)
        assert at32.rank == metric_spectrum(eig32).rank == 3
        assert metric_spectrum(eig32.double()).rank > 3  # float64's floor counts round-off
        s = np.linalg.svd(w.double().numpy(), compute_uv=False)
        p = np.concatenate([s, np.zeros(5)]) / s.sum() + RANKME_EPS
        assert at32.effective_rank == pytest.approx(np.exp(-(p * np.log(p)).sum()), rel=1e-5)
