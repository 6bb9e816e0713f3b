"""``geometry.probes.protocol``: this package's probes, the paper's (paper_probes.py), or both.

A real tiny run (lightly host, embedded digits) with ``protocol=both`` writes both into its
``probes.json``; the paper's numbers there equal a direct call of
:func:`~solo_geometry.analysis.paper_probes.paper_rotation_probes` on the run's model and probe
splits, and its linear probe on Z equals a hand loop written from the paper's description
(features by ``torch.rot90`` and ``(x - mean) / std`` by hand, Adam 1e-3, 5 epochs of batches
of 256).
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solo_geometry.analysis.evaluation import evaluate
from solo_geometry.analysis.paper_probes import paper_rotation_probes
from solo_geometry.config import OrbitsConfig, ProbesConfig
from solo_geometry.folder.probe_table import ProbeTable
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.inputs.datasets import probe_splits
from solo_geometry.inputs.digits import make_digits
from solo_geometry.models.checkpoint import LoadedModel, load_model
from tests.shared import build_once


def _support() -> ModuleType:
    path = Path(__file__).parent.parent / "hosts" / "lightly_support.py"
    spec = importlib.util.spec_from_file_location("lightly_support", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _train_both(folder: Path, digits: Path) -> None:
    """One tiny SimCLR run with ``geometry.probes.protocol=both``, under ``folder / "runs"``."""
    from solo_geometry.hosts.lightly import launch

    checkpoint = {"enabled": True, "dir": "trained_models", "frequency": 1}
    recipe = _support().write_recipe(folder / "recipes", "simclr", digits, checkpoint=checkpoint)
    overrides = [
        "+geometry=on",
        "geometry.probes.protocol=both",
        "geometry.probes.targets=[rotation]",
        "geometry.probes.probes=[linear]",
        "geometry.probes.orbits.families=[]",
        "geometry.measure.hessian=false",
        "geometry.measure.augment=false",
        "geometry.report=false",
    ]
    launch(recipe, overrides, runs_root=folder / "runs")


@pytest.fixture(scope="module")
def run_both(
    tmp_path_factory: pytest.TempPathFactory, digits: Path
) -> tuple[Path, ProbeTable, LoadedModel]:
    """The run of ``_train_both``, once per session: the data, its probe table and its model.

    Its probes fit on the recipe's train folder and score on its val folder.
    """
    pytest.importorskip("lightly", reason="the lightly host needs lightly")
    folder = build_once(tmp_path_factory, "probe_protocol", lambda f: _train_both(f, digits))
    (run,) = (folder / "runs").iterdir()
    table = RunFolder(run).read_probes()
    assert table is not None
    assert table.settings["data"] == str((digits / "train", digits / "val"))
    return digits, table, load_model(run)


def _hand_linear_on_z(model: LoadedModel, train_x: Tensor, test_x: Tensor) -> float:
    """The paper's linear rotation probe on Z, written out from its description."""

    def rotated(x: Tensor) -> tuple[Tensor, Tensor]:
        rng = random.Random(0)  # RotationDataset(seed=0): one quarter turn per image, in order
        k = [rng.randint(0, 3) for _ in range(len(x))]
        turned = [torch.rot90(img, n, (1, 2)) for img, n in zip(x, k, strict=True)]
        return torch.stack(turned), torch.tensor(k)

    mean, std = (torch.tensor(v, dtype=torch.float32).view(1, 3, 1, 1) for v in model.mean_std)
    model.backbone.eval()
    with torch.no_grad():
        (xtr, ytr), (xte, yte) = rotated(train_x), rotated(test_x)
        ztr = torch.cat([model.backbone((c - mean) / std) for c in xtr.split(256)])
        zte = torch.cat([model.backbone((c - mean) / std) for c in xte.split(256)])
    torch.manual_seed(0)
    probe = nn.Linear(ztr.shape[1], 4)  # the first module the paper's code builds
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(probe.parameters(), lr=1e-3)
    for _ in range(5):
        for idx in torch.randperm(len(ztr), generator=gen).split(256):
            opt.zero_grad()
            F.cross_entropy(probe(ztr[idx]), ytr[idx]).backward()
            opt.step()
    with torch.no_grad():
        return float((probe(zte).argmax(1) == yte).double().mean())


@pytest.mark.shared("probe_protocol")  # its first test goes first, and trains the run
class TestProtocolBoth:
    def test_writes_both_probes(self, run_both: tuple[Path, ProbeTable, LoadedModel]) -> None:
        _, table, _ = run_both
        assert {(r.features, r.probe, r.target) for r in table.rows} == {
            ("z", "linear", "rotation"),
            ("h", "linear", "rotation"),
        }
        assert table.paper is not None and table.paper["protocol"] == "paper"
        assert table.paper["n"] == table.settings["n_test"]
        assert table.settings["probes"]["protocol"] == "both"

    def test_paper_numbers_equal_a_direct_call(
        self, run_both: tuple[Path, ProbeTable, LoadedModel]
    ) -> None:
        data, table, model = run_both
        splits = probe_splits((data / "train", data / "val"), 0)
        direct = paper_rotation_probes(
            model.backbone,
            model.head,
            splits["train"][0],
            splits["test"][0],
            normalise=model.mean_std,
        )
        assert table.paper is not None
        for key in ("linear", "mlp", "n", "settings"):
            assert table.paper[key] == direct[key], key

    def test_linear_on_z_equals_a_hand_loop(
        self, run_both: tuple[Path, ProbeTable, LoadedModel]
    ) -> None:
        data, table, model = run_both
        splits = probe_splits((data / "train", data / "val"), 0)
        hand = _hand_linear_on_z(model, splits["train"][0], splits["test"][0])
        assert table.paper is not None
        # the features agree to rounding; at most one held-out image may flip
        assert abs(table.paper["linear"][0] - hand) <= 1.0 / table.paper["n"] + 1e-12


class TestProtocolChoices:
    def _table(self, tmp_path: Path, protocol: str) -> ProbeTable:
        data = make_digits(tmp_path / "digits", size=16)
        torch.manual_seed(0)
        backbone = nn.Sequential(nn.Conv2d(3, 4, 3, stride=4), nn.Flatten())  # 4 x 4 x 4 = 64
        cfg = ProbesConfig(
            protocol=protocol,
            targets=["rotation"],
            probes=["linear"],
            orbits=OrbitsConfig(families=[]),
        )
        return evaluate(
            backbone,
            nn.Linear(64, 8),
            data / "val",
            RunFolder(tmp_path / "run"),
            cfg,
            progress=False,
        )

    def test_package_is_the_default_and_writes_no_paper_probes(self, tmp_path: Path) -> None:
        assert ProbesConfig().protocol == "package"
        table = self._table(tmp_path, "package")
        assert table.paper is None and len(table.rows) == 2

    def test_paper_alone_writes_no_package_rows(self, tmp_path: Path) -> None:
        table = self._table(tmp_path, "paper")
        assert table.rows == [] and table.paper is not None
        assert len(table.paper["linear"]) == len(table.paper["mlp"]) == 2
        read = RunFolder(tmp_path / "run").read_probes()
        assert read is not None and read.paper == table.paper  # probes.json round trip

    def test_unknown_protocol_names_value_and_choices(self) -> None:
        with pytest.raises(
            ValueError,
            match=r"geometry.probes.protocol: unknown value 'x'; "
            r"choose from \['both', 'package', 'paper'\]",
        ):
            ProbesConfig(protocol="x")
