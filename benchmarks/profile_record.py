"""Where one geometry record's time goes, on solo-learn's own cifar recipes (CPU).

Per recipe: the model is built as solo-learn's ``main_pretrain.py`` builds it (``+geometry=on``
at the defaults), one batch of 32 random 32 x 32 images in the recipe's views; the training
step (forward and backward, captured features) is timed, then every part of a record from
that step's captured view: the representation statistics, the augmentation tangents (rho),
building the operators' graphs, one product of each operator (H_eff, GN, M) in float64 and
float32, the Lanczos runs of the extremes (steps per operator) at the configured dtype, and the
spectra with the density, its probes side by side (batched products) and one product at a time.
Then, in training steps (``.../in_steps``): the record, the record with the density, rho, H_eff's
Lanczos run alone, and rho with H_eff's run (what a record would cost with GN's and M's runs left
out, at these products and this batch's Lanczos steps).
H_eff's run is the spectrum's own ``seconds`` (wall time, the rest is CPU time): the same with
``--threads 1`` on a core nothing else uses. ``products/<op>``: the record's products per
operator (GN's 0 where its spectrum is H_eff's run).

``--breakdown`` gives alone where one record's time goes (``record_breakdown.py``): each part's
own CPU seconds inside ``measure`` (setup, graphs, the products per operator, the rest of the
Lanczos runs, the statistics, rho) and one product's parts (GN's J v, loss second derivative,
J^T w; one H_eff and one M product; what the head's first Linear on the block's rows alone
would save).

``--levers`` adds, and ``--levers-only`` gives alone, the levers of issue 56 on the same batch
(``record_levers.py``): warm starts across records (the next record's batch, other images) and
within one, blocks of three vectors with batched products, GN and M from one pass,
forward-over-reverse products; their products, product times taken in turn with the baseline's,
``ratio/...`` over the cold run, and their tables after the JSON lines.

Usage::

    PYTHONPATH=. python benchmarks/profile_record.py --solo-root /work/solo-learn
    PYTHONPATH=. python benchmarks/profile_record.py --recipes simclr --levers-only
    PYTHONPATH=. python benchmarks/profile_record.py --dtype float32 --breakdown
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from record_breakdown import (
    breakdown,
    breakdown_tables,
    paired_record,
    product_parts,
    rows_only,
)
from record_levers import lever_tables, levers, ratios

from solo_geometry.config import GeometryConfig, SpectrumConfig
from solo_geometry.geometry.spectrum import effective_hessian_spectrum
from solo_geometry.linalg.blocks import block_indices, restrict_to_block
from solo_geometry.linalg.operators import HeadOperators, head_operators
from solo_geometry.runtime.measure import _rho, _stats, measure, spectrum_options

RECIPES = ("simclr", "byol", "vicreg", "barlow", "mocov2plus", "dino")
CPU = ["accelerator=cpu", "devices=[0]", "strategy=auto", "precision=32", "sync_batchnorm=False"]


def build(method: str, solo_root: Path, batch_size: int) -> Any:
    """The geometry-aware solo-learn model of ``method``'s cifar recipe."""
    from solo.args.pretrain import parse_cfg
    from solo.methods import METHODS

    from solo_geometry.hosts.solo import install
    from solo_geometry.recipe import load_recipe

    install()
    path = solo_root / "scripts" / "pretrain" / "cifar" / f"{method}.yaml"
    cfg = load_recipe(
        path,
        [
            *CPU,
            "data.dataset=custom",
            "data.train_path=/tmp",
            "data.val_path=null",
            "data.format=image_folder",
            "wandb.enabled=False",
            "auto_resume.enabled=False",
            f"optimizer.batch_size={batch_size}",
            "+geometry=on",
            "geometry.probes.enabled=false",
        ],
    )
    cfg = parse_cfg(cfg)
    torch.manual_seed(0)
    return METHODS[cfg.method](cfg)


def timed(fn: Callable[[], Any], repeats: int = 3) -> tuple[float, Any]:
    """Median CPU seconds of ``repeats`` calls of ``fn`` and its last result."""
    times, out = [], None
    for _ in range(repeats):
        start = time.process_time()
        out = fn()
        times.append(time.process_time() - start)
    return statistics.median(times), out


def training_step(model: Any, batch: list[Any]) -> float:
    """CPU seconds of one forward and backward of the training step, features captured."""
    model.geometry_capture(True)
    start = time.process_time()
    loss = model.training_step(batch, 0)
    loss = loss["loss"] if isinstance(loss, dict) else loss
    torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad], allow_unused=True)
    return time.process_time() - start


def density_spectra(view: Any, Z: torch.Tensor, cfg: GeometryConfig) -> tuple[float, float]:
    """CPU seconds of the spectra with the density: probes side by side, then one at a time.

    The second run takes the same steps with single products in turn (what the spectra cost
    before the probes were batched): ``HeadOperators._batched_product`` refused, so
    :meth:`HeadOperators.batched` falls back to one product after the other.
    """

    def spectra() -> float:
        start = time.process_time()
        effective_hessian_spectrum(
            view.head,
            view.loss_of_outputs,
            Z,
            **spectrum_options(cfg.spectrum, density=True),
            generator=torch.Generator().manual_seed(0),
        )
        return time.process_time() - start

    def refuse(*_: Any) -> torch.Tensor:
        raise RuntimeError("one product at a time")

    batched, side = HeadOperators._batched_product, spectra()
    HeadOperators._batched_product = refuse  # type: ignore[method-assign,assignment]
    try:
        return side, spectra()
    finally:
        HeadOperators._batched_product = batched  # type: ignore[method-assign]


def random_batch(model: Any, batch_size: int, seed: int) -> list[Any]:
    """One batch of random 32 x 32 images in the recipe's views."""
    g = torch.Generator().manual_seed(seed)
    views = model.num_large_crops + model.num_small_crops
    X = [torch.randn(batch_size, 3, 32, 32, generator=g) for _ in range(views)]
    return [torch.arange(batch_size), X, torch.zeros(batch_size, dtype=torch.long)]


def lever_record(model: Any, view: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The levers of ``record_levers.py`` on this view, the next record's batch another one."""
    cfg = GeometryConfig(spectrum=SpectrumConfig(dtype=args.dtype))

    def make(v: Any) -> HeadOperators:
        return head_operators(v.head, v.loss_of_outputs, v.features.detach(), dtype=torch.float32)

    ops = make(view)  # before the next step changes the module's state (queues, targets)
    training_step(model, random_batch(model, args.batch_size, 1))  # the next record's batch
    view_next = model.geometry_view(random_batch(model, args.batch_size, 1))
    model.geometry_capture(False)
    index = block_indices(view.features.shape[1], cfg.spectrum.max_samples)
    row = levers(view, ops, make(view_next), index)
    return {**row, **ratios(row)}


def profile(method: str, args: argparse.Namespace) -> dict[str, Any]:
    """The cost breakdown of one record of ``method``'s recipe, in CPU seconds."""
    model = build(method, args.solo_root, args.batch_size)
    model.train()
    cfg = GeometryConfig(spectrum=SpectrumConfig(dtype=args.dtype))  # the defaults, this dtype
    g = torch.Generator().manual_seed(0)
    batch = random_batch(model, args.batch_size, 0)
    step = statistics.median(training_step(model, batch) for _ in range(3))
    view = model.geometry_view(batch)
    Z = view.features.detach()
    out: dict[str, Any] = {"recipe": method, "step": step, "shape": list(Z.shape)}
    if args.levers_only:
        return {**out, **lever_record(model, view, args)}
    if args.breakdown:
        cfg = GeometryConfig(spectrum=SpectrumConfig(dtype=args.dtype))
        out.update(breakdown(view, cfg, step))
        out.update(product_parts(view, cfg, lambda fn: timed(fn, 5)[0]))
        out.update(rows_only(view, cfg, lambda fn: timed(fn, 5)[0]))
        out.update(paired_record(view, cfg, step))
        model.geometry_capture(False)
        return out
    out["stats"], _ = timed(lambda: _stats(view, [], Z.dtype))
    out["rho"], _ = timed(lambda: _rho(view, Z, cfg.measure, torch.Generator().manual_seed(0)))
    index = block_indices(Z.shape[1], cfg.spectrum.max_samples)
    for dtype in (torch.float64, torch.float32):
        name = str(dtype).removeprefix("torch.")
        make = functools.partial(head_operators, view.head, view.loss_of_outputs, Z, dtype=dtype)
        out[f"build/{name}"], ops = timed(make, 1)
        dim = Z.shape[0] * (index.numel() if index is not None else Z.shape[1]) * Z.shape[2]
        v = torch.randn(dim, generator=g, dtype=torch.float64).to(dtype)
        for op in ("heff", "gn", "m"):
            product = restrict_to_block(getattr(ops, op), ops.shape, index)
            product(v)  # builds the operator's graph
            out[f"{op}/{name}"], _ = timed(functools.partial(product, v))
    start = time.process_time()
    spec = effective_hessian_spectrum(
        view.head,
        view.loss_of_outputs,
        Z,
        **spectrum_options(cfg.spectrum, density=False),
        generator=torch.Generator().manual_seed(0),
    )
    out["spectra"] = time.process_time() - start
    for op, s in spec.operators.items():
        out[f"{op}/steps"], out[f"{op}/seconds"] = s.steps, s.seconds
    out["z_norm"] = float(Z.double().norm())  # the same batch's features in every run?
    out["density/side_by_side"], out["density/one_at_a_time"] = density_spectra(view, Z, cfg)
    out["record"], record = timed(
        lambda: measure(view, cfg.measure, cfg.spectrum, seed=cfg.seed, density=False), 1
    )
    for op in ("heff", "gn", "m"):  # the record's own products per operator (GN = H_eff: 0)
        shared = op == "gn" and record.metrics.get("gn_is_heff")
        out[f"products/{op}"] = 0 if shared else record.metrics.get(f"{op}/steps")
    out["record_density"], _ = timed(
        lambda: measure(view, cfg.measure, cfg.spectrum, seed=cfg.seed, density=True), 1
    )
    model.geometry_capture(False)
    out["gn_is_heff"] = spec.gn_is_heff
    # in training steps: the record, with the density, and rho with H_eff's run alone (what a
    # record would cost with GN's and M's runs left out)
    for key in ("record", "record_density", "rho"):
        out[f"{key}/in_steps"] = out[key] / step
    out["heff_run/in_steps"] = out["heff/seconds"] / step
    out["heff_and_rho/in_steps"] = (out["rho"] + out["heff/seconds"]) / step
    if args.levers:
        model.geometry_capture(True)
        training_step(model, batch)  # this batch's features captured again for its view
        out.update(lever_record(model, model.geometry_view(batch), args))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES))
    parser.add_argument("--solo-root", type=Path, required=True)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--levers", action="store_true", help="add record_levers.py's levers")
    parser.add_argument("--breakdown", action="store_true", help="one record's time per part alone")
    parser.add_argument(
        "--levers-only", action="store_true", help="the levers of record_levers.py alone"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for method in args.recipes:
        row = profile(method, args)
        rows.append(row)
        print(
            json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}),
            flush=True,
        )
    if args.levers or args.levers_only:
        print(lever_tables(rows))
    if args.breakdown:
        print(breakdown_tables(rows))


if __name__ == "__main__":
    main()
