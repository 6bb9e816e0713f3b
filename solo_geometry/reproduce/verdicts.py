"""``solo-geometry reproduce verdicts KIND PATH...``: a claim's verdicts on saved results.

Each kind judges the paper's claims of one part on a reproduction's own output or on the
authors' released arrays, and prints one verdict per claim (``--json``: a list of objects with
``id``, ``claim``, ``verdict`` and ``evidence``; ``hessian --json`` an object with the runs'
numbers beside them, :mod:`.hessian`). A kind registers itself by a function taking
the ``verdicts`` parser's subparsers object, listed in :data:`KINDS`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from solo_geometry.reproduce.collapse.files import add_collapse_kind
from solo_geometry.reproduce.hessian import add_hessian_kind
from solo_geometry.reproduce.invariance.result import read_invariance
from solo_geometry.reproduce.invariance.verdicts import format_verdicts, run_evidence, verdicts
from solo_geometry.reproduce.paper_arrays import paper_evidence
from solo_geometry.reproduce.results import Verdict

__all__ = ["KINDS", "add_verdicts_parser", "format_verdicts", "invariance_verdicts"]


def invariance_verdicts(paths: list[Path]) -> list[Verdict]:
    """Invariance verdicts on one ``invariance.json`` (or its folder) or the authors' arrays.

    Raises:
        ValueError: a path that is neither, or an unreadable file.
    """
    runs = [p / "invariance.json" if (p / "invariance.json").is_file() else p for p in paths]
    if len(runs) == 1 and runs[0].suffix == ".json" and runs[0].is_file():
        return verdicts(run_evidence(read_invariance(runs[0])))
    if any(p.suffix == ".json" for p in runs):
        raise ValueError("give one invariance.json, or the authors' result folders or files")
    return verdicts(paper_evidence(list(paths)))


def _run_invariance(args: argparse.Namespace) -> int:
    rows = invariance_verdicts(args.paths)
    print(json.dumps([r.as_json() for r in rows], indent=1) if args.json else format_verdicts(rows))
    return 0


def _add_invariance(kinds: Any) -> None:
    parser = kinds.add_parser(
        "invariance",
        help="guillotine probes, orbits, separation, curvature, depth",
        description="Invariance verdicts on an invariance.json (or its folder), or on the "
        "authors' results/<dataset>/<backbone> folder or its .npy/.npz files.",
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    parser.add_argument("--json", action="store_true", help="a JSON list instead of text")
    parser.set_defaults(func=_run_invariance)


# One function per kind: it adds the kind's subparser and sets its ``func``.
KINDS: tuple[Callable[[Any], None], ...] = (add_collapse_kind, _add_invariance, add_hessian_kind)


def add_verdicts_parser(actions: Any) -> argparse.ArgumentParser:
    """Register ``verdicts`` under ``solo-geometry reproduce`` with every kind of :data:`KINDS`."""
    parser = actions.add_parser(
        "verdicts",
        help="verdicts on saved results (a reproduction's or the authors' arrays)",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    kinds = parser.add_subparsers(dest="kind", metavar="KIND", required=True)
    for add in KINDS:
        add(kinds)
    return parser
