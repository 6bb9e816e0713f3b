"""The ``solo-geometry`` command.

Subcommands:
    data digits --out DIR   write the embedded digits data set (image_folder layout)
    pretrain                pretrain a recipe with geometry (solo-learn or lightly host)
    probe RUN --data DIR    backbone-vs-head probes and orbit table of a run or checkpoint
    report RUN [RUN ...]    plots and index.html of one run, or several overlaid
    orbits FILE [--json]    the paper's orbit table of saved orbit arrays (.npz / .npy)
    demo                    the end-to-end main job on the embedded data
    reproduce collapse      the paper's collapse experiment (Hydra multirun sweep)
    reproduce invariance    the paper's invariance findings (guillotine, orbits, curvature,
                            head depth, whitening); ``reproduce all``: both, one page
    upstream export         the patch series contributing the heads to solo-learn
    zoo ACTION              model zoo: build, card RUN --out DIR, verify DIR, list
    analyse CKPT --data DIR geometry of solo-learn, lightly, VICReg, Barlow Twins, DINO checkpoints

Bad input exits with status 2 and a message naming the value and the choices (set
``SOLO_GEOMETRY_DEBUG=1`` for the traceback).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import TextIO

from solo_geometry import __version__
from solo_geometry.commands import (
    analyse,
    data,
    demo,
    orbits,
    pretrain,
    probe,
    report,
    reproduce,
    upstream,
    zoo,
)
from solo_geometry.folder.preempted import Preempted
from solo_geometry.folder.records import RecordsWarning
from solo_geometry.recipe import split_overrides
from solo_geometry.runtime.sink import Unwritten

__all__ = ["build_parser", "error_message", "main", "parse_arguments"]

# Each command's module (solo_geometry/commands/) registers it: `add_parser(subparsers)`, in the
# order `solo-geometry --help` lists them.
_COMMANDS: tuple[Callable[[argparse._SubParsersAction], argparse.ArgumentParser], ...] = (
    data.add_parser,
    probe.add_parser,
    pretrain.add_parser,
    report.add_parser,
    demo.add_parser,
    orbits.add_parser,
    reproduce.add_parser,
    upstream.add_parser,
    zoo.add_parser,
    analyse.add_parser,
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="solo-geometry", description="Geometry of projection heads in SSL runs."
    )
    parser.add_argument("--version", action="version", version=f"solo-geometry {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add_parser in _COMMANDS:
        add_parser(subparsers)
    return parser


# What a file-system error expected of the path it names (the rest of OSError: its strerror).
_EXPECTED = (
    (FileExistsError, "a folder or a free path, not a file in the way"),
    (NotADirectoryError, "folders all the way down (a part of the path is a file)"),
    (IsADirectoryError, "a file, not a folder"),
    (PermissionError, "a location this user can read and write"),
)


def error_message(err: BaseException) -> str:
    """The one line a bad input gets.

    The error's own text; for a file-system error, the path, what went wrong and what was
    expected.

    Args:
        err: the exception raised by the command.

    Returns:
        The message, without line breaks.
    """
    if isinstance(err, OSError) and err.strerror and err.filename is not None:
        expected = next((text for kind, text in _EXPECTED if isinstance(err, kind)), None)
        message = f"{str(err.filename)!r}: {err.strerror}"
        message += f"; expected {expected}" if expected else ""
    else:
        message = str(err) or type(err).__name__
    return " ".join(message.split())  # one line, whatever the library's layout


def _one_line_warnings(command: str) -> Callable[..., None]:
    """``warnings.showwarning`` printing what a reader of run files did as one line.

    A :class:`~solo_geometry.folder.records.RecordsWarning` (a torn last line dropped, lines
    skipped) is ``solo-geometry COMMAND: warning: MESSAGE`` on stderr; any other warning is
    shown as Python shows it.
    """
    shown = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if issubclass(category, RecordsWarning):
            sys.stdout.flush()
            print(f"solo-geometry {command}: warning: {message}", file=sys.stderr)
        else:
            shown(message, category, filename, lineno, file, line)

    return show


def parse_arguments(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None = None
) -> argparse.Namespace:
    """Parse the command line; a command's options may come before or after its overrides.

    argparse fills a positional list (``pretrain``'s Hydra overrides) from its first run of
    words only, so ``pretrain +geometry=on --host lightly geometry.seed=1`` would leave
    ``geometry.seed=1`` "unrecognized". The words left over are appended, in their order, to
    the overrides of a command that takes them; anything else left over is an error.

    Args:
        parser: :func:`build_parser`'s parser.
        argv: arguments without the program name (default ``sys.argv[1:]``).

    Returns:
        The parsed arguments.

    Raises:
        SystemExit: status 2, argparse's usage error, for an argument no command takes.
    """
    args, extra = parser.parse_known_args(argv)
    if extra and isinstance(getattr(args, "overrides", None), list):
        more, others = split_overrides(extra)
        args.overrides.extend(more)
        extra = others
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


# pathlib's error for a '~' it cannot expand (HOME unset, no entry in the password database).
_NO_HOME = "Could not determine home directory."


def locale_warning() -> str | None:
    """A warning when the file-system encoding is not UTF-8 (a locale Python did not coerce).

    ``LANG=C`` and ``LC_ALL=POSIX`` are read as UTF-8 by Python (PEP 538, PEP 540); only a
    locale of another encoding, or ``PYTHONUTF8=0`` with ``PYTHONCOERCECLOCALE=0``, leaves a
    file-system encoding in which a path with other characters cannot be opened.
    """
    encoding = sys.getfilesystemencoding()
    if encoding.lower().replace("-", "") == "utf8":
        return None
    return (
        f"the file-system encoding of this locale is {encoding!r}, not UTF-8: a path with "
        f"characters outside it cannot be read or written; expected a UTF-8 locale "
        f"(LC_ALL=C.UTF-8) or PYTHONUTF8=1"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    This is the one handler that turns bad input into a one-line error: every command raises
    ``ValueError``, ``TypeError``, ``ModuleNotFoundError`` or an ``OSError`` (a missing,
    existing, unwritable path) and the message is printed here as the last line on stderr.

    Args:
        argv: arguments without the program name (default ``sys.argv[1:]``).

    Returns:
        0 on success, 2 on bad input (also raised as ``SystemExit`` by argparse).
    """
    args = parse_arguments(build_parser(), argv)
    action = f" {args.action}" if getattr(args, "action", None) else ""
    if (warning := locale_warning()) is not None:
        print(f"solo-geometry {args.command}{action}: warning: {warning}", file=sys.stderr)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _one_line_warnings(f"{args.command}{action}")
            return int(args.func(args) or 0)
    except Unwritten as err:  # trained to the end, a file could not be written: exit 3
        sys.stdout.flush()
        print(f"solo-geometry {args.command}: {err}", file=sys.stderr, flush=True)
        return err.status
    except Preempted as err:  # a scheduler's signal: checkpointed, never exit 0
        sys.stdout.flush()
        print(f"solo-geometry {args.command}: {err}", file=sys.stderr)
        sys.stderr.flush()
        return err.status
    except RuntimeError as err:
        if str(err) != _NO_HOME or os.environ.get("SOLO_GEOMETRY_DEBUG"):
            raise
        sys.stdout.flush()
        print(
            f"solo-geometry {args.command}{action}: error: a path starting with '~' cannot be "
            f"expanded: HOME is unset and user id {os.getuid()} has no home directory in the "
            f"password database; expected HOME set or paths without '~'",
            file=sys.stderr,
        )
        return 2
    except (ValueError, TypeError, OSError, ModuleNotFoundError) as err:
        if os.environ.get("SOLO_GEOMETRY_DEBUG"):
            raise
        sys.stdout.flush()  # the command's progress first, the error last
        print(f"solo-geometry {args.command}{action}: error: {error_message(err)}", file=sys.stderr)
        sys.stderr.flush()
        return 2


if __name__ == "__main__":
    sys.exit(main())
