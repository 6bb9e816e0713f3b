"""One run folder as the report reads it: records, probes, features and config, or notes.

:func:`read_run` reads what exists (a missing or unreadable file becomes a note on the page,
never an error); :func:`check_reportable` refuses, before anything is written, a folder with
nothing to report.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from solo_geometry.inputs.features import load_cache
from solo_geometry.run.probe_table import ProbeTable
from solo_geometry.run.records import (
    GeometryRecord,
    RecordsError,
    RecordsWarning,
    read_records,
)
from solo_geometry.run.run_folder import RunFolder

__all__ = ["RunData", "check_reportable", "read_run"]


@dataclass
class RunData:
    """Everything the report shows about one run.

    Attributes:
        name: label of the run in legends (the folder name, made unique).
        path: the run folder.
        records: ``ok`` records of ``geometry.jsonl``, in file order.
        problems: ``(line number, reason)`` of lines that could not be used.
        skipped: records the monitor marked ``skipped``.
        config: text of ``config.yaml`` or None.
        probes: the probe table of ``probes.json`` or None.
        features: sets of ``features.pt`` as numpy arrays, or None.
        notes: missing files and other facts shown on the page.
    """

    name: str
    path: Path
    records: list[GeometryRecord] = field(default_factory=list)
    problems: list[tuple[int, str]] = field(default_factory=list)
    skipped: list[GeometryRecord] = field(default_factory=list)
    config: str | None = None
    probes: ProbeTable | None = None
    features: dict[str, dict[str, np.ndarray]] | None = None
    notes: list[str] = field(default_factory=list)


def _features(folder: RunFolder) -> dict[str, dict[str, np.ndarray]]:
    sets = load_cache(folder.features, tag=None, any_tag=True)["sets"]
    return {name: {k: v.numpy() for k, v in tensors.items()} for name, tensors in sets.items()}


def _read_geometry(folder: RunFolder, run: RunData) -> list[GeometryRecord]:
    """The records; a dropped torn line becomes a note, skipped lines one warning naming them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RecordsWarning)
        records = read_records(folder.geometry, problems=run.problems)
    for w in caught:  # shown as they came, and the torn line's on the page too
        if issubclass(w.category, RecordsWarning):
            run.notes.append(str(w.message))
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if run.problems:
        lines = ", ".join(str(n) for n, _ in run.problems)
        why = "; ".join(f"line {n}: {reason}" for n, reason in run.problems)
        warnings.warn(
            RecordsWarning(
                f"{folder.geometry}: unusable lines {lines} skipped, drawing the rest ({why})"
            ),
            stacklevel=3,
        )
    return records


def read_run(path: Path, name: str | None = None) -> RunData:
    """Read a run folder; missing or unreadable files become notes, never errors.

    Args:
        path: the run folder.
        name: label (default: the folder name).

    Returns:
        The run's data.

    Raises:
        ValueError: if ``path`` is not a directory.
        RecordsError: if ``geometry.jsonl`` was written by an unknown schema version.
    """
    if not path.is_dir():
        raise ValueError(f"run folder {str(path)!r} does not exist or is not a directory")
    folder = RunFolder(path)
    run = RunData(name or path.name, path)
    if folder.geometry.is_file():
        records = _read_geometry(folder, run)
        run.records = [r for r in records if r.ok]
        run.skipped = [r for r in records if not r.ok]
    else:
        run.notes.append(f"no {folder.GEOMETRY}: no curves")
    if folder.config.is_file():
        run.config = folder.config.read_text(errors="replace")
    else:
        run.notes.append(f"no {folder.CONFIG}")
    readers = (
        (folder.probes, folder.read_probes, "probes"),
        (folder.features, lambda: _features(folder), "features"),
    )
    for file, reader, attr in readers:
        if not file.is_file():
            run.notes.append(f"no {file.name}: {attr} not shown (run `solo-geometry probe`)")
            continue
        try:
            setattr(run, attr, reader())
        except (RecordsError, ValueError, OSError, RuntimeError) as err:  # the rest renders
            run.notes.append(f"unreadable {file.name}: {type(err).__name__}: {err}")
    return run


def check_reportable(path: Path) -> None:
    """Check, before anything is written, that a run folder holds something to report.

    Args:
        path: the run folder.

    Raises:
        ValueError: if it is no folder, or holds no geometry record (no ``geometry.jsonl``, or
            an empty one), no ``probes.json`` and no ``features.pt``.
    """
    if not path.is_dir():
        raise ValueError(f"run folder {str(path)!r} does not exist or is not a directory")
    folder = RunFolder(path)
    if folder.geometry.is_file():
        with folder.geometry.open(errors="replace") as fh:
            if any(line.strip() for line in fh):
                return
        found = f"{folder.GEOMETRY} is empty"
    else:
        found = f"no {folder.GEOMETRY}"
    if not (folder.probes.is_file() or folder.features.is_file()):
        raise ValueError(
            f"run folder {str(path)!r} has nothing to report ({found}, no {folder.PROBES}, no "
            f"{folder.FEATURES}); expected a run folder written by `solo-geometry pretrain` "
            f"or `solo-geometry probe`"
        )
