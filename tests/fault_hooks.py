"""Faults injected into real runs, in this process or in a subprocess tree (no tests here).

Three hooks, switched on by environment variables so they reach every process of a run (the CLI,
solo-learn's ``main_pretrain`` it starts) through a ``sitecustomize.py`` that
:func:`hooked_env` writes and puts first on ``PYTHONPATH``:

* ``SG_TEAR_AT=<step>``: the record of that step is written half, flushed to disk, the file
  ``SG_TEAR_MARK`` created, and the process then sleeps, so the test's SIGKILL lands inside the
  write of a record;
* ``SG_PAUSE_AT=<step>``: before the record of that step is written, the file ``SG_PAUSE_MARK``
  is created and the process waits (up to a minute) for the file ``SG_PAUSE_GO``, so a test's
  signal lands inside a known step;
* ``SG_FULL_AT=<step>``: the disk is full for the record of that step: the process's file-size
  limit (``RLIMIT_FSIZE``, ``SIGXFSZ`` ignored) is set to the file's size plus 100 bytes while
  it is appended, so the operating system's own write stops part way (``EFBIG``), then lifted;
* ``SG_FAULTS=kind,kind,...``: the n-th measurement meets the n-th fault (cycling): ``oom``
  (``torch.OutOfMemoryError`` raised inside the measurement), ``error`` (a RuntimeError),
  ``nan_features`` (the backbone features all NaN), ``nan_loss`` (the loss closures NaN),
  ``none`` (no fault).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

NAN = float("nan")
FAULTS = ("oom", "error", "nan_features", "nan_loss", "none")
# The reason each fault leaves in its skipped record.
REASONS = {
    "oom": "OutOfMemoryError: injected",
    "error": "RuntimeError: injected",
    "nan_features": "FloatingPointError: non-finite backbone features",
    "nan_loss": "FloatingPointError: non-finite loss",
}


def faulty(measure: Callable[..., Any], faults: list[str]) -> Callable[..., Any]:
    """``measure`` meeting ``faults[n % len(faults)]`` at its n-th call."""
    calls = [0]

    def measure_with_fault(view: Any, *args: Any, **kw: Any) -> Any:
        kind = faults[calls[0] % len(faults)]
        calls[0] += 1
        if kind == "oom":
            raise torch.OutOfMemoryError("injected: CUDA out of memory, tried to allocate 4 GiB")
        if kind == "error":
            raise RuntimeError("injected inside the measurement")
        if kind == "nan_features":
            view = dataclasses.replace(view, features=torch.full_like(view.features, NAN))
        if kind == "nan_loss":
            f, g = view.loss_of_features, view.loss_of_outputs
            view = dataclasses.replace(
                view,
                loss_of_features=lambda Z: f(Z) * NAN,
                loss_of_outputs=None if g is None else (lambda H: g(H) * NAN),
            )
        return measure(view, *args, **kw)

    return measure_with_fault


def tearing(append: Callable[..., Any], step: int, mark: Path) -> Callable[..., Any]:
    """``RunFolder.append_record`` that stops half-way through the record of ``step``."""

    def append_record(self: Any, record: Any) -> None:
        if record.step == step:
            line = record.to_json() + "\n"
            with self.geometry.open("a") as fh:
                fh.write(line[: len(line) // 2])
                fh.flush()
                os.fsync(fh.fileno())
            mark.write_text(str(step))
            time.sleep(600)  # the test's SIGKILL lands here, inside the record
        append(self, record)

    return append_record


def pausing(append: Callable[..., Any], step: int, mark: Path, go: Path) -> Callable[..., Any]:
    """``RunFolder.append_record`` that waits for ``go`` before the record of ``step``."""

    def append_record(self: Any, record: Any) -> None:
        if record.step == step and not record.final:
            mark.write_text(str(step))
            deadline = time.monotonic() + 60
            while not go.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        append(self, record)

    return append_record


def filling(append: Callable[..., Any], step: int) -> Callable[..., Any]:
    """``RunFolder.append_record`` whose write of the record of ``step`` meets a full disk."""
    import resource
    import signal

    def append_record(self: Any, record: Any) -> None:
        if record.step != step or record.final:
            return append(self, record)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        before = resource.getrlimit(resource.RLIMIT_FSIZE)
        limit = self.geometry.stat().st_size + 100
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, before[1]))
        try:
            return append(self, record)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, before)

    return append_record


def install() -> None:
    """Install the hooks the environment asks for (called by the generated sitecustomize)."""
    if os.environ.get("SG_TEAR_AT"):
        from solo_geometry.folder.run_folder import RunFolder

        RunFolder.append_record = tearing(  # type: ignore[method-assign]
            RunFolder.append_record, int(os.environ["SG_TEAR_AT"]), Path(os.environ["SG_TEAR_MARK"])
        )
    if os.environ.get("SG_PAUSE_AT"):
        from solo_geometry.folder.run_folder import RunFolder

        RunFolder.append_record = pausing(  # type: ignore[method-assign]
            RunFolder.append_record,
            int(os.environ["SG_PAUSE_AT"]),
            Path(os.environ["SG_PAUSE_MARK"]),
            Path(os.environ["SG_PAUSE_GO"]),
        )
    if os.environ.get("SG_FULL_AT"):
        from solo_geometry.folder.run_folder import RunFolder

        RunFolder.append_record = filling(  # type: ignore[method-assign]
            RunFolder.append_record, int(os.environ["SG_FULL_AT"])
        )
    if os.environ.get("SG_FAULTS"):
        import solo_geometry.runtime.monitor as monitor

        monitor.measure = faulty(monitor.measure, os.environ["SG_FAULTS"].split(","))  # type: ignore[assignment]


def hooked_env(folder: Path, **variables: str) -> dict[str, str]:
    """An environment whose Python processes install the hooks of ``variables``.

    Args:
        folder: where ``sitecustomize.py`` is written.
        variables: ``SG_TEAR_AT``, ``SG_TEAR_MARK``, ``SG_PAUSE_AT``, ``SG_PAUSE_MARK``,
            ``SG_PAUSE_GO``, ``SG_FULL_AT``, ``SG_FAULTS``.

    Returns:
        ``os.environ`` with ``PYTHONPATH`` = folder, this tests folder, the repository, and the
        variables set.
    """
    folder.mkdir(parents=True, exist_ok=True)
    here = Path(__file__).resolve().parent
    (folder / "sitecustomize.py").write_text(
        f"import sys\nsys.path.insert(0, {str(here)!r})\n"
        "import fault_hooks\nfault_hooks.install()\n"
    )
    paths = [str(folder), str(here.parent), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p), **variables}
