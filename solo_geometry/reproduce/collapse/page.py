"""The collapse sweep's page: the paper's figure set (:data:`FIGURES`) and ``index.html``.

The figures follow plot_results.py's, drawn by :func:`solo_geometry.analysis.pages.plot_panels`
(the seeds' mean, their min-max shaded); epoch 0 is the collapsed start. With ``--compare
FILE``, :data:`COMPARE` draws our curves beside the authors' (:func:`~.files.load_runs`), each
over its epoch-0 mean, against optimiser steps.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from solo_geometry.analysis.pages import (
    Line,
    Panel,
    claims,
    figure,
    plot_panels,
    table,
    write_page,
)
from solo_geometry.reproduce.collapse.alerts import alert_markdown
from solo_geometry.reproduce.collapse.files import summary_runs
from solo_geometry.reproduce.collapse.result import CellRecord, CollapseRow, CollapseSummary
from solo_geometry.reproduce.collapse.summary import CURVE_KEY, table_markdown
from solo_geometry.reproduce.collapse.verdicts import curve_ratios

__all__ = ["COMPARE", "FIGURES", "page_body", "write_collapse_page", "write_compare"]

COLOURS = {"linear": "#1f77b4", "relu": "#ff7f0e", "gelu": "#2ca02c", "swish": "#d62728"}
# file name -> title
FIGURES = {
    "fig1_collapse_instability.png": "Collapse instability: std(H) / std(H) at the start",
    "fig1_swish_robustness.png": "Swish robustness: BatchNorm and learning-rate ablations",
    "fig1_relu_gap.png": "The ReLU gap: BatchNorm and learning-rate ablations",
    "fig1_gradient_norms.png": "Head gradient norm ||grad_head L||",
    "fig1_condition_numbers.png": "Covariance condition number of H",
    "fig1_timescale_separation.png": "Relative update size: head (solid) vs backbone (dashed)",
}
COMPARE = "fig1_compare.png"  # with --compare FILE only
TITLES = {
    **FIGURES,
    COMPARE: "This run (left) beside the authors' released curves (right), "
    "no BN, base lr: std / epoch-0 mean",
}
Records = Sequence[CellRecord]
Group = tuple[str, str, float]  # head, norm, lr


def _group(records: Records, **match: str | float) -> dict[Group, list[CellRecord]]:
    """Records whose rows match ``match`` (field: value), grouped by (head, norm, lr)."""
    groups: dict[Group, list[CellRecord]] = {}
    for r in records:
        row = r.row
        if all(getattr(row, k) == v for k, v in match.items()):
            groups.setdefault((row.head, row.norm, row.lr), []).append(r)
    return dict(sorted(groups.items()))


def _array(members: Records, key: str, normalise: bool) -> np.ndarray:
    data = np.array([r.series[key] for r in members], dtype=float)  # (seeds, epochs + 1)
    if normalise:  # over epoch 0; NaN where that is 0
        start = data[:, :1]
        data = np.divide(data, start, out=np.full_like(data, np.nan), where=start != 0)
    return data


def _line(members: Records, key: str, label: str, colour: str, style: str = "-") -> Line:
    return Line(_array(members, key, key == CURVE_KEY), label, colour, style)


def write_figures(out: Path, records: Records) -> list[str]:
    """Draw the figure set into ``out``; returns the file names written."""
    lrs = sorted({r.row.lr for r in records})
    base = lrs[len(lrs) // 2]
    main = _group(records, lr=base)
    plain = {head: members for (head, norm, _), members in main.items() if norm == "none"}

    def by_head(key: str) -> list[Line]:
        return [
            _line(m, key, f"{h} {n}", COLOURS[h], "-" if n == "none" else "--")
            for (h, n, _), m in main.items()
        ]

    def ablation(head: str) -> list[Line]:
        return [
            _line(
                members,
                CURVE_KEY,
                f"{head} {norm} lr={lr:g}",
                COLOURS[head] if norm == "none" else "#9467bd",
                "-" if lr == base else ("--" if lr > base else ":"),
            )
            for (_, norm, lr), members in _group(records, head=head).items()
        ]

    def pairs(one: tuple[str, str], other: tuple[str, str], style: str) -> list[Line]:
        (key1, what1), (key2, what2) = one, other
        return [
            line
            for h, m in plain.items()
            for line in (
                _line(m, key1, f"{h} {what1}", COLOURS[h]),
                _line(m, key2, f"{h} {what2}", COLOURS[h], style),
            )
        ]

    lines = {
        "fig1_collapse_instability.png": (by_head(CURVE_KEY), "std / epoch-0 mean"),
        "fig1_swish_robustness.png": (ablation("swish"), "norm. std(H)"),
        "fig1_relu_gap.png": (ablation("relu"), "norm. std(H)"),
        "fig1_gradient_norms.png": (by_head("head/grad_norm"), "||grad_head L||_2"),
        "fig1_condition_numbers.png": (
            pairs(("h/cond_paper", "(paper's clamp)"), ("h/cond", "(numerical rank)"), ":"),
            "cond Cov(H)",
        ),
        "fig1_timescale_separation.png": (
            pairs(("head/rel_update", "head"), ("backbone/rel_update", "backbone"), "--"),
            "lr ||g|| / ||theta||",
        ),
    }
    for name, (drawn, ylabel) in lines.items():  # (COMPARE is drawn by write_compare)
        panel = Panel(FIGURES[name], drawn, "epoch (0: collapsed start)", ylabel, integer_x=True)
        plot_panels(out / name, [panel], size=(8, 4.5), legend_right=True)
    return list(lines)


def _compare_panel(runs: Sequence[CollapseRow], title: str) -> Panel:
    lines = []
    for head in COLOURS:
        members = [r for r in runs if (r.head, r.norm, r.lr_name) == (head, "none", "base")]
        if members:
            length = min(len(r.std_curve) for r in members)
            data = np.array([curve_ratios(r)[:length] for r in members])  # (seeds, epochs)
            steps = (np.arange(length) + 1) * (members[0].steps_per_epoch or 0)
            lines.append(Line(data, f"{head} ({len(members)})", COLOURS[head], x=steps))
    return Panel(title, lines, "optimiser steps (end of epoch)", level=2.0)


def write_compare(
    out: Path, ours: Sequence[CollapseRow], theirs: Sequence[CollapseRow], source: str
) -> str:
    """Draw ``fig1_compare.png``: our curves beside the authors', each over its epoch-0 mean.

    One panel of theirs per data set and backbone (their file may hold several: CIFAR-10 and
    CIFAR-100, ResNet-18 and ViT-Tiny), never pooled across them.
    """
    panels = [replace(_compare_panel(ours, "this run"), ylabel="std / epoch-0 mean (dotted: 2x)")]
    for dataset, backbone in sorted({(r.dataset, r.backbone) for r in theirs}):
        members = [r for r in theirs if (r.dataset, r.backbone) == (dataset, backbone)]
        title = f"authors: {dataset} {backbone} ({Path(source).name})"
        panels.append(_compare_panel(members, title))
    plot_panels(out / COMPARE, panels, size=(5.5, 4), sharey=True)
    return COMPARE


def page_body(summary: CollapseSummary, figures: Sequence[str], prefix: str = "") -> str:
    """The page's HTML body; figure paths relative to the page, under ``prefix``."""
    rho = [(h, v["h/cond"], v["h/cond_paper"]) for h, v in summary.spearman.items()]
    return (
        f"<p>Escape criterion: {html.escape(summary.escape_criterion)}. "
        f"Protocol: {html.escape(str(summary.protocol))}</p>"
        f"<h2>The paper's claims, from this run</h2>{claims(summary.claims)}"
        f"<h2>Mean +- std over seeds</h2><pre>{html.escape(table_markdown(summary))}</pre>"
        "<h2>The collapse alert, replayed per epoch</h2>"
        f"<pre>{html.escape(alert_markdown(summary_runs(summary), summary.factor))}</pre>"
        "<h2>Spearman rho(std(H), cond(H)) per head</h2>"
        + table(("head", "numerical rank", "paper's clamp"), rho)
        + "<h2>Figures</h2>"
        + "".join(figure(TITLES[f], f"{prefix}{f}") for f in figures)
    )


def write_collapse_page(
    out: Path, summary: CollapseSummary, records: Records, extra: Sequence[str] = ()
) -> Path:
    """Draw the figures and write ``<out>/index.html`` (with ``extra`` figures); its path."""
    figures = [*(write_figures(out, records) if records else []), *extra]
    body = page_body(summary, figures)
    return write_page(
        out / "index.html", "Collapse experiment (pseudo-collapse, alpha 0.1)", [], body
    )
