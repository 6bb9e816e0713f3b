"""Tests of solo_geometry/folder/run_folder.py: the run folder and every path in it."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest

from solo_geometry.folder import run_folder as run_folder_module
from solo_geometry.folder.probe_table import OrbitRow, ProbeRow
from solo_geometry.folder.records import RecordsError
from solo_geometry.folder.run_folder import RunFolder
from tests.record_helpers import (
    ORBIT_ROW,
    PROBE_ROW,
    full_record,
    make_record,
    probe_table,
    record_line,
    write_file,
)


class TestRunFolder:
    @pytest.fixture
    def run(self, tmp_path: Path) -> RunFolder:
        return RunFolder.create(tmp_path / "runs", "byol-digits")

    def test_create(self, tmp_path: Path) -> None:
        run = RunFolder.create(tmp_path / "new" / "runs", "byol-digits")
        assert run.path.parent == tmp_path / "new" / "runs"
        assert re.fullmatch(r"byol-digits-\d{8}-\d{6}", run.path.name)
        assert sorted(p.name for p in run.path.iterdir()) == [RunFolder.INCOMPLETE]

    def test_create_names_are_unique(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(run_folder_module.time, "strftime", lambda fmt: "20240102-030405")
        paths = [RunFolder.create(tmp_path, "r").path for _ in range(3)]
        stem = "r-20240102-030405"
        assert [p.name for p in paths] == [stem, f"{stem}-1", f"{stem}-2"]
        assert all((p / RunFolder.INCOMPLETE).is_file() for p in paths)

    @pytest.mark.parametrize("name", ["", "a/b", "a\\b", ".", "..", "/abs"])
    def test_create_rejects_bad_names(self, tmp_path: Path, name: str) -> None:
        with pytest.raises(ValueError, match=re.escape(repr(name))):
            RunFolder.create(tmp_path / "runs", name)
        assert not (tmp_path / "runs").exists()

    @pytest.mark.parametrize(
        ("attr", "name"),
        [
            ("geometry", "geometry.jsonl"),
            ("probes", "probes.json"),
            ("features", "features.pt"),
            ("config", "config.yaml"),
            ("checkpoints", "checkpoints"),
            ("report", "report"),
        ],
    )
    def test_paths(self, tmp_path: Path, attr: str, name: str) -> None:
        assert getattr(RunFolder(str(tmp_path)), attr) == tmp_path / name

    def test_finish_ok_drops_marker(self, run: RunFolder) -> None:
        assert run.finish(ok=True)
        assert run.path.is_dir() and not (run.path / RunFolder.INCOMPLETE).exists()

    @pytest.mark.parametrize(
        ("files", "kept"),
        [
            ({}, False),
            ({"geometry.jsonl": ""}, False),
            ({"config.yaml": "a: 1\n", "report/index.html": "<html/>"}, False),
            ({"checkpoints/last.ckpt": "x"}, True),
            ({"checkpoints/deep/epoch=1.ckpt": "x"}, True),
            ({"geometry.jsonl": record_line(0) + "\n"}, True),
        ],
        ids=["empty", "empty-records", "no-results", "ckpt", "nested-ckpt", "records"],
    )
    def test_finish_failed(self, run: RunFolder, files: dict[str, str], kept: bool) -> None:
        for name, text in files.items():
            write_file(run.path / name, text)
        assert run.has_results() is kept
        assert run.finish(ok=False) is kept
        assert run.path.is_dir() is kept
        if kept:
            assert (run.path / RunFolder.INCOMPLETE).read_text().startswith("failed")

    def test_append_record(self, run: RunFolder) -> None:
        written = [full_record(), make_record(20, "skipped"), make_record(30)]
        for record in written:
            run.append_record(record)
        assert run.geometry.read_text().count("\n") == 3
        assert run.records() == written
        assert run.records(ok_only=True) == [written[0], written[2]]

    def test_start_records_none_empties(self, run: RunFolder) -> None:
        write_file(run.geometry, f"{record_line(0)}\n{record_line(1)}\n")
        run.start_records(None)
        assert run.geometry.read_text() == ""
        (run.path / "fresh").mkdir()
        fresh = RunFolder(run.path / "fresh")
        fresh.start_records(None)
        assert fresh.geometry.read_text() == ""

    @pytest.mark.parametrize(
        ("keep_through", "steps"),
        [(-1, []), (0, [0]), (9, [0, 5]), (10, [0, 5, 10]), (100, [0, 5, 10, 15])],
    )
    def test_start_records_keeps_through_step(
        self, run: RunFolder, keep_through: int, steps: list[int]
    ) -> None:
        write_file(run.geometry, "".join(f"{record_line(s)}\n" for s in (0, 5, 10, 15)))
        run.start_records(keep_through)
        assert [r.step for r in run.records()] == steps

    @pytest.mark.parametrize(("keep_through", "steps"), [(5, [0, 5]), (100, [0, 5, 10])])
    def test_start_records_repairs_torn_last_line(
        self, run: RunFolder, keep_through: int, steps: list[int]
    ) -> None:
        write_file(
            run.geometry,
            f"{record_line(0)}\n{record_line(5)}\n{record_line(10)}\n" + '{"schema": 1, "st',
        )
        with pytest.warns(UserWarning, match="torn"):
            run.start_records(keep_through)
        text = run.geometry.read_text()
        assert text.endswith("\n") and text.count("\n") == len(steps)
        run.append_record(make_record(200))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert [r.step for r in run.records()] == [*steps, 200]

    def test_write_config(self, run: RunFolder) -> None:
        path = run.write_config({"lr": 0.5, "name": "byol", "tag": "${name}-${lr}"})
        assert path == run.config == run.path / "config.yaml"
        assert path.read_text() == "lr: 0.5\nname: byol\ntag: byol-0.5\n"

    def test_write_config_keeps_unresolvable_interpolation(self, run: RunFolder) -> None:
        path = run.write_config({"a": "${missing}"})
        assert path.read_text() == "a: ${missing}\n"

    def test_write_read_probes_round_trip(self, tmp_path: Path) -> None:
        run = RunFolder(tmp_path)
        assert run.read_probes() is None
        table = probe_table()
        assert run.write_probes(table) == run.probes == tmp_path / "probes.json"
        back = run.read_probes()
        assert back == table
        assert back is not None and isinstance(back.rows[0], ProbeRow)
        assert isinstance(back.orbits[0], OrbitRow)
        assert json.loads(run.probes.read_text())["gaps"] == table.gaps()
        assert [p.name for p in tmp_path.iterdir()] == ["probes.json"]  # no temporary left

    @pytest.mark.parametrize(
        ("patch", "message"),
        [
            ({"schema": 99}, "schema version 99"),
            ({"rows": [{**PROBE_ROW, "seed": 3}]}, r"probes.json.rows: unknown.*'seed'"),
            ({"orbits": [{**ORBIT_ROW, "tmax": 2}]}, r"probes.json.orbits: unknown.*'tmax'"),
            ({"extra": 1}, r"probes.json: unknown.*'extra'"),
        ],
        ids=["schema", "row-field", "orbit-field", "table-field"],
    )
    def test_read_probes_rejects_unknown(
        self, tmp_path: Path, patch: dict[str, Any], message: str
    ) -> None:
        run = RunFolder(tmp_path)
        write_file(run.probes, json.dumps({**probe_table().to_dict(), **patch}))
        with pytest.raises(RecordsError, match=message):
            run.read_probes()

    def test_read_probes_corrupt_names_file(self, tmp_path: Path) -> None:
        run = RunFolder(tmp_path)
        write_file(run.probes, '{"rows": [')
        with pytest.raises(RecordsError, match=rf"^{re.escape(str(run.probes))}: not JSON"):
            run.read_probes()
