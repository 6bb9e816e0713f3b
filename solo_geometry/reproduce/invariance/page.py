"""The invariance reproduction's page: its tables and figures next to the paper's numbers.

``write_invariance_page(out, result)`` writes ``out/invariance.html`` (and its PNGs under
``out/figures/``) from the result ``invariance.json`` holds; every number on it is read from
that result. The page frame, tables and figures are :mod:`solo_geometry.analysis.pages`'s.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from solo_geometry.analysis.pages import (
    Line,
    Panel,
    Section,
    claims,
    plot_panels,
    pm,
    table,
    write_page,
)
from solo_geometry.analysis.plots import pca_2d
from solo_geometry.reproduce.invariance.claims import PUBLISHED, PUBLISHED_DEPTH
from solo_geometry.reproduce.invariance.result import (
    Curvature,
    DepthRow,
    InvarianceResult,
    OrbitReading,
    PaperProbes,
    ProbePair,
    Whitening,
)

__all__ = ["DEPARTURES", "invariance_section", "write_invariance_page"]


# How this reproduction differs from the paper's code (experiments.py, head_depth_ablations.py).
DEPARTURES = (
    "data: the embedded digits (1,797 scans, 32x32) by default, not CIFAR-10; widths, batch and "
    "epochs at CPU scale (see the settings; the paper: 2048-wide heads, batch 256, 50 epochs; "
    "its depth ablation batch 512 and 100 sweeps in one draw)",
    "as the paper: its loss (one-directional cross-view cross-entropy at temperature 0.1), its "
    "CIFAR stem (3x3 stride 1 padding 1, no max-pool) and its input (no normalisation)",
    "heads: the paper's layers (Linear without bias, then BatchNorm, after every Linear, the "
    "last included), built by this package's smooth_mlp head in place of the recipe's projector; "
    "the geometry monitor is on for them (statistics only, at the first and the last step)",
    "probes: the paper's (raw features, Linear with bias and MLP 256 on Z / 512 on H, Adam 1e-3, "
    "5 epochs, batch 256) and, beside them, docs/design.md's (L2-tuned logistic regression by "
    "L-BFGS on standardised features, an MLP early-stopped on validation)",
    "the paper's probe settings (5 epochs of batches of 256) on the digits' 1,438 probe-train "
    "images are 30 Adam steps (about 1,000 on CIFAR-10's 50,000), so at this scale its probes "
    "barely learn; this package's probes, fitted to convergence, are reported beside them",
    "orbits: each table twice, the head fed unit z (the paper's code) and raw z (as in "
    "training), with the raw training feature norm and H's cosine with its mean",
    "seeds: one pretraining per experiment; the spread is over draws of the orbit images and "
    "sweeps, as the paper's code seeds them",
)


def _zh(pair: Sequence[float] | None, fmt: str = "{:.4f}") -> str:
    """``Z / H``; a dash without numbers."""
    return "—" if pair is None else " / ".join(fmt.format(v) for v in pair)


def _gap(z: float, h: float) -> tuple[str, str, str]:
    return f"{z:.4f}", f"{h:.4f}", f"{z - h:+.4f}"


def _paper_probes_html(paper: PaperProbes) -> str:
    """The paper's rotation probes (``geometry.probes.protocol=both``) beside its numbers."""
    rows = [
        (probe, *_gap(z, h), paper.n, _zh(PUBLISHED.probes[f"rotation_{probe}"]))
        for probe, (z, h) in (("linear", paper.linear), ("mlp", paper.mlp))
    ]
    return table(("probe", "Z", "H", "Z - H", "held-out images", "paper Z / H"), rows)


def _probes_html(probes: Sequence[ProbePair]) -> str:
    rows = [
        (r.target, r.probe, *_gap(r.z, r.h), f"{r.chance:.3f}", _zh(_published_probe(r)))
        for r in probes
    ]
    return table(("target", "probe", "Z", "H", "Z - H", "chance", "paper Z / H"), rows)


def _published_probe(r: ProbePair) -> tuple[float, float] | None:
    return PUBLISHED.probes.get(f"{r.target}_{r.probe}")


_FORMS = {"spread": "{:.3e}", "d_intra": "{:.4f}", "d_inter": "{:.4f}", "separation": "{:.2f}"}


def _orbits_html(orbits: OrbitReading) -> str:
    first, over = orbits.per_seed[0], orbits.table
    rows: list[tuple[object, ...]] = []
    for key, fmt in _FORMS.items():
        ours = [pm(getattr(part, key), fmt) for part in (first.z, first.h, over.z, over.h)]
        if key == "separation":
            paper = " / ".join(pm(pair, fmt) for pair in PUBLISHED.separation)
        else:
            paper = _zh(PUBLISHED.orbit_stats[key], fmt)
        rows.append((key, *ours, paper))
    compression = pm(over.compression, "{:.2f}")
    paper = f"{PUBLISHED.compression:.2f}x"
    rows.append(("compression", f"{first.compression:.2f}x", "", compression, "", paper))
    header = (
        "statistic",
        "Z (seed 0, ± over orbits)",
        "H (seed 0)",
        "Z (mean ± std over seeds)",
        "H (over seeds)",
        "paper Z / H",
    )
    return table(header, rows)


def _reading_note(orbits: Mapping[str, OrbitReading]) -> str:
    unit, raw = orbits["unit_z"], orbits["raw_z"]
    return (
        f"<p>Mean norm of raw training features {unit.feature_norm:.2f}. Cosine of H's rows "
        f"with their mean: {unit.h_cosine_to_mean:.3f} (unit z), "
        f"{raw.h_cosine_to_mean:.3f} (raw z); the authors' released table: 0.992.</p>"
    )


def _curvature_html(curv: Curvature) -> str:
    rows: list[tuple[object, ...]] = [
        (f"seed {i}", f"{r.kappa_z:.4f}", f"{r.kappa_h:.4f}", f"{r.ratio:.3f}", r.n_sweeps)
        for i, r in enumerate(curv.per_seed)
    ]
    for name, (z, h, ratio), sweeps in (
        ("over seeds", (curv.kappa_z, curv.kappa_h, curv.ratio), ""),
        ("paper", (PUBLISHED.curvature_z, PUBLISHED.curvature_h, PUBLISHED.curvature_ratio), 200),
    ):
        rows.append((name, pm(z), pm(h), pm(ratio, "{:.3f}"), sweeps))
    return table(("", "kappa(Z)", "kappa(H)", "kappa(H) / kappa(Z)", "sweeps"), rows)


# The depth table's and figure's numbers: DepthRow's fields, PUBLISHED_DEPTH's keys; each with
# its figure title, its column and its format.
_DEPTH = {
    "compression": ("orbit compression", "compression", "{:.2f}"),
    "separation_z": ("separation in Z", "separation Z", "{:.2f}"),
    "separation_h": ("separation in H", "separation H", "{:.2f}"),
    "curvature_ratio": ("curvature ratio", "curvature ratio", "{:.3f}"),
}
_PAPER_DEPTH = ("paper Z / H", "paper compr.", "paper sep. Z / H", "paper curv.")


def _depth_html(depth: Sequence[DepthRow]) -> str:
    rows = []
    for d in depth:
        p, r = PUBLISHED_DEPTH[d.depth], d.rotation_linear
        ours = [pm(getattr(d, key), fmt) for key, (_, _, fmt) in _DEPTH.items()]
        paper = (
            _zh((p["z"], p["h"]), "{:.3f}"),
            f"{p['compression']:.1f}x",
            _zh((p["separation_z"], p["separation_h"]), "{:.2f}"),
            f"{p['curvature_ratio']:.2f}x",
        )
        rows.append((d.depth, _zh((r.z, r.h), "{:.3f}"), f"{r.gap:+.3f}", *ours, *paper))
    columns = [column for _, column, _ in _DEPTH.values()]
    return table(("depth", "rotation linear Z / H", "gap", *columns, *_PAPER_DEPTH), rows)


def _whitening_html(wh: Whitening) -> str:
    rows = []
    for e in wh.epochs:
        w, m = e.whitening, e.metric or {}
        cond, rank = m.get("cond", math.nan), m.get("effective_rank", math.nan)
        score = (f"{w.score:.3f}", f"{w.cond_z:.1f}", f"{w.cond_h:.1f}", w.rank)
        rows.append((e.epoch, *score, f"{cond:.2f}", f"{rank:.1f}", e.n_samples))
    header = (
        "epoch",
        "whitening score",
        "cond Cov(Z)",
        "cond Cov(H)",
        "shared rank",
        "cond W^T W",
        "eff. rank W",
        "images",
    )
    return table(header, rows)


def _fig_orbits(out: Path, orbits: OrbitReading) -> Path:
    """PCA of the seed-0 orbits in Z and in H, one colour per class (the paper's figure 3)."""
    data = np.load(out / orbits.per_seed[0].file)
    classes = sorted(set(data["orbit_labels"].tolist()))
    panels = []
    for key, space in (("orbits_z", "backbone Z"), ("orbits_h", "head H")):
        xy = pca_2d(data[key])  # (M, 2)
        lines = []
        for oid in np.unique(data["orbit_ids"]):
            m = data["orbit_ids"] == oid
            colour = f"C{classes.index(int(data['orbit_labels'][m][0])) % 10}"
            lines += [Line(xy[m, 1], None, colour, "-o", x=xy[m, 0], size=3)]
            lines += [Line(xy[m, 1][:1], None, colour, "*", x=xy[m, 0][:1], size=11)]
        title = f"rotation orbits in {space} (PCA; star: 0 degrees)"
        panels.append(Panel(title, lines, logy=False))
    return plot_panels(out / "figures" / "orbits.png", panels, size=(5.5, 4.5), dpi=110)


def _depth_panel(title: str, ours: Sequence, err: Sequence | None, paper: list, ds: list) -> Panel:
    lines = [
        Line(ours, "this run (± over seeds)", style="-o", x=ds, err=err),
        Line(paper, "paper (CIFAR-10)", "gray", "--s", x=ds),
    ]
    return Panel(title, lines, xlabel="head depth", logy=False, integer_x=True)


def _fig_depth(out: Path, depth: Sequence[DepthRow]) -> Path:
    ds, pub = [d.depth for d in depth], [PUBLISHED_DEPTH[d.depth] for d in depth]
    gap = [d.rotation_linear.gap for d in depth]
    panels = [
        _depth_panel("rotation probe gap Z - H", gap, None, [p["z"] - p["h"] for p in pub], ds)
    ]
    for key in ("compression", "separation_h", "curvature_ratio"):
        ours, err = zip(*(getattr(d, key) for d in depth), strict=True)
        panels.append(_depth_panel(_DEPTH[key][0], ours, err, [p[key] for p in pub], ds))
    return plot_panels(out / "figures" / "depth.png", panels, size=(3.75, 3.6), dpi=110)


def _spectra(wh: Whitening) -> tuple[list[Line], list[Line]]:
    """Covariance spectra and metric eigenvalues of the first and the last epoch."""
    cov, metric = [], []
    for e, style in ((wh.epochs[0], ":"), (wh.epochs[-1], "-")):
        for space, values, colour in (("Z", e.cov_z, "C0"), ("H", e.cov_h, "C3")):
            lam = np.asarray(values, dtype=np.float64)
            lam = lam[lam > 1e-12 * lam[0]]  # the numerical rank: N held-out images or the width
            cov.append(Line(lam, f"{space}, epoch {e.epoch}", colour, style))
        metric.append(Line(list(e.metric_eigenvalues), f"epoch {e.epoch}", "C2", style))
    return cov, metric


def _fig_whitening(out: Path, wh: Whitening) -> Path:
    s, steps = wh.series, wh.series["step"]
    cov, metric = _spectra(wh)
    panels = [
        Panel(
            "whitening score cond(H) / cond(Z)",
            [Line(s["whitening/score"], "training batch", style="-o", x=steps)],
            xlabel="step",
            level=1.0,
        ),
        Panel(
            "metric spectrum over training",
            [
                Line(s["metric/cond"], "cond W^T W", style="-o", x=steps),
                Line(s["metric/effective_rank"], "effective rank W", style="-s", x=steps),
            ],
            xlabel="step",
        ),
        Panel("covariance spectra (held-out)", cov, xlabel="index"),
        Panel("eigenvalues of W^T W", metric, xlabel="index"),
    ]
    return plot_panels(out / "figures" / "whitening.png", panels, size=(4.0, 3.6), dpi=110)


def _settings_html(result: InvarianceResult) -> str:
    rows = [(k, str(v)) for k, v in result.settings.items()]
    rows += [
        ("dataset", result.dataset),
        ("host", result.host),
        ("seconds", ", ".join(f"{k} {v:.0f}" for k, v in result.seconds.items())),
    ]
    return table(("setting", "value"), rows)


def invariance_section(out: Path, result: InvarianceResult) -> Section:
    """The invariance part of the page, ``(title, HTML)``; its figures under ``out/figures``.

    Raises:
        ValueError: a result without its guillotine, its paper probes or its whitening part.
    """
    g, wh = result.guillotine, result.whitening
    if g is None or g.probes_paper is None or wh is None:
        raise ValueError(
            "an invariance page needs the guillotine (with paper probes) and whitening"
        )
    figs = {
        "orbits": _fig_orbits(out, g.orbits["unit_z"]).relative_to(out),
        "depth": _fig_depth(out, result.depth).relative_to(out),
        "whitening": _fig_whitening(out, wh).relative_to(out),
    }
    body = [
        "<h3>Claims</h3>",
        claims(result.claims),
        f"<h3>Guillotine: probes on Z vs H (head width {result.settings['width']}, "
        "paper 2048)</h3>",
        _probes_html(g.probes),
        "<h3>The paper's rotation probes (its code's settings: raw features, Adam 1e-3, 5 "
        "epochs, batch 256)</h3>",
        _paper_probes_html(g.probes_paper),
        "<h3>Orbit table (the paper's protocol and statistics; the head fed unit z, as the "
        "paper's code)</h3>",
        _orbits_html(g.orbits["unit_z"]),
        "<h3>The same orbits, the head fed raw z (as in training)</h3>",
        _orbits_html(g.orbits["raw_z"]),
        _reading_note(g.orbits),
        f'<img src="{figs["orbits"]}">',
        "<h3>Curvature of 0-45 degree rotation sweeps</h3>",
        _curvature_html(g.curvature),
        "<h3>Head depth (Swish + BN heads)</h3>",
        _depth_html(result.depth),
        f'<img src="{figs["depth"]}">',
        "<h3>Whitening: metric-linear head (held-out images per epoch)</h3>",
        _whitening_html(wh),
        f'<img src="{figs["whitening"]}">',
        "<h3>Settings</h3>",
        _settings_html(result),
        "<h3>Departures from the paper's code</h3>",
        "<ul>" + "".join(f"<li>{html.escape(d)}</li>" for d in DEPARTURES) + "</ul>",
    ]
    return "Invariance: the head discards what the backbone keeps", "\n".join(body)


def write_invariance_page(out: Path, result: InvarianceResult) -> Path:
    """Write ``out/invariance.html`` from the result of the invariance reproduction."""
    section = invariance_section(out, result)
    return write_page(out / "invariance.html", "The paper reproduced", [section])
