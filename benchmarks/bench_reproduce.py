"""Time ``solo-geometry reproduce collapse`` against its budgets: --quick < 5 min, grid < 90 min.

Runs the command in a fresh process (a fresh sweep folder, so nothing is skipped) and prints its
wall time (the default grid: the authors' 14 configurations x 3 seeds at the CPU scale), the CPU
time of it and its workers, the machine's load average before and after (the
budgets are for 2 otherwise idle cores; a shared machine shows up there), and each cell's own
seconds from ``summary.json``. Without ``--full`` the full grid is not run: its time is projected
from the quick cells' seconds per optimiser step and per measurement, and printed as a projection;
so is the time on idle cores, from the CPU time (on a shared machine the wall time mostly
measures the other jobs).

    python benchmarks/bench_reproduce.py                 # --quick, timed; full grid projected
    python benchmarks/bench_reproduce.py --full          # the default grid, timed (42 cells)
    python benchmarks/bench_reproduce.py --full --keep DIR  # keep DIR/{quick,full} and their output
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from solo_geometry.reproduce.collapse.protocol import CPU, Protocol, protocol_of

QUICK_BUDGET_S, FULL_BUDGET_S = 300.0, 5400.0
QUICK, FULL = protocol_of(True, "cpu", "paper"), CPU  # --quick and the default grid


def _cells(p: Protocol) -> int:
    return len(p.cells())


def _records(p: Protocol) -> int:
    """Monitor records of one cell: step 0, every every_n_steps, and the final one."""
    steps = p.epochs * p.steps_per_epoch
    return 1 + (steps - 1) // p.every_n_steps + 1


def _run(args: list[str], out: Path) -> tuple[float, float, dict]:
    cmd = [
        sys.executable,
        "-m",
        "solo_geometry.cli",
        "reproduce",
        "collapse",
        "--out",
        str(out),
        *args,
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    with (out.parent / f"{out.name}.stdout.txt").open("w") as log:  # the command's own output
        subprocess.run(cmd, check=True, stdout=log)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads((out / "summary.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="time the full grid too")
    parser.add_argument("--host", default="lightly", help="host of the cells (default lightly)")
    parser.add_argument(
        "--jobs", type=int, default=None, help="cells at once (default: the cores available)"
    )
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="keep each form's sweep (and its printed output) in KEEP/<form>",
    )
    args = parser.parse_args()
    jobs = [] if args.jobs is None else ["--jobs", str(args.jobs)]
    print(
        f"cores available: {len(os.sched_getaffinity(0))}, load average before: "
        f"{os.getloadavg()[0]:.2f}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) if args.keep is None else args.keep
        wall, cpu, summary = _run(["--quick", "--host", args.host, *jobs], root / "quick")
    load = os.getloadavg()[0]
    cells = summary["rows"]
    per_cell = [r["seconds"] for r in cells]
    print(
        f"\n--quick: {len(cells)} cells, wall {wall:.1f} s, CPU {cpu:.1f} s, load average "
        f"after {load:.2f}; budget {QUICK_BUDGET_S:.0f} s: "
        f"{'met' if wall < QUICK_BUDGET_S else 'NOT met'}"
    )
    steps = sum(r["steps"] for r in cells)
    print(
        f"  {cpu / steps:.4f} CPU-s per optimiser step (all of the command's CPU time over "
        f"its {steps} steps)"
    )
    print("  cell                      seconds  steps  records")
    for r in cells:
        name = f"{r['head']}-{r['norm']}-lr{r['lr']:g}-s{r['seed']}"
        print(f"  {name:<24} {r['seconds']:8.1f} {r['steps']:6d} {r['records']:8d}")
    # Projection: the quick cells' mean seconds scaled by the full cells' steps + records.
    q_work = QUICK.epochs * QUICK.steps_per_epoch + _records(QUICK)
    f_work = FULL.epochs * FULL.steps_per_epoch + _records(FULL)
    mean_cell = sum(per_cell) / len(per_cell)
    workers = max(1, len(os.sched_getaffinity(0)))
    overhead = max(0.0, wall - sum(per_cell) / workers)
    projected = _cells(FULL) * mean_cell * f_work / q_work / workers + overhead
    print(
        f"\ndefault grid ({_cells(FULL)} cells, {workers} workers), projected from --quick: "
        f"{projected / 60:.1f} min; budget {FULL_BUDGET_S / 60:.0f} min: "
        f"{'met' if projected < FULL_BUDGET_S else 'NOT met'} (projection)"
    )
    # On a shared machine wall time measures the other jobs; CPU time divided by the cores is
    # what 2 idle cores would take if the cells kept both busy (the pool does, 8 cells on 2).
    quick_idle = cpu / workers
    full_idle = cpu * _cells(FULL) / len(cells) * f_work / q_work / workers
    q_ok = "met" if quick_idle < QUICK_BUDGET_S else "NOT met"
    f_ok = "met" if full_idle < FULL_BUDGET_S else "NOT met"
    print(
        f"CPU-time projection for {workers} idle cores: --quick {quick_idle:.0f} s ({q_ok}), "
        f"full grid {full_idle / 60:.1f} min ({f_ok})"
    )
    if args.full:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) if args.keep is None else args.keep
            wall, cpu, summary = _run(["--host", args.host, *jobs], root / "full")
        verdict = "met" if wall < FULL_BUDGET_S else "NOT met"
        print(
            f"full grid: {len(summary['rows'])} cells, wall {wall / 60:.1f} min, CPU "
            f"{cpu / 60:.1f} min; budget: {verdict}"
        )


if __name__ == "__main__":
    main()
