"""The probes' random-init rows (solo_geometry.analysis.evaluation): the same network at random
initialisation, probed beside Z and H under the same protocol, in probes.json and the command."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from solo_geometry.analysis.evaluation import RANDOM_INIT_SETS, evaluate, random_init_modules
from solo_geometry.analysis.probes import linear_probe
from solo_geometry.cli import main as cli_main
from solo_geometry.config import OrbitsConfig, ProbesConfig
from solo_geometry.folder.probe_table import random_init_summary, versus_random_init
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.inputs.datasets import IMAGENET_MEAN_STD, probe_splits
from solo_geometry.inputs.features import load_cache
from solo_geometry.models.backbones import build_backbone
from solo_geometry.models.checkpoint import build_untrained, load_model
from solo_geometry.models.solo_mlp import solo_projector
from tests.shared import CountingNet, image_folder

CLASS_ONLY = ProbesConfig(targets=["class"], probes=["linear"], orbits=OrbitsConfig(families=[]))


def _build() -> tuple[nn.Module, nn.Module]:
    return CountingNet(), nn.Linear(6, 4)


def _collapsed() -> tuple[nn.Module, nn.Module]:
    """A "trained" network whose backbone collapsed: every weight and bias zero."""
    backbone, head = _build()
    with torch.no_grad():
        for p in backbone.parameters():
            p.zero_()
    return backbone, head


def _by_hand(backbone: nn.Module, head: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """Z and H of images in [0, 1] as the probes compute them (normalised, eval mode)."""
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in IMAGENET_MEAN_STD)
    with torch.no_grad():
        z = backbone.eval()((images - mean) / std)
        return torch.cat([z, head.eval()(z)], dim=1)


class TestRandomInitModules:
    def test_a_fresh_seeded_build_and_the_callers_rng_untouched(self) -> None:
        state = torch.get_rng_state()
        backbone, head = random_init_modules(_build, seed=3)
        assert torch.equal(torch.get_rng_state(), state)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(3)
            want_b, want_h = _build()
        for got, want in ((backbone, want_b), (head, want_h)):
            for (k, a), b in zip(got.state_dict().items(), want.state_dict().values(), strict=True):
                assert torch.equal(a, b), k
        other, _ = random_init_modules(_build, seed=4)
        assert not torch.equal(other.net[0].weight, backbone.net[0].weight)
        assert not backbone.training and not head.training


class TestEvaluateRandomInit:
    def test_known_answer_and_below_its_random_init(self, tmp_path: Path) -> None:
        """A collapsed backbone probes at chance, below the seeded fresh build computed here."""
        data, run = image_folder(tmp_path / "data"), RunFolder(tmp_path / "run")
        trained = _collapsed()
        table = evaluate(*trained, data, run, CLASS_ONLY, progress=False, random_init=_build)
        # independently: the seeded build, its features by hand, the same probe and split
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(CLASS_ONLY.seed)
            fresh = _build()
        splits = probe_splits(data, CLASS_ONLY.seed)
        (x_tr, y_tr), (x_te, y_te) = splits["train"], splits["test"]
        f_tr, f_te = _by_hand(*fresh, x_tr), _by_hand(*fresh, x_te)
        sets = load_cache(run.features)["sets"]
        cached = sets[f"{RANDOM_INIT_SETS}/seed0/test/class"]
        torch.testing.assert_close(torch.cat([cached["z"], cached["h"]], 1), f_te)
        assert not torch.allclose(sets["test/class"]["z"], cached["z"])  # trained: all zero
        for space, cols in (("z", slice(0, 6)), ("h", slice(6, 10))):
            want = linear_probe(f_tr[:, cols], y_tr, f_te[:, cols], y_te, seed=0)
            row = table.row(space, "linear", "class")
            assert row is not None and row.random_init == pytest.approx(want.accuracy, abs=1e-12)
            assert row.random_init_details["l2"] == want.details["l2"]
        z = table.row("z", "linear", "class")
        assert z is not None and z.accuracy == pytest.approx(z.chance)  # constant Z: chance
        assert z.random_init is not None and z.random_init > 0.9  # colour gives the class
        assert table.gaps()["trained_minus_random_init"]["z/linear/class"] < -0.5
        assert versus_random_init(z).endswith(": below its random initialisation")
        assert random_init_summary(table).startswith("every probe is below its random init")
        assert run.read_probes() == table and table.settings["random_init"] == {
            "measured": True,
            "seed": 0,
        }

    def test_second_evaluation_reads_the_cached_features(self, tmp_path: Path) -> None:
        data, run = image_folder(tmp_path / "data", n_per_class=4), RunFolder(tmp_path / "run")
        built: list[nn.Module] = []

        def build() -> tuple[nn.Module, nn.Module]:
            backbone, head = _build()
            built.append(backbone)
            return backbone, head

        first = evaluate(*_build(), data, run, CLASS_ONLY, progress=False, random_init=build)
        second = evaluate(*_build(), data, run, CLASS_ONLY, progress=False, random_init=build)
        assert [b.calls for b in built][0] > 0 and built[1].calls == 0  # type: ignore[attr-defined]
        assert [r.random_init for r in first.rows] == [r.random_init for r in second.rows]

    def test_without_a_constructor_not_measured(self, tmp_path: Path) -> None:
        data, run = image_folder(tmp_path / "data", n_per_class=4), RunFolder(tmp_path / "run")
        table = evaluate(*_build(), data, run, CLASS_ONLY, progress=False)
        assert all(r.random_init is None for r in table.rows)
        assert table.gaps()["trained_minus_random_init"] == {}
        assert random_init_summary(table) == "random init not measured"
        assert table.settings["random_init"]["measured"] is False
        assert not any(k.startswith(RANDOM_INIT_SETS) for k in load_cache(run.features)["sets"])


def _untrained_run(root: Path, seed: int) -> Path:
    """A run whose checkpoint is an untrained resnet18 + BYOL projector drawn under ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        backbone, d = build_backbone("resnet18", cifar=True)
        projector = solo_projector("byol", d, 16, 8)
    state = {f"backbone.{k}": v for k, v in backbone.state_dict().items()}
    state |= {f"projector.{k}": v for k, v in projector.state_dict().items()}
    (root / "checkpoints").mkdir(parents=True)
    torch.save({"state_dict": state}, root / "checkpoints" / "last.ckpt")
    cfg = {
        "method": "byol",
        "backbone": {"name": "resnet18"},
        "data": {"dataset": "cifar10"},
        "method_kwargs": {"proj_hidden_dim": 16, "proj_output_dim": 8},
    }
    (root / "config.yaml").write_text(yaml.safe_dump(cfg))
    return root


class TestProbeCommandRandomInit:
    ARGS = ("--no-orbits", "--quiet", "--targets", "class", "--seed", "0")

    def test_a_checkpoint_that_is_its_seeded_build_equals_its_random_init(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The checkpoint holds the seed-0 draw of its own constructors: trained == random init."""
        run, data = _untrained_run(tmp_path / "run", 0), image_folder(tmp_path / "data", 4)
        assert cli_main(["probe", str(run), "--data", str(data), *self.ARGS]) == 0
        out = capsys.readouterr().out
        table = RunFolder(run).read_probes()
        assert table is not None and table.schema == 2 and len(table.rows) == 4
        for row in table.rows:
            assert row.random_init == row.accuracy, row
            assert f"random init {row.accuracy:.3f}, trained - random init +0.000" in out
        sets = load_cache(run / "features.pt", any_tag=True)["sets"]
        for key in ("z", "h"):
            assert torch.equal(sets["test/class"][key], sets["random_init/seed0/test/class"][key])

    def test_a_checkpoint_of_other_weights_against_the_seeded_build(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        run, data = _untrained_run(tmp_path / "run", 7), image_folder(tmp_path / "data", 4)
        assert cli_main(["probe", str(run), "--data", str(data), *self.ARGS]) == 0
        sets = load_cache(run / "features.pt", any_tag=True)["sets"]
        fresh = sets["random_init/seed0/test/class"]
        assert not torch.allclose(sets["test/class"]["z"], fresh["z"])  # weights of seed 7
        with torch.random.fork_rng(devices=[]):  # independently: seed 0, the same constructors
            torch.manual_seed(0)
            backbone, d = build_backbone("resnet18", cifar=True)
            head = solo_projector("byol", d, 16, 8)
        test_x = probe_splits(data, 0)["test"][0]
        mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in load_model(run).mean_std)
        with torch.no_grad():
            z = backbone.eval()((test_x - mean) / std)
            torch.testing.assert_close(fresh["z"], z)
            torch.testing.assert_close(fresh["h"], head.eval()(z))
        assert "random init" in capsys.readouterr().out


class TestBuildUntrained:
    def test_the_recipes_initialisers_applied(self) -> None:
        """A pseudo-collapse recipe's random init is the scaled draw, as its host built it."""
        cfg = {
            "method": "byol",
            "backbone": {"name": "resnet18"},
            "data": {"dataset": "cifar10"},
            "method_kwargs": {"proj_hidden_dim": 16, "proj_output_dim": 8},
        }
        init = {"geometry": {"init": {"pseudo_collapse": True, "alpha": 0.1}}}
        plain = random_init_modules(functools.partial(build_untrained, cfg), seed=0)
        scaled = random_init_modules(functools.partial(build_untrained, cfg | init), seed=0)
        a, b = (
            [m for m in head.modules() if isinstance(m, nn.Linear)] for _, head in (plain, scaled)
        )
        assert a and len(a) == len(b)
        for before, after in zip(a, b, strict=True):
            torch.testing.assert_close(after.weight, 0.1 * before.weight)
        assert torch.equal(plain[0].conv1.weight, scaled[0].conv1.weight)
