"""Geometry on solo-learn's queue, prototype and centring methods, built from its cifar recipes.

Per method: the loss closure equals the training step's SSL loss (captured and fresh), its
Hessian-vector products match a dense float64 Hessian, and a real Lightning run with geometry on
ends with exactly the parameters, queues and centres of the same run with geometry off.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from solo_helpers import GEOMETRY_CHEAP, NEW_METHODS, SOLO_REASON
from solo_recipes import (
    assert_hvps_match_dense,
    assert_same_state,
    batch,
    cifar_overrides,
    recipe,
    ssl_loss,
    state_of,
)

pytest.importorskip("solo", reason=SOLO_REASON)
pytestmark = pytest.mark.solo  # counted in the terminal summary (conftest.py)

from solo.args.pretrain import parse_cfg  # noqa: E402
from solo.methods import METHODS  # noqa: E402

from solo_geometry.hosts.solo import install  # noqa: E402
from solo_geometry.hosts.solo.methods import GeometryMethod  # noqa: E402
from solo_geometry.recipe import load_recipe  # noqa: E402

install()

NEW = NEW_METHODS
GEOMETRY = [*GEOMETRY_CHEAP, "geometry.every_n_steps=1", "geometry.measure.augment=false"]


def _model(method: str, overrides: list[str], digits: Path) -> Any:
    cfg = load_recipe(recipe(method), [*cifar_overrides(method, digits / "train"), *overrides])
    return METHODS[method](parse_cfg(cfg))


def _prepare(method: str, model: Any, n: int = 8) -> Any:
    """What a Trainer sets up before the first step, where the method needs it.

    SwAV builds its Sinkhorn-Knopp and queue in ``on_train_start`` (given a real Trainer,
    detached again: the steps here run outside a fit loop). DeepClusterV2's ``on_train_start``
    sizes its memory banks by the loader (here one batch of ``n``) and k-means gives it cluster
    assignments at the start of epoch 1: here a labelling of the 64 first samples.
    """
    model.train()
    if method == "swav":
        model.trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False)
        model.on_train_start()
        model.trainer = None
    if method == "deepclusterv2":
        g = torch.Generator().manual_seed(0)
        model.assignments = torch.randint(0, 12, (len(model.prototypes), 64), generator=g)
        model.local_memory_index = torch.zeros(n, dtype=torch.long)
        model.local_memory_embeddings = torch.randn(2, n, model.proj_output_dim, generator=g)
    return model


@pytest.mark.parametrize("method", NEW)
class TestClosure:
    def test_equals_training_loss(self, method: str, digits: Path) -> None:
        torch.manual_seed(0)
        model = _prepare(method, _model(method, GEOMETRY, digits))
        assert isinstance(model, GeometryMethod)
        b = batch()
        with torch.no_grad():
            fresh = model.geometry_view(b)  # before the step: the state the step will read
            fresh_loss = fresh.loss_of_features(fresh.features)
        model.geometry_capture(True)
        expected = ssl_loss(model, b)  # the step updates queues in place
        view = model.geometry_view(b)
        model.geometry_capture(False)
        torch.testing.assert_close(
            view.loss_of_features(view.features), expected, rtol=1e-5, atol=1e-6
        )
        torch.testing.assert_close(fresh_loss, expected, rtol=1e-5, atol=1e-6)
        H = torch.stack([view.head(z) for z in view.features]).double()
        torch.testing.assert_close(view.loss_of_outputs(H).float(), expected, rtol=1e-5, atol=1e-6)

    def test_hvps_match_dense_hessian(self, method: str, digits: Path) -> None:
        torch.manual_seed(0)
        model = _prepare(method, _model(method, GEOMETRY, digits), n=4)
        b = batch(n=4)
        model.geometry_capture(True)
        with torch.no_grad():
            model.training_step(b, 0)
        view = model.geometry_view(b)
        model.geometry_capture(False)
        assert_hvps_match_dense(view)


class _Batches(torch.utils.data.Dataset):
    """Seeded random 8x8 image pairs in solo-learn's ``(index, [X_1, X_2], target)`` form."""

    def __init__(self, n: int = 16, size: int = 8) -> None:
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(2, n, 3, size, size, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self) -> int:
        return self.x.shape[1]

    def __getitem__(self, i: int) -> tuple:
        return i, [self.x[0, i], self.x[1, i]], self.y[i]


def _train(method: str, overrides: list[str], digits: Path, steps: int) -> dict:
    pl.seed_everything(0)
    model = _model(method, overrides, digits)
    data = torch.utils.data.DataLoader(_Batches(), batch_size=8, shuffle=False)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, data)
    return state_of(model)


@pytest.mark.slow
@pytest.mark.parametrize("method", NEW)
def test_training_unchanged_bit_for_bit(method: str, digits: Path, tmp_path: Path) -> None:
    from solo_geometry.folder.records import read_records

    steps = 4 if method == "deepclusterv2" else 2  # its loss is defined from epoch 1 on
    off = _train(method, [], digits, steps)
    on = _train(method, [*GEOMETRY, f"geometry.out_dir={tmp_path / 'on'}"], digits, steps)
    records = read_records(tmp_path / "on")
    assert [r.step for r in records] == list(range(steps + 1))
    if method == "deepclusterv2":  # epoch 0 (steps 0, 1): no k-means assignments yet
        assert all("k-means" in str(r.reason) for r in records[:2])
        records = records[2:]
    assert all(r.ok for r in records), [r.reason for r in records]
    assert_same_state(on, off)


class TestDINOLoss:
    def test_equals_solo_dino_loss(self) -> None:
        from solo.losses.dino import DINOLoss

        from solo_geometry.hosts.solo.prototypes import dino_loss

        solo = DINOLoss(
            num_prototypes=6,
            warmup_teacher_temp=0.04,
            teacher_temp=0.07,
            warmup_teacher_temp_epochs=2,
            num_epochs=4,
            student_temp=0.1,
        )
        solo.epoch = 1
        solo.center = torch.randn(1, 6)
        g = torch.Generator().manual_seed(0)
        student, teacher = torch.randn(2, 10, 6, generator=g).double().unbind()
        temp = solo.teacher_temp_schedule[1]
        probs = torch.softmax((teacher - solo.center.double()) / temp, dim=-1)
        expected = solo(student, teacher)
        torch.testing.assert_close(dino_loss(student, probs, 0.1), expected)


def test_deepclusterv2_before_kmeans_is_refused(digits: Path) -> None:
    model = _model("deepclusterv2", GEOMETRY, digits)
    model.assignments = -torch.ones(len(model.prototypes), 64, dtype=torch.long)
    with pytest.raises(ValueError, match="no cluster assignments.*k-means"):
        model.geometry_view(batch())
