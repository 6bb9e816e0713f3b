"""Builders of run records, their JSON lines and probe tables.

Shared by the tests of the records and of the run folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from solo_geometry.folder.probe_table import OrbitRow, ProbeRow, ProbeTable
from solo_geometry.folder.records import (
    SCHEMA_VERSION,
    GeometryRecord,
    Settings,
)

SETTINGS = Settings(
    dtype="float64",
    tau=1e-3,
    floor=2.5e-4,
    n_batch=64,
    n_block=8,
    n_views=2,
    dim=256,
    lanczos_max_steps=30,
    slq_probes=4,
    augment_samples=16,
    seed=7,
)


def make_record(step: int, status: str = "ok", **kwargs: Any) -> GeometryRecord:
    reason = None if status == "ok" else "non-finite loss"
    return GeometryRecord(step=step, epoch=step // 10, status=status, reason=reason, **kwargs)


def full_record() -> GeometryRecord:
    """A record with every field away from its default."""
    return GeometryRecord(
        step=12,
        epoch=3,
        status="ok",
        reason=None,
        settings=SETTINGS,
        metrics={"heff/lambda_min": -0.5, "heff/neg_count": 3, "gn/cond": None, "flag": True},
        density={"nodes": [0.0, 1.5], "weights": [0.25, 0.75]},
        final=True,
        head="bn_relu",
        n_skipped=2,
        seconds=0.125,
        meta={"geometry": {"every_n_steps": 10}},
    )


def record_line(step: int, status: str = "ok", **extra: Any) -> str:
    """One line of geometry.jsonl written by hand (no trailing newline)."""
    data = {"schema": SCHEMA_VERSION, "step": step, "epoch": 0, "status": status, **extra}
    return json.dumps(data)


def write_file(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


PROBE_ROW = {"features": "z", "probe": "linear", "target": "t", "accuracy": 1.0, "chance": 0.5}


ORBIT_ROW = {
    "family": "crop",
    "t_max": 1.0,
    "k": 8,
    "z": {},
    "h": {},
    "compression": 1.0,
    "compression_per_orbit": [1.0, 0.0],
}


def probe_table() -> ProbeTable:
    """Accuracies are binary fractions so every gap is exact."""
    rows = [
        ProbeRow("z", "linear", "digit", 0.875, 0.1, {"lam": 1e-3}),
        ProbeRow("h", "linear", "digit", 0.625, 0.1),
        ProbeRow("z", "mlp", "digit", 0.9375, 0.1, {"hidden": 64}),
        ProbeRow("h", "mlp", "digit", 0.8125, 0.1),
        ProbeRow("z", "linear", "rotation", 0.5, 0.25),  # no h counterpart, no mlp counterpart
        ProbeRow("h", "mlp", "rotation", 0.75, 0.25),  # no z counterpart, no linear counterpart
    ]
    orbits = [
        OrbitRow(
            family="crop",
            t_max=0.5,
            k=16,
            z={"spread": [1.5, 0.25], "separation": [2.0, 0.5], "n_orbits": 32},
            h={"spread": [0.75, 0.125], "separation": [1.0, 0.25], "n_orbits": 32},
            compression=2.0,
            compression_per_orbit=[2.0, 0.125],
        ),
    ]
    return ProbeTable(rows=rows, orbits=orbits, settings={"seed": 0, "n_train": 1000})
