"""The collapse claim rules: calibrated on the authors' released results, and able to fail."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from solo_geometry.geometry.stats import std_ceiling
from solo_geometry.reproduce.collapse.files import authors_runs, load_runs
from solo_geometry.reproduce.collapse.result import CollapseRow
from solo_geometry.reproduce.collapse.verdicts import (
    BN_BAND,
    CLAIMS,
    curve_ratios,
    escape,
    judge,
    row_escape,
)
from tests.shared import COLLAPSE_AUTHORS

FIXTURE = COLLAPSE_AUTHORS


def _authors(name: str = "cifar10/resnet18") -> list[CollapseRow]:
    return [r for r in load_runs(FIXTURE) if f"{r.dataset}/{r.backbone}" == name]


def _verdicts(runs: list[CollapseRow]) -> dict[str, str]:
    return {v["id"]: v["verdict"] for v in judge(runs)}


class TestAuthorsCalibration:
    def test_fixture_provenance(self) -> None:
        data = json.loads(FIXTURE.read_text())
        assert data["provenance"]["commit"] == "117231d60fee34d4906d1f16c5007e13a96a4d94"
        assert "results/cifar10/resnet18/collapse_results.npy" in data["provenance"]["paths"]
        assert len(data["results"]["cifar10/resnet18"]) == 14  # their 14 configurations

    def test_cifar10_resnet18_verdicts_are_what_the_paper_states(self) -> None:
        got = _verdicts(_authors())
        assert got == {
            "smooth_escape": "held",
            "relu_needs_bn": "held",
            "m_negative_at_start": "undecidable",  # no M in their file
        }

    def test_cifar10_resnet18_per_run_statements(self) -> None:
        """DESIGN section 8's reading of their file, run by run."""
        runs = _authors()
        for run in runs:
            esc = row_escape(run)
            if run.norm == "none" and run.head in ("gelu", "swish") and run.lr_name != "small":
                assert esc.outcome == "escaped" and 9 <= esc.escape_epoch <= 26, run
                assert esc.escape_step == (esc.escape_epoch + 1) * 97
            if run.head == "relu" and run.norm == "none":
                assert esc.outcome == "not escaped", run
            if run.norm == "bn":  # no escape; near its level
                assert esc.outcome in ("not escaped", "undecidable"), run
                assert all(BN_BAND[0] <= v < BN_BAND[1] for v in curve_ratios(run)[1:]), run
        linear = sorted(row_escape(r).escape_epoch or math.inf for r in runs if r.head == "linear")
        assert linear == [27, 43, math.inf]
        finals = {
            lr: np.mean(
                [
                    curve_ratios(r)[-1]
                    for r in runs
                    if r.head == "relu" and r.norm == "none" and r.lr_name == lr
                ]
            )
            for lr in ("small", "base", "large")
        }
        assert finals["small"] > finals["base"] > finals["large"]
        assert [round(v, 2) for v in finals.values()] == [0.45, 0.11, 0.03]

    def test_cifar100_layout_keyed_by_activation(self) -> None:
        runs = _authors("cifar100/resnet18")
        assert {(r.head, r.norm, r.lr_name) for r in runs} == {
            (h, "none", "base") for h in ("linear", "relu", "gelu", "swish")
        }
        assert _verdicts(runs)["smooth_escape"] == "held"
        assert _verdicts(runs)["relu_needs_bn"] == "undecidable"  # one lr, no BN runs

    def test_npy_layout_read_without_running_code(self, tmp_path: Path) -> None:
        data = json.loads(FIXTURE.read_text())["results"]["cifar10/resnet18"]
        path = tmp_path / "cifar10" / "resnet18" / "collapse_results.npy"
        path.parent.mkdir(parents=True)
        np.save(path, {k: {"raw": np.array(v)} for k, v in data.items()})  # type: ignore[arg-type]
        runs = load_runs(path)  # the restricted unpickler: arrays and plain containers
        assert _verdicts(runs) == _verdicts(_authors())
        assert _verdicts(load_runs(path, trust_pickle=True)) == _verdicts(runs)
        assert {(r.dataset, r.backbone) for r in runs} == {("cifar10", "resnet18")}

    def test_unknown_key_is_an_error(self) -> None:
        with pytest.raises(ValueError, match="tanh_bn"):
            authors_runs({"tanh_bn_True_lr_base": [[1.0]]}, dataset="d", backbone="b")


class _Payload:
    """An object whose unpickling would create ``marker`` (a crafted file's code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (Path.touch, (str(self.marker),))  # type: ignore[return-value]


def _run(
    head: str, norm: str, lr: str, curve: list[float], seed: int = 0, m: int | None = None
) -> CollapseRow:
    return CollapseRow(
        head,
        norm,
        0.05,
        lr_name=lr,
        seed=seed,
        dataset="toy",
        backbone="net",
        std_curve=tuple(curve),
        output_rows=1024,
        output_dim=2048,
        steps_per_epoch=10,
        m_neg_count_start=m,
    )


def _good() -> list[CollapseRow]:
    """A grid on which every claim holds."""
    up, flat = [1e-3, 1e-3, 3e-3, 4e-3], [1e-3, 1e-3, 1e-3, 1e-3]
    runs = [_run(h, "none", "base", up, s, m=3) for h in ("gelu", "swish") for s in range(3)]
    runs += [_run("linear", "none", "base", [1e-3, 1e-3, 1e-3, 2.5e-3], s, m=0) for s in range(3)]
    for lr, end in (("small", 0.5e-3), ("base", 0.1e-3), ("large", 0.03e-3)):
        runs += [_run("relu", "none", lr, [1e-3, end, end, end], s, m=0) for s in range(3)]
        runs += [_run("relu", "bn", lr, flat, s, m=5) for s in range(3)]
    return runs


class TestRulesCanFail:
    def test_good_grid_holds(self) -> None:
        assert set(_verdicts(_good()).values()) == {"held"}

    @pytest.mark.parametrize(
        ("cid", "change"),
        [
            # a smooth head escapes in 1 seed of 3
            (
                "smooth_escape",
                lambda r: (
                    dataclasses.replace(r, std_curve=(1e-3,) * 4)
                    if r.head == "gelu" and r.seed > 0
                    else r
                ),
            ),
            # linear escapes before the smooth heads
            (
                "smooth_escape",
                lambda r: (
                    dataclasses.replace(r, std_curve=(1e-3, 5e-3, 5e-3, 5e-3))
                    if r.head == "linear"
                    else r
                ),
            ),
            # ReLU escapes once
            (
                "smooth_escape",
                lambda r: (
                    dataclasses.replace(r, std_curve=(1e-3, 1e-3, 3e-3, 3e-3))
                    if (r.head, r.norm, r.lr_name, r.seed) == ("relu", "none", "base", 0)
                    else r
                ),
            ),
            # ReLU's final level rises with the lr
            (
                "relu_needs_bn",
                lambda r: (
                    dataclasses.replace(r, std_curve=(1e-3, 1e-3, 1e-3, 0.9e-3))
                    if (r.head, r.norm, r.lr_name) == ("relu", "none", "large")
                    else r
                ),
            ),
            # ReLU with BN drifts out of the band
            (
                "relu_needs_bn",
                lambda r: (
                    dataclasses.replace(r, std_curve=(1e-3, 1e-3, 1e-4, 1e-4))
                    if (r.head, r.norm, r.seed) == ("relu", "bn", 2)
                    else r
                ),
            ),
            # a linear head without BN with a negative eigenvalue of M
            (
                "m_negative_at_start",
                lambda r: dataclasses.replace(r, m_neg_count_start=2) if r.head == "linear" else r,
            ),
            # a smooth head without one
            (
                "m_negative_at_start",
                lambda r: (
                    dataclasses.replace(r, m_neg_count_start=0)
                    if r.head == "swish" and r.seed == 1
                    else r
                ),
            ),
        ],
    )
    def test_counter_example_is_not_held(self, cid: str, change: object) -> None:
        runs = [change(r) for r in _good()]  # type: ignore[operator]
        assert _verdicts(runs)[cid] == "not held"

    def test_relu_bn_m_is_left_out(self) -> None:
        # BN couples the batch: a ReLU+BN head's negative M is no evidence against the claim
        assert _verdicts(_good())["m_negative_at_start"] == "held"

    def test_unreachable_factor_is_undecidable(self) -> None:
        high = [
            dataclasses.replace(r, std_curve=tuple(v * 15 for v in r.std_curve))
            if r.head == "relu" and r.norm == "none"
            else r
            for r in _good()
        ]
        # ReLU's 2 x 0.015 is above the ceiling for 1024 rows in 2048 dims (0.0221)
        assert _verdicts(high)["smooth_escape"] == "undecidable"

    def test_every_id_and_missing_cells(self) -> None:
        verdicts = judge([r for r in _good() if r.head != "linear"])
        assert [v["id"] for v in verdicts] == list(CLAIMS)
        assert verdicts[0]["verdict"] == "undecidable" and "linear" in verdicts[0]["evidence"]


class TestEscape:
    def test_first_epoch_reaching_factor(self) -> None:
        esc = escape([1.0e-3, 0.5e-3, 1.9e-3, 2.0e-3, 5e-3], rows=64, dim=512, steps_per_epoch=7)
        assert (esc.outcome, esc.escape_epoch, esc.escape_step) == ("escaped", 3, 28)
        assert esc.ceiling == pytest.approx(math.sqrt(64 / (63 * 512)))

    def test_above_ceiling_is_undecidable_not_not_escaped(self) -> None:
        # the case: step-0 std 0.029 at d = 512, M = 64: 2 x 0.029 > 0.0445
        esc = escape([0.029, 0.03, 0.031], rows=64, dim=512, steps_per_epoch=12)
        assert esc.outcome == "undecidable"
        assert 2 * 0.029 > std_ceiling(64, 512)
        assert escape([0.02, 0.03], rows=64, dim=512, steps_per_epoch=1).outcome == "not escaped"

    def test_factor_must_exceed_one(self) -> None:
        with pytest.raises(ValueError, match="factor"):
            escape([1.0, 2.0], rows=4, dim=2, steps_per_epoch=1, factor=1.0)


class TestCommand:
    def test_json_on_the_authors_file(self, capsys: pytest.CaptureFixture) -> None:
        from solo_geometry.cli import main as cli_main

        assert cli_main(["reproduce", "verdicts", "collapse", str(FIXTURE), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert {"id", "claim", "verdict", "evidence"} <= set(out[0])
        mine = [v for v in out if (v["dataset"], v["backbone"]) == ("cifar10", "resnet18")]
        assert [v["id"] for v in mine] == list(CLAIMS)
        assert [v["verdict"] for v in mine] == ["held", "held", "undecidable"]

    def test_crafted_pickle_is_refused_exit_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture
    ) -> None:
        from solo_geometry.cli import main as cli_main

        path = tmp_path / "collapse_results.npy"
        marker = tmp_path / "PWNED"
        np.save(path, np.array({"relu": _Payload(marker)}, dtype=object), allow_pickle=True)
        assert cli_main(["reproduce", "verdicts", "collapse", str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "refused" in err[0] and "--trust-pickle" in err[0]
        assert not marker.exists()

    def test_factor_must_exceed_one(self, capsys: pytest.CaptureFixture) -> None:
        from solo_geometry.cli import main as cli_main

        argv = ["reproduce", "verdicts", "collapse", str(FIXTURE), "--factor", "0.5"]
        assert cli_main(argv) == 2 and "--factor" in capsys.readouterr().err
