"""Files users hand back, opened safely: no symbolic link followed, no size beyond a cap.

A run folder, a card folder or an array file comes from someone else as often as from this
package. Two things in such a file must never reach the reader that trusts it:

* **a symbolic link**: ``<run>/.lock`` linked to ``~/.bashrc`` would have that file truncated and
  overwritten with a pid by ``pretrain --resume``; ``geometry.jsonl`` linked to ``/dev/zero``
  would be read forever. Every file of a run folder is opened with ``O_NOFOLLOW`` (or checked
  with ``lstat``), reading and writing alike, and a link is refused with one line naming it and
  where it points (:class:`LinkRefused`);
* **a size no reader should allocate**: every reader compares a file's size with the cap for
  its kind before reading a byte (:class:`TooLarge`), and array readers compare the shape a
  header declares with the bytes behind it (:mod:`solo_geometry.inputs.npfiles`).

The caps (docs/failures.md, "Caps"):

* :data:`MAX_JSON_BYTES`, 64 MiB: ``probes.json``, zoo cards, ``.preempted.json``, recipes;
* :data:`MAX_RECORDS_BYTES`, 1 GiB: ``geometry.jsonl``, ``updates.jsonl``;
* :data:`MAX_ARRAY_BYTES`, 16 GiB: one ``.npy`` array or ``.npz`` member, as its header declares;
* :data:`MAX_CHECKPOINT_BYTES`, 64 GiB: a checkpoint or ``features.pt``.

Example:
    >>> text = read_text(run / "probes.json", MAX_JSON_BYTES, "probe table")
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "MAX_ARRAY_BYTES",
    "MAX_CHECKPOINT_BYTES",
    "MAX_JSON_BYTES",
    "MAX_RECORDS_BYTES",
    "LinkRefused",
    "TooLarge",
    "check_size",
    "open_fd",
    "open_read",
    "read_bytes",
    "read_text",
    "refuse_link",
]

MAX_JSON_BYTES = 64 << 20
MAX_RECORDS_BYTES = 1 << 30
MAX_ARRAY_BYTES = 16 << 30
MAX_CHECKPOINT_BYTES = 64 << 30


class LinkRefused(ValueError):
    """A file of a run (or card) folder is a symbolic link: never followed (exit status 2)."""


class TooLarge(ValueError):
    """A file, or what its header declares, is larger than its kind's cap (exit status 2)."""


def _link_error(path: Path, what: str) -> LinkRefused:
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return LinkRefused(
        f"{what} {str(path)!r} is a symbolic link (to {target!r}); refused: no link is followed "
        f"out of a run folder; expected a plain file (put a copy in place of the link)"
    )


def refuse_link(path: str | Path, what: str = "file") -> None:
    """Refuse ``path`` if it is a symbolic link (a missing path passes).

    Raises:
        LinkRefused: naming the path and where it points.
    """
    if Path(path).is_symlink():
        raise _link_error(Path(path), what)


def open_fd(path: str | Path, flags: int, what: str = "file", mode: int = 0o644) -> int:
    """``os.open`` with ``O_NOFOLLOW | O_CLOEXEC``: a link in the last component is refused.

    Raises:
        LinkRefused: ``path`` is a symbolic link.
        OSError: any other failure to open, as ``os.open`` raises it.
    """
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as err:
        if err.errno == errno.ELOOP or (err.errno == errno.EMLINK and Path(path).is_symlink()):
            raise _link_error(Path(path), what) from None
        raise


def check_size(path: str | Path, size: int, cap: int, what: str) -> None:
    """Refuse ``size`` bytes of ``path`` above ``cap``.

    Raises:
        TooLarge: naming the file, its size and the cap.
    """
    if size > cap:
        raise TooLarge(
            f"{what} {str(path)!r} is {size} bytes, over the cap of {cap} bytes for a {what}; "
            f"expected a file this package wrote (caps: docs/failures.md)"
        )


def open_read(path: str | Path, cap: int, what: str = "file") -> BinaryIO:
    """Open ``path`` for reading, not following a link, its size checked against ``cap``.

    Returns:
        A binary file object positioned at the start; the caller closes it.

    Raises:
        LinkRefused: ``path`` is a symbolic link.
        TooLarge: the file is larger than ``cap``.
        ValueError: ``path`` is not a regular file (a folder, a fifo, a device).
        OSError: the file cannot be opened.
    """
    fd = open_fd(path, os.O_RDONLY | os.O_NONBLOCK, what)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{what} {str(path)!r} is not a regular file; expected a file")
        check_size(path, st.st_size, cap, what)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | Path, cap: int, what: str = "file") -> bytes:
    """The bytes of ``path`` (see :func:`open_read` for what is refused)."""
    with open_read(path, cap, what) as fh:
        return fh.read()


def read_text(path: str | Path, cap: int, what: str = "file") -> str:
    """The UTF-8 text of ``path`` (see :func:`open_read` for what is refused).

    Raises:
        ValueError: as :func:`open_read`, or the bytes are not UTF-8 text (the message names
            the file, the byte offset and what was expected).
    """
    data = read_bytes(path, cap, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{what} {str(path)!r} is not UTF-8 text (byte {err.start} is "
            f"0x{data[err.start]:02x}); expected a text file"
        ) from None
