"""Tests of the Hydra SearchPathPlugin (hydra's example_searchpath_plugin tests, plus ours)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.plugins import Plugins
from hydra.plugins.search_path_plugin import SearchPathPlugin

from hydra_plugins.solo_geometry_searchpath.solo_geometry_searchpath import (
    SEARCHPATH,
    SoloGeometrySearchPathPlugin,
)
from solo_geometry.config import groups

REPO = Path(__file__).resolve().parents[1]


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


class TestSoloGeometrySearchPathPlugin:
    def test_discovery(self) -> None:
        names = [x.__name__ for x in Plugins.instance().discover(SearchPathPlugin)]
        assert SoloGeometrySearchPathPlugin.__name__ in names

    def test_names_the_package_holding_the_group(self) -> None:
        """The plugin's literal search path is the package's own (recipe.py reads that one)."""
        assert SEARCHPATH == groups.SEARCHPATH == "pkg://solo_geometry.config.groups"

    def test_config_installed(self) -> None:
        with initialize_config_dir(config_dir=str(REPO / "zoo" / "recipes"), version_base="1.2"):
            config_loader = GlobalHydra.instance().config_loader()
            assert {"on", "off"} <= set(config_loader.get_group_options("geometry"))

    def test_composes_onto_a_recipe(self, tmp_path: Path) -> None:
        (tmp_path / "r.yaml").write_text("method: byol\n")
        with initialize_config_dir(config_dir=str(tmp_path), version_base="1.2"):
            cfg = compose("r", ["+geometry=on", "geometry.head.name=smooth_mlp"])
            assert cfg.geometry.enabled is True and cfg.geometry.head.name == "smooth_mlp"
            assert compose("r", ["+geometry=off"]).geometry.enabled is False

    @pytest.mark.parametrize("override", ["geometry.head.nme=x", "geometry.every_n_steps=abc"])
    def test_typed_group(self, tmp_path: Path, override: str) -> None:
        (tmp_path / "r.yaml").write_text("method: byol\n")
        with initialize_config_dir(config_dir=str(tmp_path), version_base="1.2"):
            with pytest.raises(Exception, match=override.split("=")[0].replace(".", r"\.")):
                compose("r", ["+geometry=on", override])

    def test_light_import(self) -> None:
        proc = _python(
            "import sys\n"
            "import hydra_plugins.solo_geometry_searchpath.solo_geometry_searchpath\n"
            "print(sorted(m for m in ('torch', 'solo', 'lightning') if m in sys.modules))\n"
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "[]"

    @pytest.mark.solo
    def test_patches_solo_methods_in_place(self) -> None:
        pytest.importorskip("solo", reason="solo-learn 1.0.6 not importable")
        proc = _python(
            "from solo.methods import METHODS, BYOL\n"
            "table = METHODS\n"
            "import importlib\n"
            "m = importlib.import_module("
            "'hydra_plugins.solo_geometry_searchpath.solo_geometry_searchpath')\n"
            "first = METHODS['byol']\n"
            "m.patch_solo_methods(); m.patch_solo_methods()\n"
            "assert METHODS is table and METHODS['byol'] is first\n"
            "assert issubclass(first, BYOL) and first is not BYOL\n"
            "print('ok')\n"
        )
        assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]

    def test_never_raises(self) -> None:
        proc = _python(
            "import sys, types\n"
            "sys.modules['solo.methods'] = types.ModuleType('solo.methods')  # broken solo\n"
            "import warnings\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    import hydra_plugins.solo_geometry_searchpath.solo_geometry_searchpath\n"
            "print(any('could not wrap' in str(x.message) for x in w))\n"
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "True"
