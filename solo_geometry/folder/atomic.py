"""Writes that land whole or not at all: every file the package writes goes through here.

* :func:`write_text`, :func:`write_bytes`, :func:`save_figure`: the content goes to a temporary
  file beside the target, is flushed to disk (``fsync``), then renamed over the target
  (``os.replace``, atomic on POSIX and Windows); on any failure the temporary file is removed and
  the target is as it was.
* :func:`append_line`: one line appended to a log file (``geometry.jsonl``, ``updates.jsonl``)
  in one write and flushed; when the write fails part way (a full disk) the file is cut back to
  its length before, so no reader ever meets a half line this package wrote.

No link is written through: a replaced target that is a symbolic link is replaced itself (the
file it pointed to is untouched), the temporary file is created with ``O_EXCL``, and
:func:`append_line` opens with ``O_NOFOLLOW`` and refuses a link
(:class:`~.safe_files.LinkRefused`).

A failure raises :class:`WriteError` (an ``OSError``, so the command line's one-line handler
prints it and exits 2) naming the file and the system's reason, e.g. ``No space left on
device``.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from solo_geometry.folder.safe_files import open_fd

__all__ = ["WriteError", "append_line", "save_figure", "write_bytes", "write_text"]


class WriteError(OSError):
    """A file could not be written whole; the target is as it was before the write."""


def _fail(path: Path, err: OSError) -> WriteError:
    reason = err.strerror or errno.errorcode.get(err.errno or 0, "") or str(err)
    return WriteError(err.errno, f"cannot write {str(path)!r}: {reason}; nothing was changed")


def _replace_with(path: Path, fill: Callable[[Path], object]) -> Path:
    """Fill a temporary file beside ``path`` with ``fill``, fsync it and rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()  # a stale one, or a link planted in its place: never written through
        os.close(open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, "temporary file"))
        fill(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise _fail(path, err) from err
    return path


def write_bytes(path: Path, data: bytes) -> Path:
    """Replace ``path`` by ``data`` atomically.

    Raises:
        WriteError: the data could not be written; ``path`` is unchanged.
    """
    return _replace_with(path, lambda tmp: tmp.write_bytes(data))


def write_text(path: Path, text: str, encoding: str = "utf-8") -> Path:
    """Replace ``path`` by ``text`` atomically.

    Raises:
        WriteError: the text could not be written; ``path`` is unchanged.
    """
    return write_bytes(path, text.encode(encoding))


def save_figure(fig: Any, path: Path, **savefig: Any) -> Path:
    """``fig.savefig(path, **savefig)`` atomically: no 0-byte or half-drawn figure is left.

    The format is taken from ``path``'s suffix, as matplotlib would.

    Raises:
        WriteError: the figure could not be written; ``path`` is unchanged.
    """
    fmt = savefig.pop("format", None) or Path(path).suffix.lstrip(".") or None
    return _replace_with(path, lambda tmp: fig.savefig(tmp, format=fmt, **savefig))


def append_line(path: Path, line: str) -> None:
    """Append ``line`` (and a newline) to ``path`` in one write, flushed to disk.

    Raises:
        WriteError: the line could not be written whole; the file is cut back to its length
            before the call.
        LinkRefused: ``path`` is a symbolic link (nothing is written through it).
    """
    path = Path(path)
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    try:
        fd = open_fd(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, "log file")
    except OSError as err:
        raise _fail(path, err) from err
    try:
        size = os.fstat(fd).st_size
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
        except OSError as err:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise _fail(path, err) from err
    finally:
        os.close(fd)
