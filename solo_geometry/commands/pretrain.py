"""``solo-geometry pretrain``: run a solo-learn recipe on the solo-learn or the lightly host.

::

    solo-geometry pretrain --config zoo/recipes/digits/byol.yaml --host auto +geometry=on
    solo-geometry pretrain --resume runs/byol-digits-20261130-101500   # after a kill

The options and the overrides' check; the run is :func:`solo_geometry.hosts.pretrain.pretrain`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from solo_geometry.hosts.pretrain import DEFAULT_RUNS_ROOT, HOSTS, pretrain

__all__ = ["add_parser", "run"]


def run(args: argparse.Namespace) -> int:
    """Pretrain or resume as the options say (bad overrides: ``ValueError``)."""
    odd = [a for a in args.overrides if "=" not in a and not a.startswith("~")]
    if odd:
        raise ValueError(f"overrides must look like key=value, +group=option or ~key; got {odd}")
    pretrain(
        args.config,
        args.overrides,
        host=args.host,
        runs_root=args.runs_root,
        solo_root=args.solo_root,
        resume=args.resume,
    )
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``pretrain`` on the ``solo-geometry`` command.

    Args:
        subparsers: the command's subparsers.

    Returns:
        The new subparser (its ``func`` default runs the command).
    """
    parser = subparsers.add_parser(
        "pretrain",
        help="pretrain a solo-learn recipe (solo-learn or lightly host)",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument(
        "--config", type=Path, default=None, help="recipe YAML file (with --resume: the run's)"
    )
    parser.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="RUN",
        help="continue a killed run folder from its newest checkpoint, in place",
    )
    parser.add_argument(
        "--host",
        choices=HOSTS,
        default="auto",
        help="auto: solo-learn when importable, else lightly (default: auto)",
    )
    parser.add_argument(
        "--runs-root",
        type=Path,
        default=DEFAULT_RUNS_ROOT,
        help="folder for run folders (default: runs)",
    )
    parser.add_argument(
        "--solo-root",
        type=Path,
        default=None,
        help="solo-learn checkout for --host solo (default: found)",
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. +geometry=on")
    parser.set_defaults(func=run)
    return parser
