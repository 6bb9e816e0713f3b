"""The run folder: one run's files and every path in it (docs/design.md section 7).

``<root>/<name>-<YYYYmmdd-HHMMSS>/`` holds ``config.yaml`` (the resolved recipe),
``geometry.jsonl`` and ``probes.json`` (schemas of :mod:`solo_geometry.folder.records`),
``features.pt`` (the probes' feature cache), ``checkpoints/`` and ``report/``. Every command that
reads or writes a run goes through :class:`RunFolder`; no other module spells a file name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from solo_geometry.folder.atomic import append_line, write_text
from solo_geometry.folder.probe_table import ProbeTable
from solo_geometry.folder.records import (
    GEOMETRY_FILE,
    GeometryRecord,
    RecordsError,
    read_records,
)
from solo_geometry.folder.safe_files import MAX_JSON_BYTES, read_text, refuse_link

__all__ = ["RunFolder", "slurm_job_id", "slurm_number"]


def slurm_number(name: str) -> int | None:
    """The Slurm variable ``name`` as a whole number (ASCII digits), None when unset or empty.

    Slurm writes its ids and counts in ASCII digits; ``str.isdigit`` would also pass ``'²'``
    (which ``int`` refuses) and ``int`` would read ``'١'`` (an Arabic-Indic one), so neither is
    the test.

    Raises:
        ValueError: naming the variable and its value when it holds anything else.
    """
    value = os.environ.get(name, "")
    if not value.strip():
        return None
    if not re.fullmatch(r"[0-9]{1,30}", value.strip()):
        raise ValueError(
            f"environment variable {name}={value!r}: expected a whole number of ASCII digits "
            f"(as Slurm sets it); unset it outside Slurm"
        )
    return int(value)


def slurm_job_id() -> str | None:
    """This process's Slurm job as ``scontrol requeue`` names it, None outside Slurm.

    ``<array job>_<task>`` for a task of a job array, else ``SLURM_JOB_ID`` (Lightning's choice
    when it requeues a job on SIGUSR1).

    Raises:
        ValueError: a ``SLURM_*`` id that is not a whole number (:func:`slurm_number`).
    """
    job = slurm_number("SLURM_JOB_ID")
    array, task = slurm_number("SLURM_ARRAY_JOB_ID"), slurm_number("SLURM_ARRAY_TASK_ID")
    if array is not None and task is not None:
        return f"{array}_{task}"
    return None if job is None else str(job)


def _names_job(folder: Path, job: str) -> bool:
    """Whether ``folder`` (a real folder, no link) holds a ``.slurm_job`` naming ``job``.

    A link (to a folder or a file elsewhere), a file that is not text or cannot be read: not
    this job's run, so never resumed (a requeued job writes only into a run it made).
    """
    marker = folder / RunFolder.SLURM_JOB
    try:
        if folder.is_symlink() or not folder.is_dir() or marker.is_symlink():
            return False
        if not marker.is_file() or marker.stat().st_size > 64:
            return False
        return marker.read_bytes().decode("ascii").strip() == job
    except (OSError, UnicodeDecodeError):
        return False


@dataclass(frozen=True)
class RunFolder:
    """One run's folder and every path in it (docs/design.md section 7).

    While a run is being set up or trained the folder holds a ``.incomplete`` marker;
    :meth:`finish` removes it on success, and on failure removes the whole folder unless
    something worth keeping (a checkpoint or geometry records) was written.

    Attributes:
        path: the folder.
    """

    path: Path

    GEOMETRY = GEOMETRY_FILE
    PROBES = "probes.json"
    UPDATES = "updates.jsonl"
    FEATURES = "features.pt"
    CONFIG = "config.yaml"
    CHECKPOINTS = "checkpoints"
    REPORT = "report"
    INCOMPLETE = ".incomplete"
    LOCK = ".lock"
    PREEMPTED = ".preempted.json"
    PREEMPTED_CHECKPOINT = "preempted.ckpt"
    SLURM_JOB = ".slurm_job"  # the Slurm job that created the folder (a requeue resumes it)
    HPC_CHECKPOINTS = "hpc_ckpt_*.ckpt"  # Lightning's, at SLURM's SIGUSR1, in default_root_dir

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @classmethod
    def create(cls, root: str | Path, name: str) -> RunFolder:
        """Create ``<root>/<name>-<YYYYmmdd-HHMMSS>`` (a numeric suffix if it exists already).

        Args:
            root: the runs folder (created if missing).
            name: the run's name, e.g. ``byol-digits``; no path separators.

        Returns:
            The new run folder, holding a ``.incomplete`` marker.

        Raises:
            ValueError: if ``name`` is empty or holds a path separator, or a ``SLURM_*`` id is
                malformed (:func:`slurm_job_id`).
        """
        if not name or "/" in name or "\\" in name or name in {".", ".."}:
            raise ValueError(f"run name must be a plain folder name, got {name!r}")
        job = slurm_job_id()  # a malformed id is refused before anything is made
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for attempt in range(1000):
            path = root / (f"{name}-{stamp}" + (f"-{attempt}" if attempt else ""))
            try:
                path.mkdir()
            except FileExistsError:
                continue
            (path / cls.INCOMPLETE).write_text("setting up\n")
            if job:
                (path / cls.SLURM_JOB).write_text(f"{job}\n")
            return cls(path)
        raise FileExistsError(f"could not create a fresh run folder for {name!r} under {root}")

    @classmethod
    def of_requeued_job(cls, root: str | Path) -> RunFolder | None:
        """The run folder under ``root`` of this Slurm job, when Slurm has requeued it.

        A requeued job (``SLURM_RESTART_COUNT`` >= 1) runs its script again from the top; the
        run its first start created (the folder whose ``.slurm_job`` names this job) is resumed
        instead of a new one begun. None outside Slurm, on a first start, or when that run left
        no checkpoint (the newest such folder when there are several). A folder that is a link,
        or whose ``.slurm_job`` is a link or not text, is never taken for this job's.

        Raises:
            ValueError: a ``SLURM_*`` variable that is not a whole number, naming it.
        """
        job, restarts = slurm_job_id(), slurm_number("SLURM_RESTART_COUNT")
        if job is None or not restarts or not Path(root).is_dir():
            return None
        mine = [cls(p) for p in Path(root).iterdir() if _names_job(p, job)]
        held = [(r.path.stat().st_mtime_ns, r) for r in mine if r.latest_checkpoint()]
        return max(held, key=lambda pair: pair[0])[1] if held else None

    @property
    def geometry(self) -> Path:
        """``geometry.jsonl``."""
        return self.path / self.GEOMETRY

    @property
    def updates(self) -> Path:
        """``updates.jsonl``: per-epoch gradient norms and update sizes."""
        return self.path / self.UPDATES

    @property
    def probes(self) -> Path:
        """``probes.json``."""
        return self.path / self.PROBES

    @property
    def features(self) -> Path:
        """``features.pt``, the probes' feature cache."""
        return self.path / self.FEATURES

    @property
    def config(self) -> Path:
        """``config.yaml``, the resolved recipe."""
        return self.path / self.CONFIG

    @property
    def checkpoints(self) -> Path:
        """``checkpoints/``."""
        return self.path / self.CHECKPOINTS

    @property
    def lock_file(self) -> Path:
        """``.lock``: held by the one process writing the run (:mod:`solo_geometry.folder.lock`)."""
        return self.path / self.LOCK

    @property
    def preempted(self) -> Path:
        """``.preempted.json``: the signal that stopped the run (see ``run.preempt``)."""
        return self.path / self.PREEMPTED

    @property
    def preempted_checkpoint(self) -> Path:
        """``checkpoints/preempted.ckpt``: the checkpoint written at a preemption signal."""
        return self.checkpoints / self.PREEMPTED_CHECKPOINT

    @property
    def report(self) -> Path:
        """``report/`` (PNG plots and ``index.html``)."""
        return self.path / self.REPORT

    def latest_checkpoint(self) -> Path | None:
        """The newest checkpoint (by modification time), None when there is none.

        ``checkpoints/**/*.ckpt`` and Lightning's ``hpc_ckpt_<n>.ckpt`` in the folder itself.

        Raises:
            LinkRefused: one of them is a symbolic link.
        """
        refuse_link(self.checkpoints, "run file")
        ckpts = [*self.checkpoints.rglob("*.ckpt")] if self.checkpoints.is_dir() else []
        ckpts += self.path.glob(self.HPC_CHECKPOINTS) if self.path.is_dir() else []
        for ckpt in ckpts:  # a link would be read (and resumed) from outside the folder
            refuse_link(ckpt, "checkpoint")
        stamped = sorted((p.stat().st_mtime_ns, str(p)) for p in ckpts)
        return Path(stamped[-1][1]) if stamped else None

    def has_results(self) -> bool:
        """Whether the folder holds anything worth keeping (checkpoints or geometry records)."""
        if any(self.path.rglob("*.ckpt")):
            return True
        return self.geometry.is_file() and self.geometry.stat().st_size > 0

    def mark_incomplete(self, why: str) -> None:
        """Put the ``.incomplete`` marker back (a resumed run), saying why."""
        write_text(self.path / self.INCOMPLETE, f"{why}\n")

    def finish(self, *, ok: bool) -> bool:
        """Drop the marker on success; on failure remove the folder unless it holds results.

        Returns:
            Whether the folder still exists.
        """
        if ok:
            (self.path / self.INCOMPLETE).unlink(missing_ok=True)
            return True
        if not self.has_results():
            shutil.rmtree(self.path, ignore_errors=True)
            return False
        write_text(self.path / self.INCOMPLETE, "failed; partial results kept\n")
        return True

    def write_config(self, cfg: DictConfig | Mapping[str, Any]) -> Path:
        """Write the resolved config; an unresolvable interpolation is kept as text."""
        node = cfg if isinstance(cfg, DictConfig) else OmegaConf.create(dict(cfg))
        try:
            text = OmegaConf.to_yaml(node, resolve=True)
        except Exception:  # noqa: BLE001 - an unresolvable interpolation: keep it unresolved
            text = OmegaConf.to_yaml(node)
        write_text(self.config, text)
        return self.config

    def records(self, *, ok_only: bool = False) -> list[GeometryRecord]:
        """The geometry records (see :func:`read_records`)."""
        return read_records(self.geometry, ok_only=ok_only)

    def start_records(self, keep_through: int | None) -> None:
        """Begin ``geometry.jsonl``: empty, or on resume the records up to a step.

        Args:
            keep_through: None for a fresh run (an existing file is replaced); else keep the
                records with ``step <= keep_through`` (a torn last line is dropped) and
                nothing after, so a resumed run continues without gap or duplicate.
        """
        kept: Iterable[GeometryRecord] = ()
        if keep_through is not None:
            kept = [r for r in self.records() if r.step <= keep_through]
        write_text(self.geometry, "".join(f"{r.to_json()}\n" for r in kept))

    def append_record(self, record: GeometryRecord) -> None:
        """Append one record as one line, whole or not at all (:func:`.atomic.append_line`)."""
        append_line(self.geometry, record.to_json())

    def read_probes(self) -> ProbeTable | None:
        """The probe table, None when the run has none.

        Raises:
            RecordsError: the file is empty, not JSON, or not a probe table (each named).
            LinkRefused: ``probes.json`` is a symbolic link.
            TooLarge: the file is over :data:`~.safe_files.MAX_JSON_BYTES`.
        """
        if not self.probes.is_file() and not self.probes.is_symlink():
            return None
        text = read_text(self.probes, MAX_JSON_BYTES, "probe table")
        if not text.strip():
            raise RecordsError(f"{self.probes}: empty; expected a probe table (a JSON object)")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise RecordsError(
                f"{self.probes}: not JSON ({err.msg}, line {err.lineno}); expected a probe table"
            ) from err
        return ProbeTable.from_dict(data, str(self.probes))

    def refuse_links(self) -> None:
        """Refuse a run folder any of whose files or folders is a symbolic link.

        The files this package reads or writes (``.lock``, the records, ``probes.json``,
        ``features.pt``, ``config.yaml``, the markers), ``checkpoints/``, ``report/`` and
        ``.hydra/`` with everything under them: a link there would be read, or written,
        outside the folder.

        Raises:
            LinkRefused: naming the first link and where it points.
        """
        names = (
            self.LOCK, self.GEOMETRY, self.UPDATES, self.PROBES, self.FEATURES, self.CONFIG,
            self.INCOMPLETE, self.PREEMPTED, self.SLURM_JOB, self.CHECKPOINTS, self.REPORT,
            ".hydra",
        )  # fmt: skip
        for name in names:
            refuse_link(self.path / name, "run file")
        for folder in (self.checkpoints, self.report, self.path / ".hydra"):
            for top, dirs, files in os.walk(folder):  # links are listed, never entered
                for name in sorted(dirs + files):
                    refuse_link(Path(top) / name, "run file")
        for path in sorted(self.path.glob(self.HPC_CHECKPOINTS)):
            refuse_link(path, "run file")

    def write_probes(self, table: ProbeTable) -> Path:
        """Write ``probes.json`` atomically."""
        write_text(self.probes, json.dumps(table.to_dict(), indent=2, allow_nan=True))
        return self.probes
