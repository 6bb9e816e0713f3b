"""Tests of solo_geometry.reproduce.collapse.alerts: the alert replayed on sweeps' curves."""

from __future__ import annotations

import json

import pytest

from solo_geometry.cli import main
from solo_geometry.geometry.stats import std_ceiling
from solo_geometry.reproduce.collapse.alerts import alert_markdown, replay, replay_run
from solo_geometry.reproduce.collapse.files import load_runs
from solo_geometry.reproduce.collapse.result import CollapseRow
from tests.shared import COLLAPSE_AUTHORS

FIXTURE = COLLAPSE_AUTHORS
ROWS, DIM, STEPS = 64, 128, 10


def run(curve: list[float], count: int | None = 0) -> CollapseRow:
    """One synthetic run of ROWS x DIM outputs, STEPS steps an epoch."""
    return CollapseRow(
        "gelu",
        "none",
        0.05,
        lr_name="base",
        backbone="resnet20",
        std_curve=tuple(curve),
        output_rows=ROWS,
        output_dim=DIM,
        steps_per_epoch=STEPS,
        m_neg_count_start=count,
    )


class TestReplay:
    def test_warning_leaving_and_lead_time(self) -> None:
        ceiling = std_ceiling(ROWS, DIM)  # 0.0891: complete below 0.00446, left above 0.00891
        curve = [0.001, 0.0005, 0.0002, 0.5 * ceiling, 0.6 * ceiling, 0.6 * ceiling]
        r = replay_run(run(curve))
        # patience 2: the start points to complete (1 of 2), epoch 1 enters it; epoch 3 points
        # back to healthy, epoch 4 enters it, so the run left at epoch 4 (after complete at 3)
        assert r.states == ("healthy", "complete", "complete", "complete", "healthy", "healthy")
        assert (r.first_warning, r.left, r.minimum) == (1, 4, 2)
        assert r.lead_steps == (2 - 1) * STEPS
        assert r.outcome == "escaped" and r.agrees is True

    def test_a_run_that_stays_collapsed(self) -> None:
        r = replay_run(run([0.001, 0.0008, 0.0006, 0.0004], count=None))
        assert r.states[-1] == "complete" and r.left is None
        assert r.outcome == "not escaped" and r.agrees is True
        assert r.lead_steps == (3 - 1) * STEPS and r.diagnosis == "unknown"

    def test_a_healthy_run_never_warns(self) -> None:
        r = replay_run(run([0.05, 0.05, 0.06]))
        assert r.first_warning is None and r.lead_steps is None and set(r.states) == {"healthy"}

    @pytest.mark.parametrize(
        ("count", "words"), [(3, "strict saddle"), (0, "no negative curvature"), (None, "unknown")]
    )
    def test_diagnosis_from_m_at_the_start(self, count: int | None, words: str) -> None:
        assert replay_run(run([0.001, 0.001], count)).diagnosis == words


class TestOnTheAuthorsFile:
    def test_table_and_agreement(self, capsys: pytest.CaptureFixture) -> None:
        assert main(["reproduce", "verdicts", "collapse", str(FIXTURE), "--alert"]) == 0
        out = capsys.readouterr().out
        # docs/reproducing.md: Swish and GELU at the base lr leave complete at these epochs
        assert (
            "| cifar10, resnet18 | swish | none | base | 3/3 | 1, 1, 1 | 0/3 | 31, 32, 22 |" in out
        )
        assert (
            "| cifar10, resnet18 | gelu | none | base | 3/3 | 1, 1, 1 | 0/3 | 27, 15, 15 |" in out
        )
        assert "in 50 of 55 decidable runs (26 undecidable)" in out
        assert out.strip() == alert_markdown(load_runs(FIXTURE)).strip()


class TestCalibrationOnTheAuthorsCurves:
    """The default thresholds on the authors' released collapse curves (docs/reproducing.md)."""

    @pytest.fixture(scope="class")
    def states(self) -> dict[str, list[list[str]]]:
        data = json.loads(FIXTURE.read_text())
        rows, dim = data["setup"]["rows"], data["setup"]["dim"]
        return {
            f"{ds}/{key}": [replay(seed, rows, dim) for seed in seeds]
            for ds, runs in data["results"].items()
            for key, seeds in runs.items()
        }

    def test_batchnorm_runs_never_alarm(self, states: dict[str, list[list[str]]]) -> None:
        bn = {k: v for k, v in states.items() if "bn_True" in k}
        assert len(bn) == 9
        assert all(s == "healthy" for runs in bn.values() for run in runs for s in run)

    def test_pseudo_collapsed_starts_enter_complete(self, states: dict[str, list]) -> None:
        for key, runs in states.items():
            if "bn_True" not in key:
                assert all(run[1] == "complete" for run in runs), key  # patience 2: epoch 1

    def test_relu_without_batchnorm_never_leaves(self, states: dict) -> None:
        relu = [k for k in states if "relu" in k and "bn_True" not in k]
        assert len(relu) == 7
        assert all(
            run[-1] == "complete" and "healthy" not in run[1:] for k in relu for run in states[k]
        )

    def test_smooth_heads_escape_on_resnet18(self, states: dict) -> None:
        escaping = (
            "cifar10/resnet18/swish_bn_False_lr_base",
            "cifar10/resnet18/gelu_bn_False_lr_base",
            "cifar100/resnet18/gelu",
        )
        for key in escaping:
            assert all(run[-1] == "healthy" for run in states[key]), key
