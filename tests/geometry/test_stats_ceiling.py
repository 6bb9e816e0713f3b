"""The ceiling of the normalised std, against the rows that reach it and random rows below it."""

from __future__ import annotations

import pytest
import torch

from solo_geometry.geometry.stats import normalized_std, std_ceiling


class TestStdCeiling:
    @pytest.mark.parametrize(("rows", "dim"), [(2, 1), (4, 2), (6, 3), (8, 4)])
    def test_reached_by_signed_basis_vectors(self, rows: int, dim: int) -> None:
        # +-e_j pairs: unit rows with zero mean attain the bound (M = 2 d)
        eye = torch.eye(dim, dtype=torch.float64)
        h = torch.cat([eye, -eye])[:rows]
        assert normalized_std(h) == pytest.approx(std_ceiling(rows, dim), rel=1e-12)

    def test_random_rows_stay_below(self) -> None:
        gen = torch.Generator().manual_seed(0)
        for rows, dim in [(64, 512), (16, 3), (1024, 2048)]:
            assert normalized_std(torch.randn(rows, dim, generator=gen)) <= std_ceiling(rows, dim)
        assert std_ceiling(64, 512) == pytest.approx(0.04454, abs=1e-5)  # the figure

    def test_needs_two_rows(self) -> None:
        with pytest.raises(ValueError, match="rows=1"):
            std_ceiling(1, 4)
