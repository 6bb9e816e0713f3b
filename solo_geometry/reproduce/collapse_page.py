"""The collapse sweep's page: the paper's figure set as PNGs and ``index.html``.

The figures follow plot_results.py's: the normalised std (std(H) over its value at the collapsed
start) per head over epochs with the seeds' min-max shaded (collapse instability), Swish's and
ReLU's BatchNorm and learning-rate ablations (Swish robustness, the ReLU gap), the head's
gradient norm, the covariance condition numbers (numerical-rank and the paper's clamped one),
and the head's and the backbone's relative update sizes (timescale separation). Epoch 0 is the
collapsed start (the monitor's step-0 record); epoch e >= 1 is the mean over epoch e's steps.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after selecting the non-interactive backend
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from solo_geometry.reproduce.collapse_summary import table_markdown  # noqa: E402

__all__ = ["FIGURES", "page_body", "write_page"]

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
Records = Sequence[Mapping[str, Any]]


def _group(records: Records, **match: Any) -> dict[tuple, list[Mapping[str, Any]]]:
    """Records matching ``match``, grouped by (head, norm, lr)."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in records:
        row = r["row"]
        if all(row[k] == v for k, v in match.items()):
            groups.setdefault((row["head"], row["norm"], row["lr"]), []).append(r)
    return dict(sorted(groups.items()))


def _array(members: Sequence[Mapping[str, Any]], key: str, normalise: bool) -> np.ndarray:
    rows = []
    for r in members:
        values = np.array([np.nan if v is None else v for v in r["series"][key]], dtype=float)
        if normalise:
            values = values / values[0] if values[0] else values * np.nan
        rows.append(values)
    return np.vstack(rows)  # (seeds, epochs + 1)


def _draw(ax: Any, members: Sequence[Mapping[str, Any]], key: str, *, label: str, colour: str,
          style: str = "-", normalise: bool = False) -> None:  # fmt: skip
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
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)


def _base_lr(records: Records) -> float:
    lrs = sorted({r["row"]["lr"] for r in records})
    return lrs[len(lrs) // 2]


def write_figures(out: Path, records: Records) -> list[str]:
    """Draw the figure set into ``out``; returns the file names written."""
    base = _base_lr(records)
    main = _group(records, lr=base)

    def by_head(key: str, normalise: bool = False) -> Any:
        def draw(ax: Any) -> None:
            for (head, norm, _), members in main.items():
                _draw(ax, members, key, label=f"{head} {norm}", colour=COLOURS[head],
                      style="-" if norm == "none" else "--", normalise=normalise)  # fmt: skip

        return draw

    def ablation(head: str) -> Any:
        def draw(ax: Any) -> None:
            for (_, norm, lr), members in _group(records, head=head).items():
                colour = COLOURS[head] if norm == "none" else "#9467bd"
                _draw(ax, members, "h/normalized_std", label=f"{head} {norm} lr={lr:g}",
                      colour=colour, style=_style(lr, base), normalise=True)  # fmt: skip

        return draw

    def conditioning(ax: Any) -> None:
        for (head, norm, _), members in main.items():
            if norm == "none":
                _draw(ax, members, "h/cond_paper", label=f"{head} (paper's clamp)",
                      colour=COLOURS[head])  # fmt: skip
                _draw(ax, members, "h/cond", label=f"{head} (numerical rank)",
                      colour=COLOURS[head], style=":")  # fmt: skip

    def timescales(ax: Any) -> None:
        for (head, norm, _), members in main.items():
            if norm == "none":
                _draw(ax, members, "head/rel_update", label=f"{head} head", colour=COLOURS[head])
                _draw(ax, members, "backbone/rel_update", label=f"{head} backbone",
                      colour=COLOURS[head], style="--")  # fmt: skip

    draws = {
        "fig1_collapse_instability.png": (by_head("h/normalized_std", True), "norm. std(H)"),
        "fig1_swish_robustness.png": (ablation("swish"), "norm. std(H)"),
        "fig1_relu_gap.png": (ablation("relu"), "norm. std(H)"),
        "fig1_gradient_norms.png": (by_head("head/grad_norm"), "||grad_head L||_2"),
        "fig1_condition_numbers.png": (conditioning, "cond Cov(H)"),
        "fig1_timescale_separation.png": (timescales, "lr ||g|| / ||theta||"),
    }
    for name, (draw, ylabel) in draws.items():
        _figure(out / name, FIGURES[name], ylabel, draw)
    return list(draws)


def page_body(summary: Mapping[str, Any], figures: Sequence[str], prefix: str = "") -> str:
    """The page's HTML body; figure paths relative to the page, under ``prefix``."""
    claims = "".join(
        f"<li><b>{html.escape(c['verdict'])}</b>: {html.escape(c['claim'])}<br>"
        f"<small>{html.escape(c['evidence'])}</small></li>"
        for c in summary["claims"]
    )
    rho = "".join(
        f"<tr><td>{h}</td><td>{v['h/cond']}</td><td>{v['h/cond_paper']}</td></tr>"
        for h, v in summary["spearman"].items()
    )
    images = "".join(
        f"<h3>{html.escape(FIGURES[f])}</h3><img src='{prefix}{f}' alt='{f}'>" for f in figures
    )
    return (
        f"<p>Escape criterion: {html.escape(summary['escape_criterion'])}. "
        f"Protocol: {html.escape(str(summary['protocol']))}</p>"
        f"<h2>The paper's claims, from this run</h2><ul>{claims}</ul>"
        f"<h2>Mean +- std over seeds</h2><pre>{html.escape(table_markdown(summary))}</pre>"
        "<h2>Spearman rho(std(H), cond(H)) per head</h2><table border=1>"
        f"<tr><th>head</th><th>numerical rank</th><th>paper's clamp</th></tr>{rho}</table>"
        f"<h2>Figures</h2>{images}"
    )


def _page(summary: Mapping[str, Any], figures: Sequence[str]) -> str:
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>collapse</title></head><body>"
        "<h1>Collapse experiment (pseudo-collapse, alpha 0.1)</h1>"
        f"{page_body(summary, figures)}</body></html>"
    )


def write_page(out: Path, summary: Mapping[str, Any], records: Records) -> Path:
    """Draw the figures and write ``<out>/index.html``; returns its path."""
    figures = write_figures(out, records) if records else []
    index = out / "index.html"
    index.write_text(_page(summary, figures))
    return index
