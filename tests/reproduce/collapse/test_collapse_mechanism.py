"""lambda_min(M) at the collapsed start against the escape: a rank test on data of known answer."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from solo_geometry.cli import main
from solo_geometry.reproduce.collapse.mechanism import (
    MIN_CELLS,
    escape_prediction,
    prediction_pairs,
    sweep_rows,
)
from solo_geometry.reproduce.collapse.result import CellRecord, CollapseRow

SUMMARY_V1 = Path(__file__).resolve().parent / "fixtures" / "collapse_summary_v1.json"


def _row(
    seed: int, lam: float | None, epoch: int | None, outcome: str | None = None
) -> CollapseRow:
    if outcome is None:
        outcome = "not escaped" if epoch is None else "escaped"
    return CollapseRow(
        "swish",
        "none",
        0.05,
        seed=seed,
        outcome=outcome,
        escape_epoch=epoch,
        m_lambda_min_start=lam,
    )


def _monotone(sign: float) -> list[CollapseRow]:
    """12 cells: escape epoch 2..9 rising with lambda_min(M) (sign +1) or falling (-1)."""
    lams = np.linspace(-1.0, -0.3, 8)
    rows = [_row(i, float(lam), 2 + (i if sign > 0 else 7 - i)) for i, lam in enumerate(lams)]
    flat = [_row(8 + i, (-1e-6 if sign > 0 else -2.0) * (i + 1), None) for i in range(4)]
    return rows + flat


class TestRankTest:
    def test_earlier_escape_with_more_negative_m_is_held(self) -> None:
        test = escape_prediction(_monotone(+1))
        assert test.correlation.rho > 0.95 and test.correlation.low > 0
        assert test.verdict.verdict == "held" and len(test.cells) == 12

    def test_the_opposite_order_is_not_held(self) -> None:
        test = escape_prediction(_monotone(-1))
        assert test.correlation.rho < -0.95 and test.correlation.high <= 0
        assert test.verdict.verdict == "not held"

    def test_rho_is_scipys_on_the_pairs_with_no_escape_last(self) -> None:
        rng = np.random.default_rng(4)
        rows = [
            _row(i, float(rng.normal()), None if i % 3 == 0 else int(rng.integers(1, 30)))
            for i in range(30)
        ]
        xs, ys, _, _ = prediction_pairs(rows)
        big = [1e9 if math.isinf(y) else y for y in ys]  # inf ranks after every epoch
        test = escape_prediction(rows)
        assert test.correlation.rho == pytest.approx(spearmanr(xs, big).statistic, abs=1e-12)
        assert test.correlation.low < 0 < test.correlation.high  # independent draws
        assert test.verdict.verdict == "undecidable"
        assert escape_prediction(rows) == test  # the bootstrap's seed is fixed

    def test_left_out_and_too_few(self) -> None:
        rows = [
            _row(0, -1.0, 3),
            _row(1, None, 4),
            _row(2, -0.5, None, outcome="undecidable"),
            _row(3, -0.2, None),
        ]
        test = escape_prediction(rows)
        assert len(test.cells) == 2 and len(test.left_out) == 2
        assert "not converged" in test.left_out[0] and "(undecidable)" in test.left_out[1]
        assert test.verdict.verdict == "undecidable" and f"fewer than {MIN_CELLS}" in (
            test.verdict.evidence
        )

    def test_no_escape_anywhere_is_undecidable(self) -> None:
        test = escape_prediction([_row(i, -0.1 * i, None) for i in range(10)])
        assert test.verdict.verdict == "undecidable" and "same escape time" in test.verdict.evidence


class TestCommand:
    def test_on_a_summary(self, capsys: pytest.CaptureFixture[str]) -> None:
        code = main(["reproduce", "verdicts", "collapse", str(SUMMARY_V1), "--mechanism"])
        out = capsys.readouterr().out
        # the fixture's rows: GELU and Swish escaped, ReLU not, all at lambda_min(M) = -0.3;
        # linear's did not converge: one value of lambda_min(M), nothing to rank
        assert code == 0 and "[undecidable] m_predicts_escape" in out
        assert "over 6 cells (4 escaped); 2 left out" in out and "same lambda_min(M)" in out

    def test_on_a_folder_of_cells_as_json(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        (tmp_path / "cells").mkdir()
        for row in _monotone(+1):
            path = tmp_path / "cells" / f"swish-none-lr0.05-s{row.seed}.json"
            path.write_text(json.dumps(CellRecord(row, {}).to_json()))
        assert sorted(sweep_rows(tmp_path), key=lambda r: r.seed) == _monotone(+1)
        code = main(["reproduce", "verdicts", "collapse", str(tmp_path), "--mechanism", "--json"])
        data = json.loads(capsys.readouterr().out)
        assert code == 0 and data["verdict"]["verdict"] == "held" and data["rho"] > 0.95
        assert set(data) >= {"rho", "low", "high", "n", "resamples", "seed", "cells", "left_out"}

    def test_bad_folder_and_cell(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["reproduce", "verdicts", "collapse", str(tmp_path), "--mechanism"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "neither summary.json nor cells/*.json" in err[0]
        (tmp_path / "cells").mkdir()
        (tmp_path / "cells" / "x.json").write_text("{not json")
        assert main(["reproduce", "verdicts", "collapse", str(tmp_path), "--mechanism"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "x.json" in err[0] and "not a cell record" in err[0]


class TestDefaultGrid:
    """The default grid's summary (docs/reproducing.md, collapse page): its verdicts replayed."""

    SUMMARY = Path(__file__).resolve().parent / "fixtures" / "default_grid_summary.json"

    def test_mechanism_is_undecidable_at_the_published_numbers(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        code = main(
            ["reproduce", "verdicts", "collapse", str(self.SUMMARY), "--mechanism", "--json"]
        )
        data = json.loads(capsys.readouterr().out)
        assert code == 0 and data["verdict"]["verdict"] == "undecidable"
        assert data["n"] == 24 and len(data["left_out"]) == 18
        assert (round(data["rho"], 3), round(data["low"], 3), round(data["high"], 3)) == (
            0.137,
            -0.081,
            0.388,
        )
        # the two escapes: Swish without BN at the base lr, seeds 0 and 1
        rows = [r for r in sweep_rows(self.SUMMARY) if r.escaped]
        assert sorted((r.head, r.norm, r.lr, r.seed, r.escape_epoch) for r in rows) == [
            ("swish", "none", 0.05, 0, 24),
            ("swish", "none", 0.05, 1, 9),
        ]

    def test_the_other_verdicts(self, capsys: pytest.CaptureFixture[str]) -> None:
        code = main(["reproduce", "verdicts", "collapse", str(self.SUMMARY)])
        out = capsys.readouterr().out
        assert code == 0
        assert "[not held] smooth_escape" in out and "[held] relu_needs_bn" in out
        assert "[held] m_negative_at_start" in out
