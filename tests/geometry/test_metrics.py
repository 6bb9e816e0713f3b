"""The registry of record metrics against independent NumPy references and closed forms.

Every ``stats`` entry of METRICS is computed on a known-answer input (column-orthogonal,
centred features whose covariance eigenvalues follow k^(-alpha) exactly: alpha-ReQ reads alpha
with R^2 = 1) in float32 and float64 and compared with a NumPy float64 reference written here
from the formula; :data:`REFERENCES` must name every entry, so a new metric without its
reference fails. The ``hessian`` entries read every field of a HessianSpectrum, the ``head``
entry is the Frobenius norm of known weights.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from test_quality import np_entropy_rank, np_lidar
from torch import nn

from solo_geometry.folder.records import PARTS
from solo_geometry.geometry.metrics import (
    MEASURED_WITH,
    METRICS,
    assemble,
    metric,
    metrics_table,
    record_stats,
    registered,
    unregistered,
)
from solo_geometry.geometry.spectrum import effective_hessian_spectrum
from solo_geometry.geometry.stats import RANKME_EPS, metric_spectrum

ALPHA = 1.5  # the covariance eigenvalues' decay of the known-answer input
V, N, D, P = 2, 16, 8, 5  # views, samples, widths of Z and H


def _power_law(m: int, d: int, alpha: float, seed: int) -> np.ndarray:
    """(m, d) rows, column means 0, orthogonal columns of norms k^(-alpha / 2)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, d))
    a -= a.mean(axis=0)  # orthogonal to the ones vector, so centring leaves it as it is
    q, _ = np.linalg.qr(a)  # (m, d): orthonormal columns, still centred
    k = np.arange(1, d + 1)
    return q * k ** (-alpha / 2) @ np.linalg.qr(rng.standard_normal((d, d)))[0].T


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _cov_eig(x: np.ndarray) -> np.ndarray:
    u = _unit(x)
    c = u - u.mean(axis=0)
    return np.sort(np.linalg.eigvalsh(c.T @ c / (len(u) - 1)))[::-1]


def _cka(x: np.ndarray, y: np.ndarray) -> float:
    xc, yc = x - x.mean(axis=0), y - y.mean(axis=0)
    num = np.linalg.norm(yc.T @ xc) ** 2
    return float(num / (np.linalg.norm(xc.T @ xc) * np.linalg.norm(yc.T @ yc)))


def _alpha_fit(x: np.ndarray) -> tuple[float, float]:
    lam = np.linalg.svd(x - x.mean(axis=0), compute_uv=False) ** 2 / (len(x) - 1)
    k = np.arange(1, lam.size + 1)
    slope, icpt = np.polyfit(np.log(k), np.log(lam), 1)
    resid = np.log(lam) - (icpt + slope * np.log(k))
    return -slope, 1 - (resid**2).sum() / ((np.log(lam) - np.log(lam).mean()) ** 2).sum()


Ref = Callable[[dict[str, np.ndarray], str], float | None]
# entry name -> reference from {"z", "h", "z_views", "h_views"} (float64) and the space
REFERENCES: dict[str, Ref] = {
    "normalized_std": lambda f, s: _unit(f[s]).std(axis=0, ddof=1).mean(),
    "cond": lambda f, s: _cov_eig(f[s])[0] / _cov_eig(f[s])[-1],
    "cond_paper": lambda f, s: _cov_eig(f[s])[0] / max(_cov_eig(f[s])[-1], 1e-7),
    "rank": lambda f, s: float(np.linalg.matrix_rank(_unit(f[s]) - _unit(f[s]).mean(axis=0))),
    "rankme_l2": lambda f, s: np_entropy_rank(np.linalg.svd(_unit(f[s]), compute_uv=False)),
    "n_samples": lambda f, s: float(len(f[s])),
    "rankme_eps": lambda f, s: RANKME_EPS,
    "rankme": lambda f, s: np_entropy_rank(np.linalg.svd(f[s], compute_uv=False)),
    "lidar": lambda f, s: np_lidar(f[f"{s}_views"]),
    "alpha_req": lambda f, s: ALPHA if s == "z" else _alpha_fit(f[s])[0],  # Z: the closed form
    "alpha_req_r2": lambda f, s: 1.0 if s == "z" else _alpha_fit(f[s])[1],
    "collapse_level": lambda f, s: float(
        np.clip(1 - np.sqrt(f[s].shape[1]) * _unit(f[s]).std(axis=0, ddof=1).mean(), 0, 1)
    ),
    "dim": lambda f, s: float(f[s].shape[1]),
    "cka": lambda f, _: _cka(f["z"], f["h"]),
    "whitening_score": lambda f, _: (
        (_cov_eig(f["h"])[0] / _cov_eig(f["h"])[P - 1])
        / (_cov_eig(f["z"])[0] / _cov_eig(f["z"])[P - 1])
    ),
    "whitening_rank": lambda f, _: float(P),
    "whitening_cond_z": lambda f, _: _cov_eig(f["z"])[0] / _cov_eig(f["z"])[P - 1],
    "whitening_cond_h": lambda f, _: _cov_eig(f["h"])[0] / _cov_eig(f["h"])[P - 1],
    "stats_n_samples": lambda f, _: float(len(f["z"])),
}
LAMBDA = np.array([4.0, 1.0, 0.25, 0.0])  # a metric head's W^T W eigenvalues, one zero
METRIC_REFERENCES = {
    "metric_min": 0.0,
    "metric_max": 4.0,
    "metric_cond": 16.0,
    "metric_rank": 3.0,
    "metric_effective_rank": np_entropy_rank(np.sqrt(LAMBDA)),
}


def _features(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    z = torch.from_numpy(_power_law(V * N, D, ALPHA, 0)).to(dtype)  # (V N, D)
    h = torch.from_numpy(np.tanh(z.double().numpy() @ np.ones((D, P)) * 0.3)).to(dtype)
    h = h + torch.from_numpy(_power_law(V * N, P, 0.5, 1)).to(dtype)  # (V N, P)
    return z, h


class TestRegistry:
    def test_names_keys_and_fields(self) -> None:
        keys = [k for m in METRICS.values() for k in m.keys()]
        assert len(keys) == len(set(keys)), "two entries stand for one key"
        for m in METRICS.values():
            assert m.measured_with in MEASURED_WITH and m.label and m.unit and m.range
            assert m.reference and m.per_part == bool(m.parts) or m.applies is not None
            assert all(registered(k) is m for k in m.keys())
        assert metric("rankme").key_for("h") == "h/rankme"
        assert registered("h/effective_rank") is None and unregistered(["x/y", "cka/z_h"]) == [
            "x/y"
        ]

    def test_measured_with_is_the_record_parts_and_the_head(self) -> None:
        # one list of record parts (folder.records.PARTS): each but density (SLQ nodes, no
        # metric) takes metrics; "head" (the head's own, every record) is no record part
        used = {m.measured_with for m in METRICS.values()}
        assert used == set(MEASURED_WITH)
        assert set(MEASURED_WITH) - {"head"} == set(PARTS) - {"density"}
        assert "head" not in PARTS

    def test_bad_names_are_refused(self) -> None:
        with pytest.raises(ValueError, match="metric 'nope' unknown; choose from"):
            metric("nope")
        with pytest.raises(ValueError, match="part 'q' unknown; choose from"):
            metric("rankme").key_for("q")
        with pytest.raises(ValueError, match="measured_with 'x' unknown; choose from"):
            assemble("x", None)

    def test_table_has_one_row_per_entry(self) -> None:
        rows = metrics_table().splitlines()[2:]
        assert len(rows) == len(METRICS) and all(r.startswith("| `") for r in rows)


class TestStatsKnownAnswer:
    def test_every_stats_entry_has_a_reference(self) -> None:
        stats = {m.name for m in METRICS.values() if m.measured_with == "stats"}
        assert stats == set(REFERENCES) | set(METRIC_REFERENCES)

    @pytest.mark.parametrize(("dtype", "rel"), [(torch.float64, 1e-9), (torch.float32, 1e-5)])
    def test_against_numpy(self, dtype: torch.dtype, rel: float) -> None:
        z, h = _features(dtype)
        views = (z.unflatten(0, (V, N)), h.unflatten(0, (V, N)))
        got = record_stats(z, h, views=views)
        f = {"z": z.double().numpy(), "h": h.double().numpy()}
        f |= {"z_views": views[0].double().numpy(), "h_views": views[1].double().numpy()}
        assert not unregistered(got)
        for name, ref in REFERENCES.items():
            entry = metric(name)
            for space in entry.parts or ("",):
                want = ref(f, space)
                key = entry.key_for(space)
                assert got[key] == pytest.approx(want, rel=rel, abs=1e-12), key
        assert not any(k.startswith("metric/") for k in got)

    def test_metric_head_entries(self) -> None:
        z, h = _features(torch.float64)
        spec = metric_spectrum(torch.from_numpy(LAMBDA))
        got = record_stats(z, h, metric=spec)
        for name, want in METRIC_REFERENCES.items():
            assert got[metric(name).key] == pytest.approx(want, rel=1e-12, abs=1e-15), name

    def test_one_view_has_no_lidar(self) -> None:
        z, h = _features(torch.float64)
        assert record_stats(z, h)["z/lidar"] is None
        assert record_stats(z.unflatten(0, (V, N)), h.unflatten(0, (V, N)))["z/lidar"] is not None


class TestOtherParts:
    def test_hessian_entries_are_the_spectrum_fields(self) -> None:
        torch.manual_seed(0)
        head = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
        Z = torch.randn(2, 5, 3, dtype=torch.float64)

        def loss(H: torch.Tensor) -> torch.Tensor:
            return (H[0] - H[1]).pow(2).sum() + H.pow(4).mean()

        for ops in (("heff", "gn", "m"), ("heff",)):
            spec = effective_hessian_spectrum(head, loss, Z, max_steps=40, operators=ops)
            got = assemble("hessian", spec, spec.operators)
            assert got == spec.as_record() and ("interaction_ratio" in got) == ("m" in ops)

    def test_head_weight_norm_and_rho(self) -> None:
        head = nn.Sequential(nn.Linear(2, 2, bias=False), nn.Linear(2, 1))
        with torch.no_grad():
            head[0].weight.copy_(torch.tensor([[3.0, 0.0], [0.0, 4.0]]))
            head[1].weight.copy_(torch.tensor([[0.0, 0.0]]))
        assert assemble("head", head) == {"head/weight_norm": pytest.approx(5.0, rel=1e-15)}
        assert assemble("augment", {"hue": 0.5}, ["hue"]) == {"rho/hue": 0.5}


RUN_FOLDER = Path(__file__).resolve().parents[2] / "docs" / "run-folder.md"
START, END = "<!-- metrics-table:start -->", "<!-- metrics-table:end -->"


def test_docs_table() -> None:
    """docs/run-folder.md's table is the registry's (regenerate with ``metrics_table()``)."""
    text = RUN_FOLDER.read_text()
    assert START in text and END in text, f"docs/run-folder.md lacks the {START} ... {END} block"
    block = text.split(START, 1)[1].split(END, 1)[0].strip()
    assert block == metrics_table(), "regenerate: print(geometry.metrics.metrics_table())"
