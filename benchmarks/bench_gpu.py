"""The monitor's cost where users train: solo-learn's cifar recipes on a GPU at ``16-mixed``.

Per recipe (solo-learn's own ``scripts/pretrain/cifar/<method>.yaml``: SimCLR, BYOL, VICReg,
Barlow Twins), two runs are paired in one invocation, fresh processes, same seed, same batches,
same steps: geometry off (``+geometry=off``) and on at its defaults (``+geometry=on``: every
50 steps, the 2% budget; probes and the report off, they are not a per-step cost). Every step is
timed in wall time after ``torch.cuda.synchronize()`` (the runs of :mod:`bench_overhead`, whose
machinery this reuses with ``--device`` and ``--precision``). The table gives, per recipe:

* ``step ms``: the median wall time of an unmeasured step, on (off);
* ``overhead``: the whole 'on' run's wall time over the 'off' run's, minus 1;
* ``record``: a mid-run record's cost in training steps (its step's wall time minus the median
  of the unmeasured steps around it, over that median); ``first``/``final`` likewise;
* ``taken/due``: records holding the spectra over the records due (the final one included),
  ``stats``: records holding the statistics;
* ``peak MB``: peak CUDA memory allocated, on (off); on the CPU, peak RSS.

Usage::

    PYTHONPATH=. python benchmarks/bench_gpu.py                        # a CUDA machine
    PYTHONPATH=. python benchmarks/bench_gpu.py --device cpu --steps 4 --batch-size 8

On the CPU (``--device cpu``) the precision is ``bf16-mixed`` (Lightning's only mixed precision
there) unless ``--precision`` says otherwise: a smoke test of the path, not a GPU figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_overhead import _local_costs, _spawn, recipe_path, taken_and_due
from budget_model import EVERY

RECIPES = ("cifar/simclr", "cifar/byol", "cifar/vicreg", "cifar/barlow")
MODES = ("off", "default")  # geometry off; on at its defaults


def summarise(recipe: str, off: dict[str, Any], on: dict[str, Any]) -> dict[str, Any]:
    """One row of the table from a recipe's paired runs (wall times)."""
    first, mid, final, step = _local_costs({**on, "cpu": on["wall"]})
    taken, due, stats = taken_and_due(on, EVERY)
    memory = "cuda_peak_mb" if on.get("cuda_peak_mb") is not None else "peak_rss_mb"
    return {
        "recipe": recipe,
        "step_ms": 1000 * step,
        "off_step_ms": 1000 * statistics.median(off["wall"][1:-1]),
        "overhead": sum(on["wall"]) / sum(off["wall"]) - 1,
        "first": first[0],
        "record": statistics.median(mid) if mid else None,
        "final": final[0],
        "taken": taken,
        "due": due,
        "stats": stats,
        "memory": memory,
        "peak_mb": on[memory],
        "off_peak_mb": off[memory],
        "statuses": sorted({m["status"] for m in on["measurements"]}),
    }


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of the summarised rows."""
    lines = [
        "| recipe | step ms: on (off) | overhead | first | record | final | taken/due "
        "(stats) | peak MB: on (off) |",
        "|" + "---|" * 8,
    ]
    for r in rows:
        record = "-" if r["record"] is None else f"{r['record']:.1f}"
        lines.append(
            f"| {r['recipe']} | {r['step_ms']:.1f} ({r['off_step_ms']:.1f}) | "
            f"{100 * r['overhead']:+.1f}% | {r['first']:.1f} | {record} | {r['final']:.1f} | "
            f"{r['taken']}/{r['due']} ({r['stats']}) | "
            f"{r['peak_mb']:.0f} ({r['off_peak_mb']:.0f}) |"
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES))
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--precision", default=None, help="default: 16-mixed (cpu: bf16-mixed)")
    parser.add_argument("--steps", type=int, default=201, help="optimiser steps per run")
    parser.add_argument("--batch-size", type=int, default=256, help="the cifar recipes' 256")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--data", type=Path, default=None, help="digits folder (made if absent)")
    parser.add_argument("--solo-root", type=Path, default=None, help="solo-learn checkout")
    parser.add_argument("--json", action="store_true", help="one JSON object per recipe")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the paired runs of every recipe and print the table (or JSON rows)."""
    args = _parser().parse_args(argv)
    if args.device == "gpu":
        import torch

        if not torch.cuda.is_available():
            print(
                "bench_gpu: no CUDA device here; pass --device cpu for the CPU smoke run",
                file=sys.stderr,
            )
            return 2
    precision = args.precision or ("16-mixed" if args.device == "gpu" else "bf16-mixed")
    if args.data is None:
        from solo_geometry.inputs.digits import make_digits

        args.data = make_digits(Path(tempfile.gettempdir()) / "solo-geometry-bench-digits")
    for recipe in args.recipes:  # fail fast on a bad name
        recipe_path(recipe, args.solo_root)
    child = [
        f"--steps={args.steps}",
        f"--batch-size={args.batch_size}",
        f"--seed={args.seed}",
        f"--workers={args.workers}",
        f"--data={args.data}",
        f"--device={args.device}",
        f"--precision={precision}",
        f"--default-every={EVERY}",
        *([f"--solo-root={args.solo_root}"] if args.solo_root else []),
    ]
    rows, log = [], sys.stderr if args.json else sys.stdout
    for recipe in args.recipes:
        runs = {}
        for mode in MODES:
            t0 = time.perf_counter()
            runs[mode] = _spawn(recipe, mode, child)
            print(f"{recipe} {mode}: {time.perf_counter() - t0:.0f} s", flush=True, file=log)
        rows.append(summarise(recipe, runs["off"], runs["default"]))
        print(json.dumps(rows[-1]) if args.json else table(rows), flush=True)
    print(
        f"\n{args.device}, precision {precision}, batch {args.batch_size}, {args.steps} steps, "
        f"geometry at its defaults (every {EVERY} steps, 2% budget); wall times",
        file=log,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
