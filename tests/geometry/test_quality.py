"""Quality metrics against dense NumPy references, closed forms and reptrix / lightly."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from precision_cases import KNOWN_RANK, LOW_DTYPES, known_rank

from solo_geometry.geometry.quality import (
    LIDAR_DELTA,
    alpha_req,
    collapse_level,
    lidar,
    linear_cka,
    rankme,
)
from solo_geometry.geometry.stats import RANKME_EPS, entropy_rank


def np_entropy_rank(v: np.ndarray, eps: float = RANKME_EPS) -> float:
    p = v / np.abs(v).sum() + eps
    return float(np.exp(-(p * np.log(p)).sum()))


def np_lidar(x: np.ndarray, delta: float = LIDAR_DELTA) -> float:
    """The paper's LiDAR, dense: (V, N, d) views of N classes."""
    v, n, d = x.shape
    mu = x.mean(axis=0)  # (N, d)
    b = mu - mu.mean(axis=0)
    sigma_b = b.T @ b / (n - 1)
    r = (x - mu).reshape(-1, d)
    sigma_w = r.T @ r / (n * (v - 1)) + delta * np.eye(d)
    ew, uw = np.linalg.eigh(sigma_w)
    inv_sqrt = uw @ np.diag(ew**-0.5) @ uw.T
    lam = np.linalg.eigvalsh(inv_sqrt @ sigma_b @ inv_sqrt).clip(min=0)
    return np_entropy_rank(lam)


def np_cka(x: np.ndarray, y: np.ndarray) -> float:
    """Kornblith et al.'s HSIC form with the centring matrix (their eq. for linear kernels)."""
    n = x.shape[0]
    h = np.eye(n) - np.ones((n, n)) / n
    k, l_ = x @ x.T, y @ y.T

    def hsic(a: np.ndarray, b: np.ndarray) -> float:
        return float(np.trace(a @ h @ b @ h))

    return hsic(k, l_) / math.sqrt(hsic(k, k) * hsic(l_, l_))


def spectrum_features(n: int, d: int, alpha: float, seed: int = 0) -> np.ndarray:
    """Rows whose covariance has eigenvalues exactly k^(-alpha) (k = 1..d)."""
    gen = np.random.default_rng(seed)
    g = gen.normal(size=(n, d))
    q, _ = np.linalg.qr(g - g.mean(axis=0))  # (n, d) orthonormal, centred columns
    s = np.sqrt((n - 1) * np.arange(1, d + 1, dtype=float) ** -alpha)
    rot, _ = np.linalg.qr(gen.normal(size=(d, d)))
    return (q * s) @ rot.T


class TestRankMe:
    @pytest.mark.parametrize(("n", "d"), [(50, 8), (10, 30)])
    def test_matches_numpy(self, n: int, d: int) -> None:
        x = np.random.default_rng(1).normal(size=(n, d)) + 3.0  # uncentred: the mean counts
        s = np.linalg.svd(x, compute_uv=False)
        assert rankme(torch.from_numpy(x)) == pytest.approx(np_entropy_rank(s), rel=1e-12)

    def test_closed_form_orthogonal_rows(self) -> None:
        k, d, eps = 5, 12, RANKME_EPS
        x = 3.0 * np.eye(d)[:k]  # k equal singular values, the rest absent (min(M, d) = k)
        p = 1 / k + eps
        assert rankme(torch.from_numpy(x)) == pytest.approx(math.exp(-k * p * math.log(p)))

    def test_views_pooled_and_zero(self) -> None:
        x = torch.randn(2, 6, 4, dtype=torch.float64)
        assert rankme(x) == pytest.approx(rankme(x.reshape(12, 4)))
        assert rankme(torch.zeros(5, 3)) is None
        with pytest.raises(ValueError, match="at least 2 samples"):
            rankme(torch.ones(1, 3))

    def test_reptrix_is_centred_eigenvalue_entropy(self) -> None:
        """reptrix centres and uses sigma^2: our entropy_rank on that spectrum matches it."""
        reptrix_rankme = pytest.importorskip("reptrix.rankme", reason="reptrix not installed")
        x = np.random.default_rng(2).normal(size=(80, 16)) * np.linspace(0.2, 2, 16) + 1.0
        s_c = np.linalg.svd(x - x.mean(axis=0), compute_uv=False)
        ref = reptrix_rankme.get_rankme(torch.from_numpy(x))
        assert entropy_rank(torch.from_numpy(s_c**2)) == pytest.approx(ref, rel=1e-6)
        assert rankme(torch.from_numpy(x)) != pytest.approx(ref, rel=1e-3)  # conventions differ


class TestLidar:
    @pytest.mark.parametrize(("v", "n", "d"), [(2, 20, 8), (3, 6, 16), (4, 40, 5)])
    def test_matches_dense_paper_formula(self, v: int, n: int, d: int) -> None:
        x = np.random.default_rng(v * n).normal(size=(v, n, d)) * np.linspace(0.1, 1, d)
        x += np.random.default_rng(0).normal(size=(1, n, d))  # class structure
        got = lidar(torch.from_numpy(x))
        assert got == pytest.approx(np_lidar(x), rel=1e-9)

    def test_identical_views_is_rankme_of_means_covariance(self) -> None:
        """Sigma_w = delta I: the LDA matrix is Sigma_b / delta, its entropy rank Sigma_b's."""
        mu = np.random.default_rng(3).normal(size=(10, 6))
        x = np.stack([mu, mu])
        b = mu - mu.mean(axis=0)
        lam = np.linalg.eigvalsh(b.T @ b)
        assert lidar(torch.from_numpy(x)) == pytest.approx(np_entropy_rank(lam), rel=1e-9)

    def test_reptrix_matrix_for_two_views(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """reptrix's LDA matrix is the paper's for V = 2 (up to Sigma_b's scale, which cancels).

        reptrix then takes the PCA spectrum of that matrix; replacing that one step by the
        matrix's eigenvalues gives the paper's LiDAR, which ours must equal.
        """
        reptrix_lidar = pytest.importorskip("reptrix.lidar", reason="reptrix not installed")
        x = np.random.default_rng(4).normal(size=(2, 30, 12)) + np.random.default_rng(5).normal(
            size=(1, 30, 12)
        )
        monkeypatch.setattr(
            reptrix_lidar.utils,
            "get_eigenspectrum",
            lambda activations_np, max_eigenvals: np.linalg.eigvalsh(
                (activations_np + activations_np.T) / 2
            )[::-1],
        )
        acts = torch.from_numpy(np.ascontiguousarray(x.transpose(1, 0, 2)))  # (N, V, d)
        ref = reptrix_lidar.get_lidar(acts, 30, 2, del_sigma_augs=LIDAR_DELTA)
        assert lidar(torch.from_numpy(x)) == pytest.approx(ref, rel=1e-6)

    def test_undefined_and_bad_input(self) -> None:
        assert lidar(torch.randn(1, 5, 3)) is None
        with pytest.raises(ValueError, match=r"\(V, N, d\)"):
            lidar(torch.randn(5, 3))
        with pytest.raises(ValueError, match="delta"):
            lidar(torch.randn(2, 5, 3), delta=0.0)


class TestAlphaReq:
    @pytest.mark.parametrize("alpha", [0.5, 1.0, 2.0])
    def test_exact_power_law(self, alpha: float) -> None:
        x = spectrum_features(200, 32, alpha)
        fit = alpha_req(torch.from_numpy(x))
        assert fit.alpha == pytest.approx(alpha, rel=1e-8)
        assert fit.r2 == pytest.approx(1.0, abs=1e-10) and fit.n_fit == 32

    def test_r2_matches_numpy_polyfit(self) -> None:
        x = np.random.default_rng(6).normal(size=(100, 20)) * np.linspace(0.1, 3, 20) ** 2
        lam = np.sort(np.linalg.eigvalsh(np.cov(x, rowvar=False)))[::-1]
        k = np.arange(1, 21)
        slope, icpt = np.polyfit(np.log(k), np.log(lam), 1)
        pred = icpt + slope * np.log(k)
        y = np.log(lam)
        r2 = 1 - ((y - pred) ** 2).sum() / ((y - y.mean()) ** 2).sum()
        fit = alpha_req(torch.from_numpy(x))
        assert fit.alpha == pytest.approx(-slope, rel=1e-9)
        assert fit.r2 == pytest.approx(r2, rel=1e-9)

    def test_reptrix_weighted_fit(self) -> None:
        reptrix_alpha = pytest.importorskip("reptrix.alpha", reason="reptrix not installed")
        x = np.random.default_rng(7).normal(size=(400, 128)) * np.arange(1, 129) ** -0.7
        ref = reptrix_alpha.get_alpha(torch.from_numpy(x), fit_range=np.arange(10, 100))[0]
        got = alpha_req(torch.from_numpy(x), fit=(11, 100), weighted=True)
        assert got.alpha == pytest.approx(ref, rel=1e-6) and got.n_fit == 90

    def test_too_few_ranks_and_bad_fit(self) -> None:
        x = torch.ones(10, 4, dtype=torch.float64)
        x[0, 0] = 2.0  # centred rank 1
        assert alpha_req(x).alpha is None and alpha_req(x).n_fit == 1
        with pytest.raises(ValueError, match="fit"):
            alpha_req(torch.randn(10, 4), fit=(0, 3))


class TestCollapseLevel:
    def test_matches_lightly(self) -> None:
        debug = pytest.importorskip("lightly.utils.debug", reason="lightly not installed")
        z = torch.randn(2, 64, 32, dtype=torch.float64) + 0.3
        std = float(debug.std_of_l2_normalized(z.reshape(128, 32)))
        assert collapse_level(z) == pytest.approx(max(0.0, 1 - math.sqrt(32) * std), rel=1e-12)

    def test_range(self) -> None:
        assert collapse_level(torch.ones(10, 8)) == 1.0  # every row the same: collapsed
        eye = torch.cat([torch.eye(8), -torch.eye(8)])  # the std's ceiling: clipped at 0
        assert collapse_level(eye) == 0.0


class TestLinearCka:
    @pytest.mark.parametrize(("n", "d"), [(40, 10), (12, 30)])  # feature and Gram forms
    def test_matches_hsic_form(self, n: int, d: int) -> None:
        gen = np.random.default_rng(8)
        x = gen.normal(size=(n, d))
        y = np.tanh(x @ gen.normal(size=(d, 6))) + gen.normal(size=(n, 6)) * 0.3
        assert linear_cka(torch.from_numpy(x), torch.from_numpy(y)) == pytest.approx(
            np_cka(x, y), rel=1e-10
        )

    def test_invariances(self) -> None:
        x = torch.randn(30, 7, dtype=torch.float64)
        q, _ = torch.linalg.qr(torch.randn(7, 7, dtype=torch.float64))
        assert linear_cka(x, 3.0 * x @ q + 5.0) == pytest.approx(1.0, rel=1e-12)
        assert linear_cka(x, torch.ones(30, 4)) is None
        with pytest.raises(ValueError, match="same samples"):
            linear_cka(x, x[:10])


def alpha_shift_bound(s: np.ndarray, delta: float) -> float:
    """Largest change of the least-squares slope of log(s_k^2) on log k when each s_k moves by
    up to ``delta`` (Weyl): each log lambda_k by up to 2 log(s_k / (s_k - delta))."""
    x = np.log(np.arange(1, s.size + 1))
    e = 2 * np.log(s / (s - delta))
    return float((np.abs(x - x.mean()) * e).sum() / ((x - x.mean()) ** 2).sum())


class TestAtFeaturesPrecision:
    """alpha-ReQ and RankMe of matrices of known rank cast to float32, bfloat16 and float16."""

    @pytest.mark.parametrize("dtype", LOW_DTYPES)
    @pytest.mark.parametrize(("m", "d", "rank", "centred"), KNOWN_RANK)
    def test_rankme(self, dtype: torch.dtype, m: int, d: int, rank: int, centred: int) -> None:
        x64 = known_rank(m, d, rank)
        s64 = np.linalg.svd(x64.numpy(), compute_uv=False)
        got = rankme(x64.to(dtype))
        if dtype == torch.float32:  # against the float64 copy's RankMe
            assert got == pytest.approx(np_entropy_rank(s64), rel=1e-6)
        # the cast's own top-`rank` singular values: none of its round-off counted
        s = np.linalg.svd(x64.to(dtype).double().numpy(), compute_uv=False)
        assert got == pytest.approx(np_entropy_rank(np.where(np.arange(s.size) < rank, s, 0)))

    @pytest.mark.parametrize("dtype", LOW_DTYPES)
    @pytest.mark.parametrize(("m", "d", "rank", "centred"), KNOWN_RANK)
    def test_alpha_req(self, dtype: torch.dtype, m: int, d: int, rank: int, centred: int) -> None:
        x64 = known_rank(m, d, rank).numpy()
        got = alpha_req(torch.from_numpy(x64).to(dtype))
        assert got.n_fit == centred
        if centred < 2:
            assert got.alpha is None
            return
        s = np.linalg.svd(x64 - x64.mean(axis=0), compute_uv=False)[:centred]
        ref = -np.polyfit(np.log(np.arange(1, centred + 1)), np.log(s**2 / (m - 1)), 1)[0]
        # rounding moves the raw matrix, hence the centred one, by <= u ||X||_F (Weyl)
        delta = torch.finfo(dtype).eps / 2 * float(np.linalg.norm(x64))
        assert abs(got.alpha - ref) <= alpha_shift_bound(s, delta)
        if dtype == torch.float32:
            assert got.alpha == pytest.approx(ref, rel=1e-4)
