"""solo-learn's own cifar recipes of the queue, prototype and centring methods, geometry on.

Each runs through solo-learn's unmodified ``main_pretrain.py`` with ``+geometry=on`` and the
overrides a new user would pass on a CPU (``data.dataset=custom`` on an image folder written to
disk, ``accelerator=cpu "devices=[0]" strategy=auto precision=32 sync_batchnorm=False``), a step
or two of batch 8, and must write finite records.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from solo_recipes import cifar_overrides
from test_solo_helpers import (
    GEOMETRY_CHEAP,
    NEW_METHODS,
    SOLO_REASON,
    run,
    solo_root,
    tail,
    write_digits,
)

from solo_geometry.records import read_records

pytest.importorskip("solo", reason=SOLO_REASON)

METHODS = NEW_METHODS
GEOMETRY = [*GEOMETRY_CHEAP, "geometry.measure.augment_families=[brightness]",
            "geometry.measure.augment_samples=2"]  # fmt: skip


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """16 of the digits (2 classes x 8) as an image folder: two batches of 8 per epoch."""
    digits = write_digits(tmp_path_factory) / "train"
    out = tmp_path_factory.mktemp("folder") / "train"
    for cls in sorted(p for p in digits.iterdir() if p.is_dir())[:2]:
        (out / cls.name).mkdir(parents=True)
        for png in sorted(cls.glob("*.png"))[:8]:
            shutil.copy(png, out / cls.name / png.name)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
def test_cifar_recipe_geometry_on(method: str, folder: Path, tmp_path: Path) -> None:
    # DeepClusterV2's loss exists from epoch 1 on (k-means at its start): two epochs for it
    steps = ["max_epochs=2", "geometry.every_n_steps=2"] if method == "deepclusterv2" else [
        "max_epochs=1", "+limit_train_batches=1", "geometry.every_n_steps=1"]  # fmt: skip
    args = [str(solo_root() / "main_pretrain.py"), "--config-path",
            str(solo_root() / "scripts" / "pretrain" / "cifar"), "--config-name", method,
            f"hydra.run.dir={tmp_path}", *cifar_overrides(method, folder),
            "++enable_progress_bar=False", *steps, *GEOMETRY]  # fmt: skip
    proc = run(args, tmp_path)
    assert proc.returncode == 0, tail(proc)
    records = read_records(tmp_path)
    if method == "deepclusterv2":
        assert [r.step for r in records] == [0, 2, 4]
        assert not records[0].ok and "k-means" in str(records[0].reason)
        records = records[1:]
    else:
        assert [r.step for r in records] == [0, 1]
    for r in records:
        assert r.ok, r.reason
        assert r.meta is None or r.meta["method"] == method
        values = [v for k, v in r.metrics.items() if not k.endswith("/cond") and v is not None]
        assert values and all(math.isfinite(v) for v in values if isinstance(v, float))
        assert math.isfinite(r.metrics["z/normalized_std"])  # an unconverged extreme is null
