"""The reproductions' one verdict type and their result files' one writer and one reader."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pytest

from solo_geometry.cli import main
from solo_geometry.folder.field_types import JsonRecord
from solo_geometry.reproduce.collapse.files import load_runs
from solo_geometry.reproduce.invariance.result import InvarianceResult, read_invariance
from solo_geometry.reproduce.invariance.verdicts import CLAIMS, run_evidence, verdicts
from solo_geometry.reproduce.results import (
    RESULT_VERSION,
    Verdict,
    read_result,
    write_result,
)

_PLAIN = {"id": "curvature", "claim": "c", "verdict": "held", "evidence": "e"}


@dataclass(frozen=True)
class _Content(JsonRecord):
    x: float
    t: tuple[float, ...]
    claims: tuple[Verdict, ...]


class TestVerdict:
    def test_reads_as_the_mapping_it_replaces(self) -> None:
        v = Verdict.from_json(_PLAIN)
        assert v == _PLAIN and _PLAIN == v and dict(v) == _PLAIN
        assert v["verdict"] == "held" and len(v) == 4 and "dataset" not in v
        grouped = Verdict("a", "c", "undecidable", "e", dataset="cifar10", backbone="resnet18")
        assert grouped.as_json()["backbone"] == "resnet18" and len(grouped) == 6
        with pytest.raises(KeyError):
            v["dataset"]

    def test_is_frozen(self) -> None:
        v = Verdict.from_json(_PLAIN)
        with pytest.raises(AttributeError):
            v.verdict = "not held"  # type: ignore[misc]

    @pytest.mark.parametrize(
        ("obj", "needle"),
        [
            ({**_PLAIN, "verdict": "maybe"}, "'maybe'"),
            ({k: v for k, v in _PLAIN.items() if k != "evidence"}, "evidence"),
            ({**_PLAIN, "claim": 3}, "claim"),
            (["held"], "list"),
        ],
    )
    def test_malformed_is_refused_by_name(self, obj: object, needle: str) -> None:
        with pytest.raises(ValueError, match=needle):
            Verdict.from_json(obj)

    def test_invariance_verdicts_are_verdicts(self) -> None:
        rows = verdicts(run_evidence({"guillotine": {}}))
        assert all(isinstance(r, Verdict) for r in rows)
        assert [r.id for r in rows] == list(CLAIMS)
        assert {r.verdict for r in rows} == {"undecidable"}


class TestFiles:
    def test_round_trip_stamps_and_cleans(self, tmp_path: Path) -> None:
        claims = [Verdict.from_json(_PLAIN)]
        path = write_result(
            tmp_path, "invariance", {"x": math.nan, "t": (1.0, math.inf), "claims": claims}
        )
        assert path == tmp_path / "invariance.json"
        raw = json.loads(path.read_text())
        assert (raw["kind"], raw["version"]) == ("invariance", RESULT_VERSION)
        assert raw["x"] is None and raw["t"] == [1.0, None]
        assert [p.name for p in tmp_path.iterdir()] == ["invariance.json"]  # no temporary left
        back = read_result(_Content, tmp_path, "invariance")
        assert back.claims == tuple(claims) and math.isnan(back.x)
        assert back.t[0] == 1.0 and math.isnan(back.t[1])

    def test_a_file_before_the_stamp_reads_as_version_0(self, tmp_path: Path) -> None:
        old = {"guillotine": {"n_test": 4}, "depth": [], "claims": [_PLAIN]}
        (tmp_path / "invariance.json").write_text(json.dumps(old))
        back = read_invariance(tmp_path / "invariance.json")
        assert back.claims == (Verdict.from_json(_PLAIN),)
        assert run_evidence(back) == run_evidence(old)

    @pytest.mark.parametrize(
        ("text", "needle"),
        [
            ('{"kind": "invariance", "version": 99}', "version 99"),
            ('{"kind": "collapse", "version": 1}', "'collapse' result"),
            ("[1, 2]", "JSON object"),
            ('{"rows": [', "as JSON"),
            ('{"claims": [{"id": "x"}]}', "lacks 'claim'"),
        ],
    )
    def test_refused_with_the_file_named(self, tmp_path: Path, text: str, needle: str) -> None:
        path = tmp_path / "invariance.json"
        path.write_text(text)
        with pytest.raises(ValueError, match=needle) as err:
            read_result(InvarianceResult, path, "invariance")
        assert "invariance.json" in str(err.value)

    def test_unknown_kind(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError, match="expected one of collapse, invariance"):
            write_result(tmp_path, "orbits", {})
        assert list(tmp_path.iterdir()) == []

    def test_a_later_version_is_one_line_and_status_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        (tmp_path / "invariance.json").write_text('{"kind": "invariance", "version": 7}')
        assert main(["reproduce", "verdicts", "invariance", str(tmp_path)]) == 2
        err = capsys.readouterr().err.strip()
        assert "version 7" in err and len(err.splitlines()) == 1

    def test_collapse_summary_of_either_version(self, tmp_path: Path) -> None:
        row = {
            "dataset": "digits",
            "backbone": "resnet18",
            "head": "linear",
            "norm": "none",
            "lr": 0.05,
            "seed": 0,
            "std_curve": [0.1, 0.2],
            "output_rows": 8,
            "output_dim": 4,
            "steps_per_epoch": 2,
        }
        old = tmp_path / "old.json"
        old.write_text(json.dumps({"rows": [row]}))
        write_result(tmp_path, "collapse", {"rows": [row]})
        new = tmp_path / "summary.json"
        assert json.loads(new.read_text())["version"] == RESULT_VERSION
        runs_old, runs_new = load_runs(old), load_runs(new)
        assert runs_old == runs_new and len(runs_new) == 1
        new.write_text(json.dumps({"kind": "collapse", "version": 5, "rows": [row]}))
        with pytest.raises(ValueError, match="version 5"):
            load_runs(new)
