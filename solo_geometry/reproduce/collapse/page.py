"""The collapse sweep's page: the paper's figure set as PNGs and ``index.html``.

The figures follow plot_results.py's: the paper's curve (the per-epoch mean of the per-step std
of the normalised projector output, over its epoch-0 mean) per head over epochs with the seeds'
min-max shaded (collapse instability), Swish's and ReLU's BatchNorm and learning-rate ablations
(Swish robustness, the ReLU gap), the head's gradient norm, the covariance condition numbers
(numerical-rank and the paper's clamped one), and the head's and the backbone's relative update
sizes (timescale separation). For the monitor's series epoch 0 is the collapsed start (its
step-0 record) and epoch e >= 1 the mean over epoch e's steps. With ``--compare FILE``,
``fig1_compare.png`` draws these curves beside the authors' released ones
(:func:`solo_geometry.reproduce.collapse.files.load_runs`), normalised the same way, against
optimiser steps.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after selecting the non-interactive backend
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from solo_geometry.reproduce.collapse.alerts import alert_markdown  # noqa: E402
from solo_geometry.reproduce.collapse.files import summary_runs  # noqa: E402
from solo_geometry.reproduce.collapse.result import CellRecord, CollapseSummary  # noqa: E402
from solo_geometry.reproduce.collapse.summary import CURVE_KEY, table_markdown  # noqa: E402
from solo_geometry.reproduce.collapse.verdicts import Run  # noqa: E402
from solo_geometry.run.atomic import save_figure, write_text

__all__ = ["COMPARE", "FIGURES", "page_body", "write_compare", "write_page"]

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
    rows = []
    for r in members:
        values = np.array([np.nan if v is None else v for v in r.series[key]], dtype=float)
        if normalise:
            values = values / values[0] if values[0] else values * np.nan
        rows.append(values)
    return np.vstack(rows)  # (seeds, epochs + 1)


def _draw(
    ax: Any,
    members: Records,
    key: str,
    *,
    label: str,
    colour: str,
    style: str = "-",
    normalise: bool = False,
) -> None:
    data = _array(members, key, normalise)
    x = np.arange(data.shape[1])
    with np.errstate(all="ignore"):
        mean, lo, hi = np.nanmean(data, 0), np.nanmin(data, 0), np.nanmax(data, 0)
    ax.plot(x, mean, style, color=colour, label=label, lw=2)
    ax.fill_between(x, lo, hi, color=colour, alpha=0.15)


def _style(lr: float, base: float) -> str:
    return "-" if lr == base else ("--" if lr > base else ":")


def _figure(path: Path, title: str, ylabel: str, draw: Any) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    draw(ax)
    ax.set_title(title)
    ax.set_xlabel("epoch (0: collapsed start)")
    ax.set_ylabel(ylabel)
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3, linestyle=":")
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8)
    save_figure(fig, path, dpi=90, bbox_inches="tight")
    plt.close(fig)


def _base_lr(records: Records) -> float:
    lrs = sorted({r.row.lr for r in records})
    return lrs[len(lrs) // 2]


def write_figures(out: Path, records: Records) -> list[str]:
    """Draw the figure set into ``out``; returns the file names written."""
    base = _base_lr(records)
    main = _group(records, lr=base)

    def by_head(key: str, normalise: bool = False) -> Any:
        def draw(ax: Any) -> None:
            for (head, norm, _), members in main.items():
                _draw(
                    ax,
                    members,
                    key,
                    label=f"{head} {norm}",
                    colour=COLOURS[head],
                    style="-" if norm == "none" else "--",
                    normalise=normalise,
                )

        return draw

    def ablation(head: str) -> Any:
        def draw(ax: Any) -> None:
            for (_, norm, lr), members in _group(records, head=head).items():
                colour = COLOURS[head] if norm == "none" else "#9467bd"
                _draw(
                    ax,
                    members,
                    CURVE_KEY,
                    label=f"{head} {norm} lr={lr:g}",
                    colour=colour,
                    style=_style(lr, base),
                    normalise=True,
                )

        return draw

    def conditioning(ax: Any) -> None:
        for (head, norm, _), members in main.items():
            if norm == "none":
                _draw(
                    ax,
                    members,
                    "h/cond_paper",
                    label=f"{head} (paper's clamp)",
                    colour=COLOURS[head],
                )
                _draw(
                    ax,
                    members,
                    "h/cond",
                    label=f"{head} (numerical rank)",
                    colour=COLOURS[head],
                    style=":",
                )

    def timescales(ax: Any) -> None:
        for (head, norm, _), members in main.items():
            if norm == "none":
                _draw(ax, members, "head/rel_update", label=f"{head} head", colour=COLOURS[head])
                _draw(
                    ax,
                    members,
                    "backbone/rel_update",
                    label=f"{head} backbone",
                    colour=COLOURS[head],
                    style="--",
                )

    draws = {
        "fig1_collapse_instability.png": (by_head(CURVE_KEY, True), "std / epoch-0 mean"),
        "fig1_swish_robustness.png": (ablation("swish"), "norm. std(H)"),
        "fig1_relu_gap.png": (ablation("relu"), "norm. std(H)"),
        "fig1_gradient_norms.png": (by_head("head/grad_norm"), "||grad_head L||_2"),
        "fig1_condition_numbers.png": (conditioning, "cond Cov(H)"),
        "fig1_timescale_separation.png": (timescales, "lr ||g|| / ||theta||"),
    }
    for name, (draw, ylabel) in draws.items():  # (COMPARE is drawn by write_compare)
        _figure(out / name, FIGURES[name], ylabel, draw)
    return list(draws)


def _compare_panel(ax: Any, runs: Sequence[Run], title: str) -> None:
    for head in COLOURS:
        members = [r for r in runs if (r.head, r.norm, r.lr) == (head, "none", "base")]
        if not members:
            continue
        length = min(len(r.curve) for r in members)
        data = np.array([r.ratios()[:length] for r in members])  # (seeds, epochs)
        steps = (np.arange(length) + 1) * members[0].steps_per_epoch
        ax.plot(steps, data.mean(0), color=COLOURS[head], lw=2, label=f"{head} ({len(members)})")
        ax.fill_between(steps, data.min(0), data.max(0), color=COLOURS[head], alpha=0.15)
    ax.axhline(2.0, color="grey", ls=":", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("optimiser steps (end of epoch)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3, linestyle=":")
    ax.legend(fontsize=7)


def write_compare(out: Path, ours: Sequence[Run], theirs: Sequence[Run], source: str) -> str:
    """Draw ``fig1_compare.png``: our curves beside the authors', each over its epoch-0 mean.

    One panel of theirs per data set and backbone (their file may hold several: CIFAR-10 and
    CIFAR-100, ResNet-18 and ViT-Tiny), never pooled across them.
    """
    groups = sorted({(r.dataset, r.backbone) for r in theirs})
    fig, axes = plt.subplots(
        1, 1 + len(groups), figsize=(5.5 * (1 + len(groups)), 4), sharey=True, squeeze=False
    )
    _compare_panel(axes[0, 0], ours, "this run")
    for ax, (dataset, backbone) in zip(axes[0, 1:], groups, strict=True):
        members = [r for r in theirs if (r.dataset, r.backbone) == (dataset, backbone)]
        _compare_panel(ax, members, f"authors: {dataset} {backbone} ({Path(source).name})")
    axes[0, 0].set_ylabel("std / epoch-0 mean (dotted: 2x)")
    save_figure(fig, out / COMPARE, dpi=90, bbox_inches="tight")
    plt.close(fig)
    return COMPARE


def _alert(summary: CollapseSummary) -> str:
    try:
        return alert_markdown(summary_runs(summary), summary.factor)
    except ValueError as error:  # a summary from before the per-epoch curves
        return str(error)


def page_body(summary: CollapseSummary, figures: Sequence[str], prefix: str = "") -> str:
    """The page's HTML body; figure paths relative to the page, under ``prefix``."""
    claims = "".join(
        f"<li><b>{html.escape(c.verdict)}</b> {html.escape(c.id)} "
        f"({html.escape(str(c.dataset))}, {html.escape(str(c.backbone))}): "
        f"{html.escape(c.claim)}<br>"
        f"<small>{html.escape(c.evidence)}</small></li>"
        for c in summary.claims
    )
    rho = "".join(
        f"<tr><td>{h}</td><td>{v['h/cond']}</td><td>{v['h/cond_paper']}</td></tr>"
        for h, v in summary.spearman.items()
    )
    images = "".join(
        f"<h3>{html.escape(TITLES[f])}</h3><img src='{prefix}{f}' alt='{f}'>" for f in figures
    )
    return (
        f"<p>Escape criterion: {html.escape(summary.escape_criterion)}. "
        f"Protocol: {html.escape(str(summary.protocol))}</p>"
        f"<h2>The paper's claims, from this run</h2><ul>{claims}</ul>"
        f"<h2>Mean +- std over seeds</h2><pre>{html.escape(table_markdown(summary))}</pre>"
        "<h2>The collapse alert, replayed per epoch</h2>"
        f"<pre>{html.escape(_alert(summary))}</pre>"
        "<h2>Spearman rho(std(H), cond(H)) per head</h2><table border=1>"
        f"<tr><th>head</th><th>numerical rank</th><th>paper's clamp</th></tr>{rho}</table>"
        f"<h2>Figures</h2>{images}"
    )


def _page(summary: CollapseSummary, figures: Sequence[str]) -> str:
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>collapse</title></head><body>"
        "<h1>Collapse experiment (pseudo-collapse, alpha 0.1)</h1>"
        f"{page_body(summary, figures)}</body></html>"
    )


def write_page(
    out: Path, summary: CollapseSummary, records: Records, extra: Sequence[str] = ()
) -> Path:
    """Draw the figures and write ``<out>/index.html`` (with ``extra`` figures); its path."""
    figures = [*(write_figures(out, records) if records else []), *extra]
    index = out / "index.html"
    write_text(index, _page(summary, figures))
    return index
