"""Folders that several tests read, built once per test session (marker ``shared``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def build_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]
) -> Path:
    """The folder ``build(folder)`` fills, built once per test session; the folder.

    Under pytest-xdist each worker has its own temporary folder inside one folder of the session:
    the build goes there, under a file lock, so whichever worker asks first builds it and the
    others wait for it or find it built (a module-scoped fixture alone is built once per worker).
    A failed build is retried by the next worker that asks. Without xdist, a new folder.
    """
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        out = tmp_path_factory.mktemp(name)
        build(out)
        return out
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp().parent  # the session's, shared by its workers
    out, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.is_file():
            shutil.rmtree(out, ignore_errors=True)
            build(out)
            done.touch()
    return out
