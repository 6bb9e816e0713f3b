"""The solo launcher's own overrides survive any run folder name (Hydra's real parser)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.hosts.solo.launcher import quoted, solo_command


@pytest.mark.parametrize(
    "name", ["it's runs", "plain", "a\\b", "ends in \\", "quote\\'d", 'say "hi"']
)
def test_run_folder_overrides_parse_back_to_the_folder(tmp_path: Path, name: str) -> None:
    run = tmp_path / name / "byol-1"
    cfg = OmegaConf.create({"geometry": {"head": {"name": "linear"}}})
    argv = solo_command(tmp_path / "byol.yaml", ["+geometry=on"], run, cfg)
    parsed = {
        o.key_or_group: o.value()
        for o in OverridesParser.create().parse_overrides([a for a in argv if "=" in a])
    }
    assert parsed["hydra.run.dir"] == str(run)  # an apostrophe broke this override before
    assert parsed["checkpoint.dir"] == str(RunFolder(run).checkpoints)
    assert parsed["default_root_dir"] == parsed["geometry.out_dir"] == str(run)
    assert quoted(Path("x")) == "'x'"
