"""Where one record's time goes: each part's own CPU seconds inside :func:`measure`.

Used by ``profile_record.py --breakdown``. The record is the monitor's (``measure`` at the
defaults, no density); each part below is timed exclusively (a part called inside another is
charged to itself only), in CPU seconds of this process:

* ``setup``: :func:`head_operators` (the head's forward, the loss and its first-order graph);
* ``graph/heff``, ``graph/m``: H_eff's and M's second-order graphs, built on their first product;
* ``product/<op>``: the products of H_eff, GN and M themselves (their count beside them);
* ``lanczos``: the rest of the spectra (the sub-block's copies, the reorthogonalisation, the
  float64 tridiagonal solves, the start vectors, the summaries);
* ``check_loss``: the loss evaluated once at Z before the spectra (finite or not);
* ``stats``: the representation statistics and quality metrics (float64 SVDs, LiDAR, ...);
* ``rho``: the augmentation tangents and the metric singularity;
* ``other``: the rest (the record's settings, copies to full precision).

``parts/<op>``: one product's parts on the same graphs, in turn: GN's J v (double vjp), the
loss's second derivative applied to it, J^T w; one H_eff and one M product; what the head's
first Linear on the block's rows alone would save. ``rows_only/<op>``: the products with only
the block's rows in the graph against the whole batch's on the block (deviation, times).
``record/...``: the record with the row-wise path and without it, in turn.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

import solo_geometry.geometry.spectrum as spectrum
import solo_geometry.linalg.slq as slq
import solo_geometry.runtime.measure as measure_module
from solo_geometry.config import GeometryConfig
from solo_geometry.linalg import operators as operators_module
from solo_geometry.linalg.blocks import block_indices, restrict_to_block
from solo_geometry.linalg.operators import HeadOperators, vjp


class Attribution:
    """Exclusive CPU seconds per label of the wrapped functions, and their call counts."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._stack: list[str] = []
        self._since = 0.0

    def _switch(self, label: str | None) -> None:
        now = time.process_time()
        if self._stack:
            top = self._stack[-1]
            self.seconds[top] = self.seconds.get(top, 0.0) + now - self._since
        self._since = now
        if label is not None:
            self._stack.append(label)
            self.calls[label] = self.calls.get(label, 0) + 1

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` with its own time charged to ``label``."""

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self._switch(label)
            try:
                return fn(*args, **kwargs)
            finally:
                self._switch(None)
                self._stack.pop()

        return wrapped


@contextmanager
def attributed(att: Attribution) -> Iterator[None]:
    """Every part of the module docstring wrapped while inside; restored on the way out."""
    cached = {name: HeadOperators.__dict__[name] for name in ("_grad_z", "_jt_g")}
    patches: list[tuple[Any, str, Any]] = [
        (HeadOperators, "heff", "product/heff"),
        (HeadOperators, "gn", "product/gn"),
        (HeadOperators, "m", "product/m"),
        (slq.ExtremesRunner, "run", "lanczos"),
        (measure_module, "effective_hessian_spectrum", "lanczos"),
        (measure_module, "_check_loss", "check_loss"),
        (measure_module, "_stats", "stats"),
        (measure_module, "_rho", "rho"),
    ]
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    build = spectrum.head_operators
    functions = {name: prop.func for name, prop in cached.items()}
    try:
        for owner, name, label in patches:
            setattr(owner, name, att.wrap(label, getattr(owner, name)))
        spectrum.head_operators = att.wrap("setup", build)
        cached["_grad_z"].func = att.wrap("graph/heff", functions["_grad_z"])
        cached["_jt_g"].func = att.wrap("graph/m", functions["_jt_g"])
        yield
    finally:
        for owner, name, fn in originals:
            setattr(owner, name, fn)
        spectrum.head_operators = build
        for name, prop in cached.items():
            prop.func = functions[name]


def breakdown(view: Any, cfg: GeometryConfig, step: float) -> dict[str, Any]:
    """One record's CPU seconds per part (module docstring), in seconds and training steps."""
    att = Attribution()
    start = time.process_time()
    with attributed(att):
        measure_module.measure(view, cfg.measure, cfg.spectrum, seed=cfg.seed, density=False)
    total = time.process_time() - start
    out: dict[str, Any] = {"breakdown/total": total, "breakdown/total_in_steps": total / step}
    for label, seconds in sorted(att.seconds.items()):
        out[f"breakdown/{label}"] = seconds
        out[f"breakdown/{label}/share"] = seconds / total
    for op in ("heff", "gn", "m"):
        out[f"breakdown/product/{op}/count"] = att.calls.get(f"product/{op}", 0)
    out["breakdown/other"] = total - sum(att.seconds.values())
    return out


def product_parts(
    view: Any, cfg: GeometryConfig, timer: Callable[[Callable[[], Any]], float]
) -> dict[str, float]:
    """One product's parts on the record's graphs (float32, the monitor's sub-block).

    ``timer``: CPU seconds of a call (``profile_record.py`` passes its median of five).
    """
    Z = view.features.detach()
    dtype = getattr(torch, cfg.spectrum.dtype)
    ops = operators_module.head_operators(view.head, view.loss_of_outputs, Z, dtype=dtype)
    index = block_indices(Z.shape[1], cfg.spectrum.max_samples)
    n = Z.shape[1] if index is None else index.numel()
    v = torch.randn(Z.shape[0] * n * Z.shape[2], generator=torch.Generator().manual_seed(0))
    vz = ops._as_z(v) if index is None else _pad(v, ops, index)
    ops.heff(vz), ops.m(vz)  # the graphs
    jv = ops.jvp(vz)
    w = vjp(ops._g, ops._h, jv)
    return {
        "parts/gn_jvp": timer(lambda: ops.jvp(vz)),
        "parts/gn_loss_hvp": timer(lambda: vjp(ops._g, ops._h, jv)),
        "parts/gn_vjp": timer(lambda: ops.vjp(w)),
        "parts/gn": timer(lambda: ops.gn(vz)),
        "parts/heff": timer(lambda: ops.heff(vz)),
        "parts/m": timer(lambda: ops.m(vz)),
        "parts/first_linear": _first_linear(view.head, Z, dtype, n, timer),
    }


def _first_linear(
    head: nn.Module,
    Z: torch.Tensor,
    dtype: torch.dtype,
    n_block: int,
    timer: Callable[[Callable[[], Any]], float],
) -> float:
    """What a product would save with the head's first Linear on the block's rows alone.

    That layer is linear, so the operators on the block factor as W^T (.) W through its
    output: its two matmuls per product (the tangent in, the cotangent out) would take
    ``n_block`` of the N rows. Returns the CPU seconds of the two on all rows less on
    ``n_block`` rows (0 for a head without a Linear layer).
    """
    first = next((m for m in head.modules() if isinstance(m, nn.Linear)), None)
    if first is None:
        return 0.0
    weight = first.weight.detach().to(dtype)  # (h, d)
    rows = Z.reshape(-1, Z.shape[-1]).to(dtype)  # (V * N, d)
    block = rows[: Z.shape[0] * n_block]
    out, out_block = rows @ weight.T, block @ weight.T

    def two(x: torch.Tensor, y: torch.Tensor) -> Callable[[], Any]:
        return lambda: (x @ weight.T, y @ weight)

    return timer(two(rows, out)) - timer(two(block, out_block))


def _pad(v: torch.Tensor, ops: HeadOperators, index: torch.Tensor) -> torch.Tensor:
    """The sub-block's vector ``v`` as a (V, N, d) vector, zero off the block."""
    views, _, d = ops.shape
    full = torch.zeros(ops.shape, dtype=ops.dtype)
    full[:, index, :] = v.reshape(views, -1, d).to(ops.dtype)
    return full


def _share(row: dict[str, Any], *labels: str) -> str:
    return f"{sum(row.get(f'breakdown/{label}/share', 0.0) for label in labels):.0%}"


def breakdown_tables(rows: list[dict[str, Any]]) -> str:
    """Markdown tables of :func:`breakdown` and :func:`product_parts` rows, one per recipe."""
    lines = [
        "| recipe | record: steps (s) | products H_eff / GN / M: count, share "
        "| setup + graphs | Lanczos rest | stats | rho | other |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        counts = " / ".join(str(r[f"breakdown/product/{op}/count"]) for op in ("heff", "gn", "m"))
        products = _share(r, "product/heff", "product/gn", "product/m")
        other = f"{r['breakdown/other'] / r['breakdown/total']:.0%}"
        lines.append(
            f"| {r['recipe']} | {r['breakdown/total_in_steps']:.2f} ({r['breakdown/total']:.2f})"
            f" | {counts}, {products} | {_share(r, 'setup', 'graph/heff', 'graph/m', 'check_loss')}"
            f" | {_share(r, 'lanczos')} | {_share(r, 'stats')} | {_share(r, 'rho')} | {other} |"
        )
    lines += [
        "",
        "| recipe | GN: J v / loss'' / J^T w = product (ms) | H_eff (ms) | M (ms) "
        "| first Linear on the block: saves (ms) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        ms = {k: 1e3 * v for k, v in r.items() if k.startswith("parts/")}
        lines.append(
            f"| {r['recipe']} | {ms['parts/gn_jvp']:.1f} / {ms['parts/gn_loss_hvp']:.1f} / "
            f"{ms['parts/gn_vjp']:.1f} = {ms['parts/gn']:.1f} | {ms['parts/heff']:.1f} | "
            f"{ms['parts/m']:.1f} | {ms.get('parts/first_linear', float('nan')):.1f} |"
        )
    return "\n".join(lines)


def _rows_only_operators(
    view: Any, Z: torch.Tensor, index: torch.Tensor, dtype: torch.dtype
) -> HeadOperators:
    """The operators with only the block's rows in the graph, the other rows' H held constant.

    The head runs on the block's rows and on the others apart (each view); the loss sees all N
    rows. Equal to the whole batch's operators on the block only where nothing couples the
    samples (no BatchNorm in the head, a loss that is a sum over samples of terms of their own
    rows): :func:`rows_only` measures how far from them it is.
    """
    head, was_training = view.head, view.head.training
    rest = torch.tensor([i for i in range(Z.shape[1]) if i not in set(index.tolist())])
    try:
        head.train(operators_module.runs_in_training_mode(head))
        forward = operators_module.frozen_module(head, dtype, Z.device)
        with torch.enable_grad():
            zb = Z[:, index].to(dtype).clone().requires_grad_(True)  # (V, s, d)
            rows = []
            for v in range(Z.shape[0]):
                hb, hr = forward(zb[v]), forward(Z[v, rest].to(dtype)).detach()
                h = hb.new_zeros(Z.shape[1], hb.shape[1]).index_put((index,), hb)
                rows.append(h.index_put((rest,), hr))
            h = torch.stack(rows)  # (V, N, p)
            (g,) = torch.autograd.grad(view.loss_of_outputs(h), h, create_graph=True)
            u = torch.zeros_like(h, requires_grad=True)
            return HeadOperators(zb, h, g, vjp(h, zb, u, create_graph=True), u)
    finally:
        head.train(was_training)


def rows_only(
    view: Any, cfg: GeometryConfig, timer: Callable[[Callable[[], Any]], float]
) -> dict[str, float]:
    """Products with only the block's rows in the graph against the record's, on the block.

    ``rows_only/<op>/dev``: max |difference| / max |record's product| on one Gaussian vector
    (0 to round-off where nothing couples the samples); ``rows_only/<op>``: CPU seconds of one
    product, ``rows_only/<op>/record``: the record's own product's, timed in turn.
    """
    Z = view.features.detach()
    dtype = getattr(torch, cfg.spectrum.dtype)
    index = block_indices(Z.shape[1], cfg.spectrum.max_samples)
    if index is None:
        return {}
    full = operators_module.head_operators(view.head, view.loss_of_outputs, Z, dtype=dtype)
    rows = _rows_only_operators(view, Z, index, dtype)
    g = torch.Generator().manual_seed(0)
    v = torch.randn(rows.dim, generator=g, dtype=torch.float64).to(dtype)
    out: dict[str, float] = {}
    for op in ("heff", "gn", "m"):
        record = restrict_to_block(getattr(full, op), full.shape, index)
        mine, theirs = getattr(rows, op)(v), record(v)
        scale = float(theirs.abs().max()) or 1.0
        out[f"rows_only/{op}/dev"] = float((mine - theirs).abs().max()) / scale
        out[f"rows_only/{op}/record"] = timer(lambda: record(v))  # noqa: B023
        out[f"rows_only/{op}"] = timer(lambda: getattr(rows, op)(v))  # noqa: B023
    return out


def paired_record(view: Any, cfg: GeometryConfig, step: float, pairs: int = 3) -> dict[str, Any]:
    """The record with the block's rows alone in the graph (row-wise heads) and without, in turn.

    ``record/whole_batch``: the former path (``spectrum.row_wise`` answering False), ``record/
    rows_only``: today's; CPU seconds, medians of ``pairs`` alternating pairs, and in steps.
    """
    lever = spectrum.row_wise
    times: dict[str, list[float]] = {"whole_batch": [], "rows_only": []}
    for _ in range(pairs):
        for name in times:
            spectrum.row_wise = lever if name == "rows_only" else (lambda _: False)  # type: ignore[assignment]
            try:
                start = time.process_time()
                measure_module.measure(
                    view, cfg.measure, cfg.spectrum, seed=cfg.seed, density=False
                )
                times[name].append(time.process_time() - start)
            finally:
                spectrum.row_wise = lever
    out: dict[str, Any] = {"record/row_wise": lever(view.head)}
    for name, seconds in times.items():
        out[f"record/{name}"] = statistics.median(seconds)
        out[f"record/{name}/in_steps"] = statistics.median(seconds) / step
    out["record/ratio"] = out["record/rows_only"] / out["record/whole_batch"]
    return out
