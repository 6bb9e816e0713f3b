"""The paper's invariance claims, its published values, and a verdict per claim from a run.

Published values: CIFAR-10, ResNet-18, SimCLR (github farischaudhry/projection-head-geometry,
``results/cifar10/resnet18``): ``guillotine_results.npy`` (rotation probes),
``curvature_results.npy`` (3 seeds), ``orbit_visualization.npy`` (the orbit table, as
``solo-geometry orbits`` computes it from that file) and
``head_depth_ablations/geometric_ablation_depth_{1,2,3}.npz`` (per-depth rotation probe, orbit
statistics and curvature, computed from those arrays with the same code). A verdict compares
this run's own numbers; it is never asserted. The paper's table gives separation 2.04 +- 0.52
for Z; its own code (``_calculate_geometric_metrics``) on its released ``orbit_visualization.npy``
gives 2.04 +- 0.50 (every other entry agrees to the digits printed). ``held`` is None where a
number is undefined.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["PUBLISHED", "PUBLISHED_DEPTH", "claims"]

# Backbone Z vs head H, as published (accuracies as fractions).
PUBLISHED: dict[str, Any] = {
    "rotation_linear": (0.5227, 0.3755),
    "rotation_mlp": (0.5546, 0.4356),
    "spread": (2.2476e-2, 1.0285e-3),
    "d_intra": (0.2114, 0.0444),
    "d_inter": (0.4319, 0.1110),
    "separation": ((2.04, 0.52), (2.50, 0.72)),  # the paper's table; its code on its array: 0.50
    "compression": 21.85,
    "curvature_z": (0.1254, 0.0024),  # mean +- std over 3 seeds
    "curvature_h": (0.2423, 0.0044),
    "curvature_ratio": (1.93, 0.0019),
}
# Per depth (Swish + BN heads): rotation linear probe Z, H; compression; separation Z, H;
# curvature ratio mean kappa(H) / mean kappa(Z) over the 100 sweeps saved.
PUBLISHED_DEPTH: dict[int, dict[str, float]] = {
    1: {
        "z": 0.4752,
        "h": 0.4740,
        "compression": 49.13,
        "separation_z": 2.19,
        "separation_h": 1.89,
        "curvature_ratio": 1.93,
    },
    2: {
        "z": 0.5282,
        "h": 0.3970,
        "compression": 57.22,
        "separation_z": 2.07,
        "separation_h": 2.61,
        "curvature_ratio": 2.00,
    },
    3: {
        "z": 0.5235,
        "h": 0.3561,
        "compression": 78.51,
        "separation_z": 2.22,
        "separation_h": 3.29,
        "curvature_ratio": 2.09,
    },
}


def _vs(z: float | None, h: float | None, fmt: str = "{:.4f}") -> str:
    if z is None or h is None:
        return "n/a"
    return f"{fmt.format(z)} (Z) vs {fmt.format(h)} (H)"


def _gt(a: float | None, b: float | None) -> bool | None:
    return None if a is None or b is None else bool(a > b)


def _increasing(values: Sequence[float | None]) -> bool | None:
    if any(v is None for v in values):
        return None
    return all(b > a for a, b in zip(values[:-1], values[1:], strict=True))  # type: ignore[operator]


def _claim(cid: str, text: str, measured: str, published: str, held: bool | None) -> dict:
    return {"id": cid, "text": text, "measured": measured, "published": published, "held": held}


def _probe_claims(probes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    acc = {(r["target"], r["probe"]): (r["z"], r["h"]) for r in probes}
    out = []
    for probe in ("linear", "mlp"):
        z, h = acc[("rotation", probe)]
        pz, ph = PUBLISHED[f"rotation_{probe}"]
        out.append(
            _claim(
                f"rotation_{probe}",
                f"rotation probe ({probe}) more accurate on Z than on H",
                _vs(z, h),
                _vs(pz, ph),
                _gt(z, h),
            )
        )
    (zl, hl), (zm, hm) = acc[("rotation", "linear")], acc[("rotation", "mlp")]
    gap_z, gap_h = zm - zl, hm - hl
    pub_z = PUBLISHED["rotation_mlp"][0] - PUBLISHED["rotation_linear"][0]
    pub_h = PUBLISHED["rotation_mlp"][1] - PUBLISHED["rotation_linear"][1]
    out.append(
        _claim(
            "nonlinearity_gap",
            "MLP-minus-linear rotation probe gap larger on H than on Z",
            _vs(gap_z, gap_h, "{:+.4f}"),
            _vs(pub_z, pub_h, "{:+.4f}"),
            _gt(gap_h, gap_z),
        )
    )
    z, h = acc[("class", "linear")]
    out.append(
        _claim(
            "class_linear",
            "class probe (linear) more accurate on Z than on H",
            _vs(z, h),
            "not in the paper's table",
            _gt(z, h),
        )
    )
    return out


def _geometry_claims(orbits: dict[str, Any], curvature: dict[str, Any]) -> list[dict[str, Any]]:
    over = orbits["over_seeds"]
    z, h = over["z"], over["h"]
    sz, sh = PUBLISHED["separation"]
    comp = over["compression"][0]
    ratio = curvature["ratio"]
    return [
        _claim(
            "spread",
            "the head shrinks rotation orbits: mean spread lower in H",
            _vs(z["spread"][0], h["spread"][0], "{:.3e}"),
            _vs(PUBLISHED["spread"][0], PUBLISHED["spread"][1], "{:.3e}"),
            _gt(z["spread"][0], h["spread"][0]),
        ),
        _claim(
            "compression",
            "orbit compression mean spread(Z) / mean spread(H) above 1",
            f"{comp:.2f}x",
            f"{PUBLISHED['compression']:.2f}x",
            _gt(comp, 1.0),
        ),
        _claim(
            "d_intra",
            "intra-orbit distance lower in H",
            _vs(z["d_intra"][0], h["d_intra"][0]),
            _vs(PUBLISHED["d_intra"][0], PUBLISHED["d_intra"][1]),
            _gt(z["d_intra"][0], h["d_intra"][0]),
        ),
        _claim(
            "separation",
            "class separation D_inter / D_intra higher in H",
            _vs(z["separation"][0], h["separation"][0], "{:.2f}"),
            _vs(sz[0], sh[0], "{:.2f}"),
            _gt(h["separation"][0], z["separation"][0]),
        ),
        _claim(
            "curvature",
            "rotation sweeps more curved in H: kappa(H) / kappa(Z) above 1",
            f"{ratio[0]:.2f}x +- {ratio[1]:.2f}",
            f"{PUBLISHED['curvature_ratio'][0]:.2f}x +- {PUBLISHED['curvature_ratio'][1]:.3f}",
            _gt(ratio[0], 1.0),
        ),
    ]


def _depth_claims(depth: list[dict[str, Any]]) -> list[dict[str, Any]]:
    gaps = [d["rotation_linear"]["gap"] for d in depth]
    comps = [d["compression"][0] for d in depth]
    pub_gaps = [PUBLISHED_DEPTH[d]["z"] - PUBLISHED_DEPTH[d]["h"] for d in (1, 2, 3)]
    pub_comps = [PUBLISHED_DEPTH[d]["compression"] for d in (1, 2, 3)]
    fmt = ", ".join
    return [
        _claim(
            "depth_gap",
            "rotation probe gap Z - H grows with head depth 1 < 2 < 3",
            fmt(f"{g:+.3f}" for g in gaps),
            fmt(f"{g:+.3f}" for g in pub_gaps),
            _increasing(gaps),
        ),
        _claim(
            "depth_compression",
            "orbit compression grows with head depth 1 < 2 < 3",
            fmt(f"{c:.2f}x" for c in comps),
            fmt(f"{c:.2f}x" for c in pub_comps),
            _increasing(comps),
        ),
    ]


def _whitening_claims(whitening: dict[str, Any]) -> list[dict[str, Any]]:
    epochs = whitening["epochs"]
    scores = [e["whitening"]["score"] for e in epochs]
    last = scores[-1] if scores else None
    return [
        _claim(
            "whitening",
            "a metric-linear head whitens: cond Cov(H) / cond Cov(Z) below 1 (held-out)",
            "n/a" if last is None else f"{last:.3f}",
            "claimed, no number published",
            None if last is None else bool(last < 1.0),
        ),
    ]


def claims(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every claim of the invariance part with its measured and published values and verdict.

    Args:
        result: the reproduction's result (``guillotine``, ``depth``, ``whitening``).

    Returns:
        Dicts with ``id``, ``text``, ``measured``, ``published`` and ``held`` (True, False, or
        None where a number is undefined).
    """
    g = result["guillotine"]
    return [
        *_probe_claims(g["probes"]),
        *_geometry_claims(g["orbits"], g["curvature"]),
        *_depth_claims(result["depth"]),
        *_whitening_claims(result["whitening"]),
    ]
