"""What ``report`` does with records and probes it cannot trust (solo_geometry.analysis.run_data).

Repeated and out-of-order steps are drawn once each, in step order, the last record of a step
kept, with one named warning; a folder whose ``geometry.jsonl`` holds no usable record, or
whose ``probes.json`` cannot be read, is refused before anything is written. The command-line
rows (one line, exit 2) are in tests/test_bad_input.py.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from solo_geometry.analysis.report import write_report
from solo_geometry.analysis.run_data import read_run
from solo_geometry.cli import main
from solo_geometry.folder.records import RecordsError, RecordsWarning
from tests.record_helpers import make_record


def _run(tmp_path: Path, lines: list[str], probes: str | None = None) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "geometry.jsonl").write_text("".join(f"{line}\n" for line in lines))
    if probes is not None:
        (run / "probes.json").write_text(probes)
    return run


def _line(step: int, std: float) -> str:
    return make_record(step, metrics={"z/normalized_std": std}).to_json()


class TestStepOrder:
    def test_repeated_and_unordered_steps_kept_last_in_order(self, tmp_path: Path) -> None:
        run = _run(tmp_path, [_line(0, 0.1), _line(20, 0.2), _line(10, 0.3), _line(20, 0.4)])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            data = read_run(run)
        assert [r.step for r in data.records] == [0, 10, 20]
        assert [r.value("z/normalized_std") for r in data.records] == [0.1, 0.3, 0.4]
        said = [str(w.message) for w in caught if issubclass(w.category, RecordsWarning)]
        assert said == [
            f"{run / 'geometry.jsonl'}: steps [20] appear more than once (the last of each "
            f"kept); drawn in step order, one record per step"
        ]
        assert said[0] in data.notes

    def test_out_of_order_only(self, tmp_path: Path) -> None:
        run = _run(tmp_path, [_line(10, 0.1), _line(0, 0.2)])
        with pytest.warns(RecordsWarning, match="records are out of step order; drawn in step"):
            data = read_run(run)
        assert [r.step for r in data.records] == [0, 10]

    def test_ordered_records_give_no_warning(self, tmp_path: Path) -> None:
        run = _run(tmp_path, [_line(0, 0.1), _line(10, 0.2)])
        with warnings.catch_warnings():
            warnings.simplefilter("error", RecordsWarning)
            assert [r.step for r in read_run(run).records] == [0, 10]

    def test_cli_warns_once_and_exits_0(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        run = _run(tmp_path, [_line(0, 0.1), _line(0, 0.2)])
        assert main(["report", str(run)]) == 0
        err = capsys.readouterr().err
        assert err.count("warning: ") == 1 and "steps [0] appear more than once" in err


class TestRefused:
    @pytest.mark.parametrize(
        ("lines", "message"),
        [
            (["\x13\x37 binary"], "no usable record (line 1: not JSON"),
            (['{"schema": 3, "step": 1, "epoch": 0, "status": 7}'], "field status must be str"),
            (["[1, 2]"], "no usable record (line 1: expected a JSON object, got list)"),
        ],
    )
    def test_no_usable_record(self, tmp_path: Path, lines: list[str], message: str) -> None:
        run = _run(tmp_path, lines)
        with pytest.raises(RecordsError, match="geometry.jsonl: no usable record") as caught:
            write_report([run])
        assert message in str(caught.value)
        assert not (run / "report").exists()

    @pytest.mark.parametrize(
        ("probes", "message"),
        [
            ("", "probes.json: empty; expected a probe table"),
            ("[]", "probes.json: expected a JSON object, got list"),
            ('{"schema": 1, "rows": 3}', "probes.json: field rows must be a list, got 3"),
            ("\xff", "probe table"),
        ],
    )
    def test_unreadable_probes(self, tmp_path: Path, probes: str, message: str) -> None:
        run = _run(tmp_path, [_line(0, 0.1)], probes)
        with pytest.raises(ValueError) as caught:
            write_report([run])
        assert message in str(caught.value)
        assert not (run / "report").exists()
