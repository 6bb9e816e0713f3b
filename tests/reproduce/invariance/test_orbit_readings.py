"""The orbit table's two head inputs: the unit-z artefact, measured on a head of known history.

The paper's orbit code feeds its head the unit z, though the head (Linear - BN - ReLU - Linear -
BN, the paper's ``ProjectionHead``) was trained on raw features. Here the head's BatchNorm running
statistics come from training features of norm r. Fed raw z (norm r, as in training) every layer
is scale-equivariant up to BatchNorm's eps, so H and its orbit table do not depend on r; fed unit
z, the running mean (of size r) swamps the input's variation, and the orbits in H shrink as r
grows: the compression measures r, not the head.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from solo_geometry.geometry.orbits import orbit_representations
from solo_geometry.models.checkpoint import LoadedModel
from solo_geometry.reproduce.invariance.evidence import OrbitSummary, orbit_evidence
from solo_geometry.reproduce.invariance.measure import READINGS, feature_norm

D, P = 32, 64


class Scaled(nn.Module):
    """A stand-in backbone: the 'image' is already a unit feature vector; it returns r times it."""

    def __init__(self, r: float) -> None:
        super().__init__()
        self.r = r

    def forward(self, x: Tensor) -> Tensor:
        return self.r * x.flatten(1)


def paper_head() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(D, P, bias=False),
        nn.BatchNorm1d(P),
        nn.ReLU(),
        nn.Linear(P, P, bias=False),
        nn.BatchNorm1d(P),
    ).double()


def unit_rows(x: Tensor) -> Tensor:
    return x / x.norm(dim=1, keepdim=True)


def data() -> tuple[Tensor, Tensor, np.ndarray, np.ndarray]:
    """Non-negative unit features (like post-ReLU pooling): training set and 15 orbits x 12."""
    g = torch.Generator().manual_seed(0)
    common = torch.rand(D, generator=g, dtype=torch.float64)
    train = unit_rows(common + 0.5 * torch.rand(2000, D, generator=g, dtype=torch.float64))
    bases = common + 0.5 * torch.rand(15, D, generator=g, dtype=torch.float64)
    noise = 0.05 * torch.rand(15, 12, D, generator=g, dtype=torch.float64)
    orbits = unit_rows((bases[:, None, :] + noise).reshape(180, D))
    ids = np.repeat(np.arange(15), 12)
    return train, orbits, ids, ids // 3


def head_trained_at(r: float, train: Tensor) -> nn.Sequential:
    """The paper's head with BatchNorm running statistics of features of norm r."""
    head = paper_head()
    for bn in (head[1], head[4]):
        assert isinstance(bn, nn.BatchNorm1d)
        bn.momentum = None  # a cumulative average: the statistics of the whole set
    head.train()
    with torch.no_grad():
        for chunk in (r * train).split(256):
            head(chunk)
    return head.eval()


def compressions(r: float) -> dict[str, float]:
    train, orbits, ids, labels = data()
    head = head_trained_at(r, train)
    out = {}
    for name, protocol in READINGS.items():
        Z, H = orbit_representations(Scaled(r), head, orbits, protocol=protocol)
        summary = OrbitSummary.from_arrays(Z.numpy(), H.numpy(), ids, labels)
        out[name] = orbit_evidence(summary, resamples=0).compression
        out[f"{name}/cos"] = summary.h_cosine_to_mean
    return out


class TestUnitZArtefact:
    def test_unit_z_compression_grows_with_the_training_feature_norm(self) -> None:
        by_r = {r: compressions(r) for r in (1.0, 4.0, 16.0)}
        unit = [by_r[r]["unit_z"] for r in (1.0, 4.0, 16.0)]
        raw = [by_r[r]["raw_z"] for r in (1.0, 4.0, 16.0)]
        # r = 1: unit z is the training input, both readings agree
        assert unit[0] == pytest.approx(raw[0], rel=1e-6)
        assert unit[0] < unit[1] < unit[2]
        assert unit[2] > 10 * unit[0]
        # raw z: the same table whatever r (BatchNorm's eps aside)
        assert raw == pytest.approx([raw[0]] * 3, rel=1e-3)
        # the symptom in the released arrays: H's rows nearly parallel under unit z
        assert by_r[16.0]["unit_z/cos"] > by_r[16.0]["raw_z/cos"]
        assert by_r[16.0]["unit_z/cos"] > 0.99

    def test_feature_norm_is_the_mean_raw_norm(self) -> None:
        train, _, _, _ = data()
        model = LoadedModel(Scaled(3.0), paper_head(), Path("x"), Path("x"), None, [])  # type: ignore[arg-type]
        assert feature_norm(model, train.float()) == pytest.approx(3.0, rel=1e-6)
