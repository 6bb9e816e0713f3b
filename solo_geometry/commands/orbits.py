"""``solo-geometry orbits FILE [--json]``: the paper's orbit table from saved orbit features.

The options; the file's layout, its checks and the table are
:mod:`solo_geometry.analysis.orbit_files`.
"""

from __future__ import annotations

import argparse
import json

from solo_geometry.analysis.orbit_files import (
    finite_or_none,
    format_orbit_table,
    orbit_file_comparison,
)

__all__ = ["add_parser", "run"]


def run(args: argparse.Namespace) -> int:
    """Print the table (or JSON); bad input raises ``ValueError``."""
    result = orbit_file_comparison(args.file, trust_pickle=args.trust_pickle)
    if args.json:
        print(json.dumps(finite_or_none(result.paper_table())))
    else:
        print(format_orbit_table(result))
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``solo-geometry orbits FILE [--json]`` (sets ``func``).

    Args:
        subparsers: the object returned by ``ArgumentParser.add_subparsers()``.

    Returns:
        The sub-parser; ``args.func(args)`` returns 0 or raises ``ValueError`` on bad input
        (``cli.main`` turns it into one line on stderr and status 2).
    """
    parser = subparsers.add_parser(
        "orbits",
        help="the paper's orbit table of saved orbit features",
        description="Spread, D_intra, D_inter and separation of Z and H and the compression, "
        "as the paper's code computes them, from an .npz or an .npy holding a dict with keys "
        "orbits_z, orbits_h, orbit_ids, orbit_labels (optional orbit_angles). An .npy dict is "
        "read by a restricted unpickler (NumPy arrays and plain containers only).",
    )
    parser.add_argument("file", metavar="FILE", help="orbit arrays (.npz, or .npy dict)")
    parser.add_argument(
        "--json",
        action="store_true",
        help='print {"z": {...}, "h": {...}, "compression": x} instead',
    )
    parser.add_argument(
        "--trust-pickle",
        action="store_true",
        help="read an .npy dict with a full pickle (runs code in the file: trusted files only)",
    )
    parser.set_defaults(func=run)
    return parser
