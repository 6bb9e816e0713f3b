"""``invariance.json`` as typed records: one writer, one reader, older files still read."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from solo_geometry.reproduce.invariance.evidence import Evidence, OrbitSummary
from solo_geometry.reproduce.invariance.result import InvarianceResult, read_invariance
from solo_geometry.reproduce.invariance.verdicts import run_evidence, verdicts
from solo_geometry.reproduce.results import write_result


def _summary(seed: int) -> dict[str, object]:
    g = np.random.default_rng(seed)
    ids, labels = np.repeat(np.arange(6), 4), np.repeat(np.arange(3), 8)
    Z = g.normal(size=(24, 5))
    return OrbitSummary.from_arrays(
        Z, 0.5 * Z + 0.1 * g.normal(size=Z.shape), ids, labels
    ).to_json()


def _reading(stem: str) -> dict[str, object]:
    stats = {k: [0.5, 0.1] for k in ("spread", "d_intra", "d_inter", "separation")}
    row = {"z": stats, "h": stats, "compression": 3.5}
    per_seed = [{**row, "file": f"{stem}_seed{s}.npz", "summary": _summary(s)} for s in (0, 1)]
    table = {"z": stats, "h": stats, "compression": [3.5, 0.0]}
    return {"table": table, "per_seed": per_seed, "h_cosine_to_mean": 0.9, "feature_norm": 4.5}


def _curvature() -> dict[str, object]:
    per_seed = [
        {"kappa_z": 0.2, "kappa_h": 0.3, "ratio": r, "n_sweeps": 4, "file": f"sweeps_seed{s}.npz"}
        for s, r in enumerate((1.4, 1.6))
    ]
    return {"per_seed": per_seed, "kappa_z": [0.2, 0.0], "kappa_h": [0.3, 0.0], "ratio": [1.5, 0.1]}


def _content() -> dict[str, object]:
    """An invariance.json's content in the layout the command writes (numbers made up)."""
    probe = {
        "target": "rotation",
        "probe": "linear",
        "z": 0.7,
        "h": 0.5,
        "gap": 0.2,
        "chance": 0.25,
    }
    paper = {
        "linear": [0.6, 0.4],
        "mlp": [0.65, 0.45],
        "n": 100,
        "protocol": "paper",
        "settings": {},
    }
    orbits = {"unit_z": _reading("orbits"), "raw_z": _reading("orbits_raw_z")}
    pair = [1.0, 0.5]
    depth = [
        {
            "depth": d,
            "run": f"runs/d{d}",
            "rotation_linear": probe,
            "rotation_paper": paper,
            **{k: pair for k in ("compression", "compression_raw_z", "separation_z")},
            **{k: pair for k in ("separation_h", "curvature_ratio")},
            "orbits": orbits,
            "curvature": _curvature(),
        }
        for d in (1, 2)
    ]
    whitening = {"score": 2.0, "rank": 4, "cond_z": math.inf, "cond_h": 8.0}
    metric = {"min": 0.0, "max": 1.0, "cond": 1.5, "rank": 4.0, "effective_rank": 3.9}
    epoch = {"epoch": 0, "cov_z": [2.0, 1.0], "cov_h": [1.0, 0.5], "whitening": whitening}
    epoch |= {"n_samples": 100, "metric": metric, "metric_eigenvalues": [1.0, 0.5]}
    return {
        "schema": 1,
        "dataset": "digits",
        "host": "lightly",
        "settings": {"seeds": 2, "probe_images": [200, 100]},
        "recipe": "simclr_invariance.yaml",
        "guillotine": {
            "run": "runs/g",
            "head": "relu_bn",
            "probes": [probe, {**probe, "probe": "mlp"}],
            "probes_paper": paper,
            "n_test": 100,
            "orbits": orbits,
            "curvature": _curvature(),
        },
        "depth": depth,
        "whitening": {
            "run": "runs/w",
            "series": {"step": [0, 5], "z/cond": [None, 3.0]},
            "epochs": [epoch],
        },
        "claims": [],
        "seconds": {"guillotine": 1.0, "total": 2.0},
    }


class TestInvarianceResult:
    def test_the_writer_and_the_reader_round_trip_byte_for_byte(self, tmp_path: Path) -> None:
        content = _content()
        first = write_result(tmp_path / "a", "invariance", content).read_bytes()
        result = read_invariance(tmp_path / "a")
        assert isinstance(result, InvarianceResult)
        assert result.guillotine is not None and result.guillotine.probes[1].probe == "mlp"
        assert result.whitening is not None
        assert math.isnan(result.whitening.epochs[0].whitening.cond_z)  # null: geometry's float
        again = write_result(tmp_path / "b", "invariance", result).read_bytes()
        assert again == first
        assert read_invariance(tmp_path / "b").to_json() == result.to_json()

    def test_claims_are_judged_on_the_record_as_on_its_content(self, tmp_path: Path) -> None:
        content = _content()
        write_result(tmp_path, "invariance", content)
        ev = run_evidence(read_invariance(tmp_path))
        assert isinstance(ev, Evidence)
        assert ev.curvature == [1.4, 1.6] and sorted(ev.depth["unit_z"]) == [1, 2]
        assert verdicts(ev) == verdicts(run_evidence(content))

    def test_a_file_without_the_stamp_still_reads(self, tmp_path: Path) -> None:
        old = {k: v for k, v in _content().items() if k != "schema"}  # no kind, no version
        (tmp_path / "invariance.json").write_text(json.dumps(old))
        result = read_invariance(tmp_path / "invariance.json")
        assert result.schema == 0 and result.dataset == "digits" and len(result.depth) == 2
        assert verdicts(run_evidence(result)) == verdicts(run_evidence(old))

    def test_a_value_of_the_wrong_type_is_refused_by_its_path(self, tmp_path: Path) -> None:
        content = _content()
        content["guillotine"]["n_test"] = "many"  # type: ignore[index]
        path = tmp_path / "invariance.json"
        path.write_text(json.dumps(content))
        with pytest.raises(ValueError, match=r"invariance.json.guillotine: field n_test"):
            read_invariance(path)
