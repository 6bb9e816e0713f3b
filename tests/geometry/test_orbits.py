from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import pytest
import torch
from scipy.spatial.distance import pdist
from torch import Tensor, nn
from torchvision.transforms import functional as TF

from solo_geometry.config.choices import ORBIT_PROTOCOLS
from solo_geometry.geometry.curvature import (
    PAPER_SWEEP_DEGREES,
    sweep_curvature,
    sweep_representations,
)
from solo_geometry.geometry.orbits import (
    PAPER_ORBIT_DEGREES,
    PROTOCOLS,
    OrbitComparison,
    make_orbits,
    orbit_comparison,
    orbit_images,
    orbit_metrics,
    orbit_representations,
    paper_orbit_selection,
)


def paper_metrics(X: np.ndarray, ids: np.ndarray, labels: np.ndarray) -> dict:
    """The paper's plot_results.py ``_calculate_geometric_metrics``, line for line."""
    intra_distances = []
    for oid in np.unique(ids):
        orbit_points = X[ids == oid]
        if len(orbit_points) > 1:
            intra_distances.append(np.mean(pdist(orbit_points, metric="euclidean")))
    d_intra_mean, d_intra_std = np.mean(intra_distances), np.std(intra_distances)
    class_centroids = np.array([np.mean(X[labels == c], axis=0) for c in np.unique(labels)])
    inter_dists = pdist(class_centroids, metric="euclidean")
    d_inter_mean, d_inter_std = np.mean(inter_dists), np.std(inter_dists)
    variances = []
    for oid in np.unique(ids):
        orbit_points = X[ids == oid]
        centroid = np.mean(orbit_points, axis=0)
        variances.append(np.mean(np.sum((orbit_points - centroid) ** 2, axis=1)))
    ratio = d_inter_mean / (d_intra_mean + 1e-10)
    ratio_std = ratio * np.sqrt(
        (d_inter_std / (d_inter_mean + 1e-10)) ** 2 + (d_intra_std / (d_intra_mean + 1e-10)) ** 2
    )
    return {
        "d_intra": (d_intra_mean, d_intra_std),
        "d_inter": (d_inter_mean, d_inter_std),
        "spread": (np.mean(variances), np.std(variances)),
        "separation": (ratio, ratio_std),
    }


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def orbit_data(
    seed: int = 0, d: int = 6, widths: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unit rows of 12 orbits of 5 rows, 3 classes, rows shuffled; orbit o has width widths[o]."""
    gen = np.random.default_rng(seed)
    n_orbits, k = 12, 5
    widths = np.full(n_orbits, 0.3) if widths is None else widths
    centres = gen.normal(size=(n_orbits, d))
    x = np.repeat(centres, k, axis=0) + np.repeat(widths, k)[:, None] * gen.normal(
        size=(n_orbits * k, d)
    )
    orbit_ids = np.repeat(np.arange(n_orbits), k)
    labels = np.repeat(np.arange(n_orbits) % 3, k)
    perm = np.random.default_rng(99).permutation(n_orbits * k)  # rows need not be grouped
    return unit(x[perm]), orbit_ids[perm], labels[perm]


def t(*arrays: np.ndarray) -> list[Tensor]:
    return [torch.from_numpy(a) for a in arrays]


def assert_pairs(got: tuple[float, float], ref: tuple, rel: float = 1e-12) -> None:
    assert got == pytest.approx(tuple(float(v) for v in ref), rel=rel)


class TestOrbitMetrics:
    @pytest.mark.parametrize("seed", [0, 1])
    def test_matches_the_papers_function(self, seed: int) -> None:
        x, o, y = orbit_data(seed)
        got = orbit_metrics(*t(x, o, y))
        ref = paper_metrics(x, o, y)
        for key in ("spread", "d_intra", "d_inter", "separation"):
            assert_pairs(getattr(got, key), ref[key])
        assert (got.n_orbits, got.n_classes) == (12, 3)

    def test_ratio_of_means_not_mean_of_ratios(self) -> None:
        widths = np.array([0.01, 0.02, 0.5, 0.6] * 3)  # tight and loose orbits in every class
        x, o, y = orbit_data(2, widths=widths)
        got = orbit_metrics(*t(x, o, y))
        ref = paper_metrics(x, o, y)
        assert_pairs(got.separation, ref["separation"])
        intra = np.array([pdist(x[o == i]).mean() for i in range(12)])
        per_orbit = ref["d_inter"][0] / intra
        assert_pairs(got.separation_per_orbit, (per_orbit.mean(), per_orbit.std()))
        assert got.separation_per_orbit[0] > 5 * got.separation[0]

    def test_single_row_orbits_and_single_class(self) -> None:
        x, o, y = orbit_data()
        o = o.copy()
        o[np.flatnonzero(o == 3)[:4]] = 12  # orbit 3 keeps one row, orbit 12 gets four
        o[np.flatnonzero(o == 12)[:1]] = 13  # ... and orbit 13 one row
        got = orbit_metrics(*t(x, o, y))
        ref = paper_metrics(x, o, y)
        for key in ("spread", "d_intra", "separation"):
            assert_pairs(getattr(got, key), ref[key])
        one_class = orbit_metrics(*t(x, o), torch.zeros(len(o)))
        assert math.isnan(one_class.d_inter[0]) and math.isnan(one_class.separation[0])

    def test_normalises_rows(self) -> None:
        x, o, y = orbit_data()
        scaled = x * np.linspace(0.5, 3.0, len(x))[:, None]
        got, ref = (asdict(orbit_metrics(*t(a, o, y))) for a in (scaled, x))
        assert all(got[k] == pytest.approx(ref[k], rel=1e-12) for k in ref)

    def test_rejects_bad_shapes(self) -> None:
        with pytest.raises(ValueError, match="orbit_ids"):
            orbit_metrics(torch.zeros(4, 2), torch.zeros(3), torch.zeros(4))
        with pytest.raises(ValueError, match="X must"):
            orbit_metrics(torch.zeros(4), torch.zeros(4), torch.zeros(4))


class TestOrbitComparison:
    def test_compression_is_a_ratio_of_means(self) -> None:
        x, o, y = orbit_data(0)
        widths = np.array([0.002, 0.3, 0.3, 0.3] * 3)  # H squeezes a few orbits hard
        h, _, _ = orbit_data(1, d=4, widths=widths)
        got = orbit_comparison(*t(x, h, o, y))
        assert isinstance(got, OrbitComparison)
        rz, rh = paper_metrics(x, o, y), paper_metrics(h, o, y)
        assert got.compression == pytest.approx(
            rz["spread"][0] / (rh["spread"][0] + 1e-10), rel=1e-12
        )
        spread = [
            [np.mean(np.sum((a[o == i] - a[o == i].mean(0)) ** 2, 1)) for i in range(12)]
            for a in (x, h)
        ]
        ratio = np.array(spread[0]) / np.array(spread[1])
        assert_pairs(got.compression_per_orbit, (ratio.mean(), ratio.std()))
        assert got.compression_per_orbit[0] > 10 * got.compression
        assert_pairs(got.h.separation, rh["separation"])

    def test_tables(self) -> None:
        x, o, y = orbit_data()
        got = orbit_comparison(*t(x, x, o, y))
        table = got.paper_table()
        assert set(table) == {"z", "h", "compression"}
        assert set(table["z"]) == {"spread", "d_intra", "d_inter", "separation"}
        assert table["compression"] == pytest.approx(1.0)
        assert set(got.as_dict()) == {"z", "h", "compression", "compression_per_orbit"}

    def test_rejects_mismatched_rows(self) -> None:
        x, o, y = orbit_data()
        with pytest.raises(ValueError, match="match H"):
            orbit_comparison(*t(x, x[:-1], o, y))


def cifar_like(n_per_class: int = 6, size: int = 8) -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(0)
    labels = torch.arange(10).repeat(n_per_class)
    return torch.rand(len(labels), 3, size, size, generator=gen, dtype=torch.float64), labels


class TestProtocols:
    def test_the_config_offers_the_protocols_the_geometry_knows(self) -> None:
        # geometry may not import config (tests/import_rules.py): the two lists held equal here
        assert ORBIT_PROTOCOLS == PROTOCOLS

    def test_paper_selection(self) -> None:
        _, labels = cifar_like()
        picked = paper_orbit_selection(labels, seed=0)
        assert labels[picked].tolist() == [0] * 3 + [2] * 3 + [4] * 3 + [6] * 3 + [9] * 3
        assert len(set(picked.tolist())) == 15
        assert torch.equal(picked, paper_orbit_selection(labels, seed=0))
        assert not torch.equal(picked, paper_orbit_selection(labels, seed=1))
        hundred = paper_orbit_selection(torch.arange(100), per_class=1)
        assert hundred.tolist() == [0, 24, 49, 74, 99]  # np.linspace(0, 99, 5, dtype=int)

    def test_paper_orbits(self) -> None:
        images, labels = cifar_like()
        orbits = orbit_images(images, labels, protocol="paper", seed=3)
        assert orbits.images.shape == (15 * 12, 3, 8, 8)
        assert orbits.orbit_ids.tolist() == [i for i in range(15) for _ in range(12)]
        assert orbits.params[:13].tolist() == [*range(0, 360, 30), 0]
        first = images[orbits.source[0]]
        for j, angle in enumerate(PAPER_ORBIT_DEGREES):
            torch.testing.assert_close(orbits.images[j], TF.rotate(first[None], angle)[0])
        assert torch.equal(orbits.labels, labels[orbits.source].repeat_interleave(12))

    def test_default_orbits(self) -> None:
        images, labels = cifar_like(1)
        orbits = orbit_images(images, labels, family="brightness", k=5, t_max=0.4)
        x, ids, tt = make_orbits(images, "brightness", 5, 0.4)
        assert torch.equal(orbits.images, x) and torch.equal(orbits.orbit_ids, ids)
        assert torch.equal(orbits.labels, labels.repeat_interleave(5))
        torch.testing.assert_close(orbits.images[5], images[1] * (1 + tt[0]))
        torch.testing.assert_close(orbits.images[2], images[0])  # t = 0 sits in the middle

    def test_rejects_unknown_protocol_and_family(self) -> None:
        images, labels = cifar_like(1)
        with pytest.raises(ValueError, match="unknown orbit protocol 'ours'"):
            orbit_images(images, labels, protocol="ours")
        with pytest.raises(ValueError, match="rotates"):
            orbit_images(images, labels, protocol="paper", family="hue")


def toy_nets() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    backbone = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()
    ).double()
    head = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3)).double()
    backbone(torch.rand(6, 3, 8, 8, dtype=torch.float64))  # running statistics away from init
    head(torch.randn(6, 4, dtype=torch.float64) * 3)
    return backbone.train(), head.train()


class TestRepresentations:
    @pytest.mark.parametrize("protocol", ["paper", "default"])
    def test_head_input_per_protocol(self, protocol: str) -> None:
        backbone, head = toy_nets()
        state = [{k: v.clone() for k, v in m.state_dict().items()} for m in (backbone, head)]
        images, _ = cifar_like(1)
        mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
        z, h = orbit_representations(
            backbone, head, images, protocol=protocol, normalise=(mean, std), batch_size=4
        )
        m, s = torch.tensor(mean).view(1, 3, 1, 1), torch.tensor(std).view(1, 3, 1, 1)
        with torch.no_grad():
            raw = backbone.eval()((images - m) / s)
            ref_z = raw / raw.norm(dim=1, keepdim=True)
            ref_h = head.eval()(ref_z if protocol == "paper" else raw)
        torch.testing.assert_close(z, ref_z)
        torch.testing.assert_close(h, ref_h / ref_h.norm(dim=1, keepdim=True))
        backbone.train(), head.train()
        for module, saved in zip((backbone, head), state, strict=True):
            assert all(torch.equal(v, saved[k]) for k, v in module.state_dict().items())

    def test_modes_restored(self) -> None:
        backbone, head = toy_nets()
        head.eval()
        orbit_representations(backbone, head, cifar_like(1)[0], protocol="paper")
        assert backbone.training and not head.training
        assert all(m.training for m in backbone.modules())


def paper_curvature(trajectory: np.ndarray) -> float:
    """experiments.py ``estimate_curvature``, line for line."""
    curvs = []
    for i in range(1, len(trajectory) - 1):
        second_deriv = trajectory[i + 1] - 2 * trajectory[i] + trajectory[i - 1]
        curvs.append(np.linalg.norm(second_deriv))
    return np.mean(curvs) if curvs else 0.0


class TestCurvature:
    def test_matches_the_papers_function(self) -> None:
        gen = np.random.default_rng(0)
        sweeps = [unit(np.cumsum(gen.normal(size=(10, 7)), axis=0)) for _ in range(4)]
        got = sweep_curvature(torch.from_numpy(np.stack(sweeps)))
        np.testing.assert_allclose(got.numpy(), [paper_curvature(s) for s in sweeps], rtol=1e-12)

    def test_great_circle_closed_form(self) -> None:
        step = math.radians(5.0)
        angles = torch.arange(10, dtype=torch.float64) * step
        circle = torch.stack([angles.cos(), angles.sin(), 0 * angles], dim=1)  # (10, 3)
        got = sweep_curvature(3.0 * circle)  # rows normalised first
        assert float(got) == pytest.approx(2 * (1 - math.cos(step)), rel=1e-12)
        line = torch.outer(torch.ones(10, dtype=torch.float64), torch.ones(4))
        assert float(sweep_curvature(line)) == 0.0

    def test_sweep_uses_raw_z_and_ratio(self) -> None:
        from solo_geometry.geometry.curvature import curvature_comparison

        backbone, head = toy_nets()
        images, _ = cifar_like(1)
        images = images[:3]
        rz, rh = sweep_representations(backbone, head, images)
        assert rz.shape == (3, 10, 4) and rh.shape == (3, 10, 3)
        with torch.no_grad():
            x = torch.stack([TF.rotate(images, a) for a in PAPER_SWEEP_DEGREES], dim=1)
            raw = backbone.eval()(x.reshape(30, 3, 8, 8))
            ref_h = head.eval()(raw)
        torch.testing.assert_close(rh.reshape(30, 3), ref_h / ref_h.norm(dim=1, keepdim=True))
        got = curvature_comparison(rz, rh)
        kz = [paper_curvature(s) for s in rz.numpy()]
        kh = [paper_curvature(s) for s in rh.numpy()]
        assert got.kappa_z == pytest.approx((np.mean(kz), np.std(kz)), rel=1e-10)
        assert got.ratio == pytest.approx(np.mean(kh) / (np.mean(kz) + 1e-8), rel=1e-10)

    def test_rejects_short_sweeps(self) -> None:
        with pytest.raises(ValueError, match="A >= 3"):
            sweep_curvature(torch.zeros(2, 2, 4))
