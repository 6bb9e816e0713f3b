"""Overhead of the GeometryMonitor on real solo-learn recipes (solo-learn host), off vs on.

Recipes: solo-learn's own cifar recipes (``scripts/pretrain/cifar/<method>.yaml`` of the
solo-learn checkout, each at its own head widths: SimCLR 2048-256, BYOL 4096-256, VICReg and
Barlow Twins 3-layer 2048-wide, ...) run on the CPU with the overrides a new user would pass:
``data.dataset=custom`` on an image folder (the digits at 32 x 32, CIFAR's size),
``accelerator=cpu "devices=[0]" strategy=auto precision=32 sync_batchnorm=False``, batch 32; and
this project's digits BYOL recipe (``digits/byol``). MoCo v2+ (a queue method) and DINO (a
centre and a teacher) are in the default set too.

Per recipe, three runs are paired in one invocation: fresh processes, same seed, same batches,
same steps, alternating order per repeat (off, on, default, then reversed). The 'on' runs
measure at a short cadence (``--every``, default 10) with the budget off, so a short run holds
several mid-run measurements; their cost is what the default settings pay per measurement. The
'default' runs measure at the default budget and the cadence ``--default-every`` (default 50,
the default cadence): they give the records taken against the records due and the overhead
measured against the 'off' run over the same steps. Every training step is timed in wall and in
CPU time of the process (``time.process_time``).

On a shared machine the speed of a step changes by a factor of several over minutes, in both
processes, so costs are taken locally: a measured step's CPU time minus the median of the
unmeasured steps around it (within 3 steps of the same run), in units of that median, i.e. in
training steps. The first record (step 0, with the SLQ density) and the final one (after the last
step, with the density) are costed the same way.

The table gives, per recipe:

* ``step``: the median CPU time of an unmeasured step, 'on' run (and 'off' run);
* ``first``, ``mid``, ``final``: the measurements' costs, in training steps;
* ``cadence 50``: the overhead if every measurement at the default cadence ran, ``mid / 50``;
* ``epoch``, ``10k steps``: the overhead at the default settings (``every_n_steps=50``,
  ``budget=0.02``) of a CIFAR-10 epoch at batch 32 (1,563 steps) and of a 10,000-step run,
  computed from these costs by the monitor's own budget rule (:func:`projected`);
* ``run``: the whole 'on' run's CPU time over the 'off' run's, at the bench's cadence (noisy);
* ``epoch taken/due``: spectral records taken and records due over that CIFAR epoch, by the
  same rule (the statistics are taken at every due step);
* ``taken/due``: the 'default' run's records holding the spectra over the steps due on its
  cadence (the final record included); ``stats``: its records holding the statistics;
* ``measured``: the whole 'default' run's CPU time over the 'off' run's, minus 1;
* peak RSS, the 'on' run's over the 'off' run's.

Probes and the report (each run once after fit) are switched off: they are not a per-step cost.

Usage::

    PYTHONPATH=. python benchmarks/bench_overhead.py                   # 6 cifar recipes + digits
    PYTHONPATH=. python benchmarks/bench_overhead.py --recipes cifar/vicreg --steps 31
    PYTHONPATH=. python benchmarks/bench_overhead.py --quick           # 11 steps, every 5
    PYTHONPATH=. python benchmarks/bench_overhead.py --json ...        # one JSON row per recipe
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

from budget_model import BUDGET, EVERY, projected, projected_taken

from solo_geometry.folder.records import read_records

ROOT = Path(__file__).resolve().parents[1]
EPOCH = 1563  # CIFAR-10's 50,000 images at batch 32
DEFAULT_RECIPES = (
    "cifar/simclr",
    "cifar/byol",
    "cifar/vicreg",
    "cifar/barlow",
    "cifar/mocov2plus",
    "cifar/dino",
    "digits/byol",
)
MODES = ("off", "on", "default")  # geometry off; every --every steps, no budget; the defaults
CPU = ["devices=[0]", "strategy=auto", "sync_batchnorm=False"]  # + accelerator and precision
DEVICES = ("auto", "cpu", "gpu")  # --device: auto is the GPU where CUDA is available


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
        data += [
            "data.dataset=custom",
            "data.format=image_folder",
            "auto_resume.enabled=False",
            "wandb.enabled=False",
            *CPU,
            f"accelerator={accelerator(args)}",
            f"precision={args.precision}",
        ]
    cadence = {
        "on": [f"geometry.every_n_steps={args.every}", "geometry.budget=null"],
        "default": [f"geometry.every_n_steps={args.default_every}"],
    }  # budget: default
    geometry = (
        ["+geometry=off"]
        if mode == "off"
        else [
            "+geometry=on",
            "geometry.probes.enabled=false",
            "geometry.report=false",
            f"geometry.out_dir={out_dir}",
            *cadence[mode],
            *args.geometry,
        ]
    )
    return [
        *data,
        f"optimizer.batch_size={args.batch_size}",
        f"data.num_workers={args.workers}",
        "checkpoint.enabled=False",
        f"++seed={args.seed}",
        *geometry,
    ]


def accelerator(args: argparse.Namespace) -> str:
    """``gpu`` or ``cpu``: ``--device``, where ``auto`` is the GPU when CUDA is available."""
    import torch

    device = getattr(args, "device", "auto")
    return ("gpu" if torch.cuda.is_available() else "cpu") if device == "auto" else device


def single(recipe: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One training run in this process; returns its step times and peak memory."""
    import lightning.pytorch as pl
    import torch
    from solo.args.pretrain import parse_cfg
    from solo.methods import METHODS

    from solo_geometry.hosts.solo import install
    from solo_geometry.recipe import load_recipe

    install()
    scratch = tempfile.TemporaryDirectory(prefix="bench-geometry-")  # gone once read, or at exit
    out_dir = scratch.name
    path = recipe_path(recipe, args.solo_root)
    cfg = parse_cfg(load_recipe(path, overrides(recipe, mode, args, out_dir)))
    pl.seed_everything(cfg.seed, verbose=False)
    model = METHODS[cfg.method](cfg)
    marks: list[tuple[float, float]] = []  # (wall, cpu) at the start and after every batch
    cuda = accelerator(args) == "gpu"

    def mark() -> None:
        if cuda:
            torch.cuda.synchronize()  # a step's kernels end inside its own interval
        marks.append((time.perf_counter(), time.process_time()))

    class Timer(pl.Callback):
        def on_train_start(self, *_: Any) -> None:
            mark()

        def on_train_batch_end(self, *_: Any) -> None:
            mark()

    trainer = pl.Trainer(
        max_steps=args.steps,
        accelerator="gpu" if cuda else "cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Timer()],
        precision=args.precision,
    )
    trainer.fit(model, _loader(cfg))
    mark()  # the end of fit: the interval after the last step holds the final record
    measurements = _measurements(Path(out_dir) / "geometry.jsonl")
    scratch.cleanup()
    return {
        "recipe": recipe,
        "mode": mode,
        # interval k < steps: batch k (with the record of step k, if any); the last: the end
        "wall": [b[0] - a[0] for a, b in zip(marks[:-1], marks[1:], strict=True)],
        "cpu": [b[1] - a[1] for a, b in zip(marks[:-1], marks[1:], strict=True)],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "cuda_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
        "measurements": measurements,
    }


def _measurements(path: Path) -> list[dict[str, Any]]:
    """Step, status, seconds, deferral and whether it held a density, per record."""
    if not path.exists():
        return []
    return [
        {
            "step": r.step,
            "status": r.status,
            "seconds": round(r.seconds, 3),
            "density": r.density is not None,
            "final": r.final,
            "parts": r.parts,
            "deferred": r.settings.deferred if r.settings is not None else None,
        }
        for r in read_records(path)
    ]


def _spawn(recipe: str, mode: str, argv: list[str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--single", recipe, mode, *argv],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{recipe} {mode} run failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _local_costs(on: dict[str, Any]) -> tuple[list[float], list[float], list[float], float]:
    """Costs of the 'on' run's records in units of its own neighbouring training steps.

    A measured step's CPU time minus the median of the unmeasured steps within 3 of it, over
    that median: the load of a shared machine changes over minutes, not over a few steps. The
    first record's baseline is the run's first unmeasured steps; the final one (after the last
    step) is all measurement.
    """
    cpu, measured = on["cpu"], {m["step"] for m in on["measurements"] if not m["final"]}
    plain = [j for j in range(1, len(cpu) - 1) if j not in measured]

    def base(k: int) -> float:
        near = sorted(plain, key=lambda j: (abs(j - k), j))[:4]
        return statistics.median(cpu[j] for j in near)

    last = len(cpu) - 2
    mid = [(cpu[k] - base(k)) / base(k) for k in sorted(measured - {0})]
    return [(cpu[0] - base(0)) / base(0)], mid, [cpu[-1] / base(last)], base(last)


def taken_and_due(run: dict[str, Any], every: int) -> tuple[int, int, int]:
    """Records with the spectra, steps due (the final one too), records with the statistics.

    ``run``'s ``cpu`` holds one interval per step and one for the end of fit.
    """
    steps = len(run["cpu"]) - 1
    due = len(range(0, steps, every)) + 1  # the final record is due too
    ms = [m for m in run["measurements"] if m["status"] == "ok"]
    return (sum("hessian" in m["parts"] for m in ms), due, sum("stats" in m["parts"] for m in ms))


def summarise(recipe: str, results: list[dict[str, Any]], every: int = EVERY) -> dict[str, Any]:
    """One row of the table from the paired off/on(/default) runs of one recipe (costs in steps).

    ``every``: the 'default' runs' cadence.
    """
    on_runs = [r for r in results if r["mode"] == "on"]
    off_runs = [r for r in results if r["mode"] == "off"]
    default_runs = [r for r in results if r["mode"] == "default"]
    first: list[float] = []
    mid: list[float] = []
    final: list[float] = []
    steps: list[float] = []
    for on in on_runs:
        f, m, z, step = _local_costs(on)
        first, mid, final, steps = first + f, mid + m, final + z, [*steps, step]
    cost, costs = statistics.median(mid), (statistics.median(first), statistics.median(final))
    off_step = statistics.median(statistics.median(r["cpu"][1:-1]) for r in off_runs)
    return {
        "recipe": recipe,
        "step_cpu": statistics.median(steps),
        "off_step_cpu": off_step,
        "first": costs[0],
        "mid": cost,
        "final": costs[1],
        "cadence": cost / EVERY,
        "epoch": projected(EPOCH, 1.0, cost, *costs, BUDGET),
        "10k": projected(10_000, 1.0, cost, *costs, BUDGET),
        "epoch_taken_due": projected_taken(EPOCH, 1.0, cost, *costs, BUDGET),
        "run": statistics.median(sum(on["cpu"]) for on in on_runs)
        / statistics.median(sum(off["cpu"]) for off in off_runs)
        - 1,
        "rss_mb": max(r["peak_rss_mb"] for r in on_runs) - max(r["peak_rss_mb"] for r in off_runs),
        **_default_columns(default_runs, off_runs, every),
    }


def _default_columns(
    runs: list[dict[str, Any]], off_runs: list[dict[str, Any]], every: int
) -> dict[str, Any]:
    """``taken``, ``due``, ``stats`` and ``measured`` of the 'default' runs (None without)."""
    if not runs:
        return {"taken": None, "due": None, "stats": None, "measured": None}
    counts = [taken_and_due(r, every) for r in runs]
    off = statistics.median(sum(r["cpu"]) for r in off_runs)
    return {
        "taken": min(c[0] for c in counts),
        "due": counts[0][1],
        "stats": min(c[2] for c in counts),
        "measured": statistics.median(sum(r["cpu"]) for r in runs) / off - 1,
    }


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of the summarised rows."""
    lines = [
        "| recipe | step CPU s: on (off) | first | mid | final | cadence 50 | epoch | "
        "10k steps | epoch taken/due | run | RSS MB | taken/due (stats) | measured |",
        "|" + "---|" * 13,
    ]
    for r in rows:
        counts = "-" if r.get("due") is None else f"{r['taken']}/{r['due']} ({r['stats']})"
        measured = "-" if r.get("measured") is None else f"{100 * r['measured']:+.1f}%"
        lines.append(
            f"| {r['recipe']} | {r['step_cpu']:.2f} ({r['off_step_cpu']:.2f}) | "
            f"{r['first']:.1f} | {r['mid']:.1f} | {r['final']:.1f} | "
            f"{100 * r['cadence']:.1f}% | {100 * r['epoch']:.2f}% | {100 * r['10k']:.2f}% | "
            f"{'/'.join(map(str, r['epoch_taken_due']))} | "
            f"{100 * r['run']:+.0f}% | {r['rss_mb']:+.0f} | {counts} | {measured} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=list(DEFAULT_RECIPES))
    parser.add_argument("--steps", type=int, default=31, help="optimiser steps per run")
    parser.add_argument("--repeats", type=int, default=1, help="off/on pairs per recipe")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--data", type=Path, default=None, help="digits folder (made if absent)")
    parser.add_argument("--solo-root", type=Path, default=None, help="solo-learn checkout")
    parser.add_argument("--every", type=int, default=10, help="the 'on' runs' cadence")
    parser.add_argument(
        "--default-every",
        type=int,
        default=EVERY,
        help="the 'default' runs' cadence (their budget is the default)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per recipe (first, mid, final in training "
        "steps, taken, due, ...) instead of the table",
    )
    parser.add_argument("--quick", action="store_true", help="11 steps, every 5, one pair")
    parser.add_argument(
        "--geometry", nargs="*", default=[], help="extra geometry overrides for the 'on' runs"
    )
    parser.add_argument("--device", choices=DEVICES, default="auto")
    parser.add_argument("--precision", default="32", help="the Trainer's precision, e.g. 16-mixed")
    parser.add_argument("--single", nargs=2, metavar=("RECIPE", "MODE"), help=argparse.SUPPRESS)
    parser.add_argument("--from-log", type=Path, help="re-summarise the runs printed in a log")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.every, args.repeats = 11, 5, 1
    if args.data is None:
        from solo_geometry.inputs.digits import make_digits

        args.data = make_digits(Path(tempfile.gettempdir()) / "solo-geometry-bench-digits")
    if args.single:
        recipe, mode = args.single
        print(json.dumps(single(recipe, mode, args)))
        return
    if args.from_log:
        lines = args.from_log.read_text().splitlines()
        runs = [
            json.loads(line[line.index("{") :])
            for line in lines
            if line.startswith(("cifar/", "digits/")) and " s, {" in line
        ]
        names = [
            n
            for n in dict.fromkeys(r["recipe"] for r in runs)  # recipes with both modes
            if {r["mode"] for r in runs if r["recipe"] == n} >= {"off", "on"}
        ]
        rows = [
            summarise(n, [r for r in runs if r["recipe"] == n], args.default_every) for n in names
        ]
        print("\n".join(json.dumps(r) for r in rows) if args.json else table(rows))
        return
    for recipe in args.recipes:  # fail fast on a bad name
        recipe_path(recipe, args.solo_root)
    argv = [
        f"--steps={args.steps}",
        f"--every={args.every}",
        f"--batch-size={args.batch_size}",
        f"--default-every={args.default_every}",
        f"--seed={args.seed}",
        f"--workers={args.workers}",
        f"--data={args.data}",
        f"--device={args.device}",
        f"--precision={args.precision}",
        *([f"--solo-root={args.solo_root}"] if args.solo_root else []),
        *(["--geometry", *args.geometry] if args.geometry else []),
    ]
    rows = []
    log = sys.stderr if args.json else sys.stdout  # --json: stdout holds the JSON rows only
    for recipe in args.recipes:
        results = []
        for i in range(args.repeats):
            for mode in MODES if i % 2 == 0 else MODES[::-1]:
                t0 = time.perf_counter()
                results.append(_spawn(recipe, mode, argv))
                print(
                    f"{recipe} {mode}: {time.perf_counter() - t0:.0f} s, {json.dumps(results[-1])}",
                    flush=True,
                    file=log,
                )
        rows.append(summarise(recipe, results, args.default_every))
        print(json.dumps(rows[-1]) if args.json else table(rows), flush=True)
    print(
        f"\nbatch {args.batch_size}, {args.steps} steps, 'on' runs measured every {args.every} "
        f"steps, 'default' runs every {args.default_every} under the default budget; "
        f"projections at every {EVERY} steps, budget {BUDGET}; costs in CPU seconds",
        file=log,
    )


if __name__ == "__main__":
    main()
