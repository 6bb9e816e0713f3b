"""The embedded data: scikit-learn's handwritten digits as an ``image_folder`` data set.

:func:`make_digits` writes scikit-learn's bundled handwritten digits (1,797 real 8x8 scans, 10
classes) as RGB PNGs in solo-learn's ``image_folder`` layout, so every recipe, test and the demo
run on real images anywhere.

References:
    - [0]: Alpaydin and Kaynak, Optical Recognition of Handwritten Digits, UCI, 1998
"""

from __future__ import annotations

import colorsys
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image
from sklearn.datasets import load_digits

__all__ = ["DIGITS_MARKER", "make_digits"]

DIGITS_MARKER = ".solo_geometry_digits.json"
_FORMAT = 1  # bump when the bytes written change
_SEED = 0
_VAL_FRACTION = 0.2


def _split(labels: np.ndarray) -> np.ndarray:
    """Boolean mask (N,) of validation samples: a fixed stratified 80/20 split."""
    rng = np.random.default_rng(_SEED)
    is_val = np.zeros(labels.shape[0], dtype=bool)
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        n_val = int(round(_VAL_FRACTION * idx.size))
        is_val[rng.permutation(idx)[:n_val]] = True
    return is_val


def _colours(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-image foreground and background RGB colours (n, 3) in [0, 1], fixed by the seed.

    Digits are grey scans; a tint gives colour augmentations (saturation, hue) something to
    act on while the class stays in the stroke shape.
    """
    rng = np.random.default_rng(_SEED + 1)
    hue = rng.uniform(0.0, 1.0, size=n)
    fg = np.array([colorsys.hsv_to_rgb(h, rng.uniform(0.5, 1.0), 1.0) for h in hue])
    bg = np.array([colorsys.hsv_to_rgb((h + 0.5) % 1.0, 0.6, rng.uniform(0.05, 0.3)) for h in hue])
    return fg, bg


def _render(pixels: np.ndarray, fg: np.ndarray, bg: np.ndarray, size: int) -> Image.Image:
    """One (8, 8) scan with values 0..16 as a (size, size) RGB image."""
    alpha = Image.fromarray((pixels * (255.0 / 16.0)).round().astype(np.uint8), mode="L")
    a = np.asarray(alpha.resize((size, size), Image.Resampling.BILINEAR), dtype=np.float64)
    a = a[..., None] / 255.0  # (size, size, 1)
    rgb = bg * (1.0 - a) + fg * a  # (size, size, 3)
    return Image.fromarray((rgb * 255.0).round().astype(np.uint8), mode="RGB")


def _write_pngs(root: Path, size: int) -> dict[str, int]:
    """Render every digit into ``root/{train,val}/<class>/<index>.png``; counts per split."""
    digits = load_digits()
    images, labels = digits.images, digits.target  # (1797, 8, 8) in 0..16, (1797,)
    is_val = _split(labels)
    fg, bg = _colours(labels.shape[0])
    counts = {"train": 0, "val": 0}
    for i in range(labels.shape[0]):
        split = "val" if is_val[i] else "train"
        folder = root / split / str(int(labels[i]))
        folder.mkdir(parents=True, exist_ok=True)
        _render(images[i], fg[i], bg[i], size).save(folder / f"{i:04d}.png", optimize=False)
        counts[split] += 1
    return counts


def _move_dir(src: Path, dst: Path) -> None:
    """Move folder ``src`` to ``dst``, replacing a previous ``dst``."""
    shutil.rmtree(dst, ignore_errors=True)
    src.rename(dst)


def _check_out_dir(out: Path) -> dict | None:
    """The marker of a previous export in ``out``, or None for a missing or empty folder."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"out_dir {str(out)!r} exists and is not a directory")
    if not out.exists() or not any(out.iterdir()):
        return None
    marker = out / DIGITS_MARKER
    if not marker.is_file():
        raise ValueError(
            f"out_dir {str(out)!r} is not empty and is not a digits export (no {DIGITS_MARKER}); "
            "refusing to write into it: choose an empty or new folder"
        )
    try:
        return dict(json.loads(marker.read_text()))
    except (ValueError, TypeError) as err:
        raise ValueError(f"unreadable digits marker {str(marker)!r}: {err}") from err


def make_digits(out_dir: str | Path, size: int = 32) -> Path:
    """Write the digits as RGB PNGs in ``out_dir/{train,val}/<class>/*.png``.

    The split is a fixed stratified 80/20 split (1,438 train, 359 val); the bytes are the same
    on every run. Calling it again on a previous export of the same size does nothing; of
    another size, rewrites that export.

    Args:
        out_dir: destination folder: missing, empty, or a previous digits export.
        size: side of the square images in pixels, 8..512.

    Returns:
        ``out_dir`` as a Path.

    Raises:
        ValueError: if ``size`` is out of range, or ``out_dir`` is a file or a non-empty
            folder that is not a digits export.
    """
    if isinstance(size, bool) or not isinstance(size, int) or not 8 <= size <= 512:
        raise ValueError(f"size must be an int in [8, 512], got {size!r}")
    out = Path(out_dir)
    previous = _check_out_dir(out)
    meta: dict[str, object] = {
        "format": _FORMAT,
        "size": size,
        "seed": _SEED,
        "val_fraction": _VAL_FRACTION,
    }
    if previous is not None and {k: previous.get(k) for k in meta} == meta:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        meta["counts"] = _write_pngs(tmp, size)
        (tmp / DIGITS_MARKER).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        out.mkdir(exist_ok=True)
        for name in ("train", "val", DIGITS_MARKER):  # only ever a previous export's files
            (tmp / name).replace(out / name) if (tmp / name).is_file() else _move_dir(
                tmp / name, out / name
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
