"""Tests of solo_geometry.models.checkpoint: the ``geometry`` node of a stored config."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from solo_geometry.config import GeometryConfig, SpectrumConfig, geometry_config
from solo_geometry.models.checkpoint import stored_geometry

CARDS = Path(__file__).resolve().parents[2] / "zoo" / "cards"


class TestStoredGeometry:
    @pytest.mark.parametrize("card", sorted(p.name for p in CARDS.iterdir() if p.is_dir()))
    def test_zoo_cards_old_keys_read_without_a_warning(self, card: str) -> None:
        """The shipped cards' recipes carry the old keys: they reach the spectrum node."""
        cfg = yaml.safe_load((CARDS / card / "recipe.yaml").read_text())
        old = cfg["geometry"]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            g = stored_geometry(cfg)
        assert g is not None
        assert (g.spectrum.max_samples, g.spectrum.max_steps, g.spectrum.tol, g.spectrum.dtype) == (
            old["max_samples"],
            old["lanczos_max_steps"],
            old["lanczos_tol"],
            old["dtype"],
        )
        assert g.spectrum.density_probes == old["measure"]["density_probes"]

    def test_a_users_old_key_still_warns(self) -> None:
        cfg = {"method": "byol", "geometry": {"max_samples": 4}}
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert stored_geometry(cfg) == GeometryConfig(spectrum=SpectrumConfig(max_samples=4))
        with pytest.warns(FutureWarning, match="geometry.spectrum.max_samples"):
            geometry_config(OmegaConf.create(cfg))

    def test_no_geometry_node(self) -> None:
        assert stored_geometry({"method": "byol"}) is None
