"""One rank of a 2-process gloo group measuring real solo-learn modules (test_ddp_ranks.py).

Usage::

    python ddp_ranks_entry.py <rank> <world> <store file> <scenario> <out file>

Each rank builds the same module (same seed) from solo-learn's digits recipes with a ViT
backbone (LayerNorm: the backbone acts per sample, so only the heads' BatchNorm differs between
one rank and two), takes its chunk of one global batch and calls
:func:`~solo_geometry.runtime.distributed.measure_across_ranks` as the monitor does. Scenarios:

* ``bn``: SimCLR (a BatchNorm ``smooth_mlp`` projector) and BYOL (projector and predictor with
  BatchNorm, momentum targets) measured on 2 ranks, each without and with sync BatchNorm
  (declared by the host: SyncBatchNorm trains only on CUDA); rank zero then measures the
  1-process references on the concatenated batch: per-chunk statistics built by hand (no
  sync), the module's own 1-process view (sync, global statistics);
* ``faults``: a sequence of SimCLR records, each with a fault forced on one rank (module
  docstring of the test), and an ``all_reduce`` between them as a training step would do.

The outcome (torch.save) goes to ``out``: per record ``(status, reason or metrics)``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "zoo" / "recipes" / "digits"
N = 4  # rows per rank
GEOMETRY = [
    "+geometry=on",
    "geometry.probes.enabled=false",
    "geometry.spectrum.dtype=float64",
    "geometry.spectrum.max_steps=300",
    "geometry.spectrum.tol=1e-10",
    "geometry.spectrum.max_samples=8",
    "geometry.measure.augment=false",
    "geometry.spectrum.density_probes=1",
]
VIT = ["backbone.name=vit_tiny", "++backbone.kwargs.img_size=32", "++backbone.kwargs.patch_size=8"]
HEADS = {
    "simclr": ["geometry.head.name=smooth_mlp"],  # solo-learn's SimCLR projector has no BN
    "byol": ["++method_kwargs.pred_hidden_dim=64"],  # its projector and predictor have BN
}
FAULT = "injected"


def build(method: str, tmp: Path) -> Any:
    """The wrapped solo-learn module of ``method``, seeded (identical on every rank)."""
    from solo.args.pretrain import parse_cfg
    from solo.methods import METHODS

    from solo_geometry.hosts.solo import install
    from solo_geometry.recipe import load_recipe

    install()
    cfg = load_recipe(
        RECIPES / f"{method}.yaml",
        [
            f"data.train_path={tmp}",
            "data.val_path=null",
            "method_kwargs.proj_hidden_dim=64",
            "method_kwargs.proj_output_dim=32",
            *VIT,
            *GEOMETRY,
            *HEADS[method],
        ],
    )
    torch.manual_seed(0)
    model = METHODS[method](parse_cfg(cfg))
    return model.train()


def global_batch(ranks: int = 2) -> list[Any]:
    """One global batch ``[indexes, [X_1, X_2], targets]`` of ``ranks * N`` rows (seeded)."""
    g = torch.Generator().manual_seed(1)
    X = [torch.randn(ranks * N, 3, 32, 32, generator=g) for _ in range(2)]
    return [torch.arange(ranks * N), X, torch.zeros(ranks * N, dtype=torch.long)]


def chunk(batch: list[Any], rank: int) -> list[Any]:
    """Rank ``rank``'s rows of the global batch, as DDP's sampler hands them out."""
    rows = slice(rank * N, (rank + 1) * N)
    return [batch[0][rows], [x[rows] for x in batch[1]], batch[2][rows]]


def record(model: Any, batch: list[Any], run: Callable[..., Any] | None = None) -> tuple:
    """One record as the monitor takes it: ``("ok", metrics)`` or ``("skipped", reason)``."""
    from solo_geometry.runtime.distributed import measure_across_ranks
    from solo_geometry.runtime.measure import measure
    from solo_geometry.state import preserved_state

    def measured(view: Any) -> Any:
        cfg = model.geometry_cfg
        return measure(view, cfg.measure, cfg.spectrum, seed=cfg.seed, density=False)

    try:
        with preserved_state(model):
            result = measure_across_ranks(model, batch, run or measured)
        return "ok", result.metrics
    except Exception as err:  # noqa: BLE001 - what the monitor does with it
        return "skipped", f"{type(err).__name__}: {err}"


class Chunked(nn.Module):
    """The reference's head: applied to each rank's rows alone (written here, not imported)."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head

    def forward(self, x: Tensor) -> Tensor:
        """(2N, d) -> (2N, p), BatchNorm statistics of each N rows."""
        return torch.cat([self.head(x[:N]), self.head(x[N:])])


def per_chunk_reference(model: Any, method: str, batch: list[Any]) -> Any:
    """The 1-process view of the concatenated batch with each rank's BatchNorm statistics."""
    from solo.losses.byol import byol_loss_func
    from solo.losses.simclr import simclr_loss_func
    from solo.methods.base import BaseMomentumMethod

    from solo_geometry.hosts.base import assemble_view
    from solo_geometry.linalg.operators import frozen_module

    Z = model.geometry_view(batch).features  # (2, 2N, d): the backbone acts per sample
    if method == "simclr":

        def loss(H: Tensor) -> Tensor:  # (2, 2N, p)
            z = torch.cat([H[0], H[1]])  # views concatenated, as solo-learn does
            return simclr_loss_func(z, indexes=batch[0].repeat(2), temperature=model.temperature)

        return assemble_view(Z, Chunked(model.projector), loss)
    with torch.no_grad():
        feats = [BaseMomentumMethod.momentum_forward(model, x)["feats"] for x in batch[1]]
        targets = [Chunked(model.momentum_projector)(f).double() for f in feats]  # (2N, p)

    def byol(H: Tensor) -> Tensor:  # (2, 2N, p)
        pred = frozen_module(model.predictor, H.dtype, H.device)
        P = [torch.cat([pred(H[v][:N]), pred(H[v][N:])]) for v in range(2)]  # each rank's BN
        return byol_loss_func(P[1], targets[0].to(H)) + byol_loss_func(P[0], targets[1].to(H))

    return assemble_view(Z, Chunked(model.projector), byol)


def scenario_bn(rank: int, tmp: Path) -> dict[str, Any]:
    """Every (method, sync) on 2 ranks; rank zero adds the 1-process references."""
    from solo_geometry.runtime.distributed import collectives_off
    from solo_geometry.runtime.measure import measure
    from solo_geometry.state import preserved_state

    out: dict[str, Any] = {}
    batch = global_batch()
    for method in ("simclr", "byol"):
        model = build(method, tmp)
        for sync in (False, True):
            model.geometry_sync_batchnorm = sync
            out[f"{method}/{sync}/ranks"] = record(model, chunk(batch, rank))
        if rank == 0:
            model.geometry_sync_batchnorm = None
            cfg = model.geometry_cfg
            with preserved_state(model), collectives_off():  # one process
                view = per_chunk_reference(model, method, batch)
                out[f"{method}/False/one"] = measure(
                    view, cfg.measure, cfg.spectrum, seed=cfg.seed, density=False
                ).metrics
                view = model.geometry_view(batch)  # one process: BatchNorm of the whole batch
                out[f"{method}/True/one"] = measure(
                    view, cfg.measure, cfg.spectrum, seed=cfg.seed, density=False
                ).metrics
    return out


def scenario_faults(rank: int, tmp: Path) -> dict[str, Any]:
    """Records with a fault on one rank each; between them, a training step's all_reduce."""
    from solo_geometry.runtime import distributed

    model = build("simclr", tmp)
    batch = chunk(global_batch(), rank)
    room, loads = distributed._room, distributed._loads

    def oom(*args: Any) -> Any:
        raise torch.OutOfMemoryError(f"{FAULT}: CUDA out of memory")

    def nan_parts(batch: Any) -> Any:
        from dataclasses import replace

        parts = type(model).geometry_parts(model, batch)
        return replace(parts, features=parts.features * float("nan"))

    def failing_run(view: Any) -> Any:
        raise RuntimeError(f"{FAULT} inside the products")

    faults: list[tuple[int, Callable[[], None]]] = [
        (-1, lambda: None),  # no fault
        (0, lambda: setattr(distributed, "_room", oom)),  # rank 0: room for the gather
        (1, lambda: setattr(distributed, "_room", oom)),  # rank 1: room for the outcome
        (1, lambda: setattr(distributed, "_loads", oom)),  # rank 1: reading the outcome
        (1, lambda: setattr(model, "geometry_parts", nan_parts)),  # rank 1: NaN features
        (0, lambda: None),  # rank 0: an exception inside the products (run below)
        (-1, lambda: None),
    ]
    records, steps = [], []
    for i, (where, inject) in enumerate(faults):
        if where == rank:
            inject()
        run = failing_run if (i == 5 and rank == 0) else None
        records.append(record(model, batch, run))
        distributed._room, distributed._loads = room, loads
        model.__dict__.pop("geometry_parts", None)
        step = torch.ones(1)
        dist.all_reduce(step)  # training goes on: the next step's gradient all-reduce
        steps.append(step.item())
    return {"records": records, "steps": steps}


def main(rank: int, world: int, store: str, scenario: str, out: str) -> None:
    """Join the group, run the scenario, save its outcome."""
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=120),
    )
    try:
        tmp = Path(out).parent
        result = (scenario_bn if scenario == "bn" else scenario_faults)(rank, tmp)
    finally:
        dist.destroy_process_group()
    torch.save(result, out)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
