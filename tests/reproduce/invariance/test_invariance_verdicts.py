"""Invariance verdicts: calibrated on the authors' arrays, and each rule able to say otherwise."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from solo_geometry.cli import main
from solo_geometry.geometry.orbits import orbit_comparison
from solo_geometry.reproduce.invariance.evidence import (
    Evidence,
    OrbitSummary,
    ProbeEvidence,
    orbit_evidence,
)
from solo_geometry.reproduce.invariance.verdicts import CLAIMS, run_evidence, verdicts
from solo_geometry.reproduce.paper_arrays import paper_evidence, read_npy_dict
from tests.shared import PAPER_INVARIANCE

FIXTURE = PAPER_INVARIANCE


def paper(name: str = "cifar10/resnet18") -> Evidence:
    return Evidence.from_json(json.loads(FIXTURE.read_text())[name])


def by_id(rows: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    return {r["id"]: r for r in rows}


def orbits(seed: int, scale_h: float = 0.3, n_classes: int = 5, k: int = 12) -> tuple:
    """Random orbits: 3 per class, K rows around a class direction; H a shrunk copy of Z."""
    g = np.random.default_rng(seed)
    centres = g.normal(size=(n_classes, 16))
    ids, labels, Z = [], [], []
    for o in range(3 * n_classes):
        c = o // 3
        base = centres[c] + 0.5 * g.normal(size=16)
        Z.append(base + 0.3 * g.normal(size=(k, 16)))
        ids += [o] * k
        labels += [c] * k
    Zm = np.concatenate(Z)
    Hm = np.concatenate([z.mean(0) + scale_h * (z - z.mean(0)) for z in Z])
    return Zm, Hm, np.array(ids), np.array(labels)


class TestCalibration:
    def test_every_claim_held_on_the_authors_resnet18_arrays(self) -> None:
        rows = verdicts(paper())
        assert [r["id"] for r in rows] == list(CLAIMS)
        assert {r["verdict"] for r in rows} == {"held"}, rows
        assert all(set(r) == {"id", "claim", "verdict", "evidence"} for r in rows)

    def test_the_evidence_is_the_papers_numbers(self) -> None:
        ev = paper()
        e = orbit_evidence(ev.orbits["unit_z"][0])
        assert e.compression == pytest.approx(21.85, abs=0.005)
        assert e.separation_z == pytest.approx(2.04, abs=0.005)
        assert e.separation_h == pytest.approx(2.50, abs=0.005)
        assert e.h_cosine_to_mean == pytest.approx(0.992, abs=0.0005)
        comps = [orbit_evidence(ev.depth["unit_z"][d][0]).compression for d in (1, 2, 3)]
        assert comps == pytest.approx([49.13, 57.22, 78.51], abs=0.005)
        assert ev.probes["paper"].linear == (0.5227, 0.3755)
        assert sum(ev.curvature) / 3 == pytest.approx(1.9328, abs=1e-4)

    def test_vit_orbit_head_rows_are_parallel(self) -> None:
        e = orbit_evidence(paper("cifar10/vit_tiny").orbits["unit_z"][0])
        assert e.h_cosine_to_mean > 0.9999
        assert e.compression == pytest.approx(4015, rel=1e-3)

    @pytest.mark.skipif(
        "SOLO_GEOMETRY_PAPER_RESULTS" not in os.environ,
        reason="set SOLO_GEOMETRY_PAPER_RESULTS to the authors' results/ folder",
    )
    def test_fixture_matches_the_released_arrays(self) -> None:
        root = Path(os.environ["SOLO_GEOMETRY_PAPER_RESULTS"])
        fresh = paper_evidence([root / "cifar10" / "resnet18"]).fixture()
        fixed = json.loads(FIXTURE.read_text())["cifar10/resnet18"]
        # the same keys, lengths and strings; floats equal to float64 round-off (the order of a
        # sum may differ with the NumPy build: 1e-16 relative moves seen between versions)
        assert _same_json(fresh, fixed), "fixture differs from the released arrays"


def _same_json(a: Any, b: Any) -> bool:
    """Equal JSON trees, floats within 1e-12 relative (1e-15 absolute) of each other."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-12, abs=1e-15, nan_ok=True)
    return type(a) is type(b) and a == b


class TestSummary:
    def test_summary_reproduces_the_orbit_table(self) -> None:
        Z, H, ids, labels = orbits(0)
        e = orbit_evidence(OrbitSummary.from_arrays(Z, H, ids, labels))
        ref = orbit_comparison(
            torch.from_numpy(Z),
            torch.from_numpy(H),
            torch.from_numpy(ids),
            torch.from_numpy(labels),
        ).paper_table()
        assert e.compression == pytest.approx(ref["compression"], rel=1e-9)
        assert e.separation_z == pytest.approx(ref["z"]["separation"][0], rel=1e-9)
        assert e.separation_h == pytest.approx(ref["h"]["separation"][0], rel=1e-9)

    def test_summary_survives_json(self) -> None:
        s = OrbitSummary.from_arrays(*orbits(1))
        back = OrbitSummary.from_json(json.loads(json.dumps(s.to_json())))
        assert orbit_evidence(back) == orbit_evidence(s)


def shrink(s: OrbitSummary, factor: float) -> OrbitSummary:
    return replace(s, spread_h=s.spread_h * factor)


class TestRulesCanSayOtherwise:
    def test_probes(self) -> None:
        ev = paper()
        ev.probes["paper"] = ProbeEvidence((0.40, 0.50), (0.45, 0.452), 10000)
        v = by_id(verdicts(ev))
        assert v["probe_linear"]["verdict"] == "not held"
        assert v["probe_mlp"]["verdict"] == "undecidable"
        ev.probes["paper"] = replace(ev.probes["paper"], n=None)
        assert by_id(verdicts(ev))["probe_linear"]["verdict"] == "undecidable"

    def test_two_probe_readings_that_disagree_are_undecidable(self) -> None:
        ev = paper()
        ev.probes["package"] = ProbeEvidence((0.40, 0.50), (0.6, 0.4), 10000)
        v = by_id(verdicts(ev))
        assert v["probe_linear"]["verdict"] == "undecidable"
        assert "disagree" in v["probe_linear"]["evidence"]
        assert v["probe_mlp"]["verdict"] == "held"

    def test_orbits_that_grow_in_the_head(self) -> None:
        ev = paper()
        s = ev.orbits["unit_z"][0]
        ev.orbits["unit_z"] = [shrink(s, 1000.0)]  # H spread 1000x larger: 0.02x
        assert by_id(verdicts(ev))["orbit_compression"]["verdict"] == "not held"
        ev.orbits["raw_z"] = [s]
        assert by_id(verdicts(ev))["orbit_compression"]["verdict"] == "undecidable"

    def test_separation_lower_in_the_head(self) -> None:
        ev = paper()
        ev.orbits["unit_z"] = ev.depth["unit_z"][1]  # depth 1: 2.19 (Z) vs 1.89 (H)
        assert by_id(verdicts(ev))["separation"]["verdict"] == "not held"
        Z, H, ids, labels = orbits(2, scale_h=1.0)  # H = Z: no difference
        ev.orbits["unit_z"] = [OrbitSummary.from_arrays(Z, H, ids, labels)]
        assert by_id(verdicts(ev))["separation"]["verdict"] == "undecidable"

    @pytest.mark.parametrize(
        ("ratios", "verdict"),
        [
            ([0.70, 0.71, 0.72], "not held"),
            ([0.99, 1.01, 1.0], "undecidable"),
            ([1.9], "undecidable"),
        ],
    )
    def test_curvature(self, ratios: list[float], verdict: str) -> None:
        ev = paper()
        ev.curvature = ratios
        assert by_id(verdicts(ev))["curvature"]["verdict"] == verdict

    def test_depth_compression_falling(self) -> None:
        ev = paper()
        d = ev.depth["unit_z"]
        ev.depth["unit_z"] = {1: d[3], 2: d[2], 3: d[1]}
        assert by_id(verdicts(ev))["depth_compression"]["verdict"] == "not held"
        ev.depth["unit_z"] = {1: d[1], 2: d[1], 3: d[1]}
        assert by_id(verdicts(ev))["depth_compression"]["verdict"] == "undecidable"

    def test_no_evidence_is_undecidable(self) -> None:
        rows = verdicts(Evidence())
        assert {r["verdict"] for r in rows} == {"undecidable"}


class TestRestrictedReader:
    def test_reads_a_saved_dict(self, tmp_path: Path) -> None:
        path = tmp_path / "d.npy"
        np.save(path, {"a": np.arange(3.0), "b": np.float32(2.5), "s": "x"}, allow_pickle=True)
        d = read_npy_dict(path)
        assert d["a"].tolist() == [0.0, 1.0, 2.0] and d["b"] == 2.5 and d["s"] == "x"

    def test_refuses_a_pickle_that_calls_something(self, tmp_path: Path) -> None:
        class Payload:
            def __reduce__(self) -> tuple:
                return (os.getcwd, ())

        arr = np.empty((), dtype=object)
        arr[()] = {"x": Payload()}
        path = tmp_path / "evil.npy"
        np.save(path, arr, allow_pickle=True)
        with pytest.raises(ValueError, match="posix.getcwd is not allowed|getcwd"):
            read_npy_dict(path)


def run_json(tmp_path: Path) -> Path:
    """A minimal invariance.json: package probes, two orbit readings, curvature, no depth."""
    s = OrbitSummary.from_arrays(*orbits(3)).to_json()
    reading = {"per_seed": [{"summary": s}, {"summary": s}]}
    result = {
        "guillotine": {
            "probes": [
                {"target": "rotation", "probe": "linear", "z": 0.6, "h": 0.4},
                {"target": "rotation", "probe": "mlp", "z": 0.62, "h": 0.45},
            ],
            "n_test": 2000,
            "probes_paper": {"linear": [0.55, 0.45], "mlp": [0.6, 0.5], "n": 2000},
            "orbits": {"unit_z": reading, "raw_z": reading},
            "curvature": {"per_seed": [{"ratio": 0.7}, {"ratio": 0.72}]},
        },
        "depth": [],
    }
    path = tmp_path / "invariance.json"
    path.write_text(json.dumps(result))
    return path


class TestCommand:
    def test_on_a_run(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        path = run_json(tmp_path)
        assert main(["reproduce", "verdicts", "invariance", str(tmp_path), "--json"]) == 0
        rows = by_id(json.loads(capsys.readouterr().out))
        assert rows["probe_linear"]["verdict"] == "held"
        assert rows["orbit_compression"]["verdict"] == "held"
        assert rows["curvature"]["verdict"] == "not held"
        assert rows["depth_compression"]["verdict"] == "undecidable"
        assert by_id(verdicts(run_evidence(json.loads(path.read_text())))) == rows

    def test_bad_path_is_one_line_and_status_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["reproduce", "verdicts", "invariance", str(tmp_path / "nothing")]) == 2
        err = capsys.readouterr().err.strip()
        assert "nothing" in err and len(err.splitlines()) == 1
