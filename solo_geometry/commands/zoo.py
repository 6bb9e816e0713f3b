"""``solo-geometry zoo ACTION``: the model zoo's cards (the library: :mod:`solo_geometry.zoo`).

::

    solo-geometry zoo build [--quick] [--out DIR] [--only ENTRY ...]
    solo-geometry zoo card RUN --out DIR [--data DIR]
    solo-geometry zoo verify DIR [--data DIR]        exit 1 naming every field out of tolerance
    solo-geometry zoo list [DIR]                      the cards as a table (default zoo/cards)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from solo_geometry.hosts.pretrain import HOSTS
from solo_geometry.zoo.build import build_zoo, entries, format_cards, read_cards
from solo_geometry.zoo.folder import write_card
from solo_geometry.zoo.verify import verify_card

__all__ = ["DEFAULT_CARDS", "add_parser"]

DEFAULT_CARDS = Path("zoo") / "cards"


def _build(args: argparse.Namespace) -> int:
    cards = build_zoo(args.out, quick=args.quick, only=args.only, host=args.host, seed=args.seed)
    print(format_cards(cards))
    return 0


def _card(args: argparse.Namespace) -> int:
    card = write_card(args.run, args.out, data=args.data, progress=not args.quiet)
    print(f"wrote {args.out} ({card.name})")
    return 0


def _verify(args: argparse.Namespace) -> int:
    bad = verify_card(args.dir, data=args.data)
    for mismatch in bad:
        print(f"solo-geometry zoo verify: {mismatch}", file=sys.stderr)
    if bad:
        print(f"{args.dir}: {len(bad)} field(s) outside tolerance", file=sys.stderr)
        return 1
    print(f"{args.dir}: verified")
    return 0


def _list(args: argparse.Namespace) -> int:
    print(format_cards(read_cards(args.dir)))
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``solo-geometry zoo {build,card,verify,list}``.

    Args:
        subparsers: the command's subparsers.

    Returns:
        The ``zoo`` sub-parser.
    """
    zoo = subparsers.add_parser("zoo", help="model zoo: build, card, verify, list")
    actions = zoo.add_subparsers(dest="action", metavar="ACTION", required=True)
    build = actions.add_parser("build", help="pretrain, card and verify the digits zoo")
    build.add_argument("--out", type=Path, default=Path("zoo") / "build", help="build folder")
    build.add_argument("--quick", action="store_true", help="CI sizes (1 epoch of 2 steps)")
    build.add_argument(
        "--only",
        nargs="+",
        default=None,
        metavar="ENTRY",
        help=f"entries (default all: {', '.join(e.name for e in entries())})",
    )
    build.add_argument("--host", choices=HOSTS, default="auto", help="pretraining host")
    build.add_argument("--seed", type=int, default=5, help="the runs' seed (default 5)")
    build.set_defaults(func=_build)
    card = actions.add_parser("card", help="write a run as a Hugging Face Hub folder")
    card.add_argument("run", metavar="RUN", help="run folder")
    card.add_argument("--out", type=Path, required=True, help="card folder (new or empty)")
    card.add_argument("--data", type=Path, default=None, help="evaluation data (default digits)")
    card.add_argument("--quiet", action="store_true", help="no progress bars")
    card.set_defaults(func=_card)
    verify = actions.add_parser("verify", help="recompute a card; exit 1 naming bad fields")
    verify.add_argument("dir", metavar="DIR", type=Path, help="card folder")
    verify.add_argument("--data", type=Path, default=None, help="data (default: regenerated)")
    verify.set_defaults(func=_verify)
    listing = actions.add_parser("list", help="the cards as a table")
    listing.add_argument(
        "dir",
        metavar="DIR",
        type=Path,
        nargs="?",
        default=DEFAULT_CARDS,
        help="cards folder (default zoo/cards)",
    )
    listing.set_defaults(func=_list)
    return zoo
