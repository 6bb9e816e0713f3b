"""Overhead of the GeometryMonitor on real solo-learn recipes (solo-learn host), off vs on.

Recipes: solo-learn's own cifar recipes (``scripts/pretrain/cifar/<method>.yaml`` of the
solo-learn checkout, each at its own head widths: SimCLR 2048-256, BYOL 4096-256, VICReg and
Barlow Twins 3-layer 2048-wide, ...) run on the CPU with the overrides a new user would pass:
``data.dataset=custom`` on an image folder (the digits at 32 x 32, CIFAR's size),
``accelerator=cpu "devices=[0]" strategy=auto precision=32 sync_batchnorm=False``, batch 32; and
this project's digits BYOL recipe (``digits/byol``).

Per recipe, geometry off and on at the default settings (``every_n_steps=50``,
``budget=0.02``) are paired in one invocation: fresh processes, same seed, alternating order per
repeat (off, on, then on, off). Per mode:

* the median wall time per training step (time between consecutive batch ends);
* the amortised time per step: the whole fit (first batch end to the end of fit, the final
  measurement included) divided by the number of steps;
* peak memory: the process's peak RSS and, on a GPU, ``torch.cuda.max_memory_allocated``.

Two fresh processes differ by several percent in speed on a shared 2-core machine, more than the
monitor costs, so the table also measures the monitor's cost inside the 'on' runs:

* ``cost/meas``: the extra wall time of a measured step over the run's median step (everything
  the monitor adds at that step: capture, measurement, writing, logging);
* ``steady``: the monitor's cost per unit of training time away from the one-off first and final
  records: the cadence's cost ``cost/meas / (50 x step)`` when that is within the budget, else
  the budget (the monitor spaces measurements to keep it);
* ``run``: the measured overhead of the whole 'on' run: every measured step's extra time (first
  and final included) over the 'off' run's training time (its median step x steps);
* ``1 epoch`` and ``10k steps``: the same, projected for a CIFAR epoch at batch 32 (1,563 steps)
  and a 10,000-step run, from the measured per-measurement costs and the budget's spacing.

Probes (run once after fit) are switched off: they are not a per-step cost.

Usage::

    PYTHONPATH=. python benchmarks/bench_overhead.py                   # 4 cifar recipes + digits
    PYTHONPATH=. python benchmarks/bench_overhead.py --recipes cifar/vicreg --steps 101
    PYTHONPATH=. python benchmarks/bench_overhead.py --quick           # 61 steps, 1 pair
"""

from __future__ import annotations

import argparse
import json
import math
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
EVERY = 50  # the default cadence, GeometryConfig.every_n_steps
BUDGET = 0.02  # the default budget, GeometryConfig.budget
EPOCH = 1563  # CIFAR-10's 50,000 images at batch 32
DEFAULT_RECIPES = ("cifar/simclr", "cifar/byol", "cifar/vicreg", "cifar/barlow", "digits/byol")
CPU = ["accelerator=cpu", "devices=[0]", "strategy=auto", "precision=32", "sync_batchnorm=False"]


def recipe_path(name: str, solo_root: Path | None) -> Path:
    """``cifar/<m>``: solo-learn's own recipe; ``digits/<m>``: this project's."""
    kind, _, method = name.partition("/")
    if kind == "digits":
        return ROOT / "solo_geometry" / "recipes" / "digits" / f"{method}.yaml"
    if kind != "cifar":
        raise SystemExit(f"--recipes: unknown {name!r}; use cifar/<method> or digits/<method>")
    if solo_root is None:
        import solo

        solo_root = Path(solo.__file__).resolve().parents[1]
    path = solo_root / "scripts" / "pretrain" / "cifar" / f"{method}.yaml"
    if not path.is_file():
        raise SystemExit(f"--recipes: {path} not found (solo-learn checkout: --solo-root)")
    return path


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


def overrides(recipe: str, mode: str, args: argparse.Namespace, out_dir: str) -> list[str]:
    """The command-line overrides of one run."""
    data = [f"data.train_path={args.data / 'train'}", "data.val_path=null"]
    if recipe.startswith("cifar/"):
        data += ["data.dataset=custom", "data.format=image_folder", "auto_resume.enabled=False",
                 "wandb.enabled=False", *CPU]  # fmt: skip
    geometry = (["+geometry=off"] if mode == "off" else
                ["+geometry=on", "geometry.probes.enabled=false", f"geometry.out_dir={out_dir}",
                 *args.geometry])  # fmt: skip
    return [*data, f"optimizer.batch_size={args.batch_size}", f"data.num_workers={args.workers}",
            "checkpoint.enabled=False", f"++seed={args.seed}", *geometry]  # fmt: skip


def single(recipe: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One training run in this process; returns its timings and peak memory."""
    import lightning.pytorch as pl
    import torch
    from solo.args.pretrain import parse_cfg
    from solo.methods import METHODS

    from solo_geometry.hosts.solo import install
    from solo_geometry.recipe import load_recipe

    install()
    out_dir = tempfile.mkdtemp(prefix="bench-geometry-")
    path = recipe_path(recipe, args.solo_root)
    cfg = parse_cfg(load_recipe(path, overrides(recipe, mode, args, out_dir)))
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
    records = _measurements(Path(out_dir) / "geometry.jsonl")
    # a record of step k was taken inside batch k (after its backward): its time is in
    # steps[k - 1]; step 0's falls before the first batch end and the final one after the last
    extra = {r["step"]: steps[r["step"] - 1] - median for r in records if 0 < r["step"] < len(ends)}
    return {
        "recipe": recipe,
        "mode": mode,
        "steps": len(ends),
        "median_step_s": median,
        "extra_at_measured_s": extra,
        "amortised_step_s": (done - ends[0]) / (len(ends) - 1),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "cuda_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
        "measurements": records,
    }


def _measurements(path: Path) -> list[dict[str, Any]]:
    """Step, status, seconds, deferral and whether it held a density, per record."""
    if not path.exists():
        return []
    return [
        {"step": r.step, "status": r.status, "seconds": round(r.seconds, 3),
         "density": r.density is not None, "final": r.final,
         "deferred": r.settings.deferred if r.settings is not None else None}
        for r in read_records(path)
    ]  # fmt: skip


def _spawn(recipe: str, mode: str, argv: list[str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--single", recipe, mode, *argv], capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{recipe} {mode} run failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def projected(n: int, step: float, cost: float, one_off: float, budget: float | None) -> float:
    """Overhead of an ``n``-step run, projected from measured costs by the monitor's own rule.

    The first record (``one_off`` s, with its density) runs at step 0; a measurement due every
    ``EVERY`` steps (``cost`` s) runs once the time spent plus its cost plus the final record's
    (``one_off``) is within ``budget`` of the training time so far; the final record runs at
    the end.
    """
    spent = one_off
    for due in range(EVERY, n, EVERY):
        if budget is None or spent + cost + one_off <= budget * due * step:
            spent += cost
    return (spent + one_off) / (n * step)


def summarise(recipe: str, results: list[dict[str, Any]], budget: float | None) -> dict[str, Any]:
    """One row of the table from the off/on runs of one recipe."""
    off = [r for r in results if r["mode"] == "off"]
    on = [r for r in results if r["mode"] == "on"]
    step = statistics.median(r["median_step_s"] for r in off)
    amo_off = statistics.median(r["amortised_step_s"] for r in off)
    amo_on = statistics.median(r["amortised_step_s"] for r in on)
    extras = [e for r in on for e in r["extra_at_measured_s"].values()]
    records = [m for r in on for m in r["measurements"]]
    plain = [m["seconds"] for m in records if not m["density"]]
    dens = [m["seconds"] for m in records if m["density"]]
    # a mid-run measurement's wall cost: in-step extra time where one was taken mid-run, else
    # its own recorded seconds (the extra time includes capture, writing and logging too)
    cost = statistics.median(extras) if extras else statistics.median(plain or dens)
    one_off = statistics.median(dens) if dens else cost
    # the whole 'on' run: in-step extra time of every mid-run record plus the step-0 and final
    # records' own seconds (outside any timed step), over the 'off' run's training time
    spent = statistics.median(
        sum(r["extra_at_measured_s"].values())
        + sum(m["seconds"] for m in r["measurements"] if str(m["step"]) not in
              r["extra_at_measured_s"] or m["final"])
        for r in on
    )  # fmt: skip
    steps = statistics.median(r["steps"] for r in on)
    return {
        "recipe": recipe,
        "off_step_s": step,
        "wall": amo_on / amo_off - 1,
        "cost_s": cost,
        "one_off_s": one_off,
        "records": statistics.median(len(r["measurements"]) for r in on),
        "steady": min(cost / (EVERY * step), budget if budget is not None else math.inf),
        "run": spent / (steps * step),
        "epoch": projected(EPOCH, step, cost, one_off, budget),
        "10k": projected(10_000, step, cost, one_off, budget),
        "rss_mb": max(r["peak_rss_mb"] for r in on) - max(r["peak_rss_mb"] for r in off),
    }


def table(rows: list[dict[str, Any]], steps: int) -> str:
    head = (f"| recipe | off s/step | cost/meas s | first/final s | records in {steps} steps | "
            "steady | run | 1 epoch | 10k steps | wall (2 processes) | RSS MB |")  # fmt: skip
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        lines.append(
            f"| {r['recipe']} | {r['off_step_s']:.3f} | {r['cost_s']:.3f} | {r['one_off_s']:.3f} | "
            f"{r['records']:g} | {100 * r['steady']:.2f}% | {100 * r['run']:.2f}% | "
            f"{100 * r['epoch']:.2f}% | {100 * r['10k']:.2f}% | {100 * r['wall']:+.2f}% | "
            f"{r['rss_mb']:+.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=list(DEFAULT_RECIPES))
    parser.add_argument("--steps", type=int, default=201, help="optimiser steps per run")
    parser.add_argument("--repeats", type=int, default=1, help="off/on pairs per recipe")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--data", type=Path, default=None, help="digits folder (made if absent)")
    parser.add_argument("--solo-root", type=Path, default=None, help="solo-learn checkout")
    parser.add_argument("--quick", action="store_true", help="61 steps, one pair")
    parser.add_argument("--geometry", nargs="*", default=[],
                        help="extra geometry overrides for the 'on' runs")  # fmt: skip
    parser.add_argument("--single", nargs=2, metavar=("RECIPE", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats = 61, 1
    if args.data is None:
        from solo_geometry.datasets import make_digits

        args.data = make_digits(Path(tempfile.gettempdir()) / "solo-geometry-bench-digits")
    if args.single:
        print(json.dumps(single(*args.single, args)))
        return
    for recipe in args.recipes:  # fail fast on a bad name
        recipe_path(recipe, args.solo_root)
    argv = [f"--steps={args.steps}", f"--batch-size={args.batch_size}", f"--seed={args.seed}",
            f"--workers={args.workers}", f"--data={args.data}",
            *([f"--solo-root={args.solo_root}"] if args.solo_root else []),
            *(["--geometry", *args.geometry] if args.geometry else [])]  # fmt: skip
    budget = BUDGET
    for g in args.geometry:
        if g.startswith("geometry.budget="):
            value = g.split("=", 1)[1]
            budget = None if value in ("null", "None") else float(value)
    rows = []
    for recipe in args.recipes:
        results = []
        for i in range(args.repeats):
            for mode in ("off", "on") if i % 2 == 0 else ("on", "off"):
                t0 = time.perf_counter()
                results.append(_spawn(recipe, mode, argv))
                print(f"{recipe} {mode}: {time.perf_counter() - t0:.0f} s, "
                      f"{json.dumps(results[-1])}", flush=True)  # fmt: skip
        rows.append(summarise(recipe, results, budget))
        print(table(rows, args.steps), flush=True)
    print(f"\nbatch {args.batch_size}, {args.steps} steps, every {EVERY} steps, budget {budget}")


if __name__ == "__main__":
    main()
