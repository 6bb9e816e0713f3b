"""``solo-geometry data digits --out DIR``: write an embedded data set to disk.

The options; the data set is :func:`solo_geometry.inputs.digits.make_digits`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from solo_geometry.inputs.digits import make_digits

__all__ = ["add_parser"]


def _digits(args: argparse.Namespace) -> int:
    out = make_digits(args.out, size=args.size)
    print(f"digits written to {out} (train/ and val/, image_folder layout)")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``solo-geometry data DATASET`` (each data set sets ``func``).

    Args:
        subparsers: the object returned by ``ArgumentParser.add_subparsers()``.

    Returns:
        The ``data`` sub-parser; ``args.func(args)`` returns 0 or raises ``ValueError``.
    """
    data = subparsers.add_parser("data", help="write an embedded data set to disk")
    kinds = data.add_subparsers(dest="dataset", metavar="DATASET", required=True)
    digits = kinds.add_parser("digits", help="scikit-learn's 1,797 digits as RGB PNGs")
    digits.add_argument("--out", type=Path, required=True, help="destination folder")
    digits.add_argument("--size", type=int, default=32, help="image side in pixels (8..512)")
    digits.set_defaults(func=_digits)
    return data
