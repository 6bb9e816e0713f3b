"""Loading solo-learn recipes with Hydra overrides (solo_geometry.recipe)."""

from __future__ import annotations

from pathlib import Path

import pytest

from solo_geometry.config import GeometryConfig, geometry_config
from solo_geometry.recipe import RecipeError, load_recipe, recipe_from_yaml, split_overrides

RECIPE = """\
defaults:
  - _self_
  - augmentations: two.yaml
  - override hydra/hydra_logging: disabled
  - override hydra/job_logging: disabled

hydra:
  output_subdir: null
  run:
    dir: .

name: byol-test
method: byol
backbone:
  name: resnet18
optimizer:
  name: lars
  lr: 1.0
  batch_size: 16
max_epochs: 1
"""

AUGS = """\
- crop_size: 32
  num_crops: 2
"""


@pytest.fixture()
def recipe(tmp_path: Path) -> Path:
    (tmp_path / "augmentations").mkdir()
    (tmp_path / "augmentations" / "two.yaml").write_text(AUGS)
    path = tmp_path / "byol.yaml"
    path.write_text(RECIPE)
    return path


class TestLoadRecipe:
    def test_defaults_list_composes(self, recipe: Path) -> None:
        cfg = load_recipe(recipe)
        assert cfg.method == "byol"
        assert cfg.augmentations[0].num_crops == 2
        assert "hydra" not in cfg and "defaults" not in cfg

    def test_overrides(self, recipe: Path) -> None:
        cfg = load_recipe(recipe, ["optimizer.lr=0.5", "+seed=3", "~max_epochs"])
        assert cfg.optimizer.lr == 0.5
        assert cfg.seed == 3
        assert "max_epochs" not in cfg

    def test_not_struct(self, recipe: Path) -> None:
        cfg = load_recipe(recipe)
        cfg.new_key = 1  # solo-learn fills defaults into the config
        assert cfg.new_key == 1

    def test_geometry_on(self, recipe: Path) -> None:
        cfg = load_recipe(recipe, ["+geometry=on"])
        # the group's on.yaml adds nothing to the schema's defaults: the recipe as it is
        assert geometry_config(cfg) == GeometryConfig()

    def test_geometry_options(self, recipe: Path) -> None:
        cfg = load_recipe(
            recipe,
            ["+geometry=on", "geometry.head.name=smooth_mlp", "geometry.head.activation=gelu"],
        )
        gcfg = geometry_config(cfg)
        assert gcfg is not None
        assert (gcfg.head.name, gcfg.head.activation) == ("smooth_mlp", "gelu")

    def test_geometry_off(self, recipe: Path) -> None:
        assert geometry_config(load_recipe(recipe, ["+geometry=off"])) is None
        assert geometry_config(load_recipe(recipe)) is None

    def test_misspelt_geometry_key_names_it(self, recipe: Path) -> None:
        with pytest.raises(RecipeError, match="nme"):
            load_recipe(recipe, ["+geometry=on", "geometry.head.nme=x"])

    def test_unknown_key_without_plus(self, recipe: Path) -> None:
        with pytest.raises(RecipeError, match="not_a_key"):
            load_recipe(recipe, ["not_a_key=1"])

    def test_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError, match="nope.yaml"):
            load_recipe(tmp_path / "nope.yaml")

    def test_not_yaml(self, tmp_path: Path) -> None:
        path = tmp_path / "r.txt"
        path.write_text("method: byol\n")
        with pytest.raises(ValueError, match="yaml"):
            load_recipe(path)

    def test_bad_override_word(self, recipe: Path) -> None:
        with pytest.raises(RecipeError, match="key=value"):
            load_recipe(recipe, ["lonely"])

    def test_missing_defaults_entry(self, recipe: Path) -> None:
        recipe.write_text(RECIPE.replace("two.yaml", "three.yaml"))
        with pytest.raises(RecipeError, match="three"):
            load_recipe(recipe)


class TestHelpers:
    def test_recipe_from_yaml(self) -> None:
        cfg = recipe_from_yaml("method: simclr\nmax_epochs: 2\n")
        assert cfg.method == "simclr"

    @pytest.mark.parametrize("text", ["- a\n- b\n", "defaults: [_self_]\nmethod: x\n"])
    def test_recipe_from_yaml_rejects(self, text: str) -> None:
        with pytest.raises(RecipeError):
            recipe_from_yaml(text)

    def test_split_overrides(self) -> None:
        overrides, others = split_overrides(["a=1", "+geometry=on", "~b", "--flag", "word"])
        assert overrides == ["a=1", "+geometry=on", "~b"]
        assert others == ["--flag", "word"]
