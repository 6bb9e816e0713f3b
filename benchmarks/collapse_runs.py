"""Running one benchmark configuration and collecting what the labels and detectors read.

Each configuration runs twice through ``solo-geometry pretrain`` (lightly host): trained for
``epochs``, and the same recipe, seed and head at random initialisation (one epoch of no batch,
``+limit_train_batches=0``), one after the other in one process (:func:`launch_parts`: the
imports are paid once; each run seeds itself, and tests/test_collapse_detection.py checks the
init run's reading against the trained run's before its first step). Both end with the
package's linear probes of Z and H (class target: trained on the training folder, scored on the
validation folder; orbits and report off) and the feature cache of the validation set, from
which :mod:`benchmarks.collapse_labels` reads the geometry. The trained run's records (every
``every`` steps, spectra off: no state reads them) are what the detectors replay. One
``run.json`` per configuration.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from benchmarks.collapse_configs import Config
from benchmarks.collapse_labels import Evidence, geometry_of, label, reference_key, reference_step
from solo_geometry.config import AlertConfig
from solo_geometry.folder.records import read_records, renamed_metrics
from solo_geometry.geometry.metrics import record_stats
from solo_geometry.runtime.alert import CollapseAlert
from solo_geometry.runtime.heldout import spread

__all__ = [
    "HELDOUT_ROWS",
    "collect",
    "launch",
    "launch_parts",
    "read_result",
    "run_config",
    "start_of",
]

ROOT = Path(__file__).resolve().parents[1]
HELDOUT_ROWS = 256  # the held-out batch the records hold (geometry.alert.heldout)
RECIPES = ROOT / "solo_geometry" / "recipes" / "digits"
PROBES = [
    f"geometry.alert.heldout={HELDOUT_ROWS}",  # both batches' statistics: the replays pick
    "geometry.report=false",
    "geometry.measure.hessian=false",
    "geometry.measure.augment=false",
    "geometry.probes.targets=[class]",
    "geometry.probes.probes=[linear]",
    "geometry.probes.orbits.families=[]",
]
KEEP = (
    "normalized_std",
    "rankme_l2",
    "rankme",
    "n_samples",
    "dim",
    "lidar",
    "alpha_req",
    "collapse_level",
)


def _lightly(
    cfg: Config, data: Path, root: Path, epochs: int, every: int, batches: int | None
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "solo_geometry.cli",
        "pretrain",
        "--config",
        str(RECIPES / f"{cfg.recipe}.yaml"),
        "--host",
        "lightly",
        "--runs-root",
        str(root),
        "+geometry=on",
        f"data.train_path={data / 'train'}",
        f"data.val_path={data / 'val'}",
        "data.num_workers=0",
        # the random initialisation: one epoch of no batch (max_epochs=0 is refused as bad input)
        f"max_epochs={max(epochs, 1)}",
        f"geometry.every_n_steps={every}",
        *PROBES,
        *(
            [f"+limit_train_batches={0 if epochs == 0 else batches}"]
            if batches or not epochs
            else []
        ),
        *cfg.overrides,
        *(["scheduler.name=none"] if epochs == 0 else []),  # a schedule divides by the steps
    ]


def _folder(root: Path) -> Path:
    runs = [p for p in root.iterdir() if (p / "probes.json").is_file()]
    if len(runs) != 1:
        raise RuntimeError(f"{root}: expected one finished run folder, found {len(runs)}")
    return runs[0]


def _finished(root: Path) -> bool:
    return root.is_dir() and any((p / "probes.json").is_file() for p in root.iterdir())


def launch(argv: list[str], root: Path, log: Path) -> float:
    """Run ``argv`` in ``root`` (made if missing), output to ``log``; its wall seconds.

    Raises:
        RuntimeError: on a non-zero exit, naming the log.
    """
    root.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.run(argv, cwd=root, env=env, stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}; see {log}")
    return time.perf_counter() - t0


# Runs ``solo-geometry pretrain`` once for each argument list of argv[1] (JSON), in order, each
# with its output in its own log; exits with the first non-zero status.
_PARTS = """
import json, os, sys
from solo_geometry.cli import main
for args, log in json.loads(sys.argv[1]):
    with open(log, "w") as fh:
        sys.stdout.flush(); sys.stderr.flush()
        os.dup2(fh.fileno(), 1); os.dup2(fh.fileno(), 2)
        status = main(args)
        sys.stdout.flush(); sys.stderr.flush()
    if status:
        sys.exit(status)
"""


def launch_parts(parts: list[tuple[list[str], Path]], cwd: Path, log: Path) -> float:
    """Run ``solo-geometry pretrain`` with each ``(args, log)`` of ``parts`` in one process.

    The same runs as :func:`launch` of each (``args`` without the interpreter and
    ``-m solo_geometry.cli``), one after the other, each output to its log; the process's own
    output (an exception before a run, say) to ``log``. Its wall seconds.

    Raises:
        RuntimeError: on a non-zero exit, naming the logs.
    """
    cwd.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    todo = json.dumps([[args, str(part_log)] for args, part_log in parts])
    t0 = time.perf_counter()
    with log.open("w") as fh:
        argv = [sys.executable, "-c", _PARTS, todo]
        proc = subprocess.run(argv, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        logs = ", ".join(str(p) for _, p in parts)
        raise RuntimeError(f"exit {proc.returncode}; see {logs} and {log}")
    return time.perf_counter() - t0


def _probes_and_geometry(folder: Path) -> tuple[dict[str, float], float, dict[str, Any]]:
    table = json.loads((folder / "probes.json").read_text())
    rows = [r for r in table["rows"] if r["probe"] == "linear" and r["target"] == "class"]
    probe = {r["features"]: float(r["accuracy"]) for r in rows}
    cache = _validation(folder)
    geometry = {s: geometry_of(cache[s].double()) for s in ("z", "h")}
    return probe, float(rows[0]["chance"]), geometry


def _validation(folder: Path) -> dict[str, Any]:
    """The run's feature cache of the validation set (``z``, ``h``: sorted files' order)."""
    return torch.load(folder / "features.pt", weights_only=False)["sets"]["test/class"]


def start_of(init: Path, rows: int = HELDOUT_ROWS) -> dict[str, float]:
    """The alert's held-out reference at the start, from the random-initialisation run.

    The network the trained run starts from is the init run's (same recipe, seed and head, no
    step), so its validation features at the held-out batch's rows (``spread``) give what the
    monitor reads before the first step: the same statistics (``record_stats``, part
    ``heldout``) taken by the same :meth:`CollapseAlert.begin`, at the features' precision.
    Runs recorded before the monitor took that reading are replayed with it; the quick
    benchmark's test checks it against the live reading.
    """
    cache = _validation(init)
    picked = spread(len(cache["z"]), rows)
    alert = CollapseAlert(AlertConfig())
    alert.begin(record_stats(cache["z"][picked], cache["h"][picked], part="heldout"))
    return dict(alert.state_dict()["start"])


def _records(folder: Path) -> list[dict[str, Any]]:
    out = []
    for r in read_records(folder):
        if not r.ok:
            continue
        metrics = {k: v for k, v in r.metrics.items() if k.split("/")[-1] in KEEP}
        out.append({"step": r.step, "epoch": r.epoch, "metrics": metrics, "alert": r.alert})
    return out


def collect(
    cfg: Config, trained: Path, init: Path, seconds: float, epochs: int | None = None
) -> dict[str, Any]:
    """The run's ``run.json``: evidence, label, reference time and records.

    Args:
        cfg: the configuration.
        trained: its trained run folder.
        init: its random-initialisation run folder.
        seconds: wall time of both runs.
        epochs: the training epochs (for the table).

    Returns:
        JSON-safe dict.
    """
    probe, chance, val = _probes_and_geometry(trained)
    probe0, _, val0 = _probes_and_geometry(init)
    ev = Evidence(probe, probe0, chance, val, val0)
    name, reasons = label(ev)
    records = _records(trained)
    key = reference_key(ev) if name == "collapsed" else None
    ref = None
    if key is not None:
        series = [(r["step"], r["metrics"].get(key)) for r in records]
        series = [(s, v) for s, v in series if isinstance(v, int | float) and v > 0]
        ref = reference_step([s for s, _ in series], [v for _, v in series])
    return {
        "config": asdict(cfg),
        "epochs": epochs,
        "label": name,
        "reasons": reasons,
        "evidence": {
            "probe": probe,
            "probe_init": probe0,
            "chance": chance,
            "val": {s: asdict(g) for s, g in val.items()},
            "val_init": {s: asdict(g) for s, g in val0.items()},
        },
        "reference": {"key": key, "step": ref},
        "start": start_of(init),
        "records": records,
        "seconds": seconds,
    }


def read_result(path: Path) -> dict[str, Any]:
    """A finished ``run.json``, read as the benchmark scores it.

    One written before records schema 5 has its metrics renamed (RankMe of unit rows was
    ``effective_rank``).
    """
    result = dict(json.loads(path.read_text()))
    records = result.get("records", [])
    for record in records:
        record["metrics"] = renamed_metrics(record.get("metrics", {}))
    first = (records[0].get("alert") or {}) if records else {}
    if records and not first.get("start") and result.get("start"):
        # recorded before the monitor took the held-out reading at the start: the init run's
        records[0]["alert"] = {**first, "start": result["start"]}
    return result


def run_config(
    cfg: Config, data: Path, out: Path, epochs: int, every: int, batches: int | None = None
) -> dict[str, Any]:
    """Run ``cfg`` trained and at random initialisation (reusing a finished ``run.json``).

    Args:
        cfg: the configuration.
        data: the digits folder (``train/``, ``val/``).
        out: the benchmark's folder; the run goes to ``out/<cfg.name>``.
        epochs: training epochs.
        every: steps between records.
        batches: training batches per epoch (None: all).

    Returns:
        The ``run.json`` dict; ``{"config", "label": "failed", "error"}`` on a failed run.
    """
    where = out / cfg.name
    done = where / "run.json"
    if done.is_file():
        return read_result(done)
    try:
        parts = []
        for part, epochs_of in (("train", epochs), ("init", 0)):
            if not _finished(where / part):  # a finished run folder is read again, not rerun
                (where / part).mkdir(parents=True, exist_ok=True)
                argv = _lightly(cfg, data, where / part, epochs_of, every, batches)
                parts.append((argv[3:], where / f"{part}.log"))  # past python -m solo_geometry.cli
        seconds = launch_parts(parts, where, where / "runs.log") if parts else 0.0
        result = collect(cfg, _folder(where / "train"), _folder(where / "init"), seconds, epochs)
    except (RuntimeError, OSError, KeyError, ValueError) as err:
        return {"config": asdict(cfg), "label": "failed", "error": str(err), "records": []}
    done.write_text(json.dumps(result, indent=1))
    return result
