"""Run records (solo_geometry.records): the record schema, its reader, the run folder, probes.

Hand-written references throughout: files are written line by line here, not through the
module under test, and the probe gaps are computed by hand from binary fractions so they
compare exactly.
"""

from __future__ import annotations

import dataclasses
import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest

from solo_geometry import records as records_module
from solo_geometry.records import (
    SCHEMA_VERSION,
    GeometryRecord,
    OrbitRow,
    ProbeRow,
    ProbeTable,
    RecordsError,
    RunFolder,
    Settings,
    read_records,
)

SETTINGS = Settings(
    dtype="float64",
    tau=1e-3,
    floor=2.5e-4,
    n_batch=64,
    n_block=8,
    n_views=2,
    dim=256,
    lanczos_steps=30,
    density_probes=4,
    augment_samples=16,
    seed=7,
)


def _record(step: int, status: str = "ok", **kwargs: Any) -> GeometryRecord:
    reason = None if status == "ok" else "non-finite loss"
    return GeometryRecord(step=step, epoch=step // 10, status=status, reason=reason, **kwargs)


def _full_record() -> GeometryRecord:
    """A record with every field away from its default."""
    return GeometryRecord(
        step=12,
        epoch=3,
        status="ok",
        reason=None,
        settings=SETTINGS,
        metrics={"heff/lambda_min": -0.5, "heff/neg_count": 3, "gn/cond": None, "flag": True},
        density={"nodes": [0.0, 1.5], "weights": [0.25, 0.75]},
        final=True,
        head="bn_relu",
        n_skipped=2,
        seconds=0.125,
        meta={"geometry": {"every_n_steps": 10}},
    )


def _line(step: int, status: str = "ok", **extra: Any) -> str:
    """One line of geometry.jsonl written by hand (no trailing newline)."""
    data = {"schema": SCHEMA_VERSION, "step": step, "epoch": 0, "status": status, **extra}
    return json.dumps(data)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


_ROW = {"features": "z", "probe": "linear", "target": "t", "accuracy": 1.0, "chance": 0.5}
_ORBIT = {"family": "crop", "t_max": 1.0, "z": {}, "h": {}, "compression": {}}


def _probe_table() -> ProbeTable:
    """Accuracies are binary fractions so every gap is exact."""
    rows = [
        ProbeRow("z", "linear", "digit", 0.875, 0.1, {"lam": 1e-3}),
        ProbeRow("h", "linear", "digit", 0.625, 0.1),
        ProbeRow("z", "mlp", "digit", 0.9375, 0.1, {"hidden": 64}),
        ProbeRow("h", "mlp", "digit", 0.8125, 0.1),
        ProbeRow("z", "linear", "rotation", 0.5, 0.25),  # no h counterpart, no mlp counterpart
        ProbeRow("h", "mlp", "rotation", 0.75, 0.25),  # no z counterpart, no linear counterpart
    ]
    orbits = [
        OrbitRow(
            family="crop",
            t_max=0.5,
            z={"spread": 1.5, "curvature": 0.25},
            h={"spread": 0.75, "curvature": 0.5},
            compression={"mean": 2.0, "std": 0.125},
        ),
    ]
    return ProbeTable(rows=rows, orbits=orbits, settings={"seed": 0, "n_train": 1000})


class TestGeometryRecord:
    @pytest.mark.parametrize(
        ("obj", "name"),
        [(_record(0), "step"), (_record(0), "settings"), (SETTINGS, "tau")],
        ids=["record.step", "record.settings", "settings.tau"],
    )
    def test_frozen(self, obj: Any, name: str) -> None:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, name, 1)

    def test_versioned(self) -> None:
        record = _record(0)
        assert record.schema == SCHEMA_VERSION
        assert json.loads(record.to_json())["schema"] == SCHEMA_VERSION

    def test_to_json_is_one_line_of_plain_json(self) -> None:
        text = _full_record().to_json()
        assert "\n" not in text
        data = json.loads(text)
        assert data["settings"] == dataclasses.asdict(SETTINGS)
        assert data["metrics"]["gn/cond"] is None

    def test_to_json_rejects_nan(self) -> None:
        with pytest.raises(ValueError):
            _record(0, metrics={"x": float("nan")}).to_json()

    @pytest.mark.parametrize("record", [_record(0), _full_record()], ids=["defaults", "full"])
    def test_round_trip(self, record: GeometryRecord) -> None:
        back = GeometryRecord.from_dict(json.loads(record.to_json()))
        assert back == record
        assert isinstance(back.settings, Settings)

    @pytest.mark.parametrize(
        ("patch", "where", "name"),
        [
            ({"bogus": 1}, "rec", "bogus"),
            ({"settings": {"tau": 0.1, "lanczos_stepz": 3}}, "rec.settings", "lanczos_stepz"),
        ],
        ids=["top-level", "nested-settings"],
    )
    def test_unknown_field_rejected_by_name(
        self, patch: dict[str, Any], where: str, name: str
    ) -> None:
        data = {**json.loads(_record(0).to_json()), **patch}
        with pytest.raises(RecordsError, match=rf"^{re.escape(where)}: unknown.*'{name}'"):
            GeometryRecord.from_dict(data, "rec")

    @pytest.mark.parametrize("status", ["failed", "OK", ""])
    def test_unknown_status_rejected(self, status: str) -> None:
        with pytest.raises(RecordsError, match=repr(status)):
            GeometryRecord(step=0, epoch=0, status=status)
        with pytest.raises(RecordsError, match=repr(status)):
            GeometryRecord.from_dict(json.loads(_line(0, status)))

    def test_missing_required_field_is_a_records_error(self) -> None:
        with pytest.raises(RecordsError, match="^rec: .*epoch"):
            GeometryRecord.from_dict({"schema": SCHEMA_VERSION, "step": 0, "status": "ok"}, "rec")

    @pytest.mark.parametrize("schema", [None, 0, 99, "1"])
    def test_unknown_schema_rejected_naming_it(self, schema: Any) -> None:
        data = {**json.loads(_record(0).to_json()), "schema": schema}
        with pytest.raises(RecordsError, match=f"schema version {re.escape(repr(schema))}"):
            GeometryRecord.from_dict(data)

    @pytest.mark.parametrize("data", [[1, 2], "ok", 3])
    def test_non_object_rejected(self, data: Any) -> None:
        with pytest.raises(RecordsError, match="expected a JSON object"):
            GeometryRecord.from_dict(data)

    @pytest.mark.parametrize(
        ("value", "expected"),
        [(2, 2.0), (-0.5, -0.5), (None, None), (True, None), (float("inf"), None), ("x", None)],
    )
    def test_value(self, value: Any, expected: float | None) -> None:
        record = _record(0, metrics={"k": value})
        assert record.value("k") == expected
        assert record.value("absent") is None

    @pytest.mark.parametrize(("status", "ok"), [("ok", True), ("skipped", False)])
    def test_ok(self, status: str, ok: bool) -> None:
        assert _record(0, status).ok is ok


class TestReadRecords:
    def test_reads_in_file_order_from_file_or_folder(self, tmp_path: Path) -> None:
        lines = [_line(0), _line(5, "skipped", reason="nan"), "", _line(10)]
        path = _write(tmp_path / RunFolder.GEOMETRY, "\n".join(lines) + "\n")
        for source in (path, tmp_path, str(path)):
            got = read_records(source)
            assert [(r.step, r.status) for r in got] == [(0, "ok"), (5, "skipped"), (10, "ok")]
            assert got[1].reason == "nan"

    def test_final_line_without_newline_is_read(self, tmp_path: Path) -> None:
        path = _write(tmp_path / "g.jsonl", f"{_line(0)}\n{_line(1)}")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert [r.step for r in read_records(path)] == [0, 1]

    @pytest.mark.parametrize("torn", ['{"schema": 1, "step": 2, "ep', "{", '{"step": '])
    def test_torn_last_line_ignored_with_warning(self, tmp_path: Path, torn: str) -> None:
        path = _write(tmp_path / "g.jsonl", f"{_line(0)}\n{_line(1)}\n{torn}")
        with pytest.warns(UserWarning, match=rf"{re.escape(str(path))}:3: torn last record"):
            got = read_records(path)
        assert [r.step for r in got] == [0, 1]

    def test_corrupt_last_line_with_newline_is_not_torn(self, tmp_path: Path) -> None:
        path = _write(tmp_path / "g.jsonl", f"{_line(0)}\n{{garbage\n")
        with pytest.raises(RecordsError, match=rf"^{re.escape(str(path))}:2: not a JSON record"):
            read_records(path)

    def test_corrupt_middle_line_raises_naming_file_and_line(self, tmp_path: Path) -> None:
        path = _write(tmp_path / "g.jsonl", f"{_line(0)}\n{{garbage\n{_line(2)}\n")
        with pytest.raises(RecordsError, match=rf"^{re.escape(str(path))}:2: not a JSON record"):
            read_records(path)

    def test_invalid_record_raises_naming_file_and_line(self, tmp_path: Path) -> None:
        path = _write(tmp_path / "g.jsonl", f"{_line(0)}\n{_line(1, bogus=3)}\n")
        with pytest.raises(RecordsError, match=rf"^{re.escape(str(path))}:2: unknown.*'bogus'"):
            read_records(path)

    def test_problems_collected_and_rest_returned(self, tmp_path: Path) -> None:
        text = f"{_line(0)}\n{{garbage\n{_line(2, bogus=3)}\n{_line(3)}\n[1]\n"
        path = _write(tmp_path / "g.jsonl", text)
        problems: list[tuple[int, str]] = []
        got = read_records(path, problems=problems)
        assert [r.step for r in got] == [0, 3]
        assert [n for n, _ in problems] == [2, 3, 5]
        assert problems[0][1].startswith("not JSON")
        assert "'bogus'" in problems[1][1] and "expected a JSON object" in problems[2][1]
        assert not any(str(path) in reason for _, reason in problems)  # the line number says it

    @pytest.mark.parametrize("collect", [False, True], ids=["raise", "problems=[]"])
    def test_unknown_schema_version_always_raises(self, tmp_path: Path, collect: bool) -> None:
        bad = json.dumps({"schema": 99, "step": 1, "epoch": 0, "status": "ok"})
        path = _write(tmp_path / "g.jsonl", f"{_line(0)}\n{bad}\n{_line(2)}\n")
        problems: list[tuple[int, str]] | None = [] if collect else None
        with pytest.raises(RecordsError, match=rf"^{re.escape(str(path))}:2: schema version 99"):
            read_records(path, problems=problems)
        assert not problems

    def test_ok_only(self, tmp_path: Path) -> None:
        lines = [_line(0), _line(1, "skipped"), _line(2), _line(3, "skipped")]
        path = _write(tmp_path / "g.jsonl", "\n".join(lines) + "\n")
        assert [r.step for r in read_records(path, ok_only=True)] == [0, 2]
        assert [r.step for r in read_records(path)] == [0, 1, 2, 3]

    @pytest.mark.parametrize("name", ["missing.jsonl", "empty-run"])
    def test_missing_file_is_empty(self, tmp_path: Path, name: str) -> None:
        (tmp_path / "empty-run").mkdir()
        assert read_records(tmp_path / name) == []

    def test_empty_file_is_empty(self, tmp_path: Path) -> None:
        assert read_records(_write(tmp_path / "g.jsonl", "")) == []


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
        monkeypatch.setattr(records_module.time, "strftime", lambda fmt: "20240102-030405")
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
            ({"geometry.jsonl": _line(0) + "\n"}, True),
        ],
        ids=["empty", "empty-records", "no-results", "ckpt", "nested-ckpt", "records"],
    )
    def test_finish_failed(self, run: RunFolder, files: dict[str, str], kept: bool) -> None:
        for name, text in files.items():
            _write(run.path / name, text)
        assert run.has_results() is kept
        assert run.finish(ok=False) is kept
        assert run.path.is_dir() is kept
        if kept:
            assert (run.path / RunFolder.INCOMPLETE).read_text().startswith("failed")

    def test_append_record(self, run: RunFolder) -> None:
        written = [_full_record(), _record(20, "skipped"), _record(30)]
        for record in written:
            run.append_record(record)
        assert run.geometry.read_text().count("\n") == 3
        assert run.records() == written
        assert run.records(ok_only=True) == [written[0], written[2]]

    def test_start_records_none_empties(self, run: RunFolder) -> None:
        _write(run.geometry, f"{_line(0)}\n{_line(1)}\n")
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
        _write(run.geometry, "".join(f"{_line(s)}\n" for s in (0, 5, 10, 15)))
        run.start_records(keep_through)
        assert [r.step for r in run.records()] == steps

    @pytest.mark.parametrize(("keep_through", "steps"), [(5, [0, 5]), (100, [0, 5, 10])])
    def test_start_records_repairs_torn_last_line(
        self, run: RunFolder, keep_through: int, steps: list[int]
    ) -> None:
        _write(run.geometry, f"{_line(0)}\n{_line(5)}\n{_line(10)}\n" + '{"schema": 1, "st')
        with pytest.warns(UserWarning, match="torn"):
            run.start_records(keep_through)
        text = run.geometry.read_text()
        assert text.endswith("\n") and text.count("\n") == len(steps)
        run.append_record(_record(200))
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
        table = _probe_table()
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
            ({"rows": [{**_ROW, "seed": 3}]}, r"probes.json.rows: unknown.*'seed'"),
            ({"orbits": [{**_ORBIT, "tmax": 2}]}, r"probes.json.orbits: unknown.*'tmax'"),
            ({"extra": 1}, r"probes.json: unknown.*'extra'"),
        ],
        ids=["schema", "row-field", "orbit-field", "table-field"],
    )
    def test_read_probes_rejects_unknown(
        self, tmp_path: Path, patch: dict[str, Any], message: str
    ) -> None:
        run = RunFolder(tmp_path)
        _write(run.probes, json.dumps({**_probe_table().to_dict(), **patch}))
        with pytest.raises(RecordsError, match=message):
            run.read_probes()

    def test_read_probes_corrupt_names_file(self, tmp_path: Path) -> None:
        run = RunFolder(tmp_path)
        _write(run.probes, '{"rows": [')
        with pytest.raises(RecordsError, match=rf"^{re.escape(str(run.probes))}: not JSON"):
            run.read_probes()


class TestProbeTable:
    def test_gaps(self) -> None:
        assert _probe_table().gaps() == {
            "z_minus_h": {"linear/digit": 0.875 - 0.625, "mlp/digit": 0.9375 - 0.8125},
            "mlp_minus_linear": {"z/digit": 0.9375 - 0.875, "h/digit": 0.8125 - 0.625},
        }
        assert _probe_table().gaps()["z_minus_h"]["linear/digit"] == 0.25  # sign: z minus h

    def test_gaps_empty(self) -> None:
        assert ProbeTable(rows=[]).gaps() == {"z_minus_h": {}, "mlp_minus_linear": {}}

    @pytest.mark.parametrize(
        ("key", "expected"),
        [
            (("z", "linear", "digit"), 0.875),
            (("h", "mlp", "digit"), 0.8125),
            (("h", "mlp", "rotation"), 0.75),
            (("h", "linear", "rotation"), None),
            (("z", "mlp", "colour"), None),
        ],
    )
    def test_accuracy(self, key: tuple[str, str, str], expected: float | None) -> None:
        assert _probe_table().accuracy(*key) == expected

    def test_to_dict_carries_gaps(self) -> None:
        data = _probe_table().to_dict()
        assert data["gaps"] == _probe_table().gaps()
        assert data["schema"] == SCHEMA_VERSION
