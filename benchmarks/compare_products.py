"""Ways to take a curvature product on solo-learn's cifar heads, timed against each other (CPU).

Per recipe (the model as ``profile_record.py`` builds it, batch 32, float32 products, one
thread): one product of H_eff, GN and M through the cached double-backward graphs (what the
monitor takes), B of them one after the other, B at once (``HeadOperators.batched``, vmap over
the backward graph), GN and M of one vector (H_eff = GN + M from one pass), and H_eff by
forward-over-reverse (``torch.func.jvp`` over ``torch.func.grad``), which recomputes the head
and the loss at every product. Each alternative's largest deviation from the double-backward
product, relative to its largest entry, is printed beside its time; a path that cannot run
prints why.

Usage::

    PYTHONPATH=. python benchmarks/compare_products.py --solo-root /work/solo-learn
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from profile_record import RECIPES, build

from solo_geometry.linalg.operators import frozen_module, head_operators


def timed(fn: Callable[[], Any], repeats: int = 5) -> float:
    """Median CPU seconds of ``repeats`` calls of ``fn`` after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def deviation(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest deviation max |a - b| / max |b| (max |a| where b is 0)."""
    scale = float(b.abs().max())
    return float((a.reshape(b.shape) - b).abs().max()) / scale if scale else float(a.abs().max())


def compare(method: str, args: argparse.Namespace) -> dict[str, Any]:
    """The products' CPU seconds for ``method``'s recipe."""
    model = build(method, args.solo_root, args.batch_size)
    model.train()
    g = torch.Generator().manual_seed(0)
    views = model.num_large_crops + model.num_small_crops
    X = [torch.randn(args.batch_size, 3, 32, 32, generator=g) for _ in range(views)]
    model.geometry_capture(True)
    batch = [torch.arange(args.batch_size), X, torch.zeros(args.batch_size, dtype=torch.long)]
    model.training_step(batch, 0)
    view = model.geometry_view(batch)
    model.geometry_capture(False)
    Z, dtype, B = view.features.detach(), torch.float32, args.vectors
    ops = head_operators(view.head, view.loss_of_outputs, Z, dtype=dtype)
    vs = torch.randn(B, *Z.shape, generator=g).to(dtype)
    out: dict[str, Any] = {"recipe": method, "vectors": B}
    for op in ("heff", "gn", "m"):
        single, batched = getattr(ops, op), ops.batched(op)
        out[f"{op}/one"] = timed(lambda: single(vs[0]))  # noqa: B023
        out[f"{op}/one_by_one"] = timed(lambda: [single(v) for v in vs])  # noqa: B023
        out[f"{op}/batched"] = timed(lambda: batched(vs))  # noqa: B023
        out[f"{op}/batched_dev"] = deviation(batched(vs)[1], single(vs[1]))
    out["gn+m/one"] = timed(lambda: (ops.gn(vs[0]), ops.m(vs[0])))
    out["gn+m/dev"] = deviation(ops.gn(vs[0]) + ops.m(vs[0]), ops.heff(vs[0]))
    forward = frozen_module(view.head, dtype, Z.device)

    def loss(z: torch.Tensor) -> torch.Tensor:
        return view.loss_of_outputs(torch.stack([forward(z[v]) for v in range(z.shape[0])]))

    gradient, z0 = torch.func.grad(loss), Z.to(dtype)
    try:
        fwd = torch.func.jvp(gradient, (z0,), (vs[0],))[1]
        out["heff/fwd_over_rev"] = timed(lambda: torch.func.jvp(gradient, (z0,), (vs[0],)))
        out["heff/fwd_over_rev_dev"] = deviation(fwd, ops.heff(vs[0]))
    except RuntimeError as err:
        out["heff/fwd_over_rev"] = f"cannot run: {str(err).splitlines()[0][:120]}"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES))
    parser.add_argument("--solo-root", type=Path, required=True)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--vectors", type=int, default=3, help="B: vectors per batched product")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for method in args.recipes:
        print(
            json.dumps(
                {
                    k: round(v, 5) if isinstance(v, float) else v
                    for k, v in compare(method, args).items()
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
