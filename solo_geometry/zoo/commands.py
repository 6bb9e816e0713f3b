"""The ``zoo`` and ``analyse`` subcommands of ``solo-geometry``.

::

    solo-geometry zoo build [--quick] [--out DIR] [--only ENTRY ...]
    solo-geometry zoo card RUN --out DIR [--data DIR]
    solo-geometry zoo verify DIR [--data DIR]        exit 1 naming every field out of tolerance
    solo-geometry zoo list [DIR]                      the cards as a table (default zoo/cards)
    solo-geometry analyse CHECKPOINT --data DIR [--out DIR] [--layout NAME] [--trust-pickle]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from solo_geometry.commands.pretrain import HOSTS
from solo_geometry.zoo.analyse import analyse, format_analysis
from solo_geometry.zoo.build import build_zoo, entries, format_cards, read_cards
from solo_geometry.zoo.folder import write_card
from solo_geometry.zoo.layouts import BRANCHES, LAYOUTS
from solo_geometry.zoo.verify import verify_card

__all__ = ["add_analyse_parser", "add_zoo_parser"]

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


def add_zoo_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
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


def _analyse(args: argparse.Namespace) -> int:
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


def add_analyse_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
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
    parser.set_defaults(func=_analyse)
    return parser
