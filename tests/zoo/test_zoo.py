"""Zoo cards: the Hugging Face Hub folder, its verification, tampering caught, the list."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file

from solo_geometry.cli import main as cli_main
from solo_geometry.geometry.metrics import METRICS
from solo_geometry.models.backbones import build_backbone
from solo_geometry.models.solo_mlp import solo_projector
from solo_geometry.zoo.build import entries, format_cards, read_cards
from solo_geometry.zoo.card import CARD_FILES, ZooCard, render_readme
from solo_geometry.zoo.folder import load_card_model, write_card
from tests.shared import image_folder, small_settings

SECTIONS = (
    "## Model",
    "## Intended use and limitations",
    "## Training recipe",
    "## Evaluation",
    "## Geometry",
)


def _run(root: Path) -> Path:
    """A lightly-host run folder: config.yaml and checkpoints/last.ckpt of a random model."""
    torch.manual_seed(0)
    backbone, d = build_backbone("resnet18")
    projector = solo_projector("simclr", d, 32, 16)
    state = {f"backbone.{k}": v for k, v in backbone.state_dict().items()}
    state |= {f"projector.{k}": v for k, v in projector.state_dict().items()}
    (root / "checkpoints").mkdir(parents=True)
    torch.save({"state_dict": state, "epoch": 0}, root / "checkpoints" / "last.ckpt")
    cfg = {
        "name": "simclr-test",
        "method": "simclr",
        "backbone": {"name": "resnet18"},
        "data": {"dataset": "custom"},
        "max_epochs": 1,
        "seed": 5,
        "method_kwargs": {"proj_hidden_dim": 32, "proj_output_dim": 16},
    }
    (root / "config.yaml").write_text(yaml.safe_dump(cfg))
    return root


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(run folder, data folder, card folder), the card written once for the module."""
    root = tmp_path_factory.mktemp("zoo")
    run, data = _run(root / "run"), image_folder(root / "data", 10, 16)
    write_card(run, root / "card", data=data, settings=small_settings(), name="simclr-test")
    return run, data, root / "card"


def _copy(card: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(card, tmp_path / "card"))


def _front_matter(readme: str) -> dict:
    assert readme.startswith("---\n")
    return yaml.safe_load(readme.split("---\n")[1])


class TestCardFolder:
    def test_hub_layout(self, built: tuple[Path, Path, Path]) -> None:
        run, _, card = built
        assert {p.name for p in card.iterdir()} == set(CARD_FILES.values())
        readme = (card / "README.md").read_text()
        front = _front_matter(readme)
        for key in ("license", "library_name", "tags", "datasets", "metrics", "model-index"):
            assert key in front
        for section in SECTIONS:
            assert f"\n{section}\n" in readme
        record = ZooCard.read(card / "geometry.json")
        want = {
            r["features"] + "/" + r["probe"] + "/" + r["target"]: round(r["accuracy"], 4)
            for r in record.measurements["probes"]["rows"]
        }
        got = {
            m["name"]: m["value"]
            for res in front["model-index"][0]["results"]
            for m in res["metrics"]
        }
        assert got == want
        for key in (
            "solo_geometry",
            "commit",
            "recipe_sha256",
            "seed",
            "torch",
            "lightning",
            "solo_learn",
        ):
            assert key in record.provenance
        assert record.provenance["seed"] == 5
        assert record.settings["stats_images"] == 12
        assert record.settings["threads"] == torch.get_num_threads()  # verify measures alike

    def test_weights_are_the_checkpoints(self, built: tuple[Path, Path, Path]) -> None:
        run, _, card = built
        saved = load_file(str(card / "model.safetensors"))
        state = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
        assert set(saved) == set(state)
        for key, value in state.items():
            assert torch.equal(saved[key], value), key
        model = load_card_model(card)
        x = torch.rand(2, 3, 16, 16)
        assert model.head(model.backbone(x)).shape == (2, 16)

    def test_existing_out_is_refused(self, built: tuple[Path, Path, Path], tmp_path: Path) -> None:
        run, data, _ = built
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "keep.txt").write_text("mine")
        assert (
            cli_main(["zoo", "card", str(run), "--out", str(tmp_path / "out"), "--data", str(data)])
            == 2
        )
        assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]


class TestVerify:
    def test_untampered_card_verifies(
        self, built: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
    ) -> None:
        _, data, card = built
        assert cli_main(["zoo", "verify", str(card), "--data", str(data)]) == 0
        assert "verified" in capsys.readouterr().out

    def test_tampered_weight_is_caught(
        self, built: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        _, data, card = built
        card = _copy(card, tmp_path)
        weights = load_file(str(card / "model.safetensors"))
        weights["projector.2.weight"] = weights["projector.2.weight"] * 3.0  # the head only
        save_file(weights, str(card / "model.safetensors"))
        assert cli_main(["zoo", "verify", str(card), "--data", str(data)]) == 1
        err = capsys.readouterr().err
        assert "files/weights" in err
        assert "stats/h/" in err or "rho/" in err  # recomputed from the tampered head
        assert "stats/z/" not in err  # the backbone is untouched: its numbers still agree

    def test_tampered_card_is_caught(
        self, built: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        _, data, card = built
        card = _copy(card, tmp_path)
        readme = (card / "README.md").read_text()
        (card / "README.md").write_text(readme.replace("value: ", "value: 0.9", 1))
        assert cli_main(["zoo", "verify", str(card), "--data", str(data)]) == 1
        assert "README.md" in capsys.readouterr().err
        (card / "README.md").write_text(readme)
        record = json.loads((card / "geometry.json").read_text())
        record["measurements"]["stats"]["z/rankme_l2"] += 0.5
        (card / "geometry.json").write_text(json.dumps(record))
        assert cli_main(["zoo", "verify", str(card), "--data", str(data)]) == 1
        err = capsys.readouterr().err
        assert "stats/z/rankme_l2" in err and "README.md" in err

    def test_card_holds_the_records_stats_part(self, built: tuple[Path, Path, Path]) -> None:
        """The zoo measures through the monitor's assembly: every ``stats`` entry, quality too."""
        _, _, card = built
        stats = ZooCard.read(card / CARD_FILES["geometry"]).measurements["stats"]
        want = {
            k
            for m in METRICS.values()
            if m.measured_with == "stats" and not m.key.startswith("metric/")
            for k in m.keys()
        }
        assert set(stats) == want
        assert stats["h/rankme"] is not None and stats["z/lidar"] is None  # one view: no LiDAR
        assert 1.0 <= stats["h/rankme"] <= 16 and 0.0 <= stats["z/collapse_level"] <= 1.0

    def test_schema_1_card_reads_and_verifies_its_fields(
        self, built: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A card from before the quality metrics: effective_rank read as rankme_l2, verified."""
        _, data, card = built
        card = _copy(card, tmp_path)
        record = json.loads((card / "geometry.json").read_text())
        stats = record["measurements"]["stats"]
        old = {"z/normalized_std", "z/rankme_l2", "h/rankme_l2", "whitening/score"}
        record["measurements"]["stats"] = {
            k.replace("rankme_l2", "effective_rank"): v for k, v in stats.items() if k in old
        }
        record["schema"] = 1
        (card / "geometry.json").write_text(json.dumps(record))
        read = ZooCard.read(card / "geometry.json")
        assert read.schema == 1 and set(read.measurements["stats"]) == old
        (card / "README.md").write_text(render_readme(read))
        assert cli_main(["zoo", "verify", str(card), "--data", str(data)]) == 0, (
            capsys.readouterr().err
        )

    def test_other_data_is_caught(
        self, built: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        _, _, card = built
        other = image_folder(tmp_path / "other", 10, 16)
        (other / "train" / "0" / "0.png").unlink()
        assert cli_main(["zoo", "verify", str(card), "--data", str(other)]) == 1
        assert "data/sha256" in capsys.readouterr().err


class TestList:
    def test_list_prints_every_card(
        self, built: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
    ) -> None:
        _, _, card = built
        assert cli_main(["zoo", "list", str(card.parent)]) == 0
        out = capsys.readouterr().out
        assert "| simclr-test | simclr | projector |" in out
        assert out.strip() == format_cards(read_cards(card.parent))

    def test_unknown_entry_names_the_entries(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="simclr-digits-projector"):
            entries(["nope"])
        assert cli_main(["zoo", "build", "--only", "nope", "--out", str(tmp_path / "z")]) == 2
        assert not (tmp_path / "z").exists()
