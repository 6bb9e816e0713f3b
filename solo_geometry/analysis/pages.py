"""The package's one HTML page builder: the frame, tables, figures and claims' verdicts.

The run report (:mod:`.report`) and the reproductions' pages (``solo-geometry reproduce``) are
written by :func:`write_page`, their tables drawn by :func:`table` and their figures saved by
:func:`save_plot`; the reproductions' figures are rows of :class:`Panel` s drawn by
:func:`plot_panels` (a line over seeds: its mean, the min-max band shaded).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from solo_geometry.folder.atomic import save_figure, write_text  # noqa: E402

__all__ = [
    "CSS",
    "Line",
    "Panel",
    "Section",
    "claims",
    "figure",
    "plot_panels",
    "pm",
    "save_plot",
    "table",
    "write_page",
]

Section = tuple[str, str]  # (title, HTML body)
CSS = (
    "body{font-family:sans-serif;max-width:1400px;margin:auto}img{max-width:100%}"
    "table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #bbb;padding:2px 6px}"
    "th{background:#eee}.warn{background:#fdd;padding:4px}.note{color:#555}"
    ".held{color:#070}.not{color:#b00}.undecided{color:#a60}"
)
_VERDICT_CLASS = {"held": "held", "not held": "not", "undecidable": "undecided"}


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], *, markup: bool = False) -> str:
    """An HTML table: floats as ``.4g``, other cells escaped (as given with ``markup``)."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v) if markup else html.escape(str(v))

    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def pm(pair: Sequence[float | None], fmt: str = "{:.4f}") -> str:
    """``mean ± std`` of a (mean, std) pair; ``n/a`` without a mean."""
    mean, std = pair
    return "n/a" if mean is None else f"{fmt.format(mean)} ± {fmt.format(std or 0.0)}"


def claims(verdicts: Sequence[Mapping[str, str]]) -> str:
    """The verdicts as a table: the claim (with its data set and backbone), verdict, evidence."""
    rows = []
    for v in verdicts:
        group = f" ({v['dataset']}, {v['backbone']})" if "dataset" in v else ""
        verdict = f'<b class="{_VERDICT_CLASS.get(v["verdict"], "")}">{v["verdict"]}</b>'
        rows.append((html.escape(v["claim"] + group), verdict, html.escape(v["evidence"])))
    return table(("claim", "verdict", "evidence (this run)"), rows, markup=True)


def figure(title: str, src: str | Path) -> str:
    """A figure under its title; ``src`` relative to the page."""
    return f"<h3>{html.escape(title)}</h3><img src='{src}' alt='{html.escape(title)}'>"


def save_plot(fig: Any, path: Path, dpi: int = 90) -> Path:
    """Save a Matplotlib figure as a PNG (folders made, laid out tight) and close it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    try:
        save_figure(fig, path, dpi=dpi, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path


@dataclass(frozen=True)
class Line:
    """One line of a panel.

    Attributes:
        y: (T,) values, or (S, T) one row per seed: the mean drawn, the min to max shaded
            (None or NaN: not drawn).
        label: the legend's entry (None: none).
        colour: Matplotlib's colour (None: the next).
        style: Matplotlib's format, e.g. ``"--"`` or ``"-o"``.
        x: (T,) abscissae (None: 0 to T - 1).
        err: (T,) error bars (None: none).
        size: the markers' size in points (None: Matplotlib's).
    """

    y: Any
    label: str | None = None
    colour: str | None = None
    style: str = "-"
    x: Any = None
    err: Any = None
    size: float | None = None


@dataclass(frozen=True)
class Panel:
    """One axes: its lines, title, axis labels, log scale, a dotted reference level."""

    title: str
    lines: Sequence[Line]
    xlabel: str = ""
    ylabel: str = ""
    logy: bool = True
    level: float | None = None
    integer_x: bool = False


def _draw(ax: Any, line: Line) -> None:
    data = np.atleast_2d(np.asarray(line.y, dtype=float))  # (S, T)
    x = np.arange(data.shape[1]) if line.x is None else np.asarray(line.x)
    with np.errstate(all="ignore"):
        mean, lo, hi = np.nanmean(data, 0), np.nanmin(data, 0), np.nanmax(data, 0)
    style = {"color": line.colour, "label": line.label}
    if line.err is not None:
        ax.errorbar(x, mean, yerr=line.err, fmt=line.style, capsize=3, **style)
    else:
        ax.plot(x, mean, line.style, lw=1.5, ms=line.size, **style)
    if len(data) > 1:
        ax.fill_between(x, lo, hi, color=ax.lines[-1].get_color(), alpha=0.15)


def plot_panels(
    path: Path,
    panels: Sequence[Panel],
    *,
    size: tuple[float, float] = (5.0, 4.0),
    legend_right: bool = False,
    sharey: bool = False,
    dpi: int = 90,
) -> Path:
    """Draw ``panels`` side by side, each ``size`` inches, into the PNG ``path``; its path."""
    width, height = size
    fig, axes = plt.subplots(
        1, len(panels), figsize=(width * len(panels), height), squeeze=False, sharey=sharey
    )
    for ax, panel in zip(axes[0], panels, strict=True):
        for line in panel.lines:
            _draw(ax, line)
        ax.set(title=panel.title, xlabel=panel.xlabel, ylabel=panel.ylabel)
        ax.title.set_fontsize(9)
        if panel.logy:
            ax.set_yscale("log")
        if panel.level is not None:
            ax.axhline(panel.level, color="grey", ls=":", lw=1)
        if panel.integer_x:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3, linestyle=":")
        if any(line.label for line in panel.lines):
            where = {"loc": "center left", "bbox_to_anchor": (1.02, 0.5)} if legend_right else {}
            ax.legend(fontsize=8, **where)
    return save_plot(fig, path, dpi)


def write_page(path: Path, heading: str, sections: Sequence[Section], intro: str = "") -> Path:
    """Write an HTML page: ``heading``, ``intro``, then each section under its title.

    Returns:
        The path written (atomically).
    """
    parts = [f"<h2>{html.escape(t)}</h2>\n{b}" for t, b in sections]
    write_text(
        path,
        f"<!doctype html><html><head><meta charset='utf-8'><title>solo-geometry: "
        f"{html.escape(heading)}</title><style>{CSS}</style></head><body>"
        f"<h1>{html.escape(heading)}</h1>{intro}{''.join(parts)}</body></html>",
    )
    return path
