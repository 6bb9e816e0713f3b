"""The collapse-detection benchmark: labelled runs, every detector replayed on their records.

Runs :data:`benchmarks.collapse_configs.CONFIGS` (or ``--quick``'s four) on the embedded digits
through ``solo-geometry pretrain --host lightly``, each trained and at random initialisation
(:mod:`benchmarks.collapse_runs`), labels each run from its validation set
(:mod:`benchmarks.collapse_labels`), and replays every detector of
:mod:`benchmarks.collapse_peers` on its records. Writes ``<out>/<run>/run.json``,
``<out>/table.md`` (per detector: detections, false alarms, misses, median lead in steps; the
calibration and test halves) and ``<out>/detection.png``.

    OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/collapse_detection.py --out runs/cd --jobs 1
    PYTHONPATH=. python benchmarks/collapse_detection.py --quick --epochs 1 --batches 6 \
        --every 2 --out /tmp/cdq

A finished run's ``run.json`` is reused when the script is run again.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.collapse_calibrate import calibrate, calibrate_heldout, calibrate_peers, halves
from benchmarks.collapse_configs import CONFIGS, QUICK
from benchmarks.collapse_peers import DETECTORS, markdown, plot, score_all
from benchmarks.collapse_runs import read_result, run_config
from solo_geometry.inputs.digits import make_digits

SOURCES = {"heldout": "held-out", "batch": "training"}  # the calibration's sources, in words


def _calibration(results: list[dict[str, Any]]) -> str:
    a, b = halves(results)
    if not a or not b:
        return ""
    cal, held = calibrate(results), calibrate_heldout(results)
    names = ", ".join(r["config"]["name"] for r in a)
    return (
        f"\nCalibrated on half A ({names}): {cal.rank_option} {cal.rank_enter}, "
        f"complete_enter {cal.complete_enter}, patience {cal.patience}, features "
        f"{cal.features}, reading the {SOURCES[cal.source]} batch.\n\n"
        "| ours, calibrated | detections (early) | false alarms | misses | median lead "
        "(steps) | ambiguous fired |\n|---|---|---|---|---|---|\n"
        f"| half A (calibration, {len(a)} runs) | {cal.on_a.row()} |\n"
        f"| half B (test, {len(b)} runs) | {cal.on_b.row()} |\n"
        "\nEach peer calibrated the same way (its threshold chosen on half A), scored on half B:"
        "\n\n| detector | threshold (half A) | half B: detections (early) | false alarms | "
        "misses | median lead (steps) | ambiguous fired |\n|---|---|---|---|---|---|---|\n"
        f"| ours | {cal.rank_option} {cal.rank_enter} | {cal.on_b.row()} |\n"
        f"| ours (held-out) | heldout_enter {held.rank_enter} | {held.on_b.row()} |\n"
        + "".join(
            f"| {name} | {p.threshold:g} | {p.on_b.row()} |\n"
            for name, p in calibrate_peers(results).items()
        )
    )


def main(argv: list[str] | None = None) -> int:
    """Run, label, replay, and write the table (module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("collapse_detection"))
    p.add_argument("--quick", action="store_true", help="two collapsing and two healthy runs")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--every", type=int, default=5, help="steps between records")
    p.add_argument("--batches", type=int, default=None, help="training batches per epoch")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--only", nargs="+", default=None, help="configuration names")
    p.add_argument(
        "--score-only",
        action="store_true",
        help="run nothing: score the finished runs of --out (and --from-runs)",
    )
    p.add_argument(
        "--data",
        type=Path,
        default=None,
        help="an image folder (train/<class>, val/<class>) instead of the embedded digits; the "
        "runs are named <config>@<folder name> (benchmarks/cifar_folder.py writes CIFAR-10's)",
    )
    p.add_argument(
        "--from-runs",
        type=Path,
        nargs="+",
        default=[],
        help="also score these folders' <run>/run.json (false_alarm.py --label's cifar runs)",
    )
    a = p.parse_args(argv)
    configs = [c for c in CONFIGS if (not a.quick or c.name in QUICK)]
    if a.only:
        configs = [c for c in configs if c.name in a.only]
    data = make_digits(a.out / "digits", size=32) if a.data is None else a.data.resolve()
    if a.data is not None:
        configs = [replace(c, name=f"{c.name}@{a.data.name}") for c in configs]
    t0 = time.perf_counter()

    def one(i_cfg: tuple[int, Any]) -> dict[str, Any]:
        i, cfg = i_cfg
        res = run_config(cfg, data, a.out, a.epochs, a.every, a.batches)
        print(
            f"[{time.perf_counter() - t0:6.0f} s] {i + 1}/{len(configs)} {cfg.name}: "
            f"{res['label']} {res.get('reasons', res.get('error', ''))}",
            flush=True,
        )
        return res

    if a.score_only:
        results = [read_result(p) for p in sorted(a.out.glob("*/run.json"))]
    else:
        with ThreadPoolExecutor(max_workers=a.jobs) as pool:
            results = list(pool.map(one, enumerate(configs)))
    for folder in a.from_runs:
        results += [read_result(p) for p in sorted(folder.glob("*/run.json"))]
    scores = score_all(results, DETECTORS)
    table = markdown(results, scores) + _calibration(results)
    (a.out / "table.md").write_text(table)
    plot(results, a.out / "detection.png")
    print(table)
    return 1 if any(r["label"] == "failed" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
