"""Image folders the probes stack: which folders they read, and that their images share a size.

The probes (``probe``, ``analyse``, ``zoo card``/``verify``, the probes at the end of
``pretrain``) read whole folders into one tensor, so every image must have one size (and be
square for the quarter-turn rotation target). :func:`check_one_size` reads only each file's
header (PIL's ``Image.open``, no pixels), so a folder of mixed sizes is refused before any work,
naming two files that differ, instead of failing inside ``torch.stack`` after the probes began.

Images wider than 8 bits a channel (16-bit greyscale PNGs and TIFFs, PIL's modes ``I;16``,
``I`` and ``F``) are refused by :func:`check_depth`, here and in the hosts' check of the
training folder: every reader of images (torchvision's and solo-learn's loaders, the probes)
takes ``convert("RGB")``, which clips such values to 255 instead of scaling them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PIL import Image
from torchvision.datasets.folder import IMG_EXTENSIONS

__all__ = ["check_depth", "check_one_size", "image_files", "probe_folders"]


def check_depth(image: Path, mode: str, where: str) -> None:
    """Refuse an image whose pixels are wider than 8 bits (``convert("RGB")`` would clip them).

    Args:
        image: the file.
        mode: its PIL mode, read from the header.
        where: what the folder is, for the message.

    Raises:
        ValueError: for modes ``I;16*``, ``I`` and ``F``, naming the file and its mode.
    """
    if mode.startswith("I") or mode == "F":
        raise ValueError(
            f"{where}: image {str(image)!r} has {mode!r} pixels (wider than 8 bits); expected "
            f"8-bit images (modes L, RGB, RGBA, P): the loaders' convert('RGB') would clip "
            f"every value above 255 (rescale the folder to 8 bits first)"
        )


def image_files(root: Path) -> list[Path]:
    """The images of an ``ImageFolder`` tree (class folders, any depth), in sorted order."""
    classes = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    return [f for c in classes for f in sorted(c.rglob("*")) if f.suffix.lower() in IMG_EXTENSIONS]


def probe_folders(data: Path | tuple[Path, Path]) -> list[Path]:
    """The class folders :func:`~solo_geometry.inputs.datasets.probe_splits` reads.

    Args:
        data: a (train, held-out) pair; a folder holding ``train/`` and ``val/`` (or
            ``test/``); or one class folder (split 50/50).

    Returns:
        ``[train, held-out]``, or ``[folder]``.
    """
    if isinstance(data, tuple):
        return [Path(data[0]), Path(data[1])]
    data = Path(data)
    held = next((data / s for s in ("val", "test") if (data / s).is_dir()), None)
    if (data / "train").is_dir() and held is not None:
        return [data / "train", held]
    return [data]


def _size(image: Path) -> tuple[tuple[int, int], str] | None:
    """(width, height) and mode from the header; None for a file that does not open."""
    try:
        with Image.open(image) as im:
            return im.size, im.mode
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        return None


def check_one_size(
    folders: Sequence[Path], where: str, *, square: bool = False, hint: str = ""
) -> tuple[int, int] | None:
    """Check that every image of ``folders`` has one size (and is square, if asked).

    Args:
        folders: class folders (``ImageFolder`` layout).
        where: what the folders are, for the message (``--data 'x'``, a recipe field).
        square: also require width == height (the rotation probe turns images by quarters).
        hint: appended to the message (another way out, e.g. an option to turn the probes off).

    Returns:
        The common ``(width, height)``, None when the folders hold no readable image.

    Raises:
        ValueError: naming two files of different sizes, the first non-square one, or the
            first wider than 8 bits (:func:`check_depth`).
    """
    first: tuple[Path, tuple[int, int]] | None = None
    for image in (f for folder in folders for f in image_files(Path(folder))):
        header = _size(image)
        if header is None:
            continue
        size = header[0]
        check_depth(image, header[1], where)
        if first is None:
            first = (image, size)
            if square and size[0] != size[1]:
                raise ValueError(
                    f"{where}: image {str(image)!r} is {size[0]}x{size[1]}, not square; "
                    f"expected square images, the rotation probe turns them by quarter turns "
                    f"(or leave rotation out of the targets){hint}"
                )
        elif size != first[1]:
            (a, (aw, ah)), (bw, bh) = first, size
            raise ValueError(
                f"{where}: images differ in size ({str(a)!r} is {aw}x{ah}, {str(image)!r} is "
                f"{bw}x{bh}); expected images of one size, the probes stack them (resize the "
                f"folder to one size, e.g. the recipe's crop size){hint}"
            )
    return None if first is None else first[1]
