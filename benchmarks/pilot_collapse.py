"""Pilot of the collapse reproduction's CPU scale: a few cells at full length, timed.

Runs the ``--quick`` grid (the four heads without BatchNorm at the base lr, seed 0) at the CPU
scale's sizes and length (:data:`solo_geometry.reproduce.collapse.protocol.CPU`: epochs x steps
per epoch, batch, crop, head widths, backbone) or at the sizes given, on one core, and prints the
CPU seconds per optimiser step (this process's and its children's, setup included) and per cell
its seconds per optimiser step, its curve over epoch 0 and its escape. From the measured cost
per step it projects the time of the whole default grid (42 cells) on 2 cores: a projection,
not a timing.
The page in ``--out`` holds the curves (``fig1_collapse_instability.png``).

    python benchmarks/pilot_collapse.py --out runs/pilot               # the CPU scale
    python benchmarks/pilot_collapse.py --out DIR --epochs 3 --steps 50 --batch 32 --crop 32
    python benchmarks/pilot_collapse.py --out DIR --backbone resnet18 --crop 16 \
        --compare tests/fixtures/collapse_authors.json  # rerun: finished cells kept, figure drawn
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import time
from pathlib import Path

from solo_geometry.reproduce.collapse import reproduce_collapse
from solo_geometry.reproduce.collapse.protocol import CPU, QUICK_GRID


def _cpu() -> float:
    """CPU seconds of this process and its finished children (user + system)."""
    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    """Run the pilot cells and print their costs, curves and the projection."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--epochs", type=int, default=CPU.epochs)
    parser.add_argument("--steps", type=int, default=CPU.steps_per_epoch, help="per epoch")
    parser.add_argument("--batch", type=int, default=CPU.batch_size)
    parser.add_argument("--crop", type=int, default=CPU.crop_size)
    parser.add_argument("--widths", type=int, nargs=3, default=list(CPU.widths))
    parser.add_argument("--heads", nargs="+", default=list(QUICK_GRID[0].heads))
    parser.add_argument("--backbone", default=CPU.backbone)
    parser.add_argument("--host", default="lightly")
    parser.add_argument(
        "--compare", type=Path, default=None, help="the authors' curves (JSON) to draw beside ours"
    )
    args = parser.parse_args()
    grid = (dataclasses.replace(QUICK_GRID[0], heads=tuple(args.heads)),)
    protocol = dataclasses.replace(
        CPU,
        epochs=args.epochs,
        steps_per_epoch=args.steps,
        batch_size=args.batch,
        crop_size=args.crop,
        widths=tuple(args.widths),
        backbone=args.backbone,
        seeds=(0,),
        grid=grid,
        every_n_steps=args.epochs * args.steps,  # the monitor at the start and the end only
    )
    start, cpu0 = time.perf_counter(), _cpu()
    summary = reproduce_collapse(
        args.out, host=args.host, jobs=1, protocol=protocol, compare=args.compare
    )
    wall, cpu = time.perf_counter() - start, _cpu() - cpu0
    rows = summary.to_json()["rows"]  # the rows as summary.json holds them
    assert isinstance(rows, list)
    steps_run = sum(r["steps"] for r in rows)
    per_step = [r["seconds"] / r["steps"] for r in rows]
    cost = sum(per_step) / len(per_step)
    print(
        f"\npilot: {len(per_step)} cells, {wall:.0f} s wall, {cpu:.0f} CPU-s "
        f"({cpu / steps_run:.4f} CPU-s per step, setup included), load average "
        f"{os.getloadavg()[0]:.2f}, protocol {protocol}"
    )
    for r, c in zip(rows, per_step, strict=True):
        ratios = [round(v / r["baseline_std"], 3) for v in r["std_curve"]]
        print(
            f"  {r['head']:>6}: {c:.3f} s/step, baseline {r['baseline_std']:.4g} (ceiling "
            f"{r['ceiling']:.4g}), {r['outcome']} at epoch {r['escape_epoch']}, "
            f"curve / epoch 0: {ratios}"
        )
    cells = len(CPU.cells())
    steps = CPU.epochs * CPU.steps_per_epoch
    print(
        f"PROJECTION (not a timing): {cells} cells x {steps} steps x {cost:.3f} s/step "
        f"/ 2 cores = {cells * steps * cost / 2 / 60:.0f} min"
    )
    (args.out / "pilot.json").write_text(
        json.dumps(
            {
                "protocol": dataclasses.asdict(protocol),
                "wall_s": wall,
                "cpu_s": cpu,
                "cpu_s_per_step": cpu / steps_run,
                "s_per_step": per_step,
                "projected_grid_min": cells * steps * cost / 2 / 60,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
