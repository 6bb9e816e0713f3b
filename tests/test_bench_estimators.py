"""``benchmarks/bench_estimators.py``'s core on a tiny state and on spectra of known answer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmarks.bench_estimators import compare, dense_extremes, paper_min_eigenvalue
from solo_geometry.models.heads import SmoothMLPHead
from solo_geometry.runtime.view import GeometryView


def _diagonal(values: list[float], zeros: int = 0) -> tuple[torch.Tensor, int]:
    diag = torch.tensor(values + [0.0] * zeros, dtype=torch.float32)
    return diag, diag.numel()


def _tiny_view(seed: int = 0) -> GeometryView:
    """SimSiam's loss on a Swish head (no BN) and a fixed predictor, 2 views of 6 samples."""
    torch.manual_seed(seed)
    head = SmoothMLPHead(8, 16, 8, activation="swish", norm="none", bias=False)
    predictor = nn.Sequential(nn.Linear(8, 8), nn.SiLU(), nn.Linear(8, 8)).double()

    def loss(H: Tensor) -> Tensor:
        pred = predictor.to(H.dtype)
        p0, p1 = pred(H[0]), pred(H[1])
        cos = F.cosine_similarity
        return -(cos(p0, H[1].detach()).mean() + cos(p1, H[0].detach()).mean()) / 2

    Z = torch.randn(2, 6, 8)
    return GeometryView(
        features=Z,
        head=head,
        loss_of_features=lambda z: loss(torch.stack([head(v) for v in z])),
        loss_of_outputs=loss,
    )


class TestPaperEstimator:
    def test_finds_a_well_separated_negative_eigenvalue(self) -> None:
        diag, dim = _diagonal([-1.0, 2.0, 0.5], zeros=5)
        low, high, _ = paper_min_eigenvalue(
            lambda v: diag * v, dim, torch.Generator().manual_seed(0)
        )
        assert abs(high - 2.0) < 1e-3 and abs(low + 1.0) < 1e-3

    def test_a_dominant_negative_eigenvalue_is_read_as_positive(self) -> None:
        """|lambda_min| > lambda_max: the first iteration finds lambda_min, the shift flips."""
        diag, dim = _diagonal([-3.0, 1.0, 0.5], zeros=5)
        low, high, _ = paper_min_eigenvalue(
            lambda v: diag * v, dim, torch.Generator().manual_seed(0)
        )
        assert abs(high + 3.0) < 1e-3 and low > 0.9

    def test_a_spectrum_under_the_guard_reads_exactly_zero(self) -> None:
        diag, dim = _diagonal([-1e-10, 2e-10], zeros=6)
        low, _, v = paper_min_eigenvalue(lambda v: diag * v, dim, torch.Generator().manual_seed(0))
        assert low == 0.0 and float(v.abs().max()) < 1e-30  # the vector underflowed


class TestCompare:
    def test_dense_lanczos_agree_and_the_estimator_bounds_from_above(self) -> None:
        c = compare(_tiny_view(), max_samples=3)
        scale = max(abs(c.dense_min), abs(c.dense_max))
        assert c.lanczos_min is not None and c.lanczos_max is not None
        assert abs(c.lanczos_min - c.dense_min) <= 1e-3 * scale  # the default tolerance
        assert abs(c.lanczos_max - c.dense_max) <= 1e-3 * scale
        # a Rayleigh quotient: never below lambda_min, up to float32 round-off
        assert c.paper_min >= c.dense_min - 1e-5 * scale
        assert c.roundoff < 1e-5 and c.signs_agree == ((c.paper_min < 0) == (c.dense_min < 0))
        # the sub-block interlaces the full operator: its lambda_min is not below the full one
        assert c.lanczos_full_min is not None and c.lanczos_full_min <= c.dense_min + 1e-3 * scale

    def test_dense_extremes_of_a_known_matrix(self) -> None:
        q, _ = torch.linalg.qr(torch.randn(20, 20, dtype=torch.float64))
        a = q @ torch.diag(torch.linspace(-2, 5, 20, dtype=torch.float64)) @ q.T
        low, high = dense_extremes(lambda v: a @ v, 20, chunk=7)
        assert abs(low + 2) < 1e-12 and abs(high - 5) < 1e-12
