"""No false alarm: solo-learn's own cifar recipes run long enough for the collapse alert to act.

Each method of ``solo_geometry.hosts.solo.SUPPORTED`` runs solo-learn's unmodified
``main_pretrain.py`` on its unmodified ``scripts/pretrain/cifar/<method>.yaml`` with
``+geometry=on`` on the embedded digits (1,438 training images at 32 px as an image folder),
for ``--epochs`` epochs at batch ``--batch``, a record every ``--every`` steps. The alert is at
its defaults (``geometry.alert``); it reads only the records' representation statistics, so the
spectra, probes and report are switched off to keep the runs short (they do not change a state).
What a CPU needs besides: no workers, wandb, checkpoints; DeepClusterV2 fewer prototypes than
images and at least two epochs (it has no loss before epoch 1, so its first epoch's
records are skipped).

Usage::

    PYTHONPATH=. python benchmarks/false_alarm.py --solo-root /work/solo-learn --out /tmp/fa

prints one row per method: records, the states its alert entered, RankMe of H over min(M, d)
and the normalised std of H over its ceiling at the last record, and its minimum over the run.
A finished method's folder is reused when the script is run again (delete ``--out`` to redo).

``--label`` labels each run as benchmarks/collapse_detection.py does (collapse_labels.py): the
probes of Z and H on the digits' validation set are switched on, the same recipe runs again at
random initialisation (one epoch of no batch, ``++limit_train_batches=0``, no schedule) into
``<method>/init``, and a ``<method>/run.json`` holds the label, its evidence and the records, which
``collapse_detection.py --from-runs`` scores with the other runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.collapse_configs import Config
from benchmarks.collapse_runs import PROBES, collect
from solo_geometry.folder.records import read_records
from solo_geometry.hosts.solo import SUPPORTED
from solo_geometry.inputs.digits import make_digits
from solo_geometry.runtime.alert import ratios

RECIPE = {name: "barlow" if name == "barlow_twins" else name for name in SUPPORTED}
NEEDS = {"deepclusterv2": ["method_kwargs.num_prototypes=[100,100,100]"]}
MIN_EPOCHS = {"deepclusterv2": 2}
CPU = ["accelerator=cpu", "devices=[0]", "strategy=auto", "precision=32", "sync_batchnorm=False"]


def _args(
    method: str, data: Path, run: Path, a: argparse.Namespace, epochs: int | None = None
) -> list[str]:
    cifar = a.solo_root / "scripts" / "pretrain" / "cifar"
    epochs = max(a.epochs, MIN_EPOCHS.get(method, 1)) if epochs is None else epochs
    probes = (
        PROBES
        if a.label
        else [
            "geometry.measure.hessian=false",
            "geometry.probes.enabled=false",
            "geometry.report=false",
        ]
    )
    return [
        sys.executable,
        str(a.solo_root / "main_pretrain.py"),
        "--config-path",
        str(cifar),
        "--config-name",
        RECIPE[method],
        f"hydra.run.dir={run}",
        *CPU,
        "data.dataset=custom",
        f"data.train_path={data / 'train'}",
        f"data.val_path={data / 'val'}",
        "data.num_workers=0",
        f"optimizer.batch_size={a.batch}",
        # the random initialisation: one epoch of no batch (max_epochs=0 is refused as bad input)
        f"max_epochs={max(epochs, 1)}",
        *(["scheduler.name=none", "++limit_train_batches=0"] if epochs == 0 else []),
        "wandb.enabled=False",
        "checkpoint.enabled=False",
        "auto_resume.enabled=False",
        "++enable_progress_bar=False",
        *NEEDS.get(method, []),
        "+geometry=on",
        f"geometry.every_n_steps={a.every}",
        "geometry.alert.heldout=256",  # the held-out batch recorded too (collapse_detection.py)
        *probes,
    ]


def _row(method: str, run: Path, seconds: float) -> str:
    records = [r for r in read_records(run) if r.ok]
    states: list[str] = []
    for r in records:
        state = r.alert["state"] if r.alert else "-"
        if not states or states[-1] != state:
            states.append(state)
    pairs = [p for p in (ratios(r.metrics, "h") for r in records) if p is not None]
    if not pairs:
        return f"| {method} | {len(records)} | {' -> '.join(states)} | - | - | - | {seconds:.0f} |"
    std, rank = pairs[-1]
    low = min(s for s, _ in pairs)
    return (
        f"| {method} | {len(records)} | {' -> '.join(states)} | {rank:.3f} | {std:.3f} "
        f"| {low:.3f} | {seconds:.0f} |"
    )


def _labelled(method: str, data: Path, run: Path, env: dict, a: argparse.Namespace) -> bool:
    """The run at random initialisation, then ``run.json`` with its label (``--label``)."""
    init = run / "init"
    if not (run / "run.json").is_file():
        init.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            _args(method, data, init, a, epochs=0),
            cwd=init,
            env=env,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            print(f"| {method} | init failed (exit {proc.returncode}) |", proc.stderr[-2000:])
            return False
        cfg = Config(
            f"cifar_{method}",
            f"solo-learn scripts/pretrain/cifar/{RECIPE[method]}.yaml",
            (),
            "healthy",
            "solo-learn 1.0.6's recipe",
            "the method at its cifar defaults",
        )
        epochs = max(a.epochs, MIN_EPOCHS.get(method, 1))
        result = collect(cfg, run, init, 0.0, epochs)
        (run / "run.json").write_text(json.dumps(result, indent=1))
    result = json.loads((run / "run.json").read_text())
    print(f"| {method} | label: {result['label']} | {'; '.join(result['reasons'])} |", flush=True)
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--solo-root", type=Path, required=True, help="a solo-learn 1.0.6 checkout")
    p.add_argument("--out", type=Path, default=Path("false_alarm"))
    p.add_argument("--methods", nargs="+", default=sorted(SUPPORTED), choices=sorted(SUPPORTED))
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--every", type=int, default=5)
    p.add_argument("--label", action="store_true", help="label each run (module docstring)")
    a = p.parse_args(argv)
    data = make_digits(a.out / "digits", size=32)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    print(
        "| method | records | alert states | RankMe(H) / min(M, d) | std(H) / ceiling, last "
        "| lowest | s |"
    )
    print("|---|---|---|---|---|---|---|")
    failed = 0
    for method in a.methods:
        run = a.out / method
        t0 = time.perf_counter()
        done = run / "DONE"
        if not done.is_file():
            run.mkdir(parents=True, exist_ok=True)
            proc = subprocess.run(
                _args(method, data, run, a), cwd=run, env=env, capture_output=True, text=True
            )
            if proc.returncode != 0:
                failed += 1
                print(f"| {method} | failed (exit {proc.returncode}) |", proc.stderr[-2000:])
                continue
            done.write_text("ok\n")
        if a.label and not _labelled(method, data, run, env, a):
            failed += 1
        print(_row(method, run, time.perf_counter() - t0), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
