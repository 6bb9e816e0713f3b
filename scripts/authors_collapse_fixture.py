"""Write tests/fixtures/collapse_authors.json from the authors' released collapse results.

The authors' ``results/<dataset>/<backbone>/collapse_results.npy`` files are pickled dicts (key ->
``raw``: seeds x epochs of the per-epoch mean std of the normalised projector output). This
script, run by hand on files extracted from their repository, keeps only those numbers (6
significant digits) with their provenance, so the tests never load a pickle:

    git --git-dir=MIRROR show COMMIT:results/cifar10/resnet18/collapse_results.npy > DIR/...
    python scripts/authors_collapse_fixture.py DIR --commit COMMIT
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from solo_geometry.reproduce.collapse.files import AUTHORS_SETUP

REPO = "github.com/farischaudhry/projection-head-geometry"
PATHS = ("cifar10/resnet18", "cifar10/vit_tiny", "cifar100/resnet18")


def main() -> None:
    """Read ``DIR/<dataset>/<backbone>/collapse_results.npy`` and write the fixture."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="folder holding <dataset>/<backbone>/*.npy")
    parser.add_argument("--commit", required=True, help="the repository commit they came from")
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/collapse_authors.json"))
    args = parser.parse_args()
    results = {}
    for name in PATHS:
        data = np.load(args.root / name / "collapse_results.npy", allow_pickle=True).item()
        results[name] = {
            key: [[float(f"{v:.6g}") for v in seed] for seed in value["raw"]]
            for key, value in data.items()
        }
    fixture = {
        "provenance": {
            "repository": REPO,
            "commit": args.commit,
            "paths": [f"results/{name}/collapse_results.npy" for name in PATHS],
            "extracted": "each key's 'raw' (seeds x epochs: the per-epoch mean of "
            "torch.std(F.normalize(cat(z1, z2)), dim=0).mean()), 6 significant "
            "digits; keys as in the file",
        },
        "setup": AUTHORS_SETUP,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
