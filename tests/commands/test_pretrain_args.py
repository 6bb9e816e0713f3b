"""``pretrain``'s command line: its options before, between or after the Hydra overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from solo_geometry.cli import build_parser, parse_arguments

OPTIONS = ["--config", "r.yaml", "--host", "lightly", "--runs-root", "out", "--resume", "run"]
OVERRIDES = ["+geometry=on", "geometry.seed=3", "~geometry.alert", "++max_epochs=2"]


class TestOptionOrder:
    @pytest.mark.parametrize("cut", range(len(OVERRIDES) + 1))
    def test_options_anywhere(self, cut: int) -> None:
        """Options after the first, some, or all overrides: the same command, overrides in order."""
        first = parse_arguments(build_parser(), ["pretrain", *OPTIONS, *OVERRIDES])
        argv = ["pretrain", *OVERRIDES[:cut], *OPTIONS[:4], *OVERRIDES[cut:], *OPTIONS[4:]]
        args = parse_arguments(build_parser(), argv)
        assert vars(args) == vars(first)
        assert args.overrides == OVERRIDES
        assert (args.config, args.host, args.runs_root) == (Path("r.yaml"), "lightly", Path("out"))

    def test_split_overrides_keep_their_order(self) -> None:
        argv = ["pretrain", "a=1", "--host", "solo", "b=2", "--config", "r.yaml", "a=3"]
        assert parse_arguments(build_parser(), argv).overrides == ["a=1", "b=2", "a=3"]

    @pytest.mark.parametrize("stray", ["--bogus", "-x"])
    def test_unknown_option_still_refused(
        self, stray: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        with pytest.raises(SystemExit) as info:
            parse_arguments(build_parser(), ["pretrain", "a=1", stray, "b=2"])
        assert info.value.code == 2
        assert (
            capsys.readouterr()
            .err.splitlines()[-1]
            .endswith(f"error: unrecognized arguments: {stray}")
        )

    def test_commands_without_overrides_refuse_leftovers(self) -> None:
        with pytest.raises(SystemExit):
            parse_arguments(build_parser(), ["orbits", "x.npz", "--json", "a=1", "b=2"])
