"""Every reader a user hands a file to, fuzzed: never a traceback, never an exit other than 0 or 2.

Property-based (hypothesis): generated and mutated inputs (random bytes, valid files truncated or
with bits flipped, JSON of the wrong types) for ``geometry.jsonl`` (``report``), ``probes.json``
(``report``), zoo cards (``zoo list``) and card folders (``zoo verify``), ``.npy``/``.npz``
(``orbits``, ``reproduce verdicts collapse``), checkpoints (the checks of ``pretrain --resume``
and the reader of ``probe``/``analyse``) and image folders (the hosts' check of the training
folder and the probes' reader). The command line runs in-process (``solo_geometry.cli.main``),
as the bad-input table does; the checkpoint and image readers are called as the commands call
them, before anything is trained.

The profiles are tests/fuzz/conftest.py's: under ``ci`` (CI, ``make test``) a fixed seed and
``READER_CI_EXAMPLES`` examples per reader; ``make fuzz`` runs the ``long`` profile's
``FUZZ_EXAMPLES`` (docs/failures.md, "Fuzzing"). Every failure found becomes a named row of
docs/failures.md's table.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from solo_geometry.cli import main
from solo_geometry.folder.resume import resume_point
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.inputs.datasets import check_image_folder, load_image_folder
from solo_geometry.models.checkpoint import check_weights_only, read_checkpoint
from tests.record_helpers import full_record, make_record, probe_table
from tests.shared import orbit_arrays, png_of_size

READER_CI_EXAMPLES = 12  # per reader under the "ci" profile: the readers' fuzzers in ~20 s
_PROFILE = settings()  # the profile tests/fuzz/conftest.py loaded ("ci", or "long": make fuzz)
FUZZ = settings(
    _PROFILE,
    max_examples=(
        min(_PROFILE.max_examples, READER_CI_EXAMPLES)
        if _PROFILE.derandomize
        else _PROFILE.max_examples
    ),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CARD = Path(__file__).resolve().parents[2] / "zoo" / "cards" / "simclr-digits-projector"
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@contextlib.contextmanager
def _folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        yield Path(tmp)


def _cli(argv: list[str]) -> tuple[int, str]:
    """Exit status and stderr of the command line, run in-process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exc:  # argparse
            status = int(exc.code or 0)
    return status, err.getvalue()


def _assert_clean(status: int, err: str) -> None:
    assert status in (0, 2), err
    assert "Traceback" not in err, err
    if status == 2:
        errors = [line for line in err.splitlines() if "error:" in line]
        assert len(errors) == 1 and err.strip().splitlines()[-1] == errors[0], err


@st.composite
def mutated(
    draw: st.DrawFn, valid: bytes, kinds: tuple[str, ...] = ("random", "truncate", "flip", "splice")
) -> bytes:
    """``valid`` cut short, with bits flipped, with bytes spliced in, or random bytes."""
    kind = draw(st.sampled_from(kinds))
    if kind == "random":
        return draw(st.binary(max_size=512))
    data = bytearray(valid)
    if kind == "truncate":
        return bytes(data[: draw(st.integers(0, max(len(data) - 1, 0)))])
    if kind == "flip":
        for _ in range(draw(st.integers(1, 8))):
            at = draw(st.integers(0, len(data) - 1))
            data[at] ^= 1 << draw(st.integers(0, 7))
        return bytes(data)
    at = draw(st.integers(0, len(data)))
    return bytes(data[:at]) + draw(st.binary(min_size=1, max_size=32)) + bytes(data[at:])


def _records() -> bytes:
    lines = [make_record(s, metrics={"z/normalized_std": 0.1 * s}).to_json() for s in (0, 5)]
    return ("\n".join([*lines, full_record().to_json()]) + "\n").encode()


def _with_field(record: dict[str, Any], key: str, value: Any) -> bytes:
    return (json.dumps({**record, key: value}) + "\n").encode()


RECORD_FIELDS = [f for f in json.loads(full_record().to_json()) if f != "schema"]


class TestRecordsAndProbes:
    @FUZZ
    @given(
        data=mutated(_records())
        | st.builds(
            _with_field,
            st.just(json.loads(full_record().to_json())),
            st.sampled_from(RECORD_FIELDS),
            JSON,
        )
    )
    def test_report_on_any_geometry_jsonl(self, data: bytes) -> None:
        with _folder() as tmp:
            (tmp / "run").mkdir()
            (tmp / "run" / "geometry.jsonl").write_bytes(data)
            _assert_clean(*_cli(["report", str(tmp / "run"), "--out", str(tmp / "out")]))

    @FUZZ
    @given(
        data=mutated(json.dumps(probe_table().to_dict()).encode())
        | JSON.map(lambda v: json.dumps(v).encode())
    )
    def test_report_on_any_probes_json(self, data: bytes) -> None:
        with _folder() as tmp:
            run = RunFolder(tmp / "run")
            run.path.mkdir()
            run.probes.write_bytes(data)
            _assert_clean(*_cli(["report", str(run.path), "--out", str(tmp / "out")]))


class TestCards:
    @FUZZ
    @given(
        data=mutated((CARD / "geometry.json").read_bytes()), key=st.text(max_size=12), value=JSON
    )
    def test_zoo_list_on_any_card(self, data: bytes, key: str, value: Any) -> None:
        with _folder() as tmp:
            for name, content in (
                ("mutated", data),
                (
                    "typed",
                    _with_field(json.loads((CARD / "geometry.json").read_bytes()), key, value),
                ),
            ):
                (tmp / name).mkdir()
                (tmp / name / "geometry.json").write_bytes(content)
                _assert_clean(*_cli(["zoo", "list", str(tmp)]))
                (tmp / name / "geometry.json").unlink()


class TestCardFolders:
    @FUZZ
    @given(recipe=mutated((CARD / "recipe.yaml").read_bytes(), ("random", "truncate", "flip")))
    def test_zoo_verify_on_any_card_recipe(self, recipe: bytes) -> None:
        """A card folder whose ``recipe.yaml`` is damaged (flips keep numbers' sizes: a splice
        could ask for a layer of millions of units, a real model, not a damaged file)."""
        with _folder() as tmp:
            card = tmp / "card"
            shutil.copytree(CARD, card)
            (card / "recipe.yaml").write_bytes(recipe)
            _assert_clean(*_cli(["zoo", "verify", str(card)]))


def _npz() -> bytes:
    out = io.BytesIO()
    np.savez(out, **orbit_arrays())
    return out.getvalue()


def _npy() -> bytes:
    out = io.BytesIO()
    np.save(out, np.array(orbit_arrays(), dtype=object), allow_pickle=True)
    return out.getvalue()


class TestArrays:
    @FUZZ
    @given(data=mutated(_npz()))
    def test_orbits_on_any_npz(self, data: bytes) -> None:
        with _folder() as tmp:
            (tmp / "a.npz").write_bytes(data)
            _assert_clean(*_cli(["orbits", str(tmp / "a.npz")]))

    @FUZZ
    @given(data=mutated(_npy()))
    def test_orbits_on_any_npy(self, data: bytes) -> None:
        with _folder() as tmp:
            (tmp / "a.npy").write_bytes(data)
            _assert_clean(*_cli(["orbits", str(tmp / "a.npy")]))
            _assert_clean(*_cli(["reproduce", "verdicts", "collapse", str(tmp / "a.npy")]))


def _checkpoint() -> bytes:
    ckpt = {
        "state_dict": {
            "backbone.weight": torch.arange(4.0),
            "projector.0.weight": torch.ones(2, 2),
        },
        "epoch": 0,
        "global_step": 1,
        "pytorch-lightning_version": "2.6.0",
        "loops": {},
    }
    out = io.BytesIO()
    torch.save(ckpt, out)
    return out.getvalue()


def _reads_cleanly(read: Callable[[], object]) -> None:
    """``read()`` succeeds or raises one of the command line's bad-input errors."""
    try:
        read()
    except (ValueError, OSError) as err:  # the command line prints it as one line, exit 2
        assert str(err).strip(), type(err).__name__


class TestCheckpoints:
    @FUZZ
    @given(data=mutated(_checkpoint()))
    def test_resume_checks_and_reader_on_any_checkpoint(self, data: bytes) -> None:
        with _folder() as tmp:
            run = RunFolder(tmp / "run")
            run.checkpoints.mkdir(parents=True)
            run.config.write_text("method: simclr\n")
            ckpt = run.checkpoints / "last.ckpt"
            ckpt.write_bytes(data)
            _reads_cleanly(lambda: resume_point(run.path))
            _reads_cleanly(lambda: check_weights_only(ckpt))
            _reads_cleanly(lambda: read_checkpoint(ckpt))


def _png(mode: str) -> bytes:
    out = io.BytesIO()
    size = {"L": 1, "RGB": 3}.get(mode, 1)
    pixels = np.arange(64 * size).reshape(8, 8, size).squeeze().astype(np.uint8)
    Image.fromarray(pixels).convert(mode).save(out, format="PNG")
    return out.getvalue()


class TestImageFolders:
    @FUZZ
    @given(
        data=mutated(_png("RGB")) | mutated(_png("L")) | mutated(_png("I;16")),
        suffix=st.sampled_from([".png", ".jpg", ".tiff"]),
    )
    def test_image_checks_on_any_image(self, data: bytes, suffix: str) -> None:
        self._check(data, suffix)

    @FUZZ
    @given(width=st.integers(1, 2**31 - 1), height=st.integers(1, 2**31 - 1))
    def test_image_checks_on_any_declared_size(self, width: int, height: int) -> None:
        """Headers declaring any size, decompression bombs included (found: a traceback)."""
        self._check(png_of_size(width, height), ".png")

    def _check(self, data: bytes, suffix: str) -> None:
        with _folder() as tmp:
            for label in ("0", "1"):
                (tmp / label).mkdir()
                (tmp / label / "good.png").write_bytes(_png("RGB"))
            (tmp / "1" / f"fuzzed{suffix}").write_bytes(data)
            _reads_cleanly(lambda: check_image_folder(tmp, "data.train_path"))
            _reads_cleanly(lambda: load_image_folder(tmp))


@pytest.mark.parametrize("mode", ["RGB", "L", "I;16"])
def test_seed_images_are_what_they_say(mode: str) -> None:
    """The fuzzer's seeds: valid images of each mode (a seed PIL misreads would test nothing)."""
    with Image.open(io.BytesIO(_png(mode))) as im:
        assert im.mode == mode and im.size == (8, 8)
