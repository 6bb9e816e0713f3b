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
loss's second derivative applied to it, J^T w; and one H_eff and one M product.
"""

from __future__ import annotations

import functools
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
from solo_geometry.linalg.operators import HeadOperators, _grad, block_indices


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
        measure_module.measure(view, cfg, density=False)
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
    dtype = getattr(torch, cfg.dtype)
    ops = operators_module.head_operators(view.head, view.loss_of_outputs, Z, dtype=dtype)
    index = block_indices(Z.shape[1], cfg.max_samples)
    n = Z.shape[1] if index is None else index.numel()
    v = torch.randn(Z.shape[0] * n * Z.shape[2], generator=torch.Generator().manual_seed(0))
    vz = ops._as_z(v) if index is None else _pad(v, ops, index)
    ops.heff(vz), ops.m(vz)  # the graphs
    jv = ops.jvp(vz)
    w = _grad(ops._g, ops._h, jv)
    return {
        "parts/gn_jvp": timer(lambda: ops.jvp(vz)),
        "parts/gn_loss_hvp": timer(lambda: _grad(ops._g, ops._h, jv)),
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
