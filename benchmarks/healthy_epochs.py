"""How long a digits recipe trains before its backbone probes at its random initialisation.

The collapse-detection benchmark labels a run ``healthy`` only when its backbone (Z) probes no
more than 0.02 below the same network at random initialisation (benchmarks/collapse_labels.py).
This script measures how many epochs that takes: it trains one digits recipe at its defaults
for ``--epochs`` through ``solo-geometry pretrain --host lightly`` (geometry records sparse,
spectra off), keeps every epoch's checkpoint, and runs ``solo-geometry probe`` (class target,
linear and MLP probes of Z and H, and the same probes at random initialisation) on the
checkpoints of ``--at``. Writes ``<out>/<recipe>/curve.json`` and prints one line per epoch.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/healthy_epochs.py byol --epochs 30 \
        --at 1 2 5 10 20 30 --out runs/healthy

The checkpoint at epoch k is a point on a ``--epochs``-long cosine schedule, not the end of a
k-epoch run; the table says so.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.collapse_runs import RECIPES, launch
from solo_geometry.inputs.digits import make_digits

__all__ = ["main"]


def _accuracies(probes: Path) -> dict[str, float]:
    rows = json.loads(probes.read_text())["rows"]
    return {
        f"{r['features']}/{r['probe']}": float(r["accuracy"])
        for r in rows
        if r["target"] == "class"
    }


def main(argv: list[str] | None = None) -> int:
    """Train, probe the kept checkpoints, write the curve (module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("recipe", help="a digits recipe name (byol, simclr, ...)")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--at", type=int, nargs="+", default=[1, 2, 5, 10, 20, 30])
    p.add_argument("--out", type=Path, default=Path("healthy_epochs"))
    p.add_argument("--overrides", nargs="*", default=[])
    a = p.parse_args(argv)
    where = (a.out / a.recipe).resolve()
    where.mkdir(parents=True, exist_ok=True)
    data = make_digits(a.out.resolve() / "digits", size=32)
    t0 = time.perf_counter()
    train = where / "train"
    if not any(train.glob("*/checkpoints/last.ckpt")):
        train.mkdir(exist_ok=True)
        launch(
            [
                sys.executable, "-m", "solo_geometry.cli", "pretrain",
                "--config", str(RECIPES / f"{a.recipe}.yaml"), "--host", "lightly",
                "--runs-root", str(train), "+geometry=on",
                f"data.train_path={data / 'train'}", f"data.val_path={data / 'val'}",
                "data.num_workers=0", f"max_epochs={a.epochs}",
                "checkpoint.enabled=true", "++checkpoint.keep_prev=true",
                "geometry.every_n_steps=1000", "geometry.report=false",
                "geometry.measure.hessian=false", "geometry.measure.augment=false",
                "geometry.probes.targets=[class]", "geometry.probes.orbits.families=[]",
                *a.overrides,
            ],
            where,
            where / "train.log",
        )  # fmt: skip
    print(f"[{time.perf_counter() - t0:6.0f} s] trained {a.epochs} epochs", flush=True)
    (run,) = [c.parent.parent for c in train.glob("*/checkpoints/last.ckpt")]
    curve: list[dict[str, Any]] = []
    for epoch in a.at:
        ckpt = run / "checkpoints" / f"epoch={epoch - 1}.ckpt"
        out = where / f"probe_{epoch}"
        if not (out / "probes.json").is_file():
            launch(
                [
                    sys.executable, "-m", "solo_geometry.cli", "probe", str(ckpt),
                    "--data", str(data), "--out", str(out), "--targets", "class",
                    "--no-orbits", "--quiet",
                ],
                where,
                where / f"probe_{epoch}.log",
            )  # fmt: skip
        acc = _accuracies(out / "probes.json")
        curve.append({"epoch": epoch, "accuracy": acc})
        print(f"[{time.perf_counter() - t0:6.0f} s] epoch {epoch}: {acc}", flush=True)
    (where / "curve.json").write_text(
        json.dumps({"recipe": a.recipe, "epochs": a.epochs, "curve": curve}, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
