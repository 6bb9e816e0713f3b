"""Fuzzing ``pretrain``'s overrides and ``SLURM_*`` environment: exit 0 or 2, never a traceback.

Generated and mutated Hydra overrides (every ``geometry.*`` option of the schema with values of
every kind, recipe numbers, junk words) and Slurm environments (ids and restart counts of digits,
other scripts' digits, signs, huge numbers, junk; a runs root whose ``.slurm_job`` files are
binary, links, or name the job) go through the real command line, ``solo_geometry.cli.main``,
in this process: the overrides are parsed, composed and checked exactly as for a run, on the
lightly host and on the solo-learn host, up to the point where training would start, where
each host's trainer is replaced by a recorder (no step is trained). Every example must end with
status 0 or 2; a 2 with one ``error:`` line, the last on stderr, and no traceback; a 0, for a
``geometry.*`` option, with the composed value equal to the value as written (OmegaConf's
coercion never changes it silently). Profiles and counts: ``tests/fuzz/conftest.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import os
import shutil
import sys
import tempfile
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from omegaconf import DictConfig, OmegaConf

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "hosts")]
from lightly_support import write_recipe  # noqa: E402

from solo_geometry.cli import main  # noqa: E402
from solo_geometry.config import as_bool  # noqa: E402
from solo_geometry.config.overrides import schema_fields  # noqa: E402
from solo_geometry.folder.run_folder import RunFolder  # noqa: E402
from solo_geometry.hosts.lightly import launcher as lightly_launcher  # noqa: E402
from solo_geometry.hosts.pretrain import solo_available  # noqa: E402
from solo_geometry.recipe import NUMBERS  # noqa: E402

NO_SOLO = pytest.mark.skipif(not solo_available(), reason="solo-learn is not importable here")
HOSTS = ["lightly", pytest.param("solo", marks=NO_SOLO)]
FIELDS = schema_fields()
OPTIONS = sorted(k for k, v in FIELDS.items() if not dataclasses.is_dataclass(v))
WORDS = sorted({"true", "false", "on", "off", "yes", "no", "null", "maybe", "nan", "inf", "-inf",
                "[]", "{}", "[a,b]", "'3'", "${oc.env:HOME}", "1e-3", "0x10", "1_000", "",
                "brightness", "smooth_mlp", "projector", "float64", "bn", "h", "z", "loss",
                "paper", "both", "linear", "[brightness,hue]", "[0.1,1e-3]",
                "[class,jitter]"})  # fmt: skip
SLURM = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT")
JOB = "4242"


@pytest.fixture(scope="module")
def recipe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SimCLR recipe on a small image folder (2 classes of 8 digits, train and val)."""
    from solo_geometry.inputs.digits import make_digits

    world = tmp_path_factory.mktemp("fuzz")
    digits = make_digits(world / "all", size=32)
    for split in ("train", "val"):
        for label in ("0", "1"):
            (world / "digits" / split / label).mkdir(parents=True)
            for png in sorted((digits / split / label).glob("*.png"))[:8]:
                shutil.copy(png, world / "digits" / split / label / png.name)
    return write_recipe(world / "recipes", "simclr", world / "digits")


@pytest.fixture
def trained(monkeypatch: pytest.MonkeyPatch) -> list[DictConfig]:
    """The recipes each host would train, recorded instead of trained (the checks all run)."""
    seen: list[DictConfig] = []

    def lightly_run(cfg: DictConfig, *, runs_root: Any, resume: Any = None) -> Path:
        recipe, _ = lightly_launcher.prepare(cfg)  # every check of run_recipe before training
        seen.append(cfg)
        return RunFolder.create(Path(runs_root), recipe.name).path

    def solo_train(folder: RunFolder, config: Path, overrides: list, root: Path, cfg: Any) -> None:
        seen.append(cfg)

    monkeypatch.setattr(lightly_launcher, "run_recipe", lightly_run)
    if solo_available():
        from solo_geometry.hosts.solo import launcher as solo_launcher

        monkeypatch.setattr(solo_launcher, "_train", solo_train)
    monkeypatch.delenv("SOLO_GEOMETRY_DEBUG", raising=False)
    for name in SLURM:
        monkeypatch.delenv(name, raising=False)
    return seen


def run_cli(argv: list[str]) -> tuple[int, str]:
    """``solo_geometry.cli.main(argv)``: its status (argparse's exits included) and stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main(argv)
        except SystemExit as exc:  # argparse's usage errors
            status = exc.code if isinstance(exc.code, int) else 1
    return status, err.getvalue()


def check_outcome(status: int, err: str) -> None:
    """Exit 0 or 2; a 2 with one ``error:`` line, the last, and no traceback."""
    event(f"exit {status}")  # --hypothesis-show-statistics: how many examples were accepted
    assert status in (0, 2), err
    assert "Traceback" not in err, err
    if status == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        errors = [line for line in lines if "error:" in line]
        assert len(errors) == 1 and lines[-1] == errors[0], err


@contextlib.contextmanager
def runs_root() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp) / "runs"


def pretrain(recipe: Path, host: str, root: Path, *overrides: str) -> list[str]:
    options = ["--config", str(recipe), "--host", host, "--runs-root", str(root)]
    return ["pretrain", *options, *overrides]


scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda x: f"{x!r}"),
    st.sampled_from(WORDS),
    st.text(alphabet="ab01,.-+_[]{}:'\"$ =~é²١", max_size=8),
).map(lambda v: str(v).lower() if isinstance(v, bool) else str(v))


def _mutate(text: str, data: st.DataObject) -> str:
    """``text`` with one character inserted, removed or replaced."""
    if not text:
        return text
    at = data.draw(st.integers(0, len(text) - 1))
    char = data.draw(st.sampled_from("=.+~,[]{}'\"$ a1é\\"))
    how = data.draw(st.sampled_from(("insert", "delete", "replace")))
    return {
        "insert": text[:at] + char + text[at:],
        "delete": text[:at] + text[at + 1 :],
        "replace": text[:at] + char + text[at + 1 :],
    }[how]


def _same(raw: Any, composed: Any, hint: Any) -> bool:
    """Whether the composed value is the value as written (a bool by the package's words)."""
    if hint is bool or (hint == bool | None and raw is not None):
        try:
            return composed == as_bool(raw, "x")
        except ValueError:  # not one of the package's words: accepted by coercion alone
            return False
    if isinstance(raw, float) and math.isnan(raw):
        return isinstance(composed, float) and math.isnan(composed)
    return bool(composed == raw)


_BOOLS = ["true", "false", "on", "off", "yes", "no", "1", "0", "True", "OFF"]
_TYPED = {
    bool: st.sampled_from(_BOOLS),
    int: st.integers(-2, 10**4).map(str),
    float: st.one_of(st.floats(1e-6, 0.99).map(repr), st.integers(1, 3).map(str)),
    str: st.sampled_from(WORDS),
    list[str]: st.sampled_from(["[brightness,hue]", "[class]", "[linear,mlp]", "[]"]),
    list[float]: st.sampled_from(["[0.1,1e-3]", "[1]", "[]"]),
}


def typed(key: str) -> st.SearchStrategy[str]:
    """Values of the option's own type (so that many examples are accepted), or null."""
    hint = FIELDS[key]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    base = args[0] if typing.get_origin(hint) in (typing.Union, types.UnionType) else hint
    return _TYPED[base] | st.just("null") if base is not hint else _TYPED[base]


@pytest.mark.parametrize("host", HOSTS)
@given(data=st.data(), prefix=st.sampled_from(["", "", "++"]))
def test_geometry_option_keeps_its_type_or_exits_2(
    recipe: Path, trained: list[DictConfig], host: str, data: st.DataObject, prefix: str
) -> None:
    """Each option with a value of any kind: accepted as written, or one line and exit 2."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    key = data.draw(st.sampled_from(OPTIONS), label="key")
    value = data.draw(typed(key) | scalars, label="value")
    override = f"{prefix}{key}={value}"
    trained.clear()
    with runs_root() as root:
        status, err = run_cli(pretrain(recipe, host, root, "+geometry=on", override))
    check_outcome(status, err)
    if status == 0 and "${" not in value:
        raw = OverridesParser.create().parse_override(override)
        if not raw.is_sweep_override():
            composed = OmegaConf.to_container(trained[-1], resolve=True)
            for part in key.split("."):
                composed = composed[part]  # type: ignore[index]
            assert _same(raw.value(), composed, FIELDS[key]), (override, composed)


recipe_keys = st.sampled_from([k for k, *_ in NUMBERS] + ["seed", "data.fraction", "optimizer"])


@pytest.mark.parametrize("host", HOSTS)
@given(data=st.data())
def test_recipe_numbers_and_junk_exit_0_or_2(
    recipe: Path, trained: list[DictConfig], host: str, data: st.DataObject
) -> None:
    """Recipe numbers of any value, junk words and mutated overrides: exit 0 or 2."""
    words = data.draw(
        st.lists(
            st.one_of(
                st.builds(lambda k, v: f"++{k}={v}", recipe_keys, scalars),
                st.builds(lambda k, v: f"{k}={v}", st.sampled_from(OPTIONS), scalars),
                st.text(max_size=12).filter(lambda w: not w.startswith("-")),
                st.sampled_from(["+geometry=on", "+geometry=off", "geometry=on", "~geometry"]),
            ),
            max_size=4,
        )
    )
    words = [_mutate(w, data) if data.draw(st.booleans()) else w for w in words]
    with runs_root() as root:
        status, err = run_cli(pretrain(recipe, host, root, *words))
    check_outcome(status, err)


slurm_values = st.one_of(
    st.none(),
    st.integers(0, 10**6).map(str),
    st.sampled_from(
        [
            "",
            " ",
            "²",
            "١",
            "-1",
            "+1",
            "1.0",
            "0x1",
            "9" * 40,
            JOB,
            f" {JOB}\n",
            "1_000",
            "abc",
            "1e3",
            "\u0661\u0662",
            "4242_1",
        ]
    ),  # fmt: skip
    st.text(max_size=6),
)


@given(
    env=st.fixed_dictionaries({name: slurm_values for name in SLURM}),
    marker=st.one_of(st.binary(max_size=80), st.sampled_from([JOB.encode(), b"", b"\xff\xfe"])),
    link=st.sampled_from(["none", "marker", "folder"]),
)
def test_slurm_environment_exits_0_or_2(
    recipe: Path, trained: list[DictConfig], env: dict[str, str | None], marker: bytes, link: str
) -> None:
    """Any SLURM_* values, a runs root of odd ``.slurm_job`` files: exit 0 or 2, no file written
    outside the runs root."""
    with runs_root() as root, pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            if value is not None and "\0" not in value:
                mp.setenv(name, value)
        (root / "old").mkdir(parents=True)
        (root / "old" / ".slurm_job").write_bytes(marker)
        outside = root.parent / "outside"
        outside.mkdir()
        (outside / ".slurm_job").write_bytes(JOB.encode())
        if link == "marker":
            (root / "linked").mkdir()
            (root / "linked" / ".slurm_job").symlink_to(outside / ".slurm_job")
        elif link == "folder":
            (root / "linked").symlink_to(outside)
        status, err = run_cli(pretrain(recipe, "lightly", root))
        assert sorted(p.name for p in outside.iterdir()) == [".slurm_job"]
    check_outcome(status, err)


@given(
    overrides=st.lists(
        st.builds(lambda k, v: f"{k}={v}", st.sampled_from(OPTIONS), scalars), max_size=3
    )
)
def test_option_order_is_free(
    recipe: Path, trained: list[DictConfig], overrides: list[str]
) -> None:
    """Options before, between or after the overrides: the same outcome."""
    outcomes = []
    with runs_root() as root:
        first = ["pretrain", "--host", "lightly", "--config", str(recipe), "+geometry=on"]
        last = ["pretrain", "+geometry=on", *overrides[:1], "--host", "lightly"]
        for argv in (
            [*first, *overrides, "--runs-root", str(root)],
            [*last, "--config", str(recipe), *overrides[1:], "--runs-root", str(root)],
        ):
            status, err = run_cli(argv)
            check_outcome(status, err)
            outcomes.append((status, err.splitlines()[-1:] if status else []))
    assert outcomes[0] == outcomes[1]


def test_ci_profile_is_fixed() -> None:
    """The CI profile is derandomised with a bounded count, unless ``long`` was asked for."""
    from hypothesis import settings

    if os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci":
        assert settings.default.derandomize and settings.default.max_examples <= 100
        assert settings.default.deadline is None
