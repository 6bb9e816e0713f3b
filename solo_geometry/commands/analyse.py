"""``solo-geometry analyse CHECKPOINT --data DIR``: geometry of a published checkpoint.

::

    solo-geometry analyse CHECKPOINT --data DIR [--out DIR] [--layout NAME] [--trust-pickle]

The options; the analysis is :func:`solo_geometry.zoo.analyse.analyse` on the key layouts of
:data:`solo_geometry.zoo.layouts.LAYOUTS`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from solo_geometry.zoo.analyse import analyse, format_analysis
from solo_geometry.zoo.layouts import BRANCHES, LAYOUTS

__all__ = ["add_parser", "run"]


def run(args: argparse.Namespace) -> int:
    """Analyse the checkpoint, print the table and the file written."""
    out = args.out if args.out is not None else Path(f"{Path(args.checkpoint).stem}-analysis")
    result = analyse(
        args.checkpoint,
        args.data,
        out,
        layout=args.layout,
        branch=args.branch,
        trust_pickle=args.trust_pickle,
        progress=not args.quiet,
    )
    print(format_analysis(result))
    print(f"wrote {out / 'analysis.json'}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``solo-geometry analyse CHECKPOINT --data DIR``.

    Args:
        subparsers: the command's subparsers.

    Returns:
        The sub-parser.
    """
    parser = subparsers.add_parser(
        "analyse",
        help="backbone-vs-head geometry of a solo-learn, lightly, VICReg, Barlow "
        "Twins or DINO checkpoint",
        description="Known layouts: " + "; ".join(f"{k} ({v.source})" for k, v in LAYOUTS.items()),
    )
    parser.add_argument("checkpoint", metavar="CHECKPOINT", help="checkpoint file or run folder")
    parser.add_argument("--data", required=True, type=Path, help="labelled image folder")
    parser.add_argument("--out", type=Path, default=None, help="default <stem>-analysis")
    parser.add_argument("--layout", choices=sorted(LAYOUTS), default=None, help="force a layout")
    parser.add_argument("--branch", choices=BRANCHES, default="teacher", help="DINO network")
    parser.add_argument(
        "--trust-pickle",
        action="store_true",
        help="read a full pickle (runs code in the file: trusted files only)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(func=run)
    return parser
