"""Verdicts on the paper's invariance claims, from a reproduction or from the authors' arrays.

One :class:`~solo_geometry.reproduce.results.Verdict` per claim of :data:`CLAIMS`, judged on an
:class:`~solo_geometry.reproduce.invariance.evidence.Evidence` by :func:`judge_effect`, with the
standard errors and readings docs/reproducing.md gives ("Verdicts, calibrated on the authors'
arrays").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from solo_geometry.reproduce.invariance.evidence import (
    Evidence,
    OrbitEvidence,
    OrbitSummary,
    ProbeEvidence,
    orbit_evidence,
)
from solo_geometry.reproduce.invariance.result import (
    READINGS,
    InvarianceResult,
    OrbitReading,
    read_invariance,
)
from solo_geometry.reproduce.paper_arrays import paper_evidence
from solo_geometry.reproduce.results import VERDICTS, Verdict

__all__ = [
    "CLAIMS",
    "K_SIGMA",
    "format_verdicts",
    "invariance_verdicts",
    "judge_effect",
    "run_evidence",
    "verdicts",
]

K_SIGMA = 2.0
HELD, NOT_HELD, UNDECIDABLE = VERDICTS
CLAIMS = {
    "probe_linear": "a linear rotation probe reads rotation better from Z than from H",
    "probe_mlp": "an MLP rotation probe reads rotation better from Z than from H",
    "orbit_compression": "the head compresses rotation orbits: spread(Z) / spread(H) above 1",
    "separation": "class separation D_inter / D_intra is higher in H than in Z",
    "curvature": "rotation sweeps are more curved in H: kappa(H) / kappa(Z) above 1",
    "depth_compression": "orbit compression grows with head depth 1 < 2 < 3",
}


def judge_effect(effect: float, se: float) -> str:
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


def _probe(probes: Mapping[str, ProbeEvidence], kind: str) -> list[tuple[str, str, str]]:
    out = []
    for name, p in probes.items():
        z, h = p.linear if kind == "linear" else p.mlp
        n = p.n
        if not n:
            out.append((name, UNDECIDABLE, f"Z {z:.4f} vs H {h:.4f}, held-out size unknown"))
            continue
        se = math.sqrt(z * (1 - z) / n + h * (1 - h) / n)
        text = f"Z {z:.4f} vs H {h:.4f}, difference {z - h:+.4f} +- {se:.4f} (n {n})"
        out.append((name, judge_effect(z - h, se), text))
    return out


def _per_seed(
    name: str, summaries: Sequence[OrbitSummary], rule: Callable[[OrbitEvidence], tuple[str, str]]
) -> tuple[str, str, str]:
    judged = [rule(orbit_evidence(s, seed=i)) for i, s in enumerate(summaries)]
    verdicts = {v for v, _ in judged}
    verdict = verdicts.pop() if len(verdicts) == 1 else UNDECIDABLE
    return name, verdict, " | ".join(t for _, t in judged)


def _compression_rule(e: OrbitEvidence) -> tuple[str, str]:
    m, se, n = e.log_ratio
    text = (
        f"{e.compression:.2f}x (log ratio per orbit {m:.2f} +- {se:.2f}, {n} orbits; "
        f"H rows' cosine with their mean {e.h_cosine_to_mean:.3f})"
    )
    return judge_effect(m, se), text


def _separation_rule(e: OrbitEvidence) -> tuple[str, str]:
    diff, se = e.separation_diff
    text = f"Z {e.separation_z:.2f} vs H {e.separation_h:.2f}, H - Z {diff:+.2f} +- {se:.2f}"
    return judge_effect(diff, se), text


def _depth_reading(
    name: str, by_depth: Mapping[int, Sequence[OrbitSummary]]
) -> tuple[str, str, str]:
    depths = sorted(by_depth)
    if len(depths) < 2:
        return name, UNDECIDABLE, f"depths {depths} only"
    stats = []
    for d in depths:  # seed 0's table per depth: one draw, as the paper's ablation
        e = orbit_evidence(by_depth[d][0])
        stats.append((d, e.compression, *e.log_ratio[:2]))
    steps = [
        judge_effect(b[2] - a[2], math.hypot(a[3], b[3]))
        for a, b in zip(stats, stats[1:], strict=False)
    ]
    verdict = NOT_HELD if NOT_HELD in steps else HELD if set(steps) == {HELD} else UNDECIDABLE
    text = ", ".join(f"depth {d}: {c:.2f}x (log {m:.2f} +- {s:.2f})" for d, c, m, s in stats)
    return name, verdict, text


def _curvature(ratios: Sequence[float] | None) -> tuple[str, str]:
    if not ratios:
        return UNDECIDABLE, "no curvature ratios"
    n = len(ratios)
    mean = sum(ratios) / n
    if n < 2:
        return UNDECIDABLE, f"{mean:.3f}x from one draw of sweeps (no spread to judge it by)"
    se = math.sqrt(sum((r - mean) ** 2 for r in ratios) / (n - 1) / n)
    return judge_effect(mean - 1.0, se), f"{mean:.3f}x +- {se:.3f} over {n} draws of sweeps"


def verdicts(ev: Evidence) -> list[Verdict]:
    """One verdict per claim of :data:`CLAIMS`, in that order, judged on ``ev``."""
    found: dict[str, tuple[str, str]] = {
        "probe_linear": _combine(_probe(ev.probes, "linear")),
        "probe_mlp": _combine(_probe(ev.probes, "mlp")),
        "orbit_compression": _combine(
            [_per_seed(n, s, _compression_rule) for n, s in ev.orbits.items()]
        ),
        "separation": _combine([_per_seed(n, s, _separation_rule) for n, s in ev.orbits.items()]),
        "curvature": _curvature(ev.curvature),
        "depth_compression": _combine([_depth_reading(n, d) for n, d in ev.depth.items()]),
    }
    return [
        Verdict(cid, text, found[cid][0], found[cid][1] or "no evidence in the inputs")
        for cid, text in CLAIMS.items()
    ]


def format_verdicts(rows: Sequence[Mapping[str, str]]) -> str:
    """Verdicts as text: the verdict and the claim, then the evidence, per claim."""
    return "\n".join(f"{r['verdict']:>12s}  {r['claim']}\n{'':14s}{r['evidence']}" for r in rows)


def _orbit_readings(orbits: Mapping[str, OrbitReading]) -> dict[str, list[OrbitSummary]]:
    out = {name: orbits[name].summaries() for name in READINGS if name in orbits}
    return {k: v for k, v in out.items() if v}


def run_evidence(result: InvarianceResult | Mapping[str, object]) -> Evidence:
    """Evidence from a reproduction's ``invariance.json`` (its record, or its plain content).

    Raises:
        ValueError: if it has no ``guillotine`` part, or parts of the wrong types.
    """
    if not isinstance(result, InvarianceResult):
        result = InvarianceResult.from_json(result, where="invariance.json")
    g = result.guillotine
    if g is None:
        raise ValueError("not an invariance.json: it has no 'guillotine' part")
    probes: dict[str, ProbeEvidence] = {}
    rows = {r.probe: (r.z, r.h) for r in g.probes if r.target == "rotation"}
    if "linear" in rows and "mlp" in rows:
        probes["package"] = ProbeEvidence(rows["linear"], rows["mlp"], g.n_test)
    if g.probes_paper is not None:
        probes["paper"] = g.probes_paper
    depth: dict[str, dict[int, list[OrbitSummary]]] = {}
    for row in result.depth:
        for name, summaries in _orbit_readings(row.orbits).items():
            depth.setdefault(name, {})[row.depth] = summaries
    ratios = [r.ratio for r in g.curvature.per_seed if r.ratio is not None]
    return Evidence(
        probes=probes,
        orbits=_orbit_readings(g.orbits),
        curvature=ratios or None,
        depth=depth,
        source="invariance.json",
    )


def invariance_verdicts(paths: Sequence[Path]) -> list[Verdict]:
    """The verdicts on one ``invariance.json`` (or its folder) or on the authors' arrays.

    Raises:
        ValueError: a path that is neither, or an unreadable file.
    """
    runs = [p / "invariance.json" if (p / "invariance.json").is_file() else p for p in paths]
    if len(runs) == 1 and runs[0].suffix == ".json" and runs[0].is_file():
        return verdicts(run_evidence(read_invariance(runs[0])))
    if any(p.suffix == ".json" for p in runs):
        raise ValueError("give one invariance.json, or the authors' result folders or files")
    return verdicts(paper_evidence(list(paths)))
