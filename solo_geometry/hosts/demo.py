"""The demo (``solo-geometry demo``, ``make demo``): the main job end to end on the digits.

Four stages, each announced as it starts:

1. write the digits data set (real 8x8 scans as 32x32 PNGs, image_folder layout);
2. pretrain BYOL from ``zoo/recipes/digits/byol.yaml`` with a smooth head
   (``geometry.head.name=smooth_mlp``, swish) and geometry on, on the solo-learn host when it is
   importable and the lightly host otherwise (Lightning's progress bar shows training);
3. the probes and the report, written by the run itself at the end of fit;
4. a findings table read back from the run's own files: lambda_min of M and the interaction
   ratio ||M|| / ||H_eff|| at the first and last measurement, orbit compression per
   augmentation family, and the probe table (backbone Z vs head H, each beside the same
   network at random initialisation, saying which fits training left below it). The numbers
   are printed as measured.

The full form finishes in under 10 minutes on 2 cores; ``--quick`` (or
``SOLO_GEOMETRY_DEMO_QUICK=1``) cuts epochs, batches and measurement sizes for CI.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from solo_geometry.folder.probe_table import ProbeTable, random_init_summary
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.hosts.pretrain import pretrain
from solo_geometry.inputs.digits import make_digits
from solo_geometry.runtime.alert import STATES as ALERT_STATES

__all__ = [
    "FULL",
    "QUICK",
    "QUICK_ENV",
    "DemoSettings",
    "demo_overrides",
    "findings",
    "format_findings",
    "run_demo",
]

QUICK_ENV = "SOLO_GEOMETRY_DEMO_QUICK"
# Package data (``solo_geometry/recipes``, also ``zoo/recipes`` in the source tree), so the demo
# runs from a regular install outside the source tree.
RECIPE = Path(str(files("solo_geometry") / "recipes" / "digits" / "byol.yaml"))


@dataclass(frozen=True)
class DemoSettings:
    """Sizes of one demo run (the rest comes from the recipe)."""

    max_epochs: int
    limit_train_batches: int
    batch_size: int
    every_n_steps: int  # geometry measurement cadence in optimiser steps
    max_samples: int  # samples per measurement (operator dim = 2 * max_samples * 512)
    lanczos_max_steps: int
    augment_samples: int
    num_workers: int
    budget: float | None = 0.02  # geometry.budget; None: every due measurement and the final one
    # The end-of-fit probes: which (geometry.probes.probes) and images per orbit family.
    probes: tuple[str, ...] = ("linear", "mlp")
    orbit_images: int = 32
    # Batches of solo-learn's online-classifier validation per epoch; None: the whole val split.
    limit_val_batches: int | None = None


# 6 epochs of 45 BYOL steps of 32 images (the whole train split each epoch), a measurement
# every 30 steps, each of them whole: the demo runs without the time budget, so that its report
# shows the spectra's curves (with the 2% budget of a training run, a run this short measures
# spectra at its first and last step only). `make demo` on an idle 2-core machine: see
# docs/getting-started.md (well under 10 minutes).
FULL = DemoSettings(
    max_epochs=6,
    limit_train_batches=45,
    batch_size=32,
    every_n_steps=30,
    max_samples=32,
    lanczos_max_steps=200,
    augment_samples=16,
    num_workers=2,
    budget=None,
)
# CI: 2 steps of 16 images, a measurement at every step.
QUICK = DemoSettings(
    max_epochs=1,
    limit_train_batches=2,
    batch_size=16,
    every_n_steps=1,
    max_samples=8,
    lanczos_max_steps=60,
    augment_samples=4,
    num_workers=0,
    budget=None,  # the tiny run is shorter than one measurement: measure every step regardless
    probes=("linear",),  # the MLP probe trains to convergence: the full form's
    orbit_images=8,
    limit_val_batches=2,  # the whole split's 23 batches were half the quick form's time
)


def demo_overrides(data_dir: Path, settings: DemoSettings) -> list[str]:
    """Hydra overrides turning the digits BYOL recipe into the demo run."""
    s = settings
    return [
        f"data.train_path={(data_dir / 'train').resolve()}",
        f"data.val_path={(data_dir / 'val').resolve()}",
        f"data.num_workers={s.num_workers}",
        f"max_epochs={s.max_epochs}",
        f"++limit_train_batches={s.limit_train_batches}",
        *([] if s.limit_val_batches is None else [f"++limit_val_batches={s.limit_val_batches}"]),
        f"optimizer.batch_size={s.batch_size}",
        "+geometry=on",
        "geometry.head.name=smooth_mlp",
        "geometry.head.activation=swish",
        f"geometry.every_n_steps={s.every_n_steps}",
        f"geometry.spectrum.max_samples={s.max_samples}",
        f"geometry.spectrum.max_steps={s.lanczos_max_steps}",
        f"geometry.measure.augment_samples={s.augment_samples}",
        f"geometry.budget={'null' if s.budget is None else s.budget}",
        f"geometry.probes.probes=[{','.join(s.probes)}]",
        f"geometry.probes.orbits.images={s.orbit_images}",
    ]


def _stage(i: int, text: str) -> float:
    print(f"\n[demo {i}/4] {text}", flush=True)
    return time.perf_counter()


def run_demo(
    out_dir: str | Path = Path("runs") / "demo",
    *,
    quick: bool | None = None,
    host: str = "auto",
    recipe: str | Path | None = None,
) -> dict[str, Any]:
    """Run the demo and print its findings.

    Args:
        out_dir: folder for the data (``data/digits``) and the run folders.
        quick: reduced form; None: from ``$SOLO_GEOMETRY_DEMO_QUICK``.
        host: ``auto``, ``solo`` or ``lightly``.
        recipe: the BYOL recipe (default: ``zoo/recipes/digits/byol.yaml``).

    Returns:
        The findings (see :func:`findings`), with ``host``, ``run`` and ``seconds``.

    Raises:
        FileNotFoundError: if the recipe is missing.
        ValueError: on an unknown host.
    """
    if quick is None:
        quick = os.environ.get(QUICK_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    settings = QUICK if quick else FULL
    recipe_path = Path(recipe) if recipe is not None else RECIPE
    if not recipe_path.is_file():
        raise FileNotFoundError(f"demo recipe {str(recipe_path)!r} not found")
    out = Path(out_dir)
    start = _stage(1, f"writing the digits data to {out / 'data' / 'digits'}")
    data_dir = make_digits(out / "data" / "digits", size=32)
    _stage(
        2,
        f"pretraining BYOL with a smooth (swish) head, geometry on "
        f"({'quick' if quick else 'full'} form: {settings.max_epochs} epoch(s) x "
        f"{settings.limit_train_batches} batches of {settings.batch_size}; every "
        f"{settings.every_n_steps} step(s) a whole measurement: no time budget, so that the "
        f"report shows curves, where a training run keeps geometry.budget=0.02)",
    )
    used, run = pretrain(
        recipe_path, demo_overrides(data_dir, settings), host=host, runs_root=out / "runs"
    )
    _stage(3, "probes and report (written by the run at the end of fit)")
    _list_outputs(run)
    _stage(4, "findings, read back from the run's files")
    result = findings(run)
    result.update(host=used, run=str(run), seconds=time.perf_counter() - start)
    print(format_findings(result), flush=True)
    return result


def _list_outputs(run: Path) -> None:
    folder = RunFolder(run)
    for path in (folder.geometry, folder.probes, folder.report / "index.html"):
        print(f"  {'ok     ' if path.exists() else 'MISSING'} {path}")


def findings(run: str | Path) -> dict[str, Any]:
    """Read the headline numbers of a run folder.

    Args:
        run: the run folder.

    Returns:
        ``{"geometry": [first, last] spectral records' step, m/lambda_min, interaction_ratio
        (one entry when a single record holds the spectra),
        "n_records", "orbits": {family: (mean, std)}, "probes": [(target, probe, z, h,
        z_random_init, h_random_init)] (the same network at random initialisation; None where
        not measured), "random_init": the sentence naming the fits below it,
        "alert": {"last", "worst", "diagnosis"} (None where no record holds an alert)}``;
        missing files give empty entries.
    """
    folder = RunFolder(Path(run))
    records = folder.records(ok_only=True)
    spectral = [r for r in records if r.holds("hessian")]  # the statistics' records have none
    picked = spectral[:1] + spectral[1:][-1:]  # first and last, once each (one if only one)
    geometry = [
        {
            "step": r.step,
            "m/lambda_min": r.value("m/lambda_min"),
            "interaction_ratio": r.value("interaction_ratio"),
        }
        for r in picked
    ]
    table = folder.read_probes()
    orbits = {
        o.family: (o.compression, *o.compression_per_orbit)
        for o in sorted(table.orbits if table else [], key=lambda o: o.family)
    }
    pairs = sorted({(r.target, r.probe) for r in table.rows}) if table else []
    rows = [_probe_row(table, t, p) for t, p in pairs if table is not None]
    states = [r.alert["state"] for r in records if r.alert]
    worst = max(states, key=ALERT_STATES.index) if states else None
    last = next((r.alert for r in reversed(records) if r.alert), None)
    alert = {
        "last": last["state"] if last else None,
        "worst": worst,
        "diagnosis": last.get("diagnosis") if last else None,
    }
    return {
        "geometry": geometry,
        "n_records": len(records),
        "orbits": orbits,
        "probes": rows,
        "random_init": random_init_summary(table) if table else None,
        "alert": alert,
    }


def _probe_row(table: ProbeTable, target: str, probe: str) -> tuple[Any, ...]:
    """``(target, probe, z, h, z_random_init, h_random_init)``, None where not measured."""
    z, h = (table.row(f, probe, target) for f in ("z", "h"))
    return (
        target,
        probe,
        *(None if r is None else r.accuracy for r in (z, h)),
        *(None if r is None else r.random_init for r in (z, h)),
    )


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _num(x: Any, fmt: str = "{:+.3e}") -> str:
    return "n/a" if x is None else fmt.format(float(x))


def format_findings(result: dict[str, Any]) -> str:
    """The findings table as text (what ``make demo`` prints)."""
    lines = [f"run folder: {result.get('run')}", f"host used:  {result.get('host')}"]
    if "seconds" in result:
        lines.append(f"wall time:  {result['seconds']:.0f} s")
    geo = result["geometry"]
    span = "first -> last" if len(geo) > 1 else "the one record with spectra"
    lines.append(f"\ngeometry.jsonl ({result['n_records']} ok measurements): {span}")
    if geo:
        lines.append(f"  {'':24s}" + "".join(f"{'step ' + str(g['step']):>14s}" for g in geo))
        for key, label in (
            ("m/lambda_min", "lambda_min(M)"),
            ("interaction_ratio", "||M|| / ||H_eff||"),
        ):
            lines.append(f"  {label:24s}" + "".join(f"{_num(g[key]):>14s}" for g in geo))
    else:
        lines.append("  (no successful measurement)")
    alert = result.get("alert") or {}
    if alert.get("last"):
        lines.append(
            f"  {'collapse alert':24s}{alert['last']:>14s}   (worst over the run: {alert['worst']})"
        )
        if alert.get("diagnosis"):
            lines.append(f"  {'':24s}{alert['diagnosis']}")
    lines.append(
        "\norbit compression (probes.json): mean spread(Z) / mean spread(H) "
        "[per-orbit ratio, mean +- std]"
    )
    for family, (ratio, mean, std) in result["orbits"].items():
        lines.append(f"  {family:24s}{ratio:10.3f}    [{mean:.3f} +- {std:.3f}]")
    if not result["orbits"]:
        lines.append("  (none)")
    lines.append(
        "\nprobe accuracy (probes.json): backbone Z vs head H; rand: the same network at random"
        "\ninitialisation, probed the same way (n/a: not measured)"
    )
    lines.append(
        f"  {'target':12s}{'probe':8s}"
        + "".join(f"{h:>9s}" for h in ("Z", "rand", "Z - rand", "H", "rand", "H - rand", "Z - H"))
    )
    for target, probe, z, h, z_rand, h_rand in result["probes"]:
        cells = [(z, "{:.3f}"), (z_rand, "{:.3f}"), (_minus(z, z_rand), "{:+.3f}")]
        cells += [(h, "{:.3f}"), (h_rand, "{:.3f}"), (_minus(h, h_rand), "{:+.3f}")]
        cells += [(_minus(z, h), "{:+.3f}")]
        lines.append(
            f"  {target:12s}{probe:8s}" + "".join(f"{_num(x, fmt):>9s}" for x, fmt in cells)
        )
    if result.get("random_init"):
        lines.append(f"  {result['random_init']}")
    if not result["probes"]:
        lines.append("  (none)")
    return "\n".join(lines)
