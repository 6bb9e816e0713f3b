from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from solo_geometry.geometry.stats import RANKME_EPS, representation_stats, stats_record


def numpy_stats(x: np.ndarray, eps: float = RANKME_EPS) -> dict:
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
        "effective_rank": np.exp(-(p * np.log(p)).sum()),
    }


class TestRepresentationStats:
    @pytest.mark.parametrize(("n", "d", "true_rank"), [(64, 8, 8), (20, 32, 19), (50, 10, 3)])
    def test_matches_numpy(self, n: int, d: int, true_rank: int) -> None:
        gen = np.random.default_rng(0)
        x = gen.normal(size=(n, true_rank)) @ gen.normal(size=(true_rank, d)) + 2.0
        got = representation_stats(torch.from_numpy(x))
        ref = numpy_stats(x)
        assert got["rank"] == ref["rank"]
        assert got["eps"] == RANKME_EPS
        for key in ("normalized_std", "cond", "effective_rank"):
            assert got[key] == pytest.approx(ref[key], rel=1e-9), key
        np.testing.assert_allclose(
            got["cov_eigenvalues"], ref["cov_eigenvalues"], rtol=1e-9, atol=1e-15
        )
        assert len(got["cov_eigenvalues"]) == d

    def test_collapse(self) -> None:
        x = torch.ones(10, 4) + 1e-20 * torch.randn(10, 4)
        s = representation_stats(x)
        assert s["normalized_std"] == pytest.approx(0.0, abs=1e-12)
        assert s["effective_rank"] == pytest.approx(1.0, abs=1e-5)

    def test_rejects_bad_shape(self) -> None:
        with pytest.raises(ValueError, match="N, d"):
            representation_stats(torch.zeros(1, 3))


class TestStatsRecord:
    def test_keys_and_view_average(self) -> None:
        x = torch.randn(2, 30, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        record = stats_record("z", x)
        assert set(record) == {"z/normalized_std", "z/cond", "z/rank", "z/effective_rank"}
        per_view = [representation_stats(v)["effective_rank"] for v in x]
        assert record["z/effective_rank"] == pytest.approx(sum(per_view) / 2)
        assert all(isinstance(v, float) and math.isfinite(v) for v in record.values())
        assert stats_record("h", x[0])["h/rank"] == 6.0
