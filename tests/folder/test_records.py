"""Run records (solo_geometry.folder.records) and the run folder (solo_geometry.folder.run_folder).

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

from solo_geometry.folder.probe_table import (
    PROBES_SCHEMA_VERSION,
    ProbeRow,
    ProbeTable,
    below_random_init,
    random_init_summary,
    versus_random_init,
)
from solo_geometry.folder.records import (
    RENAMED_METRICS,
    SCHEMA_VERSION,
    GeometryRecord,
    RecordsError,
    RecordsWarning,
    Settings,
    read_records,
)
from solo_geometry.geometry.metrics import registered
from tests.record_helpers import (
    SETTINGS,
    full_record,
    make_record,
    probe_table,
    record_line,
    write_file,
)


class TestGeometryRecord:
    @pytest.mark.parametrize(
        ("obj", "name"),
        [(make_record(0), "step"), (make_record(0), "settings"), (SETTINGS, "tau")],
        ids=["record.step", "record.settings", "settings.tau"],
    )
    def test_frozen(self, obj: Any, name: str) -> None:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, name, 1)

    def test_versioned(self) -> None:
        record = make_record(0)
        assert record.schema == SCHEMA_VERSION
        assert json.loads(record.to_json())["schema"] == SCHEMA_VERSION

    def test_to_json_is_one_line_of_plain_json(self) -> None:
        text = full_record().to_json()
        assert "\n" not in text
        data = json.loads(text)
        assert data["settings"] == dataclasses.asdict(SETTINGS)
        assert data["metrics"]["gn/cond"] is None

    def test_to_json_rejects_nan(self) -> None:
        with pytest.raises(ValueError):
            make_record(0, metrics={"x": float("nan")}).to_json()

    @pytest.mark.parametrize("record", [make_record(0), full_record()], ids=["defaults", "full"])
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
        data = {**json.loads(make_record(0).to_json()), **patch}
        with pytest.raises(RecordsError, match=rf"^{re.escape(where)}: unknown.*'{name}'"):
            GeometryRecord.from_dict(data, "rec")

    @pytest.mark.parametrize("status", ["failed", "OK", ""])
    def test_unknown_status_rejected(self, status: str) -> None:
        with pytest.raises(RecordsError, match=repr(status)):
            GeometryRecord(step=0, epoch=0, status=status)
        with pytest.raises(RecordsError, match=repr(status)):
            GeometryRecord.from_dict(json.loads(record_line(0, status)))

    def test_missing_required_field_is_a_records_error(self) -> None:
        with pytest.raises(RecordsError, match="^rec: .*epoch"):
            GeometryRecord.from_dict({"schema": SCHEMA_VERSION, "step": 0, "status": "ok"}, "rec")

    def test_version_1_is_read_with_the_parts_it_held(self) -> None:
        # a version-1 record held every configured part; the reader says which from its names
        v1 = {
            "schema": 1,
            "step": 3,
            "epoch": 0,
            "status": "ok",
            "metrics": {"heff/lambda_max": 1.0, "z/cond": 2.0, "rho/hue": 0.1},
            "density": {"nodes": [0.0], "weights": [1.0]},
        }
        record = GeometryRecord.from_dict(v1)
        assert record.schema == SCHEMA_VERSION == 5
        assert record.parts == ["stats", "hessian", "augment", "density"]
        assert record.deferred_parts == {}
        stats_only = GeometryRecord.from_dict({**v1, "metrics": {"h/rank": 3}, "density": None})
        assert stats_only.parts == ["stats"] and stats_only.holds("stats")
        skipped = GeometryRecord.from_dict({**v1, "status": "skipped", "metrics": {}})
        assert skipped.parts == [] and not skipped.holds("stats")

    def test_parts_and_deferred_parts_round_trip(self) -> None:
        why = {"hessian": "budget: ...", "augment": "budget: ..."}
        record = GeometryRecord(5, 0, "ok", parts=["stats"], deferred_parts=why)
        back = GeometryRecord.from_dict(json.loads(record.to_json()))
        assert back == record and back.holds("stats") and not back.holds("hessian")

    def test_version_2_reads_and_version_3_round_trips_precision(self) -> None:
        v2 = {
            "schema": 2,
            "step": 1,
            "epoch": 0,
            "status": "ok",
            "parts": ["stats"],
            "settings": {"dtype": "float32"},
        }
        old = GeometryRecord.from_dict(v2)
        assert old.failed_parts == {} and old.settings.precision is None
        matmul = {
            "cuda_matmul_allow_tf32": True,
            "cudnn_allow_tf32": True,
            "float32_matmul_precision": "high",
        }
        settings = Settings(
            dtype="float32", features_dtype="bfloat16", precision="bf16-mixed", user_matmul=matmul
        )
        record = GeometryRecord(
            2,
            0,
            "ok",
            settings=settings,
            parts=["stats"],
            failed_parts={"hessian": "FloatingPointError: ..."},
        )
        back = GeometryRecord.from_dict(json.loads(record.to_json()))
        assert back == record and back.holds("stats") and not back.holds("hessian")
        with pytest.raises(RecordsError, match="rho"):
            GeometryRecord(2, 0, "ok", failed_parts={"rho": "?"})

    def test_version_3_reads_without_rank_eps_and_version_4_round_trips_it(self) -> None:
        settings = {"dtype": "float32", "features_dtype": "bfloat16", "precision": "bf16-mixed"}
        v3 = {"schema": 3, "step": 1, "epoch": 0, "status": "ok", "settings": settings}
        old = GeometryRecord.from_dict(v3)
        assert old.schema == SCHEMA_VERSION == 5
        assert old.settings.rank_eps is None and old.settings.rank_work_eps is None
        assert old.settings.features_dtype == "bfloat16"
        eps = {"rank_eps": 2.0**-7, "rank_work_eps": 2.0**-23}
        record = GeometryRecord(1, 0, "ok", settings=Settings(**settings, **eps), parts=["stats"])
        back = GeometryRecord.from_dict(json.loads(record.to_json()))
        assert back == record and back.settings.rank_eps == 2.0**-7

    def test_version_4_reads_with_effective_rank_renamed(self, tmp_path: Path) -> None:
        metrics = {"z/effective_rank": 3.5, "h/effective_rank": 2.0, "metric/effective_rank": 4.0}
        v4 = {"schema": 4, "step": 2, "epoch": 0, "status": "ok", "parts": ["stats"]}
        (tmp_path / "geometry.jsonl").write_text(json.dumps({**v4, "metrics": metrics}) + "\n")
        (old,) = read_records(tmp_path)
        assert old.schema == SCHEMA_VERSION == 5
        # RankMe of the L2-normalised rows under its name; the metric head's own rank untouched
        assert old.metrics == {"z/rankme_l2": 3.5, "h/rankme_l2": 2.0, "metric/effective_rank": 4.0}
        assert all(registered(new) is not None for new in RENAMED_METRICS.values())
        assert not any(registered(old_key) for old_key in RENAMED_METRICS)
        v5 = GeometryRecord.from_dict({**v4, "schema": 5, "metrics": {"z/effective_rank": 1.0}})
        assert v5.metrics == {"z/effective_rank": 1.0}  # today's records are read as written

    @pytest.mark.parametrize("field", ["parts", "deferred_parts"])
    def test_unknown_part_rejected_naming_the_choices(self, field: str) -> None:
        value: Any = ["spectra"] if field == "parts" else {"spectra": "budget"}
        with pytest.raises(RecordsError, match=r"unknown \['spectra'\]; choose from \['stats'"):
            GeometryRecord(0, 0, "ok", **{field: value})

    @pytest.mark.parametrize("schema", [None, 0, 99, "1", True])
    def test_unknown_schema_rejected_naming_it(self, schema: Any) -> None:
        data = {**json.loads(make_record(0).to_json()), "schema": schema}
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
        record = make_record(0, metrics={"k": value})
        got = record.value("k")
        assert got == expected and type(got) is type(expected)
        assert record.value("absent") is None

    @pytest.mark.parametrize(("status", "ok"), [("ok", True), ("skipped", False)])
    def test_ok(self, status: str, ok: bool) -> None:
        assert make_record(0, status).ok is ok


class TestReadRecords:
    def test_reads_in_file_order_from_file_or_folder(self, tmp_path: Path) -> None:
        lines = [record_line(0), record_line(5, "skipped", reason="nan"), "", record_line(10)]
        path = write_file(tmp_path / "geometry.jsonl", "\n".join(lines) + "\n")
        for source in (path, tmp_path, str(path)):
            got = read_records(source)
            assert [(r.step, r.status) for r in got] == [(0, "ok"), (5, "skipped"), (10, "ok")]
            assert got[1].reason == "nan"

    def test_final_line_without_newline_is_read(self, tmp_path: Path) -> None:
        path = write_file(tmp_path / "g.jsonl", f"{record_line(0)}\n{record_line(1)}")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert [r.step for r in read_records(path)] == [0, 1]

    @pytest.mark.parametrize("torn", ['{"schema": 1, "step": 2, "ep', "{", '{"step": '])
    def test_torn_last_line_ignored_with_warning(self, tmp_path: Path, torn: str) -> None:
        path = write_file(tmp_path / "g.jsonl", f"{record_line(0)}\n{record_line(1)}\n{torn}")
        with pytest.warns(UserWarning, match=rf"{re.escape(str(path))}:3: torn last record"):
            got = read_records(path)
        assert [r.step for r in got] == [0, 1]

    def test_torn_line_is_one_records_warning_naming_file_and_line(self, tmp_path: Path) -> None:
        # a kill in the middle of a multi-byte character leaves bytes that are not UTF-8
        torn = record_line(2, reason="é").encode()[:-3]
        path = tmp_path / "g.jsonl"
        path.write_bytes(f"{record_line(0)}\n{record_line(1)}\n".encode() + torn)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = read_records(path)
        assert [r.step for r in got] == [0, 1]
        assert len(caught) == 1 and caught[0].category is RecordsWarning
        assert str(caught[0].message).startswith(f"{path}:3: torn last record dropped")

    @pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
    @pytest.mark.parametrize("last", [False, True], ids=["middle", "last-without-newline"])
    def test_non_finite_line_refused_naming_file_and_line(
        self, tmp_path: Path, token: str, last: bool
    ) -> None:
        bad = record_line(1).replace(
            '"status": "ok"', f'"status": "ok", "metrics": {{"m": {token}}}'
        )
        assert token in bad
        text = f"{record_line(0)}\n{bad}" + ("" if last else f"\n{record_line(2)}\n")
        path = write_file(tmp_path / "g.jsonl", text)
        with pytest.raises(
            RecordsError,
            match=rf"^{re.escape(str(path))}:2: not a JSON record: "
            rf"non-finite number {re.escape(token)} ",
        ):
            read_records(path)
        problems: list[tuple[int, str]] = []
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a foreign line is not torn: no warning, a problem
            got = read_records(path, problems=problems)
        assert [r.step for r in got] == ([0] if last else [0, 2])
        assert [n for n, _ in problems] == [2] and "non-finite number" in problems[0][1]

    def test_non_utf8_line_refused_naming_file_and_line(self, tmp_path: Path) -> None:
        path = tmp_path / "g.jsonl"
        path.write_bytes(
            f"{record_line(0)}\n".encode() + b"\xff\xfe{}\n" + f"{record_line(2)}\n".encode()
        )
        with pytest.raises(
            RecordsError,
            match=rf"^{re.escape(str(path))}:2: not a JSON record: "
            r"not UTF-8 text \(byte 0\)",
        ):
            read_records(path)
        problems: list[tuple[int, str]] = []
        assert [r.step for r in read_records(path, problems=problems)] == [0, 2]
        assert problems == [(2, "not UTF-8 text (byte 0)")]

    def test_corrupt_last_line_with_newline_is_not_torn(self, tmp_path: Path) -> None:
        path = write_file(tmp_path / "g.jsonl", f"{record_line(0)}\n{{garbage\n")
        want = rf"^{re.escape(str(path))}:2: not a JSON record: not JSON"
        with pytest.raises(RecordsError, match=want):
            read_records(path)

    def test_corrupt_middle_line_raises_naming_file_and_line(self, tmp_path: Path) -> None:
        path = write_file(tmp_path / "g.jsonl", f"{record_line(0)}\n{{garbage\n{record_line(2)}\n")
        want = rf"^{re.escape(str(path))}:2: not a JSON record: not JSON"
        with pytest.raises(RecordsError, match=want):
            read_records(path)

    def test_invalid_record_raises_naming_file_and_line(self, tmp_path: Path) -> None:
        path = write_file(tmp_path / "g.jsonl", f"{record_line(0)}\n{record_line(1, bogus=3)}\n")
        with pytest.raises(RecordsError, match=rf"^{re.escape(str(path))}:2: unknown.*'bogus'"):
            read_records(path)

    def test_problems_collected_and_rest_returned(self, tmp_path: Path) -> None:
        text = f"{record_line(0)}\n{{garbage\n{record_line(2, bogus=3)}\n{record_line(3)}\n[1]\n"
        path = write_file(tmp_path / "g.jsonl", text)
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
        path = write_file(tmp_path / "g.jsonl", f"{record_line(0)}\n{bad}\n{record_line(2)}\n")
        problems: list[tuple[int, str]] | None = [] if collect else None
        with pytest.raises(RecordsError, match=rf"^{re.escape(str(path))}:2: schema version 99"):
            read_records(path, problems=problems)
        assert not problems

    def test_ok_only(self, tmp_path: Path) -> None:
        lines = [
            record_line(0),
            record_line(1, "skipped"),
            record_line(2),
            record_line(3, "skipped"),
        ]
        path = write_file(tmp_path / "g.jsonl", "\n".join(lines) + "\n")
        assert [r.step for r in read_records(path, ok_only=True)] == [0, 2]
        assert [r.step for r in read_records(path)] == [0, 1, 2, 3]

    @pytest.mark.parametrize("name", ["missing.jsonl", "empty-run"])
    def test_missing_file_is_empty(self, tmp_path: Path, name: str) -> None:
        (tmp_path / "empty-run").mkdir()
        assert read_records(tmp_path / name) == []

    def test_empty_file_is_empty(self, tmp_path: Path) -> None:
        assert read_records(write_file(tmp_path / "g.jsonl", "")) == []


class TestProbeTable:
    def test_gaps(self) -> None:
        assert probe_table().gaps() == {
            "z_minus_h": {"linear/digit": 0.875 - 0.625, "mlp/digit": 0.9375 - 0.8125},
            "mlp_minus_linear": {"z/digit": 0.9375 - 0.875, "h/digit": 0.8125 - 0.625},
            "trained_minus_random_init": {},  # no row measured it
        }
        assert probe_table().gaps()["z_minus_h"]["linear/digit"] == 0.25  # sign: z minus h

    def test_gaps_empty(self) -> None:
        assert ProbeTable(rows=[]).gaps() == {
            "z_minus_h": {},
            "mlp_minus_linear": {},
            "trained_minus_random_init": {},
        }

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
        assert probe_table().accuracy(*key) == expected

    def test_to_dict_carries_gaps(self) -> None:
        data = probe_table().to_dict()
        assert data["gaps"] == probe_table().gaps()
        assert data["schema"] == PROBES_SCHEMA_VERSION == 2


class TestProbeTableRandomInit:
    """Schema 2: each row beside the same network at random initialisation."""

    def _table(self) -> ProbeTable:
        rows = [
            ProbeRow("z", "linear", "class", 0.875, 0.1, random_init=0.625),
            ProbeRow("h", "linear", "class", 0.5, 0.1, random_init=0.75),  # below it
            ProbeRow("z", "mlp", "class", 0.875, 0.1),  # not measured
        ]
        return ProbeTable(rows)

    def test_gap_and_words(self) -> None:
        table = self._table()
        assert table.gaps()["trained_minus_random_init"] == {
            "z/linear/class": 0.25,
            "h/linear/class": -0.25,
        }
        z, h, mlp = table.rows
        assert versus_random_init(z) == "random init 0.625, trained - random init +0.250"
        assert versus_random_init(h) == (
            "random init 0.750, trained - random init -0.250: below its random initialisation"
        )
        assert versus_random_init(mlp) == "random init not measured"
        assert below_random_init(table) == [h]
        assert random_init_summary(table) == (
            "below its random initialisation: H linear class (0.500 against 0.750)"
        )
        above = ProbeTable([z])
        assert random_init_summary(above) == (
            "every probe is at or above the same network at random initialisation"
        )
        worse = ProbeRow("z", "mlp", "class", 0.5, 0.1, random_init=0.625)
        assert random_init_summary(ProbeTable([h, worse, mlp])) == (
            "every probe is below its random initialisation (trained - random init "
            "-0.250 to -0.125)"
        )

    def test_round_trip(self) -> None:
        data = json.loads(json.dumps(self._table().to_dict()))
        assert ProbeTable.from_dict(data) == self._table()

    def test_version_1_still_read_as_not_measured(self) -> None:
        """A probes.json written before random init: read, every row "not measured"."""
        old = {
            "schema": 1,
            "rows": [
                {
                    "features": "z",
                    "probe": "linear",
                    "target": "class",
                    "accuracy": 0.875,
                    "chance": 0.1,
                    "details": {"l2": 0.01},
                }
            ],
            "orbits": [],
            "settings": {"seed": 0},
            "paper": None,
            "gaps": {"z_minus_h": {}, "mlp_minus_linear": {}},
        }
        table = ProbeTable.from_dict(old)
        (row,) = table.rows
        assert (row.accuracy, row.details, row.random_init) == (0.875, {"l2": 0.01}, None)
        assert table.schema == 2 and versus_random_init(row) == "random init not measured"
        assert random_init_summary(table) == "random init not measured"

    def test_unknown_version_refused(self) -> None:
        with pytest.raises(RecordsError, match=r"schema version 3 .*\(1, 2\)"):
            ProbeTable.from_dict({"schema": 3, "rows": []})
