"""Checks of a generated series: default projectors unchanged, and solo-learn's own tests.

Both run in subprocesses with the checkout first on ``PYTHONPATH`` (the interpreter needs
solo-learn's dependencies; solo-learn itself is taken from the checkout).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["CompatRow", "PytestRun", "compare_projectors", "run_pytest", "save_projectors"]

NEW_TESTS = ("tests/utils/test_projectors.py", "tests/methods/test_projectors.py")
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")


@dataclass(frozen=True)
class CompatRow:
    """One method's default projectors, patched vs unpatched.

    Attributes:
        method: the method name.
        attrs: the projector attributes compared.
        n_tensors: state-dict entries compared.
        same: module structure, keys and every value identical.
        note: what differs, or the error building the method.
    """

    method: str
    attrs: tuple[str, ...]
    n_tensors: int
    same: bool
    note: str


@dataclass(frozen=True)
class PytestRun:
    """Counts of one pytest run (``{"passed": 12, "failed": 0, ...}``) and its exit status."""

    paths: tuple[str, ...]
    counts: dict[str, int]
    returncode: int

    def summary(self) -> str:
        """``"12 passed, 1 skipped"`` (no durations, so the text is reproducible)."""
        return ", ".join(f"{n} {k}" for k, n in self.counts.items()) or "nothing collected"


def _env(checkout: Path) -> dict[str, str]:
    path = os.pathsep.join([str(checkout), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}


def save_projectors(
    checkout: Path, methods: list[str], script: Path, out: Path, python: str = sys.executable
) -> None:
    """Build ``methods`` of ``checkout`` under seed 0 and save their projectors to ``out``.

    Raises:
        RuntimeError: when the script itself fails (its stderr tail in the message).
    """
    proc = subprocess.run(
        [python, str(script), str(out), *methods],
        cwd=checkout,
        env=_env(checkout),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"projector check failed in {checkout}: {proc.stderr[-2000:]}")


def _compare(new: dict, old: dict) -> tuple[bool, int, str]:
    if set(new) != set(old):
        return False, 0, f"attributes {sorted(new)} vs {sorted(old)}"
    n = 0
    for attr in sorted(old):
        if new[attr]["repr"] != old[attr]["repr"]:
            return False, n, f"{attr}: module structure differs"
        a, b = new[attr]["state"], old[attr]["state"]
        if list(a) != list(b):
            return False, n, f"{attr}: state-dict keys differ"
        for key in b:
            if not torch.equal(a[key], b[key]):
                return False, n, f"{attr}.{key}: values differ"
            n += 1
    return True, n, ""


def compare_projectors(patched: Path, unpatched: Path) -> list[CompatRow]:
    """Compare the files ``save_projectors`` wrote for the patched and unpatched checkouts."""
    new, old = (torch.load(p, weights_only=True) for p in (patched, unpatched))
    rows = []
    for method in sorted(old):
        if "error" in old[method] or "error" in new.get(method, {"error": "missing"}):
            note = new.get(method, {}).get("error") or old[method].get("error", "")
            rows.append(CompatRow(method, (), 0, False, f"could not build: {note}"))
            continue
        same, n, note = _compare(new[method], old[method])
        rows.append(CompatRow(method, tuple(sorted(old[method])), n, same, note))
    return rows


def run_pytest(
    checkout: Path, paths: tuple[str, ...], python: str = sys.executable, timeout: float = 3600
) -> PytestRun:
    """Run solo-learn's pytest on ``paths`` inside ``checkout``; returns the counts."""
    cmd = [
        python,
        "-m",
        "pytest",
        *paths,
        "-q",
        "-p",
        "no:cacheprovider",
        "--continue-on-collection-errors",
        "-W",
        "ignore",
    ]
    proc = subprocess.run(
        cmd, cwd=checkout, env=_env(checkout), capture_output=True, text=True, timeout=timeout
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    counts: dict[str, int] = {}
    for n, kind in _COUNT.findall(last):
        kind = "errors" if kind.startswith("error") else kind
        counts[kind] = counts.get(kind, 0) + int(n)
    return PytestRun(paths, counts, proc.returncode)
