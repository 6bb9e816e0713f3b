"""``solo-geometry demo`` (``make demo``): the main job end to end on the embedded digits.

The options; the demo itself is :func:`solo_geometry.hosts.demo.run_demo`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from solo_geometry.hosts.demo import QUICK_ENV, run_demo
from solo_geometry.hosts.pretrain import HOSTS

__all__ = ["add_parser", "run"]


def run(args: argparse.Namespace) -> int:
    """Run the demo (the full form unless ``--quick`` or ``$SOLO_GEOMETRY_DEMO_QUICK``)."""
    run_demo(args.out, quick=True if args.quick else None, host=args.host)
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``demo`` on the ``solo-geometry`` command.

    Args:
        subparsers: the command's subparsers.

    Returns:
        The new subparser (its ``func`` default runs the demo).
    """
    parser = subparsers.add_parser(
        "demo",
        help="the end-to-end main job on the embedded digits (make demo)",
        description="Pretrain BYOL with a smooth head and geometry on, probe, report, and "
        "print the findings.",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("runs") / "demo",
        help="folder for data and runs (default: runs/demo)",
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"reduced form for CI (also ${QUICK_ENV}=1)"
    )
    parser.add_argument(
        "--host",
        choices=HOSTS,
        default="auto",
        help="auto: solo-learn when importable, else lightly",
    )
    parser.set_defaults(func=run)
    return parser
