"""Print the requirements of a solo-learn checkout that are not installed, one name a line.

Usage: ``python .ci/solo_requirements.py "$SOLO_LEARN_ROOT/requirements.txt"``. Names only, no
versions: what is installed stays as it is (solo-learn pins ``lightning==2.1.2`` and
``torchmetrics<0.12``; this package runs on newer ones), and lightning is never listed.
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

KEEP = {"lightning", "pytorch-lightning", "torch", "torchvision"}  # never installed from here


def missing(requirements: Path) -> list[str]:
    """The distributions named in ``requirements`` that are not installed (``KEEP`` aside)."""
    out = []
    for line in requirements.read_text().splitlines():
        name = re.split(r"[<>=!~;\[ ]", line.split("#")[0].strip(), maxsplit=1)[0]
        if not name or name.lower() in KEEP:
            continue
        try:
            distribution(name)
        except PackageNotFoundError:
            out.append(name)
    return out


if __name__ == "__main__":
    print("\n".join(missing(Path(sys.argv[1]))))
