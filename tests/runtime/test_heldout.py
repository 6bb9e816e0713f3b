"""Tests of solo_geometry.runtime.heldout and the alert's reading of it.

The held-out part is checked against an independent float64 forward of the same images (picked,
decoded and normalised here with PIL and numpy), in every dtype a module is trained in; the
alert against records whose training batch and held-out batch disagree.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from solo_geometry.config import AlertConfig
from solo_geometry.geometry.stats import representation_stats
from solo_geometry.runtime.alert import CollapseAlert
from solo_geometry.runtime.heldout import HeldOutBatch, spread, start_reading, with_heldout
from solo_geometry.runtime.measure import Measurement
from solo_geometry.state import preserved_state

MEAN_STD = ((0.4, 0.5, 0.6), (0.2, 0.25, 0.3))
SIDE = 6


class Net(nn.Module):
    """A backbone (flatten, linear) and a head ending in BatchNorm, as the hosts name them."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.backbone = nn.Sequential(nn.Flatten(), nn.Linear(3 * SIDE * SIDE, 12))
        self.head = nn.Sequential(nn.Linear(12, 5), nn.BatchNorm1d(5))
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen))
            self.head[1].running_mean.copy_(torch.randn(5, generator=gen))
            self.head[1].running_var.copy_(torch.rand(5, generator=gen) + 0.5)

    def geometry_head(self) -> nn.Module:
        return self.head


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 classes of 7 PNG images, random pixels (seeded)."""
    root = tmp_path_factory.mktemp("val")
    rng = np.random.default_rng(0)
    for c in ("a", "b", "c"):
        (root / c).mkdir()
        for i in range(7):
            pixels = rng.integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / c / f"{i:02d}.png")
    return root


def reference(folder: Path, rows: int, net: Net) -> tuple[torch.Tensor, torch.Tensor]:
    """Z and H in float64, the images picked and normalised independently of the module."""
    files = sorted(p for c in sorted(folder.iterdir()) for p in sorted(c.iterdir()))
    picked = [files[round(i * (len(files) - 1) / (rows - 1))] for i in range(rows)]
    # the images are float32, as the package reads them (8-bit pixels / 255, then normalised)
    x = np.stack([np.asarray(Image.open(p).convert("RGB"), np.float32) for p in picked]) / 255
    mean, std = (np.array(v, np.float32).reshape(1, 1, 1, 3) for v in MEAN_STD)
    x = ((x - mean) / std).transpose(0, 3, 1, 2).reshape(rows, -1)
    x = torch.from_numpy(x.astype(np.float64))
    lin, (lin_h, bn) = net.backbone[1], net.head
    Z = x @ lin.weight.double().T + lin.bias.double()
    pre = Z @ lin_h.weight.double().T + lin_h.bias.double()
    var = bn.running_var.double() + bn.eps
    H = (pre - bn.running_mean.double()) / var.sqrt() * bn.weight.double() + bn.bias.double()
    return Z, H


def test_spread_known_answers() -> None:
    assert spread(10, 4) == [0, 3, 6, 9]
    assert spread(3, 256) == [0, 1, 2]  # fewer images than rows: all of them
    assert spread(5, 0) == [] and spread(1, 5) == [0]
    picked = spread(359, 256)
    assert picked[0] == 0 and picked[-1] == 358 and picked == sorted(set(picked))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_measure_against_a_float64_forward(folder: Path, dtype: torch.dtype) -> None:
    net = Net().to(dtype)
    # a bf16-true module is measured through float32 copies of its (bf16) weights
    Z, H = reference(folder, 8, Net().to(dtype).double() if dtype != torch.float64 else net)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    got = HeldOutBatch(8, folder, MEAN_STD).measure(net)
    tol = {torch.float64: 1e-10, torch.float32: 1e-4, torch.bfloat16: 1e-4}[dtype]
    for space, X in (("z", Z), ("h", H)):
        want = representation_stats(X)
        assert got[f"heldout/{space}/n_samples"] == 8
        assert got[f"heldout/{space}/dim"] == X.shape[1]
        for name in ("rankme_l2", "normalized_std"):
            assert math.isclose(got[f"heldout/{space}/{name}"], getattr(want, name), rel_tol=tol), (
                space,
                name,
            )
    # eval mode: BatchNorm read its running statistics and updated none of them
    assert all(torch.equal(v, net.state_dict()[k]) for k, v in before.items())


def test_no_folder_or_rows_is_no_part(folder: Path, tmp_path: Path) -> None:
    assert HeldOutBatch(0, folder, MEAN_STD).folder is None
    assert HeldOutBatch(8, None, MEAN_STD).measure(Net()) == {}
    (tmp_path / "a").mkdir()  # one image: no statistics, so no part
    Image.fromarray(np.zeros((SIDE, SIDE, 3), np.uint8)).save(tmp_path / "a" / "0.png")
    one = with_heldout(
        lambda view: Measurement({}, None, None, ["stats"]),  # type: ignore[arg-type]
        HeldOutBatch(8, tmp_path, MEAN_STD),
        Net(),
    )(None)
    assert one.parts == ["stats"] and not one.failed

    def run(view: object) -> Measurement:
        return Measurement({}, None, None)  # type: ignore[arg-type]

    assert with_heldout(run, None, Net()) is run
    assert with_heldout(run, HeldOutBatch(0, folder, MEAN_STD), Net()) is run


def test_a_failure_is_its_own_part(tmp_path: Path, folder: Path) -> None:
    net = Net()
    measured = with_heldout(
        lambda view: Measurement({"h/dim": 5.0}, None, None, ["stats"]),  # type: ignore[arg-type]
        HeldOutBatch(8, tmp_path / "missing", MEAN_STD),
        net,
    )(None)
    assert measured.parts == ["stats"] and measured.metrics == {"h/dim": 5.0}
    assert "heldout" in measured.failed
    assert measured_again(net, tmp_path / "missing")  # read once: later records skip it
    ok = with_heldout(
        lambda view: Measurement({}, None, None, ["stats"]),  # type: ignore[arg-type]
        HeldOutBatch(8, folder, MEAN_STD),
        net,
    )
    net.train()
    with preserved_state(net):
        out = ok(None)
    assert out.parts == ["stats", "heldout"] and "heldout/h/rankme_l2" in out.metrics
    assert net.training  # the monitor's guard restores the mode the part set


def measured_again(net: Net, missing: Path) -> bool:
    """Whether a second record after a failed read leaves the held-out part out, unfailed."""
    held = HeldOutBatch(8, missing, MEAN_STD)
    run = with_heldout(
        lambda view: Measurement({}, None, None, ["stats"]),  # type: ignore[arg-type]
        held,
        net,
    )
    first, second = run(None), run(None)
    return "heldout" in first.failed and not second.failed and held.folder is None


def _record(batch_rank: float, heldout_rank: float | None, d: int = 64) -> dict[str, float]:
    """Metrics of H and Z (std at its ceiling) with the given RankMe, batch and held-out."""
    std = math.sqrt(256 / (255 * d))
    out = {}
    for prefix, rank in (("", batch_rank), ("heldout/", heldout_rank)):
        if rank is None:
            continue
        for space in ("h", "z"):
            out |= {
                f"{prefix}{space}/normalized_std": std,
                f"{prefix}{space}/rankme_l2": rank,
                f"{prefix}{space}/n_samples": 256.0,
                f"{prefix}{space}/dim": float(d),
            }
    return out


def _states(records: list[dict[str, float]]) -> list[tuple[str, str]]:
    alert = CollapseAlert(AlertConfig())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = [alert.observe(i, r, None) for i, r in enumerate(records)]
    return [(a["state"], a["source"]) for a in out]


def test_the_alert_reads_the_heldout_batch_where_a_record_holds_it() -> None:
    # the training batch's rank falls to a tenth (invariance learnt), the held-out one holds
    invariant = [_record(50, 40), *[_record(5, 38) for _ in range(4)]]
    assert _states(invariant) == [("healthy", "heldout")] * 5
    # the held-out rank falls: dimensional after patience 2, whatever the batch says
    collapsing = [_record(50, 40), *[_record(50, 4) for _ in range(3)]]
    states = [s for s, _ in _states(collapsing)]
    assert states == ["healthy", "healthy", "dimensional", "dimensional"]
    # without held-out statistics (no folder, heldout=0): the training batch, as before
    assert [s for s, _ in _states([_record(50, None), *[_record(5, None)] * 3])] == [
        "healthy",
        "healthy",
        "dimensional",
        "dimensional",
    ]
    assert _states([_record(50, None)])[0][1] == "batch"


@pytest.mark.parametrize("bad", [1, -1, 2.5, True, "256"])
def test_bad_rows_name_the_key(bad: object) -> None:
    with pytest.raises(ValueError, match=r"geometry\.alert\.heldout: .*got"):
        AlertConfig(heldout=bad)  # type: ignore[arg-type]


def test_the_heldout_rank_is_read_against_its_reading_at_the_start() -> None:
    """A healthy run's held-out rank rises above its start and falls back; a collapse falls
    through it. Against the running maximum the first would warn (32 of 160), against the
    start (32 of 40: above heldout_enter 0.6) it does not."""
    alert = CollapseAlert(AlertConfig())
    alert.begin(_record(50, 40))
    assert alert.started
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        healthy = [alert.observe(i, _record(50, r), None) for i, r in enumerate([160, 80, 32, 32])]
        assert [a["state"] for a in healthy] == ["healthy"] * 4
        assert healthy[-1]["reference"] == "start" and healthy[-1]["rank_ratio"] == 0.8
        falls = [alert.observe(4 + i, _record(50, 20), None) for i in range(2)]
    assert [a["state"] for a in falls] == ["healthy", "dimensional"]  # 0.5 < heldout_enter 0.6
    assert falls[-1]["rank_ratio"] == pytest.approx(0.5)
    assert any("reading before training" in str(w.message) for w in caught)
    # a resumed run keeps the start its state holds; a second begin does not replace it
    resumed = CollapseAlert(AlertConfig())
    resumed.load_state_dict(alert.state_dict())
    resumed.begin(_record(50, 400))
    kept = {"h": 40 / 64, "z": 40 / 64}
    assert resumed.state_dict()["start"] == alert.state_dict()["start"] == kept
    # no reading at the start (no folder, or it failed): the running maximum, as before
    peak = CollapseAlert(AlertConfig())
    peak.begin(None)
    assert not peak.started
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = [peak.observe(i, _record(50, r), None)["state"] for i, r in enumerate([160, 32, 32])]
    assert got == ["healthy", "healthy", "dimensional"]


def test_start_reading_restores_modes_and_survives_a_failure(folder: Path, tmp_path: Path) -> None:
    net = Net().train()
    got = start_reading(HeldOutBatch(8, folder, MEAN_STD), net)
    assert got is not None and got["heldout/h/n_samples"] == 8 and net.training
    assert start_reading(None, net) is None
    assert start_reading(HeldOutBatch(0, folder, MEAN_STD), net) is None
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.png").write_bytes(b"not an image")
    with pytest.warns(UserWarning, match="held-out reading before training failed"):
        assert start_reading(HeldOutBatch(8, tmp_path, MEAN_STD), net) is None


@pytest.mark.parametrize(("enter", "leave"), [(0.8, 0.7), (1.5, 1.6), (-0.1, 0.5)])
def test_bad_heldout_thresholds_name_the_key(enter: float, leave: float) -> None:
    with pytest.raises(ValueError, match=r"geometry\.alert\.heldout_(enter|leave)"):
        AlertConfig(heldout_enter=enter, heldout_leave=leave)
