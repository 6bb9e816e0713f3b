"""Plots of the run report: one function per figure, several runs overlaid.

Each function takes ``runs``, a list of ``(name, records)`` or ``(name, data)`` pairs, and a PNG
path; it returns the path, or None when no run has the data (the report says so). Every figure
has a title, labelled axes with units and a legend. Matplotlib runs on the Agg backend.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from solo_geometry.analysis.pages import save_plot  # noqa: E402
from solo_geometry.extras import require  # noqa: E402
from solo_geometry.folder.records import GeometryRecord  # noqa: E402
from solo_geometry.linalg.slq import SpectralDensity  # noqa: E402

__all__ = [
    "pca_2d",
    "plot_bars",
    "plot_density",
    "plot_lines",
    "plot_spectra",
    "plot_umap",
]

Records = list[GeometryRecord]
_OPERATORS = (("heff", "H_eff"), ("gn", "GN"), ("m", "M"))


def _series(records: Records, key: str) -> tuple[np.ndarray, np.ndarray]:
    pts = [(r.step, v) for r in records if (v := r.value(key)) is not None]
    arr = np.array(pts, dtype=float).reshape(-1, 2)
    return arr[:, 0], arr[:, 1]


def _legend(ax: Any) -> None:
    """Legend outside the axes, on the right: it never hides a curve."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)


def _figure_legend(fig: Any, axes: Sequence[Any]) -> None:
    """One legend for panels that share their curves, right of the figure, never on a curve."""
    seen: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    if seen:
        fig.legend(
            list(seen.values()),
            list(seen),
            fontsize=8,
            loc="upper left",
            bbox_to_anchor=(1.0, 0.98),
            borderaxespad=0.0,
        )


def _symlog(ax: Any, thresh: float) -> None:
    """Symmetric log scale, linear within +-thresh, at most 4 labelled decades per sign.

    Ticks are 0 and +-10^k for decades well above ``thresh``, so no two labels collide at the
    linear region around 0.
    """
    ax.set_yscale("symlog", linthresh=thresh, linscale=0.5)
    top = max(abs(float(ax.dataLim.y0)), abs(float(ax.dataLim.y1)), 10 * thresh)
    lo, hi = math.floor(math.log10(thresh)) + 1, math.ceil(math.log10(top))
    step = max(1, math.ceil((hi - lo) / 3))
    decades = [10.0**k for k in range(hi, lo - 1, -step)]
    ax.yaxis.set_major_locator(
        matplotlib.ticker.FixedLocator([-d for d in decades] + [0.0] + decades)
    )
    ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())


def plot_spectra(runs: Sequence[tuple[str, Records]], path: Path) -> Path | None:
    """lambda_min / lambda_max of H_eff, GN and M over steps, symlog y, each record's floor drawn.

    The floor is the record's own ``settings.floor`` (tau * max|lambda(H_eff)| in that
    measurement's dtype and tau); an eigenvalue below minus the floor counts as negative.
    """
    if not any(_series(recs, "heff/lambda_max")[0].size for _, recs in runs):
        return None
    fig, axes = plt.subplots(3, 1, figsize=(9, 10), sharex=True)
    floors: list[float] = []
    for (op, label), ax in zip(_OPERATORS, axes, strict=True):
        for i, (name, recs) in enumerate(runs):
            colour = f"C{i % 10}"
            for which, style in (("lambda_max", "-"), ("lambda_min", "--")):
                steps, vals = _series(recs, f"{op}/{which}")
                ax.plot(steps, vals, style, color=colour, marker=".", label=f"{name} {which}")
            pts = [(r.step, r.settings.floor) for r in recs if r.settings.floor is not None]
            steps, floor = np.array(pts, dtype=float).reshape(-1, 2).T
            floors += [float(f) for f in floor if f > 0]
            ax.plot(steps, -floor, ":", color=colour, lw=1, label=f"{name} -floor")
        ax.set_title(f"extreme eigenvalues of {label}")
        ax.set_ylabel("eigenvalue\n(loss / feature unit$^2$)")
        ax.axhline(0.0, color="k", lw=0.5)
    axes[-1].set_xlabel("optimiser step")
    _figure_legend(fig, axes)
    thresh = min(floors) if floors else 1e-12
    for ax in axes:
        _symlog(ax, max(thresh, 1e-300))
    return save_plot(fig, path)


_ALERT_COLOURS = {"dimensional": "tab:orange", "complete": "tab:red"}


def _shade_alerts(ax: Any, runs: Sequence[tuple[str, Records]]) -> None:
    """Shade the steps each run spent in a collapse state (``alert``), one band per record.

    A record's state holds from its step to the next record's (its own step for the last).
    """
    labelled: set[str] = set()
    for _, recs in runs:
        held = [(r.step, r.alert["state"]) for r in recs if r.alert]
        if not held:
            continue
        ends = [step for step, _ in held[1:]] + [held[-1][0]]
        for (start, state), end in zip(held, ends, strict=True):
            if state in _ALERT_COLOURS:
                label = None if state in labelled else f"alert: {state}"
                labelled.add(state)
                ax.axvspan(
                    start,
                    max(end, start + 0.5),
                    color=_ALERT_COLOURS[state],
                    alpha=0.15 / len(runs),
                    lw=0,
                    label=label,
                )


def plot_lines(
    runs: Sequence[tuple[str, Records]],
    path: Path,
    panels: Sequence[tuple[str, str, str]],
    *,
    log: bool = False,
    alerts: bool = False,
) -> Path | None:
    """One panel per (key, title, y label), one curve per run over optimiser steps.

    ``alerts``: shade the steps each run's records spent ``dimensional`` (orange) or
    ``complete`` (red).
    """
    if not any(_series(recs, key)[0].size for _, recs in runs for key, _, _ in panels):
        return None
    cols = min(len(panels), 2)
    rows = -(-len(panels) // cols)
    fig, grid = plt.subplots(rows, cols, figsize=(5.5 * cols, 3.8 * rows), squeeze=False)
    axes = list(grid.flat)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    for (key, title, ylabel), ax in zip(panels, axes, strict=False):
        for i, (name, recs) in enumerate(runs):
            steps, vals = _series(recs, key)
            if log:
                vals = np.where(vals > 0, vals, np.nan)
            ax.plot(steps, vals, marker=".", color=f"C{i % 10}", label=name)
        if alerts:
            _shade_alerts(ax, runs)
        ax.set_title(title)
        ax.set_xlabel("optimiser step")
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
    _figure_legend(fig, axes[: len(panels)])
    return save_plot(fig, path)


def _smoothed(density: dict[str, list[float]], grid: np.ndarray, sigma: float) -> np.ndarray:
    """The density on ``grid`` through the engine's one smoother (Gaussian per node)."""
    weights = torch.tensor(density["weights"], dtype=torch.float64)
    dens = SpectralDensity(
        torch.tensor(density["nodes"], dtype=torch.float64),
        weights / weights.sum().clamp_min(1e-300),
    )
    return dens.smoothed(torch.from_numpy(grid), sigma).numpy()


def plot_density(runs: Sequence[tuple[str, Records]], path: Path) -> Path | None:
    """SLQ spectral density of H_eff at the first and the last measurement carrying one."""
    curves = []
    for name, recs in runs:
        carrying = [r for r in recs if r.density and r.density.get("nodes")]
        if carrying:
            ends = (carrying[0], carrying[-1]) if len(carrying) > 1 else (carrying[0],)
            curves += [(f"{name} step {r.step}", r.density) for r in ends if r.density]
    if not curves:
        return None
    nodes = np.concatenate([np.asarray(d["nodes"], dtype=float) for _, d in curves])
    lo, hi = float(nodes.min()), float(nodes.max())
    span = max(hi - lo, 1e-12 * max(abs(lo), abs(hi), 1.0))
    grid = np.linspace(lo - 0.1 * span, hi + 0.1 * span, 600)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, (label, dens) in enumerate(curves):
        style = "-" if i % 2 == 0 else "--"
        ax.plot(grid, _smoothed(dens, grid, span / 60), style, color=f"C{i // 2}", label=label)
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.set_title("SLQ spectral density of H_eff (first and last measurement)")
    ax.set_xlabel("eigenvalue (loss units / feature unit$^2$)")
    ax.set_ylabel("density (1 / eigenvalue unit)")
    _legend(ax)
    return save_plot(fig, path)


def plot_bars(
    runs: Sequence[tuple[str, dict[str, tuple[float, float]]]],
    path: Path,
    *,
    title: str,
    ylabel: str,
    log: bool = False,
    reference: float | None = None,
) -> Path | None:
    """Grouped bars: one group per key (family), one bar per run, with +- error bars."""
    keys = sorted({k for _, vals in runs for k in vals})
    if not keys:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(keys) * max(1, len(runs))), 4.2))
    width = 0.8 / max(len(runs), 1)
    x = np.arange(len(keys))
    for i, (name, vals) in enumerate(runs):
        means = [vals.get(k, (np.nan, 0.0))[0] for k in keys]
        errs = [vals.get(k, (np.nan, 0.0))[1] for k in keys]
        ax.bar(
            x + (i - (len(runs) - 1) / 2) * width,
            means,
            width,
            yerr=errs,
            capsize=3,
            label=name,
            color=f"C{i % 10}",
        )
    if reference is not None:
        ax.axhline(reference, color="k", ls=":", lw=1, label=f"reference {reference:g}")
    ax.set_xticks(x, keys)
    ax.set_title(title)
    ax.set_xlabel("augmentation family")
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    _legend(ax)
    return save_plot(fig, path)


@functools.cache
def umap_cached() -> ModuleType:
    """umap-learn, its numba functions compiled once per machine rather than once per process.

    umap-learn and pynndescent compile most of their numba functions without ``cache=True``, so
    each process that drew an embedding spent 12 to 25 s of CPU compiling them, most of a short
    run's report. This turns numba's on-disk cache on for them (``Dispatcher.enable_caching``,
    the mechanism behind ``cache=True``): later processes load the machine code and draw the
    same embedding. The cache lies where numba puts it (``NUMBA_CACHE_DIR``, else beside the
    package's sources or in the user's cache folder); where no folder is writable, the code is
    compiled in each process as before.

    Raises:
        ModuleNotFoundError: umap-learn is not installed (the message names the extra).
    """
    umap = require("umap")
    dispatcher = require("numba.core.dispatcher", "umap")  # numba comes with umap-learn
    for name, module in list(sys.modules.items()):
        if module is not None and name.split(".")[0] in ("umap", "pynndescent"):
            for obj in list(vars(module).values()):
                if isinstance(obj, dispatcher.Dispatcher):
                    try:
                        obj.enable_caching()
                    except RuntimeError:  # no writable cache folder: compiled as before
                        pass
    return umap


def _embed(x: np.ndarray, seed: int) -> tuple[np.ndarray, str]:
    """2-d UMAP of rows x (n, d) (PCA when too few points for UMAP); embedding and method."""
    why = f"only {x.shape[0]} points, too few for UMAP"
    if x.shape[0] >= 20:
        try:
            umap = umap_cached()
        except ModuleNotFoundError:
            umap, why = None, "umap-learn not installed: pip install 'solo-geometry[umap]'"
        if umap is not None:
            reducer = umap.UMAP(
                n_neighbors=min(15, x.shape[0] - 1),
                n_epochs=60,
                init="random",
                random_state=seed,
                n_jobs=1,
            )
            return np.asarray(reducer.fit_transform(x)), "UMAP"
    return pca_2d(x), f"PCA ({why})"


def pca_2d(x: np.ndarray) -> np.ndarray:
    """Rows x (n, d) on their first two principal axes (n, 2); a zero column when d is 1."""
    centred = x - x.mean(0, keepdims=True)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return centred @ vt[:2].T if vt.shape[0] >= 2 else np.c_[centred @ vt.T, np.zeros(len(x))]


def plot_umap(
    runs: Sequence[tuple[str, dict[str, np.ndarray]]],
    path: Path,
    *,
    colour_key: str,
    colour_label: str,
    title: str,
    seed: int = 0,
    max_points: int = 1500,
) -> Path | None:
    """UMAP of Z beside UMAP of H, one row per run, coloured by ``colour_key`` of the data.

    Each run's data holds ``z`` (n, d), ``h`` (n, p) and the colour array (n,); at most
    ``max_points`` rows (a seeded subsample) are embedded, with 60 UMAP epochs, to stay fast.
    """
    runs = [(n, d) for n, d in runs if d is not None and colour_key in d]
    if not runs:
        return None
    fig, axes = plt.subplots(len(runs), 2, figsize=(10, 4.5 * len(runs)), squeeze=False)
    for (name, data), row in zip(runs, axes, strict=True):
        n = len(data[colour_key])
        keep = np.sort(np.random.default_rng(seed).permutation(n)[:max_points])  # fast: subsample
        for space, ax in zip(("z", "h"), row, strict=True):
            emb, method = _embed(np.asarray(data[space], dtype=np.float32)[keep], seed)
            colour = np.asarray(data[colour_key])[keep]
            # classes are categories (tab10); an augmentation parameter is ordered (viridis)
            cmap = "tab10" if colour_label == "class" else "viridis"
            sc = ax.scatter(emb[:, 0], emb[:, 1], c=colour, s=6, cmap=cmap)
            fig.colorbar(sc, ax=ax, label=colour_label)
            feats = "Z (backbone)" if space == "z" else "H (head)"
            ax.set_title(f"{name}: {method} of {feats}", fontsize=9)
            ax.set_xlabel(f"{method.split()[0]} 1 (arbitrary units)")
            ax.set_ylabel(f"{method.split()[0]} 2 (arbitrary units)")
    fig.suptitle(title)
    return save_plot(fig, path)
