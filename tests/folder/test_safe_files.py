"""No link followed out of a run folder, no file read past its cap (folder/safe_files.py).

Each file kind of a run folder is made a symbolic link to a file outside the folder; every
reader and writer of that kind refuses it with one ``LinkRefused`` naming the link, and the
outside file keeps its bytes. The end-to-end cases (``pretrain --resume``, ``report``, ``probe``
on such folders: one line, exit 2) are rows of tests/test_bad_input.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from solo_geometry.analysis.run_data import check_reportable, read_run
from solo_geometry.folder.atomic import append_line, write_text
from solo_geometry.folder.field_types import fits
from solo_geometry.folder.lock import writer_lock
from solo_geometry.folder.records import RecordsError, read_records
from solo_geometry.folder.resume import check_archive, resume_point
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.folder.safe_files import (
    LinkRefused,
    TooLarge,
    open_read,
    read_bytes,
    read_text,
)
from solo_geometry.inputs.features import load_cache

RECORD = '{"schema": 3, "step": 0, "epoch": 0, "status": "ok"}\n'
OUTSIDE = b"the user's own file, outside the run folder\n"


@pytest.fixture
def run(tmp_path: Path) -> RunFolder:
    """A run folder with one record, and ``outside`` (a file the links point to)."""
    (tmp_path / "outside").write_bytes(OUTSIDE)
    folder = RunFolder(tmp_path / "run")
    folder.path.mkdir()
    folder.geometry.write_text(RECORD)
    return folder


def _link(run: RunFolder, name: str) -> Path:
    """Make ``<run>/<name>`` a link to the outside file; returns the outside file."""
    outside = run.path.parent / "outside"
    link = run.path / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    os.symlink(outside, link)
    return outside


class TestLinkedRunFiles:
    def test_lock_link_is_refused_and_its_target_kept(self, run: RunFolder) -> None:
        outside = _link(run, RunFolder.LOCK)
        with pytest.raises(LinkRefused, match=r"'.*/run/\.lock' is a symbolic link \(to '"):
            with writer_lock(run):
                pytest.fail("the lock was taken through a link")
        assert outside.read_bytes() == OUTSIDE
        assert (run.path / ".lock").is_symlink()  # left as found

    def test_records_link_refused_reading_and_appending(self, run: RunFolder) -> None:
        outside = _link(run, RunFolder.GEOMETRY)
        with pytest.raises(LinkRefused, match="geometry.jsonl' is a symbolic link"):
            read_records(run.path)
        with pytest.raises(LinkRefused, match="geometry.jsonl' is a symbolic link"):
            append_line(run.geometry, RECORD)
        assert outside.read_bytes() == OUTSIDE

    def test_atomic_replace_replaces_the_link_not_its_target(self, run: RunFolder) -> None:
        outside = _link(run, RunFolder.CONFIG)
        write_text(run.config, "method: simclr\n")
        assert not run.config.is_symlink() and run.config.read_text() == "method: simclr\n"
        assert outside.read_bytes() == OUTSIDE

    def test_planted_temporary_file_link_is_not_written_through(self, run: RunFolder) -> None:
        outside = _link(run, f".{RunFolder.PROBES}.{os.getpid()}.tmp")
        write_text(run.probes, "{}")
        assert run.probes.read_text() == "{}" and outside.read_bytes() == OUTSIDE

    def test_probes_link_refused(self, run: RunFolder) -> None:
        outside = _link(run, RunFolder.PROBES)
        with pytest.raises(LinkRefused, match="probes.json' is a symbolic link"):
            run.read_probes()
        assert outside.read_bytes() == OUTSIDE

    def test_features_link_refused(self, run: RunFolder) -> None:
        _link(run, RunFolder.FEATURES)
        with pytest.raises(LinkRefused, match="features.pt' is a symbolic link"):
            load_cache(run.features, any_tag=True)

    def test_checkpoint_link_refused(self, run: RunFolder) -> None:
        _link(run, "checkpoints/last.ckpt")
        with pytest.raises(LinkRefused, match="last.ckpt' is a symbolic link"):
            run.latest_checkpoint()
        with pytest.raises(LinkRefused, match="last.ckpt' is a symbolic link"):
            check_archive(run.checkpoints / "last.ckpt")

    @pytest.mark.parametrize(
        "name", [".lock", "geometry.jsonl", "checkpoints/a/last.ckpt", "report", ".hydra"]
    )
    def test_resume_refuses_any_link_before_anything(self, run: RunFolder, name: str) -> None:
        _link(run, name)
        before = sorted(p.name for p in run.path.rglob("*"))
        with pytest.raises(LinkRefused, match=f"{name}' is a symbolic link"):
            resume_point(run.path)
        assert sorted(p.name for p in run.path.rglob("*")) == before

    @pytest.mark.parametrize("name", ["geometry.jsonl", "probes.json", "config.yaml", "report"])
    def test_report_refuses_links(self, run: RunFolder, name: str) -> None:
        _link(run, name)
        with pytest.raises(LinkRefused, match=f"{name}' is a symbolic link"):
            check_reportable(run.path)
            read_run(run.path)


class TestCaps:
    def test_file_over_its_cap_refused_before_reading(self, tmp_path: Path) -> None:
        big = tmp_path / "big.json"
        big.write_bytes(b" " * 101)
        with pytest.raises(
            TooLarge, match=r"probe table '.*big.json' is 101 bytes, over the cap of 100"
        ):
            read_bytes(big, 100, "probe table")
        assert read_bytes(big, 101, "probe table") == b" " * 101

    def test_not_a_regular_file(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="is not a regular file"):
            open_read(tmp_path, 100, "probe table")

    def test_text_that_is_not_utf8_is_named(self, tmp_path: Path) -> None:
        bad = tmp_path / "card.json"
        bad.write_bytes(b'{"a": "\xff"}')
        with pytest.raises(ValueError, match=r"'.*card.json' is not UTF-8 text \(byte 7 is 0xff\)"):
            read_text(bad, 100, "zoo card")


class TestFieldTypes:
    @pytest.mark.parametrize(
        ("value", "kind", "ok"),
        [
            (1, int, True),
            (True, int, False),
            (1, float, True),
            (1.5, int, False),
            (None, int | None, True),
            ({"a": 1.0, "b": None}, dict[str, float | None], True),
            ({"a": "x"}, dict[str, float | None], False),
            ([1.0, 2], list[float], True),
            ([1.0, "2"], list[float], False),
            ("x", list[str], False),
        ],
    )
    def test_fits(self, value: object, kind: object, ok: bool) -> None:
        assert fits(value, kind) is ok

    @pytest.mark.parametrize(
        ("field", "value", "expected"),
        [
            ("step", "ten", "field step must be int, got 'ten' (str)"),
            ("metrics", [1], "field metrics must be dict[str, float | int | bool | None]"),
            ("final", 1, "field final must be bool, got 1 (int)"),
            ("alert", {"since": 3}, "alert: expected a 'state' string"),
            ("density", {"nodes": [1.0]}, "density: expected 'nodes' and 'weights' of one"),
        ],
    )
    def test_records_of_wrong_types_refused_naming_file_line_field(
        self, tmp_path: Path, field: str, value: object, expected: str
    ) -> None:
        line = {**json.loads(RECORD), field: value}
        (tmp_path / "geometry.jsonl").write_text(json.dumps(line) + "\n")
        with pytest.raises(RecordsError, match="geometry.jsonl:1: ") as caught:
            read_records(tmp_path)
        assert expected in str(caught.value)


def test_features_cache_round_trip_through_the_guarded_reader(tmp_path: Path) -> None:
    """The guarded reader loads what ``torch.save`` wrote (no false refusal)."""
    cache = {"format": "solo-geometry/features-1", "tag": "t", "sets": {}, "meta": {}}
    torch.save(cache, tmp_path / "features.pt")
    with open_read(tmp_path / "features.pt", 1 << 20, "feature cache") as fh:
        assert torch.load(fh, weights_only=True) == cache
