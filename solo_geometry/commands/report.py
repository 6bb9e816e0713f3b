"""``solo-geometry report RUN [RUN ...]``: the plots and index.html of runs, overlaid.

The options; the page is :func:`solo_geometry.analysis.report.write_report`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from solo_geometry.analysis.report import write_report
from solo_geometry.analysis.run_data import check_reportable

__all__ = ["add_parser", "run"]


def run(args: argparse.Namespace) -> int:
    """Render, print the page's path (bad input: ``ValueError``, before anything is written)."""
    for folder in args.runs:
        check_reportable(Path(folder))
    index = write_report(args.runs, args.out)
    print(f"wrote {index}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``solo-geometry report RUN [RUN ...]`` (sets ``func``).

    Args:
        subparsers: the object returned by ``ArgumentParser.add_subparsers()``.

    Returns:
        The sub-parser; ``args.func(args)`` returns 0 or raises ``ValueError`` on bad input.
    """
    parser = subparsers.add_parser(
        "report",
        help="plots and index.html of one or more runs (overlaid)",
        description="Write report/ (PNG plots and an offline index.html) from run folders.",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run folder(s)")
    parser.add_argument("--out", default=None, help="output folder (default: <run>/report)")
    parser.set_defaults(func=run)
    return parser
