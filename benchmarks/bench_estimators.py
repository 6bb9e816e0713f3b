"""The paper's lambda_min estimator beside the certified Lanczos and a dense float64 reference.

The paper's Figure 3 counts the epochs whose smallest Hessian eigenvalue is negative, from
``get_min_eigenvalue_hvp`` of hessian_tracker.py (github farischaudhry/projection-head-geometry,
commit 117231d): 20 steps of power iteration for lambda_max, then 20 steps on the shifted
operator H - lambda_max I, each step ``v = Hv / (||Hv|| + 1e-8)`` from ``torch.randn_like``,
everything in float32, and the Rayleigh quotient ``sum(v * Hv)`` of the last vector.
:func:`paper_min_eigenvalue` is that procedure line by line on a product ``hvp``.

States: cells of ``reproduce collapse``'s default grid (the digits SimSiam recipe, ResNet-20,
crops of 8, batch 16, the paper's bias-free heads with the projector's Linear weights x 0.1,
SGD at the base lr 0.05), heads Swish and ReLU, BatchNorm on and off, seed 0, built by the
lightly host's own module and trained by a Lightning Trainer: at the pseudo-collapsed start
(step 0) and after 100 and 300 optimiser steps (``--steps``; the escape: the default
grid's Swish cells first reach 2x their epoch-0 std after 890 and 2,225 steps). Per state,
on the effective Hessian H_eff of the training loss (docs/design.md section 3) restricted to
the sub-block of ``--max-samples`` samples (both views), so that the dense matrix stays small:

* ``dense``: lambda_min and lambda_max of the sub-block materialised by float64 products
  (``torch.linalg.eigvalsh``);
* ``lanczos``: :func:`solo_geometry.geometry.spectrum.effective_hessian_spectrum` at its
  defaults (float64 products, certified extremes), on the same sub-block;
* ``paper``: :func:`paper_min_eigenvalue` with float32 products on the same sub-block, its
  ratio to the dense value and whether the signs agree; ``paper_full``: the same estimator on
  the whole operator (all 2 x 16 samples, 16,384 coordinates), beside Lanczos on it;
* ``roundoff``: |theta_32 - theta_64| / lambda_max for the estimator's final vector, theta its
  Rayleigh quotient with float32 and with float64 products: the estimator's round-off in units
  of the spectrum's scale.

Run: ``OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/bench_estimators.py`` (progress on
stderr; ``--steps``, ``--max-samples``, ``--heads``, ``--norms``, ``--seed``).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import lightning.pytorch as pl
import torch
from torch import Tensor

from solo_geometry.geometry.spectrum import effective_hessian_spectrum
from solo_geometry.hosts.lightly.data import build_train_loader, num_classes
from solo_geometry.hosts.lightly.launcher import prepare
from solo_geometry.hosts.lightly.module import LightlyMethod
from solo_geometry.inputs.digits import make_digits
from solo_geometry.linalg.blocks import block_indices, restrict_to_block
from solo_geometry.linalg.operators import head_operators
from solo_geometry.recipe import load_recipe
from solo_geometry.reproduce.collapse.cell import RECIPE, CellConfig, cell_overrides
from solo_geometry.reproduce.collapse.protocol import CPU
from solo_geometry.runtime.view import GeometryView

MatVec = Callable[[Tensor], Tensor]
PAPER_STEPS = 20  # hessian_tracker.py: get_min_eigenvalue_hvp(num_iterations=20)
PAPER_EPS = 1e-8  # its guard in v / (||v|| + 1e-8)


def paper_min_eigenvalue(
    hvp: MatVec, dim: int, generator: torch.Generator, steps: int = PAPER_STEPS
) -> tuple[float, float, Tensor]:
    """hessian_tracker.py's ``get_min_eigenvalue_hvp`` on a float32 product ``hvp``.

    Returns:
        ``(lambda_min, lambda_max, v_min)``: the Rayleigh quotients it returns and computes for
        the shift, and its final vector (float32).
    """
    v = torch.randn(dim, generator=generator, dtype=torch.float32)
    v = v / (torch.norm(v) + PAPER_EPS)
    for _ in range(steps):
        hv = hvp(v)
        v = hv / (torch.norm(hv) + PAPER_EPS)
    lambda_max = torch.sum(v * hvp(v))
    v_min = torch.randn(dim, generator=generator, dtype=torch.float32)
    v_min = v_min / (torch.norm(v_min) + PAPER_EPS)
    for _ in range(steps):
        shifted = hvp(v_min) - lambda_max * v_min
        v_min = shifted / (torch.norm(shifted) + PAPER_EPS)
    lambda_min = torch.sum(v_min * hvp(v_min))
    return float(lambda_min), float(lambda_max), v_min


def dense_extremes(matvec: MatVec, dim: int, chunk: int = 256) -> tuple[float, float]:
    """lambda_min and lambda_max of a float64 operator materialised column by column."""
    cols = []
    eye = torch.eye(dim, dtype=torch.float64)
    for start in range(0, dim, chunk):
        cols.append(torch.stack([matvec(e) for e in eye[start : start + chunk]], dim=1))
    dense = torch.cat(cols, dim=1)
    dense = (dense + dense.T) / 2  # symmetric to round-off: the exact Hessian is
    eig = torch.linalg.eigvalsh(dense)
    return float(eig[0]), float(eig[-1])


@dataclass(frozen=True)
class Comparison:
    """The three estimates of lambda_min(H_eff) on one state (module docstring)."""

    dense_min: float
    dense_max: float
    lanczos_min: float | None
    lanczos_max: float | None
    lanczos_steps: int
    paper_min: float
    paper_max: float
    roundoff: float
    paper_full_min: float
    lanczos_full_min: float | None
    lanczos_full_max: float | None

    @property
    def ratio(self) -> float:
        """The estimator's lambda_min over the dense value."""
        return self.paper_min / self.dense_min if self.dense_min else math.nan

    @property
    def signs_agree(self) -> bool:
        """Whether the estimator and the dense value have the same sign."""
        return (self.paper_min < 0) == (self.dense_min < 0)


def compare(view: GeometryView, max_samples: int, seed: int = 0) -> Comparison:
    """The three estimates on one state's H_eff (sub-block of ``max_samples`` samples)."""
    if view.loss_of_outputs is None:
        raise ValueError("the view has no loss_of_outputs")
    Z, head, loss = view.features.detach(), view.head, view.loss_of_outputs
    index = block_indices(Z.shape[1], max_samples)
    n_block = Z.shape[1] if index is None else index.numel()
    dim = Z.shape[0] * n_block * Z.shape[2]
    ops64 = head_operators(head, loss, Z, dtype=torch.float64)
    ops32 = head_operators(head, loss, Z, dtype=torch.float32)
    sub64 = restrict_to_block(ops64.heff, Z.shape, index)
    sub32 = restrict_to_block(ops32.heff, Z.shape, index)
    dense_min, dense_max = dense_extremes(sub64, dim)
    spec = effective_hessian_spectrum(head, loss, Z, max_samples=max_samples, operators=("heff",))
    full = effective_hessian_spectrum(head, loss, Z, operators=("heff",))
    gen = torch.Generator().manual_seed(seed)
    p_min, p_max, v_min = paper_min_eigenvalue(sub32, dim, gen)
    theta64 = float(v_min.double() @ sub64(v_min.double()))
    full_min, _, _ = paper_min_eigenvalue(ops32.heff, ops32.dim, gen)
    return Comparison(
        dense_min=dense_min,
        dense_max=dense_max,
        lanczos_min=spec.heff.lambda_min,
        lanczos_max=spec.heff.lambda_max,
        lanczos_steps=spec.heff.steps,
        paper_min=p_min,
        paper_max=p_max,
        roundoff=abs(p_min - theta64) / max(abs(dense_max), abs(dense_min)),
        paper_full_min=full_min,
        lanczos_full_min=full.heff.lambda_min,
        lanczos_full_max=full.heff.lambda_max,
    )


def cell_model(
    head: str, norm: str, digits: Path, seed: int = 0
) -> tuple[LightlyMethod, torch.utils.data.DataLoader]:
    """The lightly host's module and loader of one default-grid cell (untrained)."""
    cfg = CellConfig(
        head=head,
        norm=norm,
        seed=seed,
        train_path=str(digits),
        batch_size=CPU.batch_size,
        crop_size=CPU.crop_size,
        backbone=CPU.backbone,
    )
    recipe, geometry = prepare(load_recipe(RECIPE, cell_overrides(cfg)))
    pl.seed_everything(recipe.seed, verbose=False)
    loader = build_train_loader(recipe.data, recipe.augmentations, recipe.optimizer.batch_size)
    return LightlyMethod(recipe, num_classes(recipe.data), geometry), loader


class _AtSteps(pl.Callback):
    """Calls ``measure(step, batch)`` after the optimiser steps listed, during one fit."""

    def __init__(self, steps: list[int], measure: Callable[[int, object], None]) -> None:
        self.steps, self.measure = set(steps), measure

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: object,
        batch: object,
        batch_idx: int,
    ) -> None:
        if trainer.global_step in self.steps:
            self.measure(trainer.global_step, batch)


def train(
    model: LightlyMethod,
    loader: torch.utils.data.DataLoader,
    steps: list[int],
    measure: Callable[[int, object], None],
) -> None:
    """One fit of the recipe (SGD, momentum 0.9, no schedule), ``measure`` after ``steps``."""
    trainer = pl.Trainer(
        max_steps=max(steps),
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[_AtSteps(steps, measure)],
    )
    trainer.fit(model, loader)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def row(cell: str, step: int, c: Comparison) -> str:
    """One Markdown row of the table."""
    return (
        f"| {cell} | {step} | {_fmt(c.dense_max)} | {_fmt(c.dense_min)} | "
        f"{_fmt(c.lanczos_min)} | {_fmt(c.paper_min)} | {c.ratio:.2g} | "
        f"{'yes' if c.signs_agree else 'no'} | {c.roundoff:.1e} | {_fmt(c.lanczos_full_min)} | "
        f"{_fmt(c.paper_full_min)} |"
    )


HEADER = (
    "| cell | step | dense lambda_max | dense lambda_min | Lanczos lambda_min | paper's "
    "lambda_min | paper / dense | signs agree | round-off / lambda_max | Lanczos lambda_min "
    "(full) | paper's (full) |\n|---|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> None:
    """Parse the options, build and train each cell, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--steps", default="0,100,300", help="optimiser steps of the states (comma-separated)"
    )
    parser.add_argument("--max-samples", type=int, default=4)
    parser.add_argument("--heads", default="swish,relu")
    parser.add_argument("--norms", default="none,bn")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    start, rows = time.perf_counter(), []
    with tempfile.TemporaryDirectory() as tmp:
        digits = make_digits(Path(tmp) / "digits") / "train"
        for head in args.heads.split(","):
            for norm in args.norms.split(","):
                cell = f"{head}-{norm}-lr0.05-s{args.seed}"
                model, loader = cell_model(head, norm, digits, args.seed)

                def measure(
                    step: int, batch: object, cell: str = cell, model: LightlyMethod = model
                ) -> None:
                    c = compare(model.geometry_view(batch), args.max_samples, args.seed)
                    rows.append(row(cell, step, c))
                    print(f"[{time.perf_counter() - start:.0f} s] {rows[-1]}", file=sys.stderr)

                model.train()
                measure(0, next(iter(loader)))
                train(model, loader, [int(s) for s in args.steps.split(",") if int(s)], measure)
    print(HEADER)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
