"""Benchmark: wall time of ``solo-geometry reproduce invariance`` (quick and full forms).

Runs the reproduction in a fresh process per form, on the embedded digits, into a temporary
folder, and prints the wall time of each experiment (guillotine with probes, orbits and
curvature; the three head depths; whitening), the process CPU time, and the machine's load
average before and after: on a shared machine the wall time grows with the other jobs' load,
so read the times with the load next to them. Targets: quick under 4 minutes, full under 45
minutes on 2 cores.

Usage:
    python benchmarks/bench_invariance.py            # quick form
    python benchmarks/bench_invariance.py --full     # quick, then the full CPU scale
    python benchmarks/bench_invariance.py --keep DIR # keep each form's outputs in DIR/<form>
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

TARGETS = {"quick": 240.0, "full": 45 * 60.0}
_CHILD = """
import sys
from solo_geometry.reproduce.invariance import FULL, QUICK, run_invariance_experiment
run_invariance_experiment(sys.argv[1], QUICK if sys.argv[2] == "quick" else FULL)
"""


def run_form(form: str, out: Path) -> dict[str, float]:
    """Run one form in a child process; its stage times, wall and CPU seconds, loads."""
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-c", _CHILD, str(out), form],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    stages = json.loads((out / "invariance.json").read_text())["seconds"]
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return {
        **stages,
        "wall": wall,
        "cpu": cpu,
        "load_before": load0,
        "load_after": os.getloadavg()[0],
    }


def main() -> None:
    """Print one row per form."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="also the full CPU scale")
    parser.add_argument("--keep", type=Path, default=None, help="keep the outputs in KEEP/<form>")
    args = parser.parse_args()
    forms = ["quick", "full"] if args.full else ["quick"]
    print(f"{os.cpu_count()} cores; times in seconds")
    header = ("form", "guillotine", "depth", "whitening", "wall", "CPU", "load", "target", "met")
    print("{:>7} {:>10} {:>7} {:>9} {:>7} {:>7} {:>11} {:>7} {:>4}".format(*header))
    for form in forms:
        with tempfile.TemporaryDirectory() as tmp:
            r = run_form(form, Path(tmp) if args.keep is None else args.keep / form)
        load = f"{r['load_before']:.1f}->{r['load_after']:.1f}"
        met = "yes" if r["wall"] < TARGETS[form] else "no"
        print(
            f"{form:>7} {r['guillotine']:10.0f} {r['depth']:7.0f} {r['whitening']:9.0f} "
            f"{r['wall']:7.0f} {r['cpu']:7.0f} {load:>11} {TARGETS[form]:7.0f} {met:>4}",
            flush=True,
        )


if __name__ == "__main__":
    main()
