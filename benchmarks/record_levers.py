"""The levers of issue 56 on one record's spectra: products and product times, on one batch.

Used by ``profile_record.py --levers``. Every count is of products (machine-independent); every
time is CPU seconds of one product, the baseline and the lever timed in turn in one process
(:func:`paired`), so a shared machine slows both alike. Per operator (H_eff, GN, M on the
monitor's sub-block, float32 products under float64 recurrences, ``lanczos_tol`` 1e-3):

* ``cold``: the monitor's run, a Gaussian start, the residual test at every step (baseline);
* warm start across records (lever 1): the next record's batch (other images, same parameters)
  cold, and started on the last batch's two extreme Ritz vectors (``y_min + y_max``);
  ``overlap``: |cos| between the two batches' top Ritz vectors;
* warm start within a record: GN's and M's runs started on H_eff's extreme Ritz vectors (same
  batch), which loses the Gaussian start their ``neg_fraction`` needs;
* blocks (lever 2): the Rayleigh-Ritz of the union of B Krylov spaces run side by side, one
  batched product of B vectors per step (3 Gaussians; or the Gaussian and H_eff's two extreme
  Ritz vectors, which keeps the Gaussian probe): the step at which the union certifies both
  extremes by the same residual test, its products (B per step) and its time (steps times one
  batched product);
* GN and M from one pass (lever 2): H_eff's run with its products taken as GN v + M v, so that
  GN's and M's runs have H_eff's basis and its images for free: the steps each still needs for
  the Rayleigh-Ritz of the joint span to certify;
* forward-over-reverse (lever 3): one H_eff product by ``torch.func.jvp`` over
  ``torch.func.grad`` against the double backward, or why it cannot run.

The union's residuals need no product beyond the runs': with full reorthogonalisation each run
satisfies A q_j = beta_{j-1} q_{j-1} + alpha_j q_j + beta_j q_{j+1} (to the products' round-off),
so A U is known for the union's basis U, and the Rayleigh-Ritz of span(U) and its exact residual
norms come from the Gram matrices U^T U, U^T A U and (A U)^T (A U).
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from solo_geometry.linalg.blocks import restrict_to_block
from solo_geometry.linalg.lanczos import _run, _start_vector
from solo_geometry.linalg.operators import HeadOperators, frozen_module, piecewise_linear

F32, F64 = torch.float32, torch.float64
OPS = ("heff", "gn", "m")


def paired(fns: dict[str, Callable[[], Any]], repeats: int = 5) -> dict[str, float]:
    """Median CPU seconds of each callable, called in turn ``repeats`` times after a warm-up."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.process_time()
            fn()
            times[name].append(time.process_time() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def run_from(
    ops: HeadOperators,
    name: str,
    index: Tensor | None,
    starts: Tensor,
    steps: int,
    tol: float,
    atol: float = 0.0,
) -> Any:
    """Lanczos from each row of ``starts`` (B, dim) side by side; row 0 leads with ``tol``."""
    batched = starts.shape[0] > 1
    product = ops.batched(name) if batched else getattr(ops, name)
    matvec = restrict_to_block(product, ops.shape, index, batched=batched)
    if not batched:
        single = matvec
        matvec = lambda v: single(v[0]).reshape(1, -1)  # noqa: E731
    return _run(matvec, starts.to(F64), min(steps, starts.shape[1]), tol, atol, 1, F32)


def union_steps(
    runs: Any, tol: float, atol: float = 0.0, fixed: tuple[Tensor, Tensor] | None = None
) -> int | None:
    """First k at which the Rayleigh-Ritz of span of every run's first k vectors certifies.

    Both extreme Ritz values' exact residual norms under max(tol * max|theta|, atol); None if
    no k up to the runs' length does. ``fixed``: vectors (n, dim) and their products (n, dim)
    in the span at every k (another operator's Krylov basis whose products were taken).
    """
    basis, alpha, beta = runs.basis, runs.alpha, runs.beta
    B, K = alpha.shape[0], runs.k - 1  # A q_j needs q_{j+1}: the last vector has no image
    U = basis[:, :K].double()  # (B, K, dim)
    AU = alpha[:, :K, None] * U + beta[:, :K, None] * basis[:, 1 : K + 1].double()
    AU[:, 1:] += beta[:, : K - 1, None] * U[:, :-1]
    U, AU = U.reshape(B * K, -1), AU.reshape(B * K, -1)
    n0 = 0 if fixed is None else fixed[0].shape[0]
    if fixed is not None:
        U, AU = torch.cat([U, fixed[0].double()]), torch.cat([AU, fixed[1].double()])
    gram, rq, sq = U @ U.T, U @ AU.T, AU @ AU.T
    for k in range(2, K + 1):
        cols = torch.cat([torch.arange(b * K, b * K + k) for b in range(B)])
        cols = torch.cat([cols, torch.arange(B * K, B * K + n0)])
        lam, vec = torch.linalg.eigh(gram[cols][:, cols])
        keep = lam > 1e-6 * lam.max()  # drop directions the runs share (sigma under 1e-3)
        W = vec[:, keep] / lam[keep].sqrt()  # span(U) = span(U W), U W orthonormal
        h = W.T @ rq[cols][:, cols] @ W
        theta, s = torch.linalg.eigh((h + h.T) / 2)
        s2 = W.T @ sq[cols][:, cols] @ W
        ends = s[:, [0, -1]]
        r2 = torch.einsum("ie,ij,je->e", ends, s2, ends) - theta[[0, -1]] ** 2
        bound = max(tol * float(theta.abs().max()), atol)
        if bool((r2.clamp(min=0).sqrt() <= bound).all()):
            return k
    return None


def shared_products(
    ops: HeadOperators, index: Tensor | None, heff_run: Any
) -> tuple[dict[str, Tensor], float]:
    """GN and M of every vector of H_eff's Krylov basis, and how far GN + M is from H_eff.

    What H_eff's run would take as its products were H_eff v taken as GN v + M v (one pass
    for both halves): GN's and M's runs then have H_eff's basis and its images for free.
    """
    Q = heff_run.basis[0, : heff_run.k]  # (k, dim) float64
    images: dict[str, Tensor] = {}
    for name in ("gn", "m"):
        product = restrict_to_block(getattr(ops, name), ops.shape, index)
        images[name] = torch.stack([product(q.to(F32)).double() for q in Q])
    heff = restrict_to_block(ops.heff, ops.shape, index)(Q[0].to(F32)).double()
    both = images["gn"][0] + images["m"][0]
    return {"basis": Q, **images}, float((both - heff).abs().max() / heff.abs().max())


def extremes_vectors(runs: Any) -> Tensor:
    """The lead run's extreme Ritz vectors (dim, 2) from its last check."""
    k = runs.k
    return runs.basis[0, :k].T @ runs.last.s[:, [0, -1]].to(runs.basis)


def forward_over_reverse(view: Any, ops: HeadOperators, v: Tensor) -> dict[str, Any]:
    """One H_eff product by ``jvp`` over ``grad``, timed in turn with the double backward."""
    Z = view.features.detach().to(F32)
    forward = frozen_module(view.head, F32, Z.device)

    def loss(z: Tensor) -> Tensor:
        return view.loss_of_outputs(torch.stack([forward(z[i]) for i in range(z.shape[0])]))

    gradient, vz = torch.func.grad(loss), v.reshape(Z.shape).to(F32)
    try:
        fwd = torch.func.jvp(gradient, (Z,), (vz,))[1]
    except RuntimeError as err:
        return {"fwd_over_rev": f"cannot run: {str(err).splitlines()[0][:100]}"}
    ref = ops.heff(vz)
    t = paired(
        {"rev": lambda: ops.heff(vz), "fwd": lambda: torch.func.jvp(gradient, (Z,), (vz,))}, 3
    )
    return {
        "fwd_over_rev/seconds": t["fwd"],
        "fwd_over_rev/ratio": t["fwd"] / t["rev"],
        "fwd_over_rev/dev": float((fwd.reshape(-1) - ref).abs().max() / ref.abs().max()),
    }


def levers(
    view: Any, ops: HeadOperators, ops_next: HeadOperators, index: Tensor | None
) -> dict[str, Any]:
    """Every lever's products (and product times) on ``view`` (operators ``ops``).

    ``ops_next``: the operators of the next record's batch.

    GN and M take the floor (1e-5 of H_eff's scale, float32) as ``atol``, as the monitor does;
    for a piecewise-linear head (GN = H_eff, M round-off) H_eff alone.
    """
    tol, out = 1e-3, {}
    dim = ops.shape[0] * (index.numel() if index is not None else ops.shape[1]) * ops.shape[2]
    gen = torch.Generator().manual_seed(0)
    g = torch.stack([_start_vector(dim, gen, F64, None) for _ in range(3)])  # (3, dim)
    atol, heff_ends = 0.0, torch.empty(0)
    shared: dict[str, Tensor] = {}
    for name in OPS[:1] if piecewise_linear(view.head) else OPS:
        cold = run_from(ops, name, index, g[:1], 200, tol, atol)
        out[f"cold/{name}"] = cold.k
        ends = extremes_vectors(cold)  # (dim, 2)
        if name == "heff":
            heff_ends, atol = ends, 1e-5 * float(cold.last.theta.abs().max())
            if not piecewise_linear(view.head):
                shared, out["shared/dev"] = shared_products(ops, index, cold)
        else:  # GN's or M's run on the span of H_eff's basis and its own Krylov space
            fixed = (shared["basis"], shared[name])
            out[f"shared/{name}"] = union_steps(cold, tol, atol, fixed) or cold.k
        out.update(across(ops_next, name, index, g[:1], ends, atol))
        blocks = {"gauss3": g}
        if name != "heff":
            warm = heff_ends.sum(1)[None]
            out[f"warm_within/{name}"] = run_from(ops, name, index, warm, 200, tol, atol).k
            blocks["gauss+heff"] = torch.cat([g[:1], heff_ends.T])
        for label, starts in blocks.items():
            union = run_from(ops, name, index, starts, cold.k + 2, 0.0)
            out[f"block/{label}/{name}"] = union_steps(union, tol, atol)
        single = restrict_to_block(getattr(ops, name), ops.shape, index)
        batched = restrict_to_block(ops.batched(name), ops.shape, index, batched=True)
        v = g.to(F32)
        t = paired({"one": functools.partial(single, v[0]), "three": functools.partial(batched, v)})
        out[f"product/{name}"], out[f"product3/{name}"] = t["one"], t["three"]
    out.update(forward_over_reverse(view, ops, restrict_full(g[0].to(F32), ops, index)))
    return out


def across(
    ops_next: HeadOperators,
    name: str,
    index: Tensor | None,
    g: Tensor,
    ends: Tensor,
    atol: float,
) -> dict[str, Any]:
    """The next batch's run cold and warm (from this batch's extreme Ritz vectors ``ends``)."""
    nxt = run_from(ops_next, name, index, g, 200, 1e-3, atol)
    warm = run_from(ops_next, name, index, ends.sum(1)[None], 200, 1e-3, atol)
    top = extremes_vectors(nxt)[:, 1]
    return {
        f"warm_across/{name}/cold": nxt.k,
        f"warm_across/{name}/warm": warm.k,
        f"warm_across/{name}/overlap": float((top @ ends[:, 1]).abs() / ends[:, 1].norm()),
    }


def restrict_full(v: Tensor, ops: HeadOperators, index: Tensor | None) -> Tensor:
    """A sub-block vector (dim,) as a whole-batch vector (V * N * d,), zeros off the block."""
    if index is None:
        return v
    views, _, d = ops.shape
    full = v.new_zeros(ops.shape)
    full[:, index, :] = v.reshape(views, -1, d)
    return full.reshape(-1)


def ratios(row: dict[str, Any]) -> dict[str, Any]:
    """Each lever's cost over the cold run's, per operator, from one ``levers`` row.

    Products: the lever's products over the cold run's; time: the lever's steps times its
    product's CPU seconds over the cold run's (a run's time is its products': at least 90% of
    it on the CPU). Warm starts across records compare with the next batch's own cold run.
    """
    out: dict[str, Any] = {}
    if "shared/gn" in row:  # the three runs' time, H_eff's products taken as GN v + M v
        secs = {name: row[f"product/{name}"] for name in OPS}
        before = sum(row[f"cold/{name}"] * secs[name] for name in OPS)
        after = row["cold/heff"] * (secs["gn"] + secs["m"])
        after += sum(row[f"shared/{name}"] * secs[name] for name in OPS[1:])
        out["ratio/shared/time"] = after / before
    for name in OPS:
        cold = row.get(f"cold/{name}")
        if cold is None:
            continue
        one, three = row[f"product/{name}"], row[f"product3/{name}"]
        nxt = row[f"warm_across/{name}/cold"]
        out[f"ratio/warm_across/{name}"] = row[f"warm_across/{name}/warm"] / nxt
        if f"warm_within/{name}" in row:
            out[f"ratio/warm_within/{name}"] = row[f"warm_within/{name}"] / cold
        for label in ("gauss3", "gauss+heff"):
            k = row.get(f"block/{label}/{name}")
            if k is not None:
                out[f"ratio/block/{label}/{name}/products"] = 3 * k / cold
                out[f"ratio/block/{label}/{name}/time"] = k * three / (cold * one)
    return out


def _cell(row: dict[str, Any], key: str, spec: str = "") -> str:
    value = row.get(key)
    return "-" if value is None else format(value, spec)


def lever_tables(rows: list[dict[str, Any]]) -> str:
    """The warm starts' and the blocks' markdown tables of ``levers`` rows (with ``ratios``)."""
    warm = [
        "| recipe | operator | cold | next batch: cold / warm (top vectors' cos) "
        "| from H_eff's vectors |",
        "|---|---|---|---|---|",
    ]
    block = [
        "| recipe | operator | cold: steps | product s: 1 / 3 batched | 3 Gaussians: steps, "
        "products, time | Gaussian + H_eff's 2: steps, products, time |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        for op in (op for op in OPS if f"cold/{op}" in row):
            w = f"warm_across/{op}"
            warm.append(
                f"| {row['recipe']} | {op} | {row[f'cold/{op}']} | {row[f'{w}/cold']} / "
                f"{row[f'{w}/warm']} ({row[f'{w}/overlap']:.3f}) | "
                f"{_cell(row, f'warm_within/{op}')} |"
            )
            cells = [
                f"{_cell(row, f'block/{b}/{op}')}, "
                f"{_cell(row, f'ratio/block/{b}/{op}/products', '.2f')}x, "
                f"{_cell(row, f'ratio/block/{b}/{op}/time', '.2f')}x"
                for b in ("gauss3", "gauss+heff")
            ]
            block.append(
                f"| {row['recipe']} | {op} | {row[f'cold/{op}']} | {row[f'product/{op}']:.4f} / "
                f"{row[f'product3/{op}']:.4f} | {cells[0]} | "
                + (cells[1] if op != "heff" else "-")
                + " |"
            )
    shared = [
        "| recipe | cold steps H_eff / GN / M | GN / M steps on H_eff's span | spectra's time "
        "| max dev of GN + M from H_eff |",
        "|---|---|---|---|---|",
    ]
    for row in (row for row in rows if "shared/gn" in row):
        shared.append(
            f"| {row['recipe']} | {row['cold/heff']} / {row['cold/gn']} / {row['cold/m']} | "
            f"{row['shared/gn']} / {row['shared/m']} | {row['ratio/shared/time']:.2f}x | "
            f"{row['shared/dev']:.1e} |"
        )
    return "\n\n".join("\n".join(t) for t in (warm, block, shared))
