"""Verdicts on the paper's invariance claims, from a reproduction or from the authors' arrays.

One verdict per claim: a dict with ``id``, ``claim``, ``verdict`` (``held``, ``not held`` or
``undecidable``) and ``evidence`` (one line), the shape of the collapse verdicts. A claim is
``held`` when its effect exceeds twice its standard error, ``not held`` when the opposite effect
does, ``undecidable`` otherwise or without evidence. Where a number has two readings (the
paper's probes and this package's; orbit tables with the head fed unit z, as the paper's code, or
raw z, as in training) each reading is judged, and the claim takes their common verdict; readings
that disagree make it ``undecidable``. Calibration: on the authors' CIFAR-10 ResNet-18 arrays every
claim is ``held``, as the paper states (``tests/reproduce/test_invariance_verdicts.py``).

Standard errors: rotation probes, binomial on the held-out images, independent (unpaired, so
conservative); orbit compression, per-orbit log spread ratio over orbits; separation, paired
bootstrap over orbits (:mod:`~solo_geometry.reproduce.invariance.orbit_evidence`); curvature
ratio, over the draws of sweeps (one draw: undecidable); depth, each step of the mean log spread
ratio against both depths' errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from solo_geometry.reproduce.invariance.orbit_evidence import OrbitSummary, orbit_evidence
from solo_geometry.reproduce.results import Verdict

__all__ = [
    "CLAIMS",
    "K_SIGMA",
    "evidence_from_json",
    "evidence_to_json",
    "format_verdicts",
    "judge",
    "run_evidence",
    "verdicts",
]

K_SIGMA = 2.0
HELD, NOT_HELD, UNDECIDABLE = "held", "not held", "undecidable"
CLAIMS = {
    "probe_linear": "a linear rotation probe reads rotation better from Z than from H",
    "probe_mlp": "an MLP rotation probe reads rotation better from Z than from H",
    "orbit_compression": "the head compresses rotation orbits: spread(Z) / spread(H) above 1",
    "separation": "class separation D_inter / D_intra is higher in H than in Z",
    "curvature": "rotation sweeps are more curved in H: kappa(H) / kappa(Z) above 1",
    "depth_compression": "orbit compression grows with head depth 1 < 2 < 3",
}


def judge(effect: float, se: float) -> str:
    """``held`` if effect > K se, ``not held`` if effect < -K se, else ``undecidable``."""
    if not math.isfinite(effect) or not math.isfinite(se):
        return UNDECIDABLE
    if effect > K_SIGMA * se:
        return HELD
    if effect < -K_SIGMA * se:
        return NOT_HELD
    return UNDECIDABLE


def _combine(readings: list[tuple[str, str, str]]) -> tuple[str, str]:
    """(verdict, evidence) from (name, verdict, text) per reading: their common verdict."""
    if not readings:
        return UNDECIDABLE, ""
    if len(readings) == 1:
        return readings[0][1], readings[0][2]
    text = "; ".join(f"{name}: {text} ({v})" for name, v, text in readings)
    verdicts = {v for _, v, _ in readings}
    if len(verdicts) > 1:
        return UNDECIDABLE, text + "; the readings disagree"
    return verdicts.pop(), text


def _probe(probes: dict[str, Any], kind: str) -> list[tuple[str, str, str]]:
    out = []
    for name, p in probes.items():
        z, h = p[kind]
        n = p.get("n")
        if not n:
            out.append((name, UNDECIDABLE, f"Z {z:.4f} vs H {h:.4f}, held-out size unknown"))
            continue
        se = math.sqrt(z * (1 - z) / n + h * (1 - h) / n)
        text = f"Z {z:.4f} vs H {h:.4f}, difference {z - h:+.4f} +- {se:.4f} (n {n})"
        out.append((name, judge(z - h, se), text))
    return out


def _per_seed(
    name: str, summaries: list[OrbitSummary], rule: Callable[[dict[str, Any]], tuple[str, str]]
) -> tuple[str, str, str]:
    judged = [rule(orbit_evidence(s, seed=i)) for i, s in enumerate(summaries)]
    verdicts = {v for v, _ in judged}
    verdict = verdicts.pop() if len(verdicts) == 1 else UNDECIDABLE
    return name, verdict, " | ".join(t for _, t in judged)


def _compression_rule(e: dict[str, Any]) -> tuple[str, str]:
    m, se, n = e["log_ratio"]
    text = (
        f"{e['compression']:.2f}x (log ratio per orbit {m:.2f} +- {se:.2f}, {n} orbits; "
        f"H rows' cosine with their mean {e['h_cosine_to_mean']:.3f})"
    )
    return judge(m, se), text


def _separation_rule(e: dict[str, Any]) -> tuple[str, str]:
    diff, se = e["separation_diff"]
    text = f"Z {e['separation_z']:.2f} vs H {e['separation_h']:.2f}, H - Z {diff:+.2f} +- {se:.2f}"
    return judge(diff, se), text


def _depth_reading(name: str, by_depth: dict[int, list[OrbitSummary]]) -> tuple[str, str, str]:
    depths = sorted(by_depth)
    if len(depths) < 2:
        return name, UNDECIDABLE, f"depths {depths} only"
    stats = []
    for d in depths:  # seed 0's table per depth: one draw, as the paper's ablation
        e = orbit_evidence(by_depth[d][0])
        stats.append((d, e["compression"], *e["log_ratio"][:2]))
    steps = [
        judge(b[2] - a[2], math.hypot(a[3], b[3])) for a, b in zip(stats, stats[1:], strict=False)
    ]
    verdict = NOT_HELD if NOT_HELD in steps else HELD if set(steps) == {HELD} else UNDECIDABLE
    text = ", ".join(f"depth {d}: {c:.2f}x (log {m:.2f} +- {s:.2f})" for d, c, m, s in stats)
    return name, verdict, text


def _curvature(ratios: list[float] | None) -> tuple[str, str]:
    if not ratios:
        return UNDECIDABLE, "no curvature ratios"
    n = len(ratios)
    mean = sum(ratios) / n
    if n < 2:
        return UNDECIDABLE, f"{mean:.3f}x from one draw of sweeps (no spread to judge it by)"
    se = math.sqrt(sum((r - mean) ** 2 for r in ratios) / (n - 1) / n)
    return judge(mean - 1.0, se), f"{mean:.3f}x +- {se:.3f} over {n} draws of sweeps"


def verdicts(ev: dict[str, Any]) -> list[Verdict]:
    """Every invariance claim judged on one body of evidence.

    Args:
        ev: ``probes`` {reading: {linear: (z, h), mlp: (z, h), n}}, ``orbits`` {reading: [
            :class:`OrbitSummary` per draw]}, ``curvature`` (ratio per draw, or None), ``depth``
            {reading: {depth: [summaries]}} (:func:`run_evidence`,
            :func:`~solo_geometry.reproduce.paper_arrays.paper_evidence`).

    Returns:
        One :class:`~solo_geometry.reproduce.results.Verdict` per claim of :data:`CLAIMS`, in
        that order.
    """
    found: dict[str, tuple[str, str]] = {
        "probe_linear": _combine(_probe(ev.get("probes") or {}, "linear")),
        "probe_mlp": _combine(_probe(ev.get("probes") or {}, "mlp")),
        "orbit_compression": _combine(
            [_per_seed(n, s, _compression_rule) for n, s in (ev.get("orbits") or {}).items()]
        ),
        "separation": _combine(
            [_per_seed(n, s, _separation_rule) for n, s in (ev.get("orbits") or {}).items()]
        ),
        "curvature": _curvature(ev.get("curvature")),
        "depth_compression": _combine(
            [_depth_reading(n, d) for n, d in (ev.get("depth") or {}).items()]
        ),
    }
    return [
        Verdict(cid, text, found[cid][0], found[cid][1] or "no evidence in the inputs")
        for cid, text in CLAIMS.items()
    ]


def format_verdicts(rows: Sequence[Mapping[str, str]]) -> str:
    """Verdicts as text: the verdict and the claim, then the evidence, per claim."""
    return "\n".join(f"{r['verdict']:>12s}  {r['claim']}\n{'':14s}{r['evidence']}" for r in rows)


def _summaries(reading: dict[str, Any]) -> list[OrbitSummary]:
    return [
        OrbitSummary.from_json(row["summary"])
        for row in reading.get("per_seed", [])
        if "summary" in row
    ]


def _orbit_readings(orbits: dict[str, Any]) -> dict[str, list[OrbitSummary]]:
    out = {name: _summaries(orbits[name]) for name in ("unit_z", "raw_z") if name in orbits}
    return {k: v for k, v in out.items() if v}


def run_evidence(result: dict[str, Any]) -> dict[str, Any]:
    """Evidence from a reproduction's ``invariance.json`` content.

    Raises:
        ValueError: if it has no ``guillotine`` part.
    """
    g = result.get("guillotine")
    if not isinstance(g, dict):
        raise ValueError("not an invariance.json: it has no 'guillotine' part")
    probes: dict[str, Any] = {}
    rows = {(r["target"], r["probe"]): (r["z"], r["h"]) for r in g.get("probes", [])}
    if ("rotation", "linear") in rows and ("rotation", "mlp") in rows:
        probes["package"] = {
            "linear": rows[("rotation", "linear")],
            "mlp": rows[("rotation", "mlp")],
            "n": g.get("n_test"),
        }
    if "probes_paper" in g:
        paper = g["probes_paper"]
        probes["paper"] = {
            "linear": tuple(paper["linear"]),
            "mlp": tuple(paper["mlp"]),
            "n": paper["n"],
        }
    depth: dict[str, dict[int, list[OrbitSummary]]] = {}
    for row in result.get("depth", []):
        for name, summaries in _orbit_readings(row.get("orbits", {})).items():
            depth.setdefault(name, {})[int(row["depth"])] = summaries
    curv = g.get("curvature") or {}
    return {
        "source": "invariance.json",
        "probes": probes,
        "orbits": _orbit_readings(g.get("orbits", {})),
        "curvature": [r["ratio"] for r in curv.get("per_seed", [])] or None,
        "depth": depth,
    }


def evidence_to_json(ev: dict[str, Any]) -> dict[str, Any]:
    """Evidence as plain JSON (orbit summaries as lists): for fixtures."""

    def tables(x: list[OrbitSummary]) -> list[dict[str, Any]]:
        return [s.to_json() for s in x]

    return {
        "probes": {
            k: {**v, "linear": list(v["linear"]), "mlp": list(v["mlp"])}
            for k, v in ev["probes"].items()
        },
        "orbits": {k: tables(v) for k, v in ev["orbits"].items()},
        "curvature": ev["curvature"],
        "depth": {k: {str(d): tables(v) for d, v in by.items()} for k, by in ev["depth"].items()},
    }


def evidence_from_json(data: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`evidence_to_json`."""

    def tables(x: list[dict[str, Any]]) -> list[OrbitSummary]:
        return [OrbitSummary.from_json(s) for s in x]

    return {
        "probes": {
            k: {**v, "linear": tuple(v["linear"]), "mlp": tuple(v["mlp"])}
            for k, v in data["probes"].items()
        },
        "orbits": {k: tables(v) for k, v in data["orbits"].items()},
        "curvature": data["curvature"],
        "depth": {k: {int(d): tables(v) for d, v in by.items()} for k, by in data["depth"].items()},
    }
