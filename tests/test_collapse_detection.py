"""benchmarks/collapse_*.py: the labels on inputs of known answer, the peers against their
libraries, the scores by hand, and the quick benchmark end to end (slow)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from benchmarks.collapse_labels import (
    Evidence,
    Geometry,
    geometry_of,
    label,
    reference_key,
    reference_step,
)
from benchmarks.collapse_peers import DETECTORS, monai_score, previous, rankme_milestone, score
from solo_geometry.geometry.quality import rankme
from tests.shared import digits_subset


def _ev(probe: tuple[float, float], init: tuple[float, float], h: Geometry) -> Evidence:
    g0 = Geometry(rank=100.0, std_ratio=0.9)
    return Evidence(
        probe={"z": probe[0], "h": probe[1]},
        probe_init={"z": init[0], "h": init[1]},
        chance=0.1,
        val={"z": g0, "h": h},
        val_init={"z": g0, "h": g0},
    )


class TestGeometry:
    def test_against_numpy(self) -> None:
        gen = torch.Generator().manual_seed(0)
        X = torch.randn(300, 16, generator=gen, dtype=torch.float64) + 0.5
        got = geometry_of(X)
        Xn = X.numpy() / np.linalg.norm(X.numpy(), axis=1, keepdims=True)
        s = np.linalg.svd(Xn, compute_uv=False)
        p = s / s.sum() + 1e-7
        assert got.rank == pytest.approx(math.exp(-(p * np.log(p)).sum()), rel=1e-9)
        ceiling = math.sqrt(300 / (299 * 16))
        assert got.std_ratio == pytest.approx(Xn.std(axis=0, ddof=1).mean() / ceiling, rel=1e-9)

    def test_constant_rows_have_no_std(self) -> None:
        X = torch.ones(50, 8, dtype=torch.float64)
        X[:, 0] += 1e-9 * torch.arange(50, dtype=torch.float64)
        assert geometry_of(X).std_ratio < 1e-6


class TestLabel:
    def test_collapsed_needs_probe_and_geometry(self) -> None:
        name, why = label(_ev((0.8, 0.4), (0.84, 0.8), Geometry(rank=10.0, std_ratio=0.85)))
        assert name == "collapsed"
        assert any("probe(H)" in w for w in why) and any("rank(H)" in w for w in why)

    def test_complete_collapse_by_std(self) -> None:
        name, _ = label(_ev((0.3, 0.1), (0.84, 0.8), Geometry(rank=80.0, std_ratio=0.01)))
        assert name == "collapsed"

    def test_healthy_needs_the_backbone_kept(self) -> None:
        healthy = Geometry(rank=90.0, std_ratio=0.9)
        assert label(_ev((0.85, 0.8), (0.84, 0.8), healthy))[0] == "healthy"
        # within the margin 0.02 below random initialisation: still healthy
        assert label(_ev((0.825, 0.8), (0.84, 0.8), healthy))[0] == "healthy"
        # the backbone probes worse than at random initialisation: ambiguous, with why
        name, why = label(_ev((0.7, 0.8), (0.84, 0.8), healthy))
        assert name == "ambiguous" and any("probe(Z)" in w for w in why)

    def test_criteria_that_disagree_are_ambiguous(self) -> None:
        # the head's probe drops but the geometry holds
        assert label(_ev((0.85, 0.5), (0.84, 0.8), Geometry(90.0, 0.9)))[0] == "ambiguous"
        # the rank halves but the probe holds
        assert label(_ev((0.85, 0.8), (0.84, 0.8), Geometry(30.0, 0.9)))[0] == "ambiguous"

    def test_reference_key(self) -> None:
        assert reference_key(_ev((0.3, 0.1), (0.8, 0.8), Geometry(80, 0.01))) == "h/normalized_std"
        assert reference_key(_ev((0.8, 0.4), (0.8, 0.8), Geometry(10, 0.9))) == "h/rankme_l2"


class TestReferenceStep:
    def test_known_answer(self) -> None:
        # floor 1.0 at step 50, top 100: the bar is e^(0.1 log 100) = 1.585, first met at 40
        steps = [0, 10, 20, 30, 40, 50, 60]
        assert reference_step(steps, [100, 50, 10, 2, 1.1, 1.0, 1.05]) == 40

    def test_flat_series_and_errors(self) -> None:
        assert reference_step([0, 5], [3.0, 3.0]) == 0
        assert reference_step([], []) is None
        with pytest.raises(ValueError, match="differ in length"):
            reference_step([0], [1.0, 2.0])
        with pytest.raises(ValueError, match="positive"):
            reference_step([0, 1], [1.0, 0.0])


def _record(step: int, epoch: int, **metrics: float) -> dict[str, Any]:
    return {"step": step, "epoch": epoch, "metrics": metrics, "alert": None}


class TestPeers:
    def test_monai_equals_the_library_on_centred_features(self) -> None:
        monai = pytest.importorskip("monai.metrics.embedding_collapse")
        gen = torch.Generator().manual_seed(2)
        X = torch.randn(64, 8, generator=gen) @ torch.randn(8, 32, generator=gen)
        X = (X - X.mean(0)).double()
        theirs = float(monai.compute_embedding_collapse(X)["effective_rank_score"])
        r = rankme(X)
        assert r is not None
        assert 1 - r / 32 == pytest.approx(theirs, abs=1e-5)
        rec = [_record(0, 0, **{"h/rankme": r, "h/n_samples": 64, "h/dim": 32})]
        assert (monai_score()(rec) is not None) == (theirs >= 0.5)

    def test_rankme_milestone_reads_each_epochs_last_record(self) -> None:
        d = {"h/dim": 100}
        recs = [
            _record(0, 0, **{"h/rankme": 5.0}, **d),  # low mid-epoch: not a milestone
            _record(5, 0, **{"h/rankme": 50.0}, **d),
            _record(10, 1, **{"h/rankme": 9.0}, **d),
        ]
        assert rankme_milestone()(recs) == 10

    def test_score_by_hand(self) -> None:
        def fires(records: list[dict[str, Any]]) -> int | None:
            return records[0]["step"] if records else None

        results = [
            {"label": "collapsed", "reference": {"step": 30}, "records": [_record(10, 0)]},
            {"label": "collapsed", "reference": {"step": 30}, "records": [_record(40, 0)]},
            {"label": "collapsed", "reference": {"step": 30}, "records": []},
            {"label": "healthy", "records": [_record(5, 0)]},
            {"label": "healthy", "records": []},
            {"label": "ambiguous", "records": [_record(5, 0)]},
        ]
        s = score(results, fires)
        assert (s.detections, s.early, s.misses, s.false_alarms, s.ambiguous_fired) == (
            2,
            1,
            1,
            1,
            1,
        )
        assert s.median_lead == 5  # leads 20 and -10

    def test_the_previous_alert_replayed(self) -> None:
        ceiling = math.sqrt(128 / (127 * 64))

        def rec(step: int, std: float, rank: float) -> dict[str, Any]:
            m = {"h/normalized_std": std * ceiling, "h/rankme_l2": rank * 64}
            return _record(step, 0, **m, **{"h/n_samples": 128, "h/dim": 64})

        # rank 0.08 of min(M, d): above its 0.05 (the SimSiam stayed healthy so)
        assert previous([rec(s, 0.9, 0.08) for s in range(5)]) is None
        # std under 0.05 of its ceiling twice (patience 2): warned at the second
        assert previous([rec(0, 0.9, 0.8), rec(5, 0.01, 0.8), rec(10, 0.01, 0.8)]) == 10

    def test_ours_reads_the_heldout_batch_and_its_batch_twin_does_not(self) -> None:
        from benchmarks.collapse_peers import alert

        ceiling = math.sqrt(128 / (127 * 64))

        def rec(step: int, batch: float, heldout: float) -> dict[str, Any]:
            m = {}
            for prefix, rank in (("", batch), ("heldout/", heldout)):
                for space in ("h", "z"):
                    m |= {
                        f"{prefix}{space}/normalized_std": 0.9 * ceiling,
                        f"{prefix}{space}/rankme_l2": rank * 64,
                        f"{prefix}{space}/n_samples": 128,
                        f"{prefix}{space}/dim": 64,
                    }
            return _record(step, 0, **m)

        # the training batch's rank falls to a tenth, the held-out batch's holds
        recs = [rec(0, 0.8, 0.6), *(rec(5 * i, 0.08, 0.55) for i in range(1, 4))]
        assert alert()(recs) is None
        assert alert(batch=True)(recs) == 10  # patience 2

    def test_every_detector_names_its_provenance(self) -> None:
        assert len({d.name for d in DETECTORS}) == len(DETECTORS)
        assert all(d.provenance for d in DETECTORS)


@pytest.mark.slow
def test_quick_benchmark_end_to_end(tmp_path: Path, digits: Path) -> None:
    """Two collapsing and two healthy digits runs, one epoch each, labelled and scored.

    On a digits folder of 40 training and 30 validation images a class (``--data``): the 6
    batches of 64 still fit one epoch, and the 300 validation images still hold more than the
    held-out batch's 256 rows (``spread`` picks among them), while the probes of each of the 8
    runs read 700 images through both networks (trained, random init), not 1,797.
    """
    from benchmarks.collapse_detection import main

    data = digits_subset(digits, tmp_path / "few", {"train": 40, "val": 30})
    args = ["--quick", "--epochs", "1", "--batches", "6", "--every", "2", "--data", str(data)]
    out = tmp_path / "out"
    rc = main([*args, "--out", str(out)])
    table = (out / "table.md").read_text()
    runs = [json.loads(p.read_text()) for p in out.glob("*/run.json")]
    assert rc == 0 and len(runs) == 4
    assert all(r["label"] in ("collapsed", "healthy", "ambiguous") for r in runs)
    assert all(r["records"] for r in runs)
    assert "| ours |" in table and "| rank gate |" in table
    assert "| ours (held-out) |" in table and "| MONAI effective_rank_score (held-out) |" in table
    # the digits' validation folder gives every record the held-out batch the alert reads
    assert all("heldout/h/rankme_l2" in rec["metrics"] for r in runs for rec in r["records"])
    # 256 of the 300 validation images: the batch is a selection (spread), as on the full digits
    assert {rec["metrics"]["heldout/h/n_samples"] for r in runs for rec in r["records"]} == {256}
    # the held-out reading the monitor took before the first step is the init run's network on
    # the same images: what older runs are replayed with (benchmarks/collapse_runs.start_of)
    for r in runs:
        live = r["records"][0]["alert"]["start"]
        assert live.keys() == {"h", "z"}
        for space in ("h", "z"):
            assert math.isclose(live[space], r["start"][space], rel_tol=1e-6), (r, space)
    assert (out / "detection.png").stat().st_size > 0


def _result(name: str, lab: str, ref: int | None, recs: list) -> dict[str, Any]:
    """A labelled run as ``run.json`` holds it, for the calibration's tests."""
    return {"config": {"name": name}, "label": lab, "reference": {"step": ref}, "records": recs}


class TestCalibrate:
    def test_chooses_on_half_a_and_scores_half_b(self) -> None:
        from benchmarks.collapse_calibrate import calibrate, halves

        ceiling = math.sqrt(128 / (127 * 64))

        def run(name: str, lab: str, ranks: list[float], ref: int | None) -> dict[str, Any]:
            recs = [
                _record(
                    5 * i,
                    0,
                    **{
                        "h/normalized_std": 0.9 * ceiling,
                        "h/rankme_l2": r,
                        "h/n_samples": 128,
                        "h/dim": 64,
                    },
                )
                for i, r in enumerate(ranks)
            ]
            return _result(name, lab, ref, recs)

        results = [
            run("simsiam_no_predictor", "collapsed", [60, 19, 19, 19], 15),  # 0.32 of its max
            run("byol_defaults", "healthy", [60, 27, 27, 27], None),  # 0.45: must stay quiet
            # one record's dip to 0.25: a healthy run the chosen patience must spare
            run("byol_defaults@cifar5k", "healthy", [60, 15, 60, 60, 60], None),
            run("byol_no_predictor", "collapsed", [60, 12, 12, 12], 15),  # half B
        ]
        a, b = halves(results)
        assert [r["config"]["name"] for r in a] == [
            "simsiam_no_predictor",
            "byol_defaults",
            "byol_defaults@cifar5k",  # another data set's run goes to its configuration's half
        ]
        cal = calibrate(results)
        # 0.35 and 0.4 both catch 0.32 and spare 0.45; the lower is kept; patience 2 spares the dip
        assert cal.rank_enter == 0.35 and cal.complete_enter == 0.05
        assert cal.rank_option == "dimensional_enter"
        assert cal.patience == 2 and cal.features == "h"
        assert cal.source == "batch"  # no held-out statistics here: a tie keeps the default
        assert (cal.on_a.detections, cal.on_a.false_alarms) == (1, 0)
        assert (cal.on_b.detections, cal.on_b.early, cal.on_b.median_lead) == (1, 1, 5)

    def test_the_heldout_threshold_reads_the_start_on_half_a(self) -> None:
        from benchmarks.collapse_calibrate import calibrate_heldout

        ceiling = math.sqrt(256 / (255 * 64))

        def run(name: str, lab: str, ranks: list[float], ref: int | None) -> dict[str, Any]:
            recs = []
            for i, r in enumerate(ranks):
                m = {
                    f"heldout/{p}/{k}": v
                    for p in ("h", "z")
                    for k, v in (
                        ("normalized_std", 0.9 * ceiling),
                        ("rankme_l2", r if p == "h" else 60.0),
                        ("n_samples", 256),
                        ("dim", 64),
                    )
                }
                recs.append(_record(5 * i, 0, **m))
            recs[0]["alert"] = {"start": {"h": 40 / 64, "z": 60 / 64}}  # before the first step
            return _result(name, lab, ref, recs)

        # both rise to 4x their start; the collapse falls to 0.4 of the start, the healthy run
        # to 0.8 (0.2 of its peak: the running maximum would warn it)
        results = [
            run("simsiam_no_predictor", "collapsed", [160, 16, 16, 16], 15),
            run("byol_defaults", "healthy", [160, 32, 32, 32], None),
            run("byol_no_predictor", "collapsed", [160, 16, 16, 16], 15),  # half B
        ]
        cal = calibrate_heldout(results)
        # 0.3 and 0.4 miss 0.4 (strictly below); 0.5 is the lowest that warns and spares 0.8
        assert (cal.rank_enter, cal.rank_option, cal.source) == (0.5, "heldout_enter", "heldout")
        assert (cal.on_a.detections, cal.on_a.false_alarms) == (1, 0)
        assert (cal.on_b.detections, cal.on_b.early) == (1, 1)

    def test_each_peer_gets_its_own_threshold_on_half_a(self) -> None:
        from benchmarks.collapse_calibrate import PEER_GRIDS, calibrate_peers

        def run(name: str, lab: str, ranks: list[float]) -> dict[str, Any]:
            m = [{"h/rankme": r, "h/n_samples": 128, "h/dim": 64} for r in ranks]
            recs = [_record(5 * i, 0, **x) for i, x in enumerate(m)]
            ref = 10 if lab == "collapsed" else None
            return _result(name, lab, ref, recs)

        # MONAI's score 1 - rank / 64: healthy 0.53 (over its 0.5: a false alarm), collapsed 0.84
        results = [
            run("simsiam_no_predictor", "collapsed", [50, 30, 10, 10]),
            run("byol_defaults", "healthy", [50, 30, 30, 30]),
            run("byol_no_predictor", "collapsed", [50, 30, 8, 8]),  # half B
            run("simsiam_defaults", "healthy", [50, 29, 29, 29]),  # half B: 0.55
        ]
        assert set(PEER_GRIDS) >= {"MONAI effective_rank_score", "RankMe milestone (held-out)"}
        monai = calibrate_peers(results)["MONAI effective_rank_score"]
        assert monai.threshold == 0.6  # the lowest that spares the healthy run of half A
        assert (monai.on_a.detections, monai.on_a.false_alarms) == (1, 0)
        assert (monai.on_b.detections, monai.on_b.false_alarms, monai.on_b.early) == (1, 0, 1)
