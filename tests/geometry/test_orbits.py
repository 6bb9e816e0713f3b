from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.spatial.distance import pdist

from solo_geometry.geometry.orbits import (
    OrbitMetrics,
    make_orbits,
    orbit_compression,
    orbit_curvature,
    orbit_metrics,
)


def numpy_reference(x: np.ndarray, orbit_ids: np.ndarray, labels: np.ndarray) -> dict:
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    spread, intra = [], []
    for o in np.unique(orbit_ids):
        rows = x[orbit_ids == o]
        spread.append(np.mean(np.sum((rows - rows.mean(0)) ** 2, axis=1)))
        intra.append(pdist(rows).mean())
    cents = np.stack([x[labels == c].mean(0) for c in np.unique(labels)])
    inter = pdist(cents)
    sep = inter.mean() / np.array(intra)
    return {
        "spread_mean": np.mean(spread),
        "spread_std": np.std(spread),
        "d_intra_mean": np.mean(intra),
        "d_intra_std": np.std(intra),
        "d_inter_mean": inter.mean(),
        "d_inter_std": inter.std(),
        "separation_mean": sep.mean(),
        "separation_std": sep.std(),
        "spread": np.array(spread),
    }


def orbit_data(seed: int = 0, d: int = 6) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    gen = np.random.default_rng(seed)
    n_orbits, k = 12, 5
    centres = gen.normal(size=(n_orbits, d))
    x = np.repeat(centres, k, axis=0) + 0.3 * gen.normal(size=(n_orbits * k, d))
    orbit_ids = np.repeat(np.arange(n_orbits), k)
    labels = np.repeat(np.arange(n_orbits) % 3, k)
    perm = gen.permutation(n_orbits * k)  # rows need not be grouped
    return x[perm], orbit_ids[perm], labels[perm]


class TestOrbitMetrics:
    def test_matches_numpy_scipy(self) -> None:
        x, o, y = orbit_data()
        got = orbit_metrics(torch.from_numpy(x), torch.from_numpy(o), torch.from_numpy(y))
        ref = numpy_reference(x, o, y)
        assert isinstance(got, OrbitMetrics)
        for key, value in got.as_dict().items():
            assert value == pytest.approx(ref[key], rel=1e-12), key

    def test_single_class_has_nan_inter(self) -> None:
        x, o, _ = orbit_data()
        got = orbit_metrics(torch.from_numpy(x), torch.from_numpy(o), torch.zeros(len(o)))
        assert math.isnan(got.d_inter_mean) and math.isnan(got.separation_mean)

    def test_rejects_bad_shapes(self) -> None:
        with pytest.raises(ValueError, match="orbit_ids"):
            orbit_metrics(torch.zeros(4, 2), torch.zeros(3), torch.zeros(4))


class TestOrbitCompression:
    def test_matches_numpy(self) -> None:
        x, o, y = orbit_data()
        h, _, _ = orbit_data(seed=1, d=4)
        got = orbit_compression(
            torch.from_numpy(x), torch.from_numpy(h), torch.from_numpy(o), torch.from_numpy(y)
        )
        ratio = numpy_reference(x, o, y)["spread"] / numpy_reference(h, o, y)["spread"]
        assert got["compression_mean"] == pytest.approx(ratio.mean(), rel=1e-12)
        assert got["compression_std"] == pytest.approx(ratio.std(), rel=1e-12)
        assert set(got["z"]) == set(got["h"]) == set(OrbitMetrics.__dataclass_fields__)


class TestOrbitCurvature:
    def test_circle_and_line(self) -> None:
        angles = torch.linspace(0, 1.0, 50, dtype=torch.float64)
        radius = 2.5
        circle = torch.stack([radius * angles.cos(), radius * angles.sin(), 0 * angles], 1)
        kappa = orbit_curvature(circle)
        assert kappa.shape == (48,)
        torch.testing.assert_close(kappa, torch.full_like(kappa, 1 / radius), rtol=2e-4, atol=0)
        line = torch.outer(torch.linspace(0, 1, 10, dtype=torch.float64), torch.ones(4))
        assert float(orbit_curvature(line).abs().max()) < 1e-6


class TestMakeOrbits:
    def test_layout(self) -> None:
        x = torch.rand(3, 3, 8, 8, dtype=torch.float64)
        images, ids, t = make_orbits(x, "brightness", 5, 0.4)
        assert images.shape == (15, 3, 8, 8)
        assert ids.tolist() == [0] * 5 + [1] * 5 + [2] * 5
        torch.testing.assert_close(images[2], x[0])  # t = 0 sits in the middle
        torch.testing.assert_close(images[5], x[1] * (1 + t[0]))
