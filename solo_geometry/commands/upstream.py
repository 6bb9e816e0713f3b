"""``solo-geometry upstream export --solo-root PATH --out DIR``: the patch series for solo-learn.

The options and what is printed; the series is :func:`solo_geometry.upstream.export_series`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from solo_geometry.upstream.export import export_series
from solo_geometry.upstream.verify import NEW_TESTS

__all__ = ["add_parser"]


def _export(args: argparse.Namespace) -> int:
    result = export_series(
        Path(args.solo_root),
        Path(args.out),
        verify=args.verify,
        pytest_paths=tuple(args.pytest or NEW_TESTS),
        baseline=args.baseline,
        python=args.python,
    )
    for path in result.patches:
        print(path)
    print(result.description)
    print(f"projectors rewritten: {', '.join(result.methods)}")
    for label, run in result.tests.items():
        print(f"pytest ({label}): {run.summary()}")
    if not result.ok:
        print("solo-geometry upstream: a check failed, see the PR description", file=sys.stderr)
        return 1
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``solo-geometry upstream export --solo-root PATH --out DIR`` (sets ``func``).

    Args:
        subparsers: the object returned by ``ArgumentParser.add_subparsers()``.

    Returns:
        The sub-parser; ``args.func(args)`` returns 0, 1 when a check failed, or raises
        ``SeriesError`` (a ``ValueError``: exit status 2) on bad input.
    """
    parser = subparsers.add_parser("upstream", help="contribute the heads to solo-learn")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    export = actions.add_parser(
        "export",
        help="write the patch series for a solo-learn checkout",
        description="Generate the projector-builder patch series against a clean solo-learn "
        "checkout: git format-patch files and PULL_REQUEST.md into --out.",
    )
    export.add_argument("--solo-root", required=True, help="clean solo-learn git checkout")
    export.add_argument("--out", required=True, help="destination (absent or empty folder)")
    export.add_argument(
        "--verify",
        action="store_true",
        help="compare default projectors and run the tests in the patched clone",
    )
    export.add_argument(
        "--pytest",
        nargs="+",
        metavar="PATH",
        help=f"test paths for --verify (default: {' '.join(NEW_TESTS)})",
    )
    export.add_argument(
        "--baseline",
        action="store_true",
        help="with --verify, also run the tests on the unpatched checkout",
    )
    export.add_argument(
        "--python", default=sys.executable, help="interpreter for the checks (default: this one)"
    )
    export.set_defaults(func=_export)
    return parser
