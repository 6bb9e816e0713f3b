"""Verdicts of the invariance claims: computed from the numbers, both ways, never asserted."""

from __future__ import annotations

from typing import Any

import pytest

from solo_geometry.reproduce.invariance import format_claims
from solo_geometry.reproduce.invariance_claims import claims


def _orbits(spread: tuple[float, float], sep: tuple[float, float], comp: float) -> dict:
    over = {
        space: {
            "spread": [s, 0.0],
            "d_intra": [s, 0.0],
            "d_inter": [1.0, 0.0],
            "separation": [p, 0],
        }
        for space, s, p in (("z", spread[0], sep[0]), ("h", spread[1], sep[1]))
    }
    return {"over_seeds": {**over, "compression": [comp, 0.0]}}


def result(flip: bool) -> dict[str, Any]:
    """A result where every claim holds (flip=False) or none does (flip=True)."""
    hi, lo = (0.4, 0.6) if flip else (0.6, 0.4)
    probes = [
        {"target": "rotation", "probe": "linear", "z": hi, "h": lo},
        {"target": "rotation", "probe": "mlp", "z": hi + (0.0 if flip else 0.01), "h": lo + 0.1},
        {"target": "class", "probe": "linear", "z": hi, "h": lo},
    ]
    if flip:  # MLP gap smaller on H than on Z
        probes[1] = {"target": "rotation", "probe": "mlp", "z": hi + 0.1, "h": lo}
    depth_gaps = (0.3, 0.2, 0.1) if flip else (0.1, 0.2, 0.3)
    depth_comps = (3.0, 2.0, 1.0) if flip else (1.0, 2.0, 3.0)
    return {
        "guillotine": {
            "probes": probes,
            "orbits": _orbits(
                (0.1, 0.2) if flip else (0.2, 0.1),
                (2.0, 1.0) if flip else (1.0, 2.0),
                0.5 if flip else 2.0,
            ),
            "curvature": {"ratio": [0.8 if flip else 1.5, 0.01]},
        },
        "depth": [
            {"rotation_linear": {"gap": g}, "compression": [c, 0.0]}
            for g, c in zip(depth_gaps, depth_comps, strict=True)
        ],
        "whitening": {"epochs": [{"whitening": {"score": 1.2 if flip else 0.8}}]},
    }


class TestClaims:
    @pytest.mark.parametrize("flip", [False, True])
    def test_every_verdict_follows_its_numbers(self, flip: bool) -> None:
        out = claims(result(flip))
        assert len(out) == 12
        assert {c["held"] for c in out} == {not flip}
        text = format_claims(out)
        assert text.count("did not hold") == (12 if flip else 0)
        assert all(c["published"] and c["measured"] for c in out)

    def test_undefined_numbers_give_no_verdict(self) -> None:
        r = result(False)
        r["whitening"]["epochs"] = []
        r["guillotine"]["probes"][2]["h"] = None
        held = {c["id"]: c["held"] for c in claims(r)}
        assert held["whitening"] is None and held["class_linear"] is None
