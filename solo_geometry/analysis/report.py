"""The run report: PNG plots and an offline ``index.html`` from one or more run folders.

Reads each folder through :func:`.run_data.read_run` (unusable lines named in the page
and one warning, a torn last line dropped and noted), ``probes.json``, ``features.pt`` and
``config.yaml``; draws what exists, notes what does not; several runs are overlaid.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from solo_geometry.analysis import pages, plots
from solo_geometry.analysis.run_data import RunData, read_run
from solo_geometry.folder.probe_table import ProbeRow, random_init_summary
from solo_geometry.folder.records import GeometryRecord
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.geometry.metrics import SPACES, metric

__all__ = ["write_report"]


def _last(records: list[GeometryRecord], prefix: str) -> dict[str, tuple[float, float]]:
    rec = next((r for r in reversed(records) if any(k.startswith(prefix) for k in r.metrics)), None)
    if rec is None:
        return {}
    return {
        k[len(prefix) :]: (v, 0.0)
        for k in rec.metrics
        if k.startswith(prefix) and (v := rec.value(k)) is not None
    }


def _panel(names: Sequence[str], parts: Sequence[str] = ("",)) -> list[tuple[str, str, str]]:
    """Lines ``(key, title, axis label)`` of entries of :data:`METRICS`, each part in turn."""
    lines = []
    for name in names:
        m = metric(name)
        for part in parts if m.per_part else ("",):
            title = f"{m.label} of {part.upper()}" if part else m.label
            lines.append((m.key_for(part), title, f"{m.label} ({m.unit})"))
    return lines


def _umap_data(run: RunData, orbit: bool) -> dict[str, np.ndarray] | None:
    sets = run.features or {}
    if not orbit:
        data = sets.get("test/class")
        return None if data is None else {**data, "colour": data["labels"]}
    fam = next((k for k in sorted(sets) if k.startswith("test/orbit/")), None)
    if fam is None or "t" not in sets[fam]:
        return None
    return {**sets[fam], "colour": sets[fam]["t"], "family": np.array(fam.split("/")[-1])}


def _figures(runs: list[RunData], out: Path) -> list[tuple[str, Path | None, str]]:
    """Draw every figure; (title, png or None, what is missing when None)."""
    recs = [(r.name, r.records) for r in runs]
    stats = _panel(("normalized_std", "rankme_l2"), SPACES)
    quality = _panel(("rankme", "lidar", "alpha_req", "collapse_level"), SPACES) + _panel(("cka",))
    conds = _panel(("operator_cond",), ("heff", "gn")) + _panel(("cond",), SPACES)
    rho = [(r.name, _last(r.records, "rho/")) for r in runs]
    orbits = [
        (r.name, {o.family: (o.compression, 0.0) for o in (r.probes.orbits if r.probes else [])})
        for r in runs
    ]
    no_geo, no_feat = "no geometry records", "no features.pt with held-out sets"
    orbit_fam = next((str(d["family"]) for r in runs if (d := _umap_data(r, True))), "orbit")
    return [
        ("Extreme eigenvalues", plots.plot_spectra(recs, out / "spectra.png"), no_geo),
        (
            "Interaction ratio ||M|| / ||H_eff||",
            plots.plot_lines(
                recs, out / "interaction.png", _panel(("interaction_ratio",)), log=True
            ),
            no_geo,
        ),
        ("Condition numbers", plots.plot_lines(recs, out / "cond.png", conds, log=True), no_geo),
        (
            "Representation statistics (shaded: collapse alert)",
            plots.plot_lines(recs, out / "stats.png", stats, alerts=True),
            no_geo,
        ),
        (
            "Representation quality (shaded: collapse alert)",
            plots.plot_lines(recs, out / "quality.png", quality, alerts=True),
            "no quality metrics in the records",
        ),
        (
            "SLQ spectral density of H_eff",
            plots.plot_density(recs, out / "density.png"),
            "no record carries a density",
        ),
        (
            "Metric singularity per family (last measurement)",
            plots.plot_bars(
                rho,
                out / "rho.png",
                title="metric singularity rho_aug (last measurement)",
                ylabel="rho_aug (1; 1 = like a random direction)",
                log=True,
                reference=1.0,
            ),
            "no rho/<family> in the records",
        ),
        (
            "Orbit compression",
            plots.plot_bars(
                orbits,
                out / "orbits.png",
                title="orbit compression spread(Z) / spread(H)",
                ylabel="mean spread(Z) / mean spread(H) (1)",
                reference=1.0,
            ),
            "no orbit table in probes.json",
        ),
        (
            "UMAP by class",
            plots.plot_umap(
                [(r.name, _umap_data(r, False)) for r in runs],  # type: ignore[misc]
                out / "umap_class.png",
                colour_key="colour",
                colour_label="class",
                title="held-out images by class",
            ),
            no_feat,
        ),
        (
            "UMAP along orbits",
            plots.plot_umap(
                [(r.name, _umap_data(r, True)) for r in runs],  # type: ignore[misc]
                out / "umap_orbit.png",
                colour_key="colour",
                colour_label=f"{orbit_fam} parameter t",
                title=f"held-out {orbit_fam} orbits by augmentation parameter",
            ),
            no_feat,
        ),
    ]


def _versus_random_init(row: ProbeRow | None) -> list[Any]:
    """The random-init accuracy and trained minus it, or "not measured" twice."""
    if row is None or row.random_init is None:
        return ["not measured", "not measured"]
    return [row.random_init, row.accuracy - row.random_init]


def _stat(stats: dict[str, Any], key: str) -> tuple[float, float]:
    """``[mean, std]`` of an orbit statistic; NaN where a hand-made table lacks it."""
    pair = stats.get(key)
    if not isinstance(pair, list | tuple) or len(pair) != 2:
        return math.nan, math.nan
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in pair)
    return (float(pair[0]), float(pair[1])) if numbers else (math.nan, math.nan)


def _probe_html(run: RunData) -> str:
    if not run.probes:
        return "<p class='note'>no probes.json: run <code>solo-geometry probe</code></p>"
    table = run.probes
    chance = {(r.target, r.probe): r.chance for r in table.rows}
    rows = []
    for target, probe in sorted(chance):
        za = table.accuracy("z", probe, target)
        ha = table.accuracy("h", probe, target)
        za, ha = (math.nan if a is None else a for a in (za, ha))
        versus = [v for f in ("z", "h") for v in _versus_random_init(table.row(f, probe, target))]
        rows.append(
            [target, probe, za, *versus[:2], ha, *versus[2:], za - ha, chance[(target, probe)]]
        )
    header = ["target", "probe", "Z acc", "Z random init", "Z - random init", "H acc"]
    header += ["H random init", "H - random init", "Z - H", "chance"]
    out = pages.table(header, rows) + f"<p>{html.escape(random_init_summary(table))}</p>"
    gaps = table.gaps()["mlp_minus_linear"]
    if gaps:
        out += pages.table(
            ["features/target", "MLP - linear"], [[k, float(v)] for k, v in gaps.items()]
        )
    if table.orbits:
        orows = [
            [
                o.family,
                *(_stat(s, key)[0] for key in ("spread", "d_intra", "d_inter") for s in (o.z, o.h)),
                *(
                    f"{m:.3f} +- {e:.3f}"
                    for m, e in (_stat(o.z, "separation"), _stat(o.h, "separation"))
                ),
                o.compression,
            ]
            for o in table.orbits
        ]
        out += pages.table(
            [
                "family",
                "spread Z",
                "spread H",
                "D_intra Z",
                "D_intra H",
                "D_inter Z",
                "D_inter H",
                "separation Z",
                "separation H",
                "compression",
            ],
            orows,
        )
    return out


def _last_html(records: list[GeometryRecord]) -> list[str]:
    """The last record's metrics, completed by the last one holding the spectra (if older)."""
    last = records[-1]
    spectral = next((r for r in reversed(records) if r.holds("hessian")), last)
    rows: list[list[Any]] = []
    for rec in [last] if spectral is last else [last, spectral]:
        shown = {row[0] for row in rows}
        rows += [
            [k, v, rec.step]
            for k in rec.metrics
            if k not in shown and (v := rec.value(k)) is not None
        ]
    waited = [r.step for r in records if r.deferred_parts and not r.final]
    note = (
        f"; at {len(waited)} due step(s) the budget deferred the spectra and rho (the "
        f"statistics were taken)"
        if waited
        else ""
    )
    head = (
        f"<p>{len(records)} measurements, {sum(r.holds('hessian') for r in records)} with "
        f"spectra{note}; last (step {last.step}), spectra from step {spectral.step}:</p>"
    )
    return [head, pages.table(["metric", "value", "step"], rows)]


def _banner(runs: Sequence[RunData]) -> str:
    """A warning line per run whose records ever left ``healthy``: its state now and the worst."""
    lines = []
    for run in runs:
        held = [r for r in run.records if r.alert]
        bad = [r for r in held if r.alert and r.alert["state"] != "healthy"]
        if not bad:
            continue
        last, first = held[-1].alert or {}, bad[0]
        why = f"; {last['diagnosis']}" if last.get("diagnosis") else ""
        lines.append(
            f"{html.escape(run.name)}: collapse alert {first.alert['state']} first at "  # type: ignore[index]
            f"step {first.step}; at the last record (step {held[-1].step}) "
            f"{last['state']}{html.escape(why)}"
        )
    return "".join(f"<div class='warn'>{line}</div>" for line in lines)


def _run_html(run: RunData) -> str:
    parts = [f"<h3>{html.escape(run.name)} <small>{html.escape(str(run.path))}</small></h3>"]
    parts += [f"<p class='note'>{html.escape(n)}</p>" for n in run.notes]
    if run.problems:
        items = "".join(f"<li>line {n}: {html.escape(why)}</li>" for n, why in run.problems)
        parts.append(
            f"<div class='warn'>geometry.jsonl: {len(run.problems)} unusable line(s), "
            f"not drawn:<ul>{items}</ul></div>"
        )
    if run.skipped:
        items = "".join(
            f"<li>step {r.step}: {html.escape(str(r.reason))}</li>" for r in run.skipped
        )
        parts.append(f"<div class='note'>skipped by the monitor:<ul>{items}</ul></div>")
    if run.records:
        parts += _last_html(run.records)
    parts.append("<h4>Probes and orbits</h4>" + _probe_html(run))
    if run.config is not None:
        parts.append(
            f"<details><summary>config.yaml</summary><pre>{html.escape(run.config)}</pre></details>"
        )
    return "\n".join(parts)


def _unique_names(paths: Sequence[Path]) -> list[str]:
    names: list[str] = []
    for p in paths:
        name = p.resolve().name or str(p)
        names.append(name if name not in names else f"{name} ({len(names)})")
    return names


def write_report(run_dirs: Sequence[str | Path], out_dir: str | Path | None = None) -> Path:
    """Write the PNG plots and ``index.html`` for one run or several overlaid.

    Args:
        run_dirs: run folders (``geometry.jsonl``, ``probes.json``, ``features.pt``,
            ``config.yaml``; each optional).
        out_dir: output folder (default: ``<run>/report`` for one run, ``<first run's
            parent>/report-<name>-vs-<name>...`` for several).

    Returns:
        Path of ``index.html``; images are referenced relative to it.

    Raises:
        ValueError: if ``run_dirs`` is empty or one of them is not a directory.
    """
    paths = [Path(p) for p in run_dirs]
    if not paths:
        raise ValueError("write_report needs at least one run folder; got none")
    names = _unique_names(paths)
    runs = [read_run(p, n) for p, n in zip(paths, names, strict=True)]
    if out_dir is None:
        out_dir = (
            RunFolder(paths[0]).report
            if len(paths) == 1
            else (paths[0].parent / ("report-" + "-vs-".join(names))[:120])
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figures = []
    for title, png, missing in _figures(runs, out):
        if png is None:
            figures.append(f"<h3>{html.escape(title)}</h3><p class='note'>not drawn: {missing}</p>")
        else:
            figures.append(pages.figure(title, png.name))
    intro = _banner(runs)
    body = "\n".join(_run_html(r) for r in runs)
    sections = [("Runs", body), ("Plots", "\n".join(figures))]
    return pages.write_page(out / "index.html", f"report: {', '.join(names)}", sections, intro)
