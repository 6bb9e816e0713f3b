"""``solo-geometry analyse CHECKPOINT --data DIR``: the geometry of any known checkpoint.

Loads a checkpoint of any layout of :data:`solo_geometry.zoo.layouts.LAYOUTS` (solo-learn and
lightly-host runs, the published full checkpoints of VICReg, Barlow Twins and DINO), then
measures backbone-vs-head probes, the orbit table, representation statistics and rho_aug
(:func:`solo_geometry.zoo.measurements.measure_model`) and writes ``analysis.json`` (with
``probes.json`` and ``features.pt``) into ``--out``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from solo_geometry.folder.atomic import write_text
from solo_geometry.zoo.layouts import load_checkpoint
from solo_geometry.zoo.measurements import MeasureSettings, check_data, measure_model

__all__ = ["ANALYSIS_FILE", "analyse", "format_analysis"]

ANALYSIS_FILE = "analysis.json"


def analyse(
    checkpoint: str | Path,
    data: str | Path,
    out: str | Path,
    *,
    settings: MeasureSettings | None = None,
    layout: str | None = None,
    branch: str = "teacher",
    trust_pickle: bool = False,
    progress: bool = False,
) -> dict[str, Any]:
    """Measure a checkpoint and write ``<out>/analysis.json``.

    Args:
        checkpoint: the checkpoint file (or a run folder).
        data: labelled image folder.
        out: output folder (created).
        settings: measurement settings (default :class:`MeasureSettings`).
        layout: force a layout (default: detected).
        branch: DINO's ``teacher`` or ``student``.
        trust_pickle: read a pickle that needs more than a weights-only load.
        progress: progress bars.

    Returns:
        ``{"checkpoint", "layout", "notes", "settings", "measurements"}`` as written.

    Raises:
        ValueError: unknown layout, unreadable checkpoint, missing data.
    """
    data = Path(data)
    settings = settings or MeasureSettings()
    check_data(data, settings)  # before the checkpoint is read
    model, found = load_checkpoint(
        checkpoint, layout=layout, branch=branch, trust_pickle=trust_pickle
    )
    for note in model.notes:
        print(f"solo-geometry analyse: {note}", file=sys.stderr)
    out = Path(out)
    results = measure_model(
        model.backbone,
        model.head,
        data,
        settings,
        mean_std=model.mean_std,
        out_dir=out,
        progress=progress,
    )
    result = {
        "checkpoint": str(checkpoint),
        "layout": found,
        "notes": model.notes,
        "settings": settings.to_dict(),
        "measurements": results,
    }
    write_text(out / ANALYSIS_FILE, json.dumps(result, indent=2, allow_nan=True) + "\n")
    return result


def _g(value: Any, width: int = 10) -> str:
    return f"{'n/a':>{width}}" if value is None else f"{value:>{width}.4g}"


def format_analysis(result: dict[str, Any]) -> str:
    """Probe table, statistics, rho_aug and orbit compression as plain text."""
    m = result["measurements"]
    lines = [
        f"layout {result['layout']}: {result['checkpoint']}",
        "",
        f"{'target':<10} {'probe':<7} {'Z':>7} {'H':>7}",
    ]
    rows = {(r["features"], r["probe"], r["target"]): r["accuracy"] for r in m["probes"]["rows"]}
    for _, probe, target in sorted(k for k in rows if k[0] == "z"):
        h = rows.get(("h", probe, target))
        h_text = "n/a" if h is None else f"{h:.4f}"
        lines.append(f"{target:<10} {probe:<7} {rows[('z', probe, target)]:>7.4f} {h_text:>7}")
    st = m["stats"]
    lines += ["", f"{'statistic':<16} {'Z':>10} {'H':>10}"]
    for key in ("normalized_std", "rankme_l2", "rank", "cond"):
        lines.append(f"{key:<16} {_g(st.get(f'z/{key}'))} {_g(st.get(f'h/{key}'))}")
    lines.append(f"whitening score {_g(st.get('whitening/score'), 0)}")
    lines += [f"rho_aug {fam}: {_g(v, 0)}" for fam, v in m["rho"].items()]
    lines += [
        f"orbit {r['family']}: compression {_g(r['compression'], 0)}" for r in m["probes"]["orbits"]
    ]
    return "\n".join(lines)
