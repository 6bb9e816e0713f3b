"""Every solo-learn method with geometry runs its own cifar recipe, geometry at its defaults.

Each of the 17 methods of ``SUPPORTED`` runs solo-learn's unmodified ``main_pretrain.py`` on
its unmodified ``scripts/pretrain/cifar/<method>.yaml`` with ``+geometry=on`` and what a new user
passes on a CPU: ``data.dataset=custom`` on an image folder written to disk,
``accelerator=cpu "devices=[0]" strategy=auto precision=32 sync_batchnorm=False`` (SimCLR, BYOL,
VICReg and Barlow Twins at ``precision=bf16-mixed``, the mixed-precision path), plus the
fewest overrides that keep it short (batch 8, two steps, no workers, no wandb or checkpoints).
The monitor, the probes, the orbit table, the report and the update sizes stay at their
defaults, and the run must write finite records, probes and a report.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from solo_helpers import SOLO_REASON, env, run, solo_root, tail
from solo_recipes import CPU, recipe

from solo_geometry.folder.records import read_records
from solo_geometry.folder.run_folder import RunFolder

pytest.importorskip("solo", reason=SOLO_REASON)
pytestmark = [pytest.mark.solo, pytest.mark.slow]  # solo: counted in the terminal summary

from solo_geometry.hosts.solo import SUPPORTED  # noqa: E402 - after the skip

# The recipe file of each method (solo-learn names barlow_twins' file barlow.yaml).
RECIPE = {name: "barlow" if name == "barlow_twins" else name for name in SUPPORTED}
# What makes a method's run possible at all on 16 images (never a geometry setting):
# DeepClusterV2 clusters the whole dataset at each epoch start into its 3 x 3000 prototypes
# and has no loss before epoch 1.
NEEDS = {"deepclusterv2": ["max_epochs=2", "method_kwargs.num_prototypes=[12,12,12]"]}
# The four methods of the mixed-precision path (issue 33) run at bf16-mixed, the CPU's stand-in
# for their recipes' 16-mixed on a GPU; the others at precision 32 (solo_recipes.CPU).
MIXED = ("barlow_twins", "byol", "simclr", "vicreg")
# Known failures at the defaults, each a bug to fix (the test then passes and strict xfail fails).
KNOWN: dict[str, str] = {}
METHODS = [
    pytest.param(m, marks=pytest.mark.xfail(strict=True, reason=KNOWN[m]) if m in KNOWN else ())
    for m in sorted(SUPPORTED)
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory, digits: Path) -> Path:
    """Digits of 2 classes as image folders: train 2 x 8 (two batches of 8), val 2 x 2 (one).

    solo-learn's ``custom`` dataset validates at 224 x 224 (Resize 256, CenterCrop 224): a
    validation batch of 8 takes about 2 s on one CPU core, and 12 per class made 5 of them
    (sanity check included) where 4 per class made 2; 2 per class make 2 batches of 4, about
    1.6 s of CPU less a method (17 methods). One batch still runs the online classifier and
    gives the probes a test split of 4, both classes in it.
    """
    out = tmp_path_factory.mktemp("folders")
    for split, n in (("train", 8), ("val", 2)):
        for cls in sorted(p for p in (digits / split).iterdir() if p.is_dir())[:2]:
            (out / split / cls.name).mkdir(parents=True)
            for png in sorted(cls.glob("*.png"))[:n]:
                shutil.copy(png, out / split / cls.name / png.name)
    return out


def overrides(method: str, folders: Path) -> list[str]:
    """The CPU overrides and the fewest that make ``method``'s recipe short."""
    args = [
        *CPU,
        "data.dataset=custom",
        f"data.train_path={folders / 'train'}",
        f"data.val_path={folders / 'val'}",
        "data.num_workers=0",
        "optimizer.batch_size=8",
        "max_epochs=1",
        "wandb.enabled=False",
        "checkpoint.enabled=False",
        "auto_resume.enabled=False",
        "++enable_progress_bar=False",
        *NEEDS.get(method, []),
        "+geometry=on",
    ]
    mixed = "precision=bf16-mixed" if method in MIXED else None
    return [mixed if mixed and o.startswith("precision=") else o for o in args]


@pytest.mark.parametrize("method", METHODS)
def test_cifar_recipe_geometry_defaults(method: str, folders: Path, tmp_path: Path) -> None:
    assert recipe(RECIPE[method]).is_file()
    args = [
        str(solo_root() / "main_pretrain.py"),
        "--config-path",
        str(recipe(method).parent),
        "--config-name",
        RECIPE[method],
        f"hydra.run.dir={tmp_path}",
        *overrides(method, folders),
    ]
    # the report's UMAP code is compiled by the first run and cached where numba keeps it
    # (analysis.plots.umap_cached), as for a user: the other runs load it
    proc = run(args, tmp_path, env=env())
    assert proc.returncode == 0, tail(proc)
    folder = RunFolder(tmp_path)
    records = read_records(tmp_path)
    assert records and records[-1].final, [(r.step, r.reason) for r in records]
    ok = [r for r in records if r.ok]
    assert ok, [(r.step, r.reason) for r in records]
    for r in ok:
        assert r.meta is None or r.meta["method"] == method
        values = [v for v in r.metrics.values() if isinstance(v, float)]
        assert values and all(math.isfinite(v) for v in values), r.metrics
        assert math.isfinite(r.metrics["z/normalized_std"])
        assert r.settings.precision == ("bf16-mixed" if method in MIXED else "32-true")
        if "hessian" in r.parts:  # converged extremes, mixed precision or not
            assert all(
                r.metrics[f"{op}/converged_{end}"]
                for op in ("heff", "gn", "m")
                for end in ("min", "max")
            ), (r.step, r.metrics)
    probes = folder.read_probes()
    assert probes is not None and {r.features for r in probes.rows} == {"z", "h"}, tail(proc)
    assert all(math.isfinite(r.accuracy) for r in probes.rows)
    assert probes.orbits and all(math.isfinite(o.compression) for o in probes.orbits)
    assert (folder.report / "index.html").is_file(), tail(proc)
