"""One writer per run folder: ``pretrain`` and ``pretrain --resume`` hold ``<run>/.lock``.

The lock is an exclusive ``fcntl.flock`` on the folder's ``.lock`` file, taken without waiting
(a second writer is refused at once, it never queues behind the first) and held for the whole
run, solo-learn's trainer process included: the kernel drops it when the holder exits, however
it exits, so a killed run never leaves a stale lock. The holder writes its pid into the file;
a refused writer names it. The file is opened with ``O_NOFOLLOW``: a ``.lock`` that is a
symbolic link (a handed-back folder) is refused, never written through. On release the file
is removed (still locked, so no third process can take the lock on a file about to vanish; a
writer that opened the old file sees that its inode is not the folder's ``.lock`` any more and
tries again).

Example:
    >>> with writer_lock(RunFolder(path)):
    ...     train()  # a second ``pretrain --resume path`` meanwhile: one line, exit 2
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager

from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.folder.safe_files import open_fd

__all__ = ["RunFolderBusy", "writer_lock"]


class RunFolderBusy(ValueError):
    """Another process is writing the run folder (exit status 2, like any bad input)."""


def _holder(fd: int) -> str:
    """The pid the lock file's holder wrote, or ``unknown`` while it has not written it yet."""
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return text if text.isdigit() else "unknown"


def _acquire(run: RunFolder) -> int:
    """Open and lock ``run.lock_file``; the locked descriptor, holding this process's pid."""
    for _ in range(100):  # a holder removing its file between our open and flock: once or twice
        fd = open_fd(run.lock_file, os.O_RDWR | os.O_CREAT, "run lock")  # a link: refused
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder(fd)
            os.close(fd)
            raise RunFolderBusy(
                f"run folder {str(run.path)!r} is being written by another process (pid {pid}, "
                f"holding {str(run.lock_file)!r}); wait for it to end or stop it, then retry"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.lstat(run.lock_file).st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return fd
        os.close(fd)  # the file we locked was removed by its last holder: lock the new one
    raise RunFolderBusy(f"run folder {str(run.path)!r}: could not take {str(run.lock_file)!r}")


@contextmanager
def writer_lock(run: RunFolder) -> Iterator[RunFolder]:
    """Hold the run folder's writer lock for the ``with`` block.

    Args:
        run: an existing run folder.

    Yields:
        ``run``.

    Raises:
        RunFolderBusy: another process holds the lock; the message names the folder and its
            pid. Nothing in the folder is changed.
        LinkRefused: ``.lock`` is a symbolic link (nothing is written through it).
    """
    fd = _acquire(run)
    try:
        yield run
    finally:
        try:
            os.unlink(run.lock_file)  # still held: nobody locks a file about to vanish
        except FileNotFoundError:
            pass  # the folder was removed (a failed run without results)
        os.close(fd)
