"""``zoo build --quick``: a real pretraining run (lightly host), carded and verified."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from solo_geometry.cli import main as cli_main
from solo_geometry.zoo.build import QUICK, entries
from solo_geometry.zoo.card import ZooCard


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("lightly") is None, reason="lightly is not installed here"
)
class TestQuickBuild:
    def test_one_entry_trains_cards_and_verifies(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        out = tmp_path / "zoo"
        argv = [
            "zoo",
            "build",
            "--quick",
            "--only",
            "byol-digits-smooth_mlp-swish",
            "--host",
            "lightly",
            "--out",
            str(out),
        ]
        assert cli_main(argv) == 0
        card_dir = out / "cards" / "byol-digits-smooth_mlp-swish"
        card = ZooCard.read(card_dir / "geometry.json")
        assert card.head == "smooth_mlp-swish" and card.method == "byol"
        assert card.data["kind"] == "digits" and card.provenance["host"] == "lightly"
        assert card.epochs == QUICK.max_epochs
        assert card.training_record is not None and card.training_record["status"] == "ok"
        assert (
            "| byol-digits-smooth_mlp-swish | byol | smooth_mlp-swish |" in capsys.readouterr().out
        )
        # verify again, the digits regenerated from the card's record
        assert cli_main(["zoo", "verify", str(card_dir)]) == 0
        recipe = (card_dir / "recipe.yaml").read_text()
        assert "smooth_mlp" in recipe and json.loads((card_dir / "geometry.json").read_text())


def test_every_method_has_both_heads() -> None:
    names = {e.name for e in entries()}
    for method in ("simclr", "byol", "vicreg", "barlow_twins"):
        assert {f"{method}-digits-projector", f"{method}-digits-smooth_mlp-swish"} <= names
    assert all(e.recipe.is_file() for e in entries())
