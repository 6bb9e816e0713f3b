"""Tests of solo_geometry.config.overrides: every ``geometry.*`` option keeps the type it is given.

The cases are generated from the schema (:func:`schema_fields` walks the ``GeometryConfig``
dataclasses): each option gets a value of each wrong type and must be refused with one line
naming it, through :func:`solo_geometry.recipe.load_recipe` and
:func:`solo_geometry.config.geometry_config`, the two calls both hosts make before anything is
created; its default, written as an override, must be accepted unchanged. A few go through the
real command line and solo-learn's own ``main_pretrain.py`` as subprocesses.
"""

from __future__ import annotations

import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from solo_geometry.config import MOVED_TO_SPECTRUM, GeometryConfig, geometry_config
from solo_geometry.config.overrides import check_geometry_overrides, schema_fields
from solo_geometry.hosts.pretrain import solo_available
from solo_geometry.recipe import load_recipe

REPO = Path(__file__).resolve().parents[2]
FIELDS = schema_fields()
# A value of each wrong type, as written on the command line, by the type of the option.
WRONG: dict[Any, tuple[str, ...]] = {
    bool: ("2", "maybe", "1.5", "[true]"),
    int: ("x", "1.5", "true", "'7'", "[1]"),
    float: ("x", "true", "[0.1]"),
    str: ("3", "1.5", "true", "[a]"),
    list[str]: ("3", "x", "[3]", "{a:1}"),
    list[float]: ("3", "x", "[x]", "{a:1}"),
}
_NONE = type(None)


def _base(hint: Any) -> tuple[Any, bool]:
    """The type of an option and whether it may be null."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(hint) if a is not _NONE), True
    return hint, False


def _wrong_cases() -> list[Any]:
    cases = []
    for key, hint in FIELDS.items():
        base, optional = _base(hint)
        if base not in WRONG:
            continue  # a node: its options are cases of their own
        values = WRONG[base] + (() if optional else ("null",))
        cases += [pytest.param(key, value, id=f"{key}={value}") for value in values]
    return cases


def _written(value: Any) -> str:
    """A value as an override writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(_written(v) for v in value) + "]"
    return repr(value) if isinstance(value, float) else str(value)


def _defaults() -> dict[str, Any]:
    plain = OmegaConf.to_container(OmegaConf.structured(GeometryConfig))
    out = {}
    for key in FIELDS:
        node: Any = {"geometry": plain}
        for part in key.split("."):
            node = node[part]
        if not isinstance(node, dict):
            out[key] = node
    return out


@pytest.fixture(scope="module")
def recipe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("recipe") / "r.yaml"
    path.write_text("method: byol\n")
    return path


def _refusal(recipe: Path, *overrides: str) -> str:
    """The one-line message of the ValueError the hosts' checks raise."""
    with pytest.raises(ValueError) as info:
        geometry_config(load_recipe(recipe, ["+geometry=on", *overrides]))
    message = str(info.value)
    assert "\n" not in message, message
    return message


class TestSchemaGenerated:
    def test_every_option_is_covered(self) -> None:
        """The schema walk finds every leaf (a new option gets cases without a new test)."""
        assert len(_wrong_cases()) >= 3 * len(_defaults())
        assert {"geometry.alert.stop", "geometry.probes.linear.l2_grid"} <= set(_defaults())

    @pytest.mark.parametrize(("key", "value"), _wrong_cases())
    def test_wrong_type_is_one_line(self, recipe: Path, key: str, value: str) -> None:
        message = _refusal(recipe, f"{key}={value}")
        assert message.startswith(f"{key}: expected "), message
        assert value.replace("'", "") in message.replace("'", ""), message

    @pytest.mark.parametrize("key", [k for k, v in FIELDS.items() if _base(v)[0] is str])
    def test_unknown_choice_is_one_line(self, recipe: Path, key: str) -> None:
        if key in ("geometry.out_dir", "geometry.probes.data"):
            pytest.skip("a path, not a choice")
        message = _refusal(recipe, f"{key}=nope")
        assert message.startswith(f"{key}: unknown value 'nope'; choose from ["), message

    def test_defaults_written_are_kept(self, recipe: Path) -> None:
        """No false refusal: every default, written as an override, composes to itself."""
        defaults = _defaults()
        written = [f"{key}={_written(value)}" for key, value in defaults.items()]
        cfg = load_recipe(recipe, ["+geometry=on", *written])
        assert {key: OmegaConf.select(cfg, key) for key in defaults} == defaults
        assert geometry_config(cfg) == GeometryConfig()

    def test_unknown_option_names_the_choices(self, recipe: Path) -> None:
        message = _refusal(recipe, "geometry.head.nme=x")
        assert message.startswith("geometry.head.nme: unknown option; choose from ['activation'")


class TestRawValues:
    @pytest.mark.parametrize(
        "override",
        [
            "geometry.alert.stop=on",
            "geometry.alert.stop=1",
            "geometry.budget=null",
            "geometry.seed=${oc.env:NO_SUCH_VAR,3}",
            "geometry.seed=1,2,3",
            "geometry.head={name:smooth_mlp,depth:3}",
            "~geometry.alert.stop",
            "geometry.lanczos_tol=1",
        ],
    )
    def test_accepted(self, override: str) -> None:
        check_geometry_overrides([override])

    @pytest.mark.parametrize(
        ("override", "message"),
        [
            ("geometry.alert.stop=2", "geometry.alert.stop: expected a boolean"),
            ("geometry.seed=1,x", "geometry.seed: expected an integer, got the string 'x'"),
            ("geometry.head={depth:1.5}", "geometry.head.depth: expected an integer"),
            ("geometry.head=smooth_mlp", "geometry.head: expected a mapping of its options"),
            ("+geometry.every=3", "geometry.every: unknown option; choose from ['alert'"),
        ],
    )
    def test_refused(self, override: str, message: str) -> None:
        with pytest.raises(ValueError, match="^" + message.replace("[", r"\[")):
            check_geometry_overrides([override])

    def test_stop_2_is_not_true(self, recipe: Path) -> None:
        """The issue's case: OmegaConf alone reads 2 as true (the check stands before it)."""
        from hydra import compose, initialize_config_dir

        from solo_geometry.recipe import _searchpath_override

        with initialize_config_dir(config_dir=str(recipe.parent), version_base="1.2"):
            cfg = compose("r", _searchpath_override(["+geometry=on", "geometry.alert.stop=2"]))
        assert cfg.geometry.alert.stop is True  # what the check prevents
        assert "expected a boolean" in _refusal(recipe, "geometry.alert.stop=2")


# A value of each old key of the spectrum's settings, away from the default.
OLD_SPECTRUM = {
    "geometry.max_samples": 4,
    "geometry.lanczos_max_steps": 30,
    "geometry.lanczos_tol": 1e-4,
    "geometry.dtype": "float64",
    "geometry.measure.density_probes": 1,
    "geometry.measure.tau": 1e-9,
}


class TestOldSpectrumKeys:
    """The keys of the spectrum's settings before ``geometry.spectrum``: one release more."""

    def test_every_old_key_is_in_the_schema(self) -> None:
        assert {f"geometry.{old}" for old in MOVED_TO_SPECTRUM} == set(OLD_SPECTRUM)
        assert set(OLD_SPECTRUM) <= set(FIELDS)

    @pytest.mark.parametrize("key", list(OLD_SPECTRUM))
    def test_old_override_reaches_the_new_key(self, recipe: Path, key: str) -> None:
        new = MOVED_TO_SPECTRUM[key.removeprefix("geometry.")]
        value = OLD_SPECTRUM[key]
        with pytest.warns(
            FutureWarning, match=rf"^{key} is deprecated, use geometry\.spectrum\.{new} "
        ):
            g = geometry_config(load_recipe(recipe, ["+geometry=on", f"{key}={_written(value)}"]))
        assert g is not None and getattr(g.spectrum, new) == value


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python *args`` (a process forked warm under ``make test``'s environment: solo_helpers)."""
    from tests.hosts.solo_helpers import env, run

    environment = {**env(), "OMP_NUM_THREADS": "1"}
    environment.pop("SOLO_GEOMETRY_DEBUG", None)
    return run(list(args), cwd, env=environment)


def _one_line(proc: subprocess.CompletedProcess, expected: str) -> None:
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr and "error:" in lines[-1], proc.stderr[-3000:]
    assert [line for line in lines if "error:" in line] == [lines[-1]]
    assert expected in lines[-1], lines[-1]


# Through the command line: the first as a process (its exit status), each in-process
# (``solo_geometry.cli.main``, the same handler; a process would add only the imports).
CLI_CASES = [
    ("geometry.alert.stop=2", "geometry.alert.stop: expected a boolean"),
    ("geometry.alert.stop=maybe", "got the string 'maybe'"),
    ("geometry.every_n_steps=1.5", "geometry.every_n_steps: expected an integer"),
]
PRETRAIN = ["pretrain", "--config", "{recipe}", "--host", "lightly", "+geometry=on"]


class TestCommandLine:
    @pytest.mark.parametrize(("override", "expected"), CLI_CASES)
    def test_main(
        self,
        recipe: Path,
        tmp_path: Path,
        override: str,
        expected: str,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        from solo_geometry.cli import main

        monkeypatch.chdir(tmp_path)
        monkeypatch.delenv("SOLO_GEOMETRY_DEBUG", raising=False)
        argv = [a.format(recipe=recipe) for a in PRETRAIN] + [override]
        status = main(argv)
        _one_line(subprocess.CompletedProcess(argv, status, "", capsys.readouterr().err), expected)
        assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
class TestSubprocess:
    def test_cli(self, recipe: Path, tmp_path: Path) -> None:
        override, expected = CLI_CASES[0]
        argv = ["-m", "solo_geometry.cli", *(a.format(recipe=recipe) for a in PRETRAIN)]
        proc = _cli(*argv, override, cwd=tmp_path)
        _one_line(proc, expected)
        assert list(tmp_path.iterdir()) == []

    @pytest.mark.skipif(not solo_available(), reason="solo-learn is not importable here")
    def test_solo_learns_own_main_pretrain(self, digits: Path, tmp_path: Path) -> None:
        """``python main_pretrain.py ... +geometry=on geometry.alert.stop=2``: one line, exit 2."""
        sys.path.insert(0, str(REPO / "tests" / "hosts"))
        from lightly_support import write_recipe

        from solo_geometry.hosts.solo.launcher import find_solo_root

        recipe = write_recipe(tmp_path / "recipes", "simclr", digits)
        proc = _cli(
            str(find_solo_root() / "main_pretrain.py"),
            "--config-path",
            str(recipe.parent),
            "--config-name",
            "simclr",
            "+geometry=on",
            "geometry.alert.stop=2",
            f"hydra.run.dir={tmp_path / 'run'}",
            cwd=tmp_path,
        )
        _one_line(proc, "solo-geometry: error: geometry.alert.stop: expected a boolean")
