"""Overhead of the GeometryMonitor on the BYOL digits recipe (solo-learn host).

Trains the recipe with geometry off and on (default cadence ``every_n_steps=50``), alternating
the two (off, on, then on, off, ...), each run in a fresh process with the same seed, and
reports per mode:

* the median wall time per training step (time between consecutive batch ends, so a
  measurement step counts as one slow step);
* the amortised time per step: the whole fit (first batch to the end of fit, the final
  measurement included) divided by the number of steps;
* peak memory: the process's peak RSS and, on a GPU, ``torch.cuda.max_memory_allocated``.

Two fresh processes differ by several percent in speed on a shared 2-core machine, more than the
monitor costs, so the table also measures the cost inside the 'on' runs: the extra wall time of
each measured step over the run's median step (everything the monitor adds at that step:
capture, measurement, writing, logging). That cost per ``every_n_steps`` steps of the 'off'
median step is the steady-state overhead; the first and final records, which also compute the
SLQ density, are one-off costs, amortised in a projection for longer runs.

Probes (run once after fit) are switched off: they are not a per-step cost.

Usage::

    PYTHONPATH=. python benchmarks/bench_overhead.py --steps 201 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from solo_geometry.records import read_records

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "zoo" / "recipes" / "digits" / "byol.yaml"
EVERY = 50  # the default cadence, GeometryConfig.every_n_steps


def _loader(cfg: Any) -> Any:
    """solo-learn's pretraining data loader, built as its main_pretrain.py builds it."""
    from solo.data.pretrain_dataloader import (
        FullTransformPipeline,
        NCropAugmentation,
        build_transform_pipeline,
        prepare_dataloader,
        prepare_datasets,
    )

    pipelines = [
        NCropAugmentation(build_transform_pipeline(cfg.data.dataset, aug), aug.num_crops)
        for aug in cfg.augmentations
    ]
    dataset = prepare_datasets(
        cfg.data.dataset,
        FullTransformPipeline(pipelines),
        train_data_path=cfg.data.train_path,
        data_format=cfg.data.format,
        no_labels=cfg.data.no_labels,
        data_fraction=cfg.data.fraction,
    )
    return prepare_dataloader(dataset, cfg.optimizer.batch_size, cfg.data.num_workers)


def single(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One training run in this process; returns its timings and peak memory."""
    import lightning.pytorch as pl
    import torch
    from solo.args.pretrain import parse_cfg
    from solo.methods import METHODS

    from solo_geometry.hosts.solo import install
    from solo_geometry.recipe import load_recipe

    install()
    out_dir = tempfile.mkdtemp(prefix="bench-geometry-")
    overrides = [
        f"data.train_path={args.data / 'train'}", "data.val_path=null",
        f"optimizer.batch_size={args.batch_size}", f"data.num_workers={args.workers}",
        "checkpoint.enabled=False", f"++seed={args.seed}",
        *(["+geometry=off"] if mode == "off" else
          ["+geometry=on", "geometry.probes.enabled=false", f"geometry.out_dir={out_dir}"]),
    ]  # fmt: skip
    cfg = parse_cfg(load_recipe(RECIPE, overrides))
    pl.seed_everything(cfg.seed, verbose=False)
    model = METHODS[cfg.method](cfg)
    ends: list[float] = []

    class Timer(pl.Callback):
        def on_train_batch_end(self, *_: Any) -> None:
            ends.append(time.perf_counter())

    cuda = torch.cuda.is_available()
    trainer = pl.Trainer(
        max_steps=args.steps, accelerator="gpu" if cuda else "cpu", devices=1, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[Timer()], precision=32,
    )  # fmt: skip
    trainer.fit(model, _loader(cfg))
    done = time.perf_counter()
    steps = [b - a for a, b in zip(ends[:-1], ends[1:], strict=True)]  # steps[k - 1]: batch k
    median = statistics.median(steps[1:])  # the first interval includes warm-up
    measured = [k for k in range(EVERY, len(ends), EVERY)]  # batches the monitor measures on
    return {
        "mode": mode,
        "median_step_s": median,
        "extra_at_measured_s": [steps[k - 1] - median for k in measured] if mode == "on" else [],
        "amortised_step_s": (done - ends[0]) / (len(ends) - 1),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "cuda_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
        "measurements": _measurements(Path(out_dir) / "geometry.jsonl"),
    }


def _measurements(path: Path) -> list[dict[str, Any]]:
    """Step, status, seconds and whether it held a density, per record."""
    if not path.exists():
        return []
    return [
        {"step": r.step, "status": r.status, "seconds": round(r.seconds, 3),
         "density": r.density is not None}
        for r in read_records(path)
    ]  # fmt: skip


def _spawn(mode: str, argv: list[str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--single", mode, *argv], capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} run failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _table(results: list[dict[str, Any]]) -> str:
    rows = ["| mode | runs | median s/step | amortised s/step | peak RSS MB | CUDA peak MB |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    summary = {}
    for mode in ("off", "on"):
        runs = [r for r in results if r["mode"] == mode]
        med = statistics.median(r["median_step_s"] for r in runs)
        amo = statistics.median(r["amortised_step_s"] for r in runs)
        rss = max(r["peak_rss_mb"] for r in runs)
        gpu = [r["cuda_peak_mb"] for r in runs if r["cuda_peak_mb"] is not None]
        summary[mode] = (med, amo, rss)
        rows.append(f"| {mode} | {len(runs)} | {med:.4f} | {amo:.4f} | {rss:.0f} | "
                    f"{max(gpu) if gpu else '-'} |")  # fmt: skip
    (m0, a0, r0), (m1, a1, r1) = summary["off"], summary["on"]
    rows.append(f"| overhead | | {100 * (m1 / m0 - 1):+.2f}% | {100 * (a1 / a0 - 1):+.2f}% | "
                f"{r1 - r0:+.0f} MB | |")  # fmt: skip
    on_runs = [r for r in results if r["mode"] == "on"]
    extra = [e for r in on_runs for e in r["extra_at_measured_s"]]
    dens = [m["seconds"] for r in on_runs for m in r["measurements"] if m["density"]]
    if extra and dens:
        cost, one_off, step = statistics.median(extra), statistics.median(dens), m0
        rows.append(
            f"\nsteady state, inside the 'on' runs: a measured step takes {cost:.3f} s more than "
            f"the median step ({len(extra)} measured steps); per {EVERY} steps of {step:.4f} s "
            f"('off' median): {100 * cost / (EVERY * step):.2f}%"
        )
        rows.append(f"one-off: the first and the final record (with SLQ density) take "
                    f"{one_off:.3f} s each")  # fmt: skip
        for n in (1_000, 10_000):
            total = 2 * one_off + (n // EVERY - 1) * cost
            rows.append(f"projected for a {n:,}-step run: {100 * total / (n * step):.2f}%")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=201, help="optimiser steps per run")
    parser.add_argument("--repeats", type=int, default=2, help="off/on pairs")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--data", type=Path, default=None, help="digits folder (made if absent)")
    parser.add_argument("--single", choices=("off", "on"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.data is None:
        from solo_geometry.datasets import make_digits

        args.data = make_digits(Path(tempfile.gettempdir()) / "solo-geometry-bench-digits")
    if args.single:
        print(json.dumps(single(args.single, args)))
        return
    argv = [f"--steps={args.steps}", f"--batch-size={args.batch_size}", f"--seed={args.seed}",
            f"--workers={args.workers}", f"--data={args.data}"]  # fmt: skip
    results = []
    for i in range(args.repeats):
        for mode in ("off", "on") if i % 2 == 0 else ("on", "off"):
            results.append(_spawn(mode, argv))
            print(json.dumps(results[-1]), flush=True)
    print(_table(results))


if __name__ == "__main__":
    main()
