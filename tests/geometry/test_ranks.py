"""Spearman's rho against scipy, and its bootstrap interval on data of known answer."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import spearmanr

from solo_geometry.geometry.ranks import bootstrap_spearman, spearman


class TestSpearman:
    @pytest.mark.parametrize("seed", [0, 1, 2])
    def test_equals_scipy_with_and_without_ties(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        x = rng.normal(size=40)
        y = x + rng.normal(size=40)
        assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)
        xt, yt = np.round(x), np.round(y)  # many ties
        assert spearman(xt, yt) == pytest.approx(spearmanr(xt, yt).statistic, abs=1e-12)

    def test_inf_ranks_last(self) -> None:
        x, y = [1.0, 2.0, 3.0, 4.0], [5.0, 9.0, math.inf, math.inf]
        assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)

    def test_undefined_for_a_constant_sample(self) -> None:
        assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
        assert math.isnan(spearman([1], [2]))
        with pytest.raises(ValueError, match="lengths 2 and 3"):
            spearman([1, 2], [1, 2, 3])


class TestBootstrap:
    def test_monotone_data_give_one_and_a_tight_interval(self) -> None:
        r = bootstrap_spearman(np.arange(30.0), np.exp(np.arange(30.0)), seed=0)
        assert (r.rho, r.low, r.high) == pytest.approx((1.0, 1.0, 1.0), abs=1e-12) and r.n == 30

    def test_independent_data_interval_holds_zero(self) -> None:
        rng = np.random.default_rng(5)
        r = bootstrap_spearman(rng.normal(size=60), rng.normal(size=60), seed=1)
        assert r.low < 0 < r.high and r.high - r.low < 0.7

    def test_fixed_seed_repeats_and_interval_covers_the_population_value(self) -> None:
        rng = np.random.default_rng(7)
        x = rng.normal(size=80)
        y = 0.8 * x + 0.6 * rng.normal(size=80)  # population rho_s = (6/pi) asin(0.4) = 0.786
        a, b = bootstrap_spearman(x, y, seed=3), bootstrap_spearman(x, y, seed=3)
        assert a == b
        assert a.low < 6 / math.pi * math.asin(0.4) < a.high and a.low > 0.5

    def test_bad_options(self) -> None:
        with pytest.raises(ValueError, match="resamples"):
            bootstrap_spearman([1, 2, 3], [1, 2, 3], resamples=0)
        with pytest.raises(ValueError, match="level"):
            bootstrap_spearman([1, 2, 3], [1, 2, 3], level=1.0)
