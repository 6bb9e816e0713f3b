"""One run folder as the report reads it: records, probes, features and config, or notes.

:func:`read_run` reads what exists: a missing file becomes a note on the page; a
``probes.json`` or ``features.pt`` it cannot read, a symbolic link among the folder's files and a
``geometry.jsonl`` without one usable record are refused (``ValueError`` naming the file, exit 2
on the command line), before anything is written. Records repeating a step, or out of step
order (two runs' files concatenated, a hand edit), are drawn once each in step order: the last
record of a step is kept, and one warning names the steps. :func:`check_reportable` refuses
a folder with nothing to report.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from solo_geometry.folder.probe_table import ProbeTable
from solo_geometry.folder.records import (
    GeometryRecord,
    RecordsError,
    RecordsWarning,
    read_records,
)
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.folder.safe_files import MAX_JSON_BYTES, MAX_RECORDS_BYTES, open_read, read_bytes
from solo_geometry.inputs.features import load_cache

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
    if not records and caught + run.problems:  # lines, none of them a record
        why = "; ".join(
            [f"line {n}: {reason}" for n, reason in run.problems[:3]]
            or ["its one line is torn, no newline after it"]
        )
        raise RecordsError(
            f"{folder.geometry}: no usable record ({why}); expected the records "
            f"solo-geometry's GeometryMonitor writes, one JSON object a line"
        )
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
    return _in_step_order(folder, run, records)


def _in_step_order(folder: RunFolder, run: RunData, records: list[GeometryRecord]) -> list:
    """The records sorted by step, the last of each step kept; one warning names the rest."""
    last = {r.step: r for r in records}  # a later record of a step replaces an earlier one
    kept = [last[step] for step in sorted(last)]
    repeated = sorted({r.step for r in records if last[r.step] is not r})
    unordered = [r.step for r in records] != sorted(r.step for r in records)
    if repeated or unordered:
        said = f"steps {repeated[:10]} appear more than once (the last of each kept)"
        said = said if repeated else "records are out of step order"
        message = f"{folder.geometry}: {said}; drawn in step order, one record per step"
        run.notes.append(message)
        warnings.warn(RecordsWarning(message), stacklevel=4)
    return kept


def read_run(path: Path, name: str | None = None) -> RunData:
    """Read a run folder; missing or unreadable files become notes, never errors.

    Args:
        path: the run folder.
        name: label (default: the folder name).

    Returns:
        The run's data.

    Raises:
        ValueError: if ``path`` is not a directory, one of its files is a symbolic link, or
            ``probes.json`` or ``features.pt`` cannot be read.
        RecordsError: if ``geometry.jsonl`` was written by an unknown schema version or holds
            lines but no usable record.
    """
    if not path.is_dir():
        raise ValueError(f"run folder {str(path)!r} does not exist or is not a directory")
    folder = RunFolder(path)
    folder.refuse_links()
    run = RunData(name or path.name, path)
    if folder.geometry.is_file():
        records = _read_geometry(folder, run)
        run.records = [r for r in records if r.ok]
        run.skipped = [r for r in records if not r.ok]
    else:
        run.notes.append(f"no {folder.GEOMETRY}: no curves")
    if folder.config.is_file() or folder.config.is_symlink():
        run.config = read_bytes(folder.config, MAX_JSON_BYTES, "recipe").decode(errors="replace")
    else:
        run.notes.append(f"no {folder.CONFIG}")
    if folder.probes.is_file() or folder.probes.is_symlink():
        run.probes = folder.read_probes()  # unreadable: refused, naming the file
    else:
        run.notes.append(f"no {folder.PROBES}: probes not shown (run `solo-geometry probe`)")
    if folder.features.is_file() or folder.features.is_symlink():
        run.features = _features(folder)
    else:
        run.notes.append(f"no {folder.FEATURES}: features not shown (run `solo-geometry probe`)")
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
    folder.refuse_links()
    if folder.geometry.is_file():
        with open_read(folder.geometry, MAX_RECORDS_BYTES, "geometry records file") as fh:
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
