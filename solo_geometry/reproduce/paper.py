"""The reproduction's page: tables and figures in the paper's layout, next to its numbers.

The page frame (:func:`write_page`) and the table helpers every experiment's section uses (the
invariance section is :mod:`solo_geometry.reproduce.invariance.page`'s). ``run_all`` runs
several experiments (each a callable returning a page section) and joins their sections into
``out/paper.html``: ``solo-geometry reproduce all``.
"""

from __future__ import annotations

import argparse
import html
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from solo_geometry.run.atomic import save_figure, write_text

__all__ = [
    "Experiment",
    "Section",
    "add_all_parser",
    "add_run_arguments",
    "run_all",
    "write_page",
]

Section = tuple[str, str]  # (title, HTML body)
Experiment = Callable[[Path, bool], Section]  # (out folder, quick) -> its page section
_STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:"
    "collapse;margin:8px 0}td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}"
    "th{background:#eee}.held{color:#070}.not{color:#b00}.undecided{color:#a60}"
    "img{max-width:100%}"
)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _pm(pair: Sequence[float | None], fmt: str = "{:.4f}") -> str:
    mean, std = pair
    return "n/a" if mean is None else f"{fmt.format(mean)} ± {fmt.format(std or 0.0)}"


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


def write_page(path: Path, sections: Sequence[Section]) -> Path:
    """Write an HTML page of sections, each under its title.

    Args:
        path: the page file.
        sections: ``(title, HTML body)`` pairs, in order.

    Returns:
        The path written.
    """
    parts = [f"<h2>{html.escape(t)}</h2>\n{b}" for t, b in sections]
    write_text(
        path,
        f"<!doctype html><html><head><meta charset='utf-8'><title>solo-geometry: "
        f"the paper reproduced</title><style>{_STYLE}</style></head><body>"
        f"<h1>The paper reproduced</h1>{''.join(parts)}</body></html>",
    )
    return path


def run_all(out: Path, quick: bool, experiments: Sequence[Experiment]) -> Path:
    """Run each experiment into ``out`` and write their sections into ``out/paper.html``."""
    out.mkdir(parents=True, exist_ok=True)
    return write_page(out / "paper.html", [run(out, quick) for run in experiments])


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """``--quick`` and ``--out``, the options every ``reproduce`` action shares."""
    parser.add_argument("--quick", action="store_true", help="the reduced form (CI)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("runs") / "reproduce",
        help="output folder (default: runs/reproduce)",
    )


def add_all_parser(subparsers: Any, experiments: Sequence[Experiment]) -> argparse.ArgumentParser:
    """Register ``all`` under ``solo-geometry reproduce``: every experiment, one page.

    Args:
        subparsers: the ``reproduce`` command's ``add_subparsers()`` object.
        experiments: the experiments in page order (collapse, then invariance).

    Returns:
        The sub-parser; ``args.func(args)`` returns 0 (bad input raises ``ValueError``).
    """
    parser = subparsers.add_parser("all", help="every experiment of the paper, one page")
    add_run_arguments(parser)

    def _run(args: argparse.Namespace) -> int:
        page = run_all(args.out, args.quick, experiments)  # bad input: cli.main's one line
        print(f"solo-geometry reproduce all: wrote {page}")
        return 0

    parser.set_defaults(func=_run)
    return parser
