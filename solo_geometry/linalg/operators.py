"""Matrix-free curvature operators of an SSL loss with respect to the backbone features.

For backbone features Z (V, N, d), a projection head h applied per view (H[v] = h(Z[v])) and a
loss L(Z) = loss(H), this module builds the products of docs/design.md section 3 on flat vectors of
length V * N * d, never materialising a matrix:

* ``heff(v)``      H_eff v = d2L/dZ2 v (exact Hessian-vector product, double backward);
* ``gn(v)``        GN v = J^T (d2 loss/dH2) (J v) (Gauss-Newton pullback, J = dH/dZ);
* ``m(v)``         M v = d/dZ <g, J(Z) v> with g = dloss/dH held constant (computed directly,
  not as H_eff - GN);
* ``pullback(v)``  G v = J^T J v.

Cost of one product: ``heff`` and ``gn`` cost about the same, the head's two passes (J v in,
J^T w out) and the loss's second derivative once; on solo-learn's cifar recipes at 2 x 32
samples in float32 the head's passes are 87 to 98% of a GN product (SimCLR, VICReg, Barlow
Twins, DINO), the loss's second derivative 32% for BYOL (its predictor) and 85% for MoCo v2+
(its key queue) (``benchmarks/profile_record.py --breakdown``). ``m`` never applies the loss's
second derivative: M's products cost 0.05 to 0.85 of GN's, which is why M is applied through
its own graph rather than as ``heff(v) - gn(v)``. Products in float32 cost about a third of
float64's on a CPU.

Every graph is built once, on the first product that needs it, and reused by every later one
(a caller that only takes ``jvp`` products never builds the second-order graphs). The head
runs through :func:`torch.func.functional_call` on detached copies of its parameters and buffers
(cast to the requested dtype), in training mode when it holds BatchNorm or InstanceNorm layers
(:func:`runs_in_training_mode`) so that they normalise as in training (BatchNorm: J couples the
samples of each view). The module itself is never written to: parameters,
``.grad``, BatchNorm running statistics and ``num_batches_tracked`` and its train/eval mode are
exactly as before (the mode is restored in ``finally``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.nn.modules.batchnorm import _BatchNorm, _NormBase

from solo_geometry.linalg.checks import check_features, check_head, check_vector

__all__ = [
    "HeadOperators",
    "LossFn",
    "frozen_module",
    "has_batch_norm",
    "head_jvp",
    "head_operators",
    "operators_at",
    "piecewise_linear",
    "runs_in_training_mode",
    "vjp",
]

LossFn = Callable[[Tensor], Tensor]


def has_batch_norm(module: nn.Module) -> bool:
    """Whether ``module`` holds a layer whose training-mode output couples the rows of a batch.

    BatchNorm (1d, 2d, 3d, their lazy forms and ``SyncBatchNorm``: torch's ``_BatchNorm``)
    normalises each feature with the batch's statistics in training mode, so each output row
    depends on every input row: the pullback metric is batch-level, and under DDP each rank's
    chunk is normalised alone unless synced (:mod:`solo_geometry.runtime.chunks`). InstanceNorm,
    GroupNorm and LayerNorm normalise within each sample, so rows stay independent: False.
    InstanceNorm with ``track_running_stats=True`` too: in training mode it uses each
    instance's own statistics and in eval mode its running ones, per channel, never the
    batch's (its mode still matters to the operators, :func:`runs_in_training_mode`).
    """
    return any(isinstance(m, _BatchNorm) for m in module.modules())


def runs_in_training_mode(head: nn.Module) -> bool:
    """Whether the operators run ``head`` in training mode (else in its own mode).

    Training mode when it is in it or holds a normalisation layer with a training mode (torch's
    ``_NormBase``: BatchNorm, InstanceNorm), so that the layer normalises with the statistics
    training used (the batch's, each instance's), not with running ones.
    """
    return head.training or any(isinstance(m, _NormBase) for m in head.modules())


# Modules whose second derivative vanishes almost everywhere, matched by exact type (a subclass
# may compute anything in its forward). Dropout is linear given its mask, drawn once per record.
PIECEWISE_LINEAR: tuple[type[nn.Module], ...] = (
    nn.Linear,
    nn.ReLU,
    nn.LeakyReLU,
    nn.Identity,
    nn.Dropout,
    nn.Flatten,
)


def piecewise_linear(head: nn.Module) -> bool:
    """Whether ``head`` is piecewise linear in its input, as a chain of modules shows it.

    True for an ``nn.Sequential`` (nested ones too) of Linear layers and ReLU, LeakyReLU,
    Identity, Dropout and Flatten modules: its Hessian in the input is 0 almost everywhere, so
    M = 0 and H_eff = GN (docs/design.md section 3). False for anything else, BatchNorm
    included (it normalises by batch statistics of the input) and any module whose forward
    this cannot see through.
    """
    if type(head) is nn.Sequential:
        return all(piecewise_linear(child) for child in head)
    return type(head) in PIECEWISE_LINEAR


def vjp(
    output: Tensor,
    wrt: Tensor,
    grad_output: Tensor,
    *,
    create_graph: bool = False,
    batched: bool = False,
) -> Tensor:
    """Vector-Jacobian product ``grad_output^T d output / d wrt``; zeros where nothing depends.

    ``batched``: ``grad_output`` holds B vectors along a leading dimension, all pulled back
    in one pass (``is_grads_batched``, vmap over the backward graph); the result has it too.
    """
    if not output.requires_grad:
        lead = (grad_output.shape[0],) if batched else ()
        return wrt.new_zeros(*lead, *wrt.shape)
    (result,) = torch.autograd.grad(
        output,
        wrt,
        grad_outputs=grad_output,
        retain_graph=True,
        create_graph=create_graph,
        allow_unused=True,
        materialize_grads=True,
        is_grads_batched=batched,
    )
    return result


def frozen_module(
    head: nn.Module, dtype: torch.dtype, device: torch.device
) -> Callable[[Tensor], Tensor]:
    """The head as a pure function of its input, on detached copies of its state.

    Floating parameters and buffers are cast to ``dtype``; buffers are cloned, so BatchNorm
    running statistics updated in training mode land in the copies, never in ``head``.
    """

    def _copy(t: Tensor) -> Tensor:
        t = t.detach().to(device)
        return t.to(dtype) if t.is_floating_point() else t.clone()

    state = {name: _copy(p) for name, p in head.named_parameters()}
    state.update({name: _copy(b).clone() for name, b in head.named_buffers()})

    def forward(x: Tensor) -> Tensor:
        return functional_call(head, state, (x,), strict=False)

    return forward


class HeadOperators:
    """Curvature operators of ``loss_fn(head(Z))`` at a fixed Z (see the module docstring).

    Build with :func:`head_operators`. Every product takes and returns a flat vector of length
    ``dim = V * N * d`` (any shape with that many elements is accepted) in ``dtype``.
    """

    def __init__(self, z: Tensor, h: Tensor, g: Tensor, jt_u: Tensor, u: Tensor) -> None:
        self._z = z  # (V, N, d) leaf, requires grad
        self._h = h  # (V, N, p) head outputs, graph to z
        self._g = g  # (V, N, p) dloss/dH with create_graph: graph to h
        self._jt_u = jt_u  # (V, N, d) J^T u, linear in the dummy u: gives J v by double-vjp
        self._u = u  # (V, N, p) dummy leaf
        self._unbatched: set[str] = set()  # products vmap refused: taken one vector at a time

    @functools.cached_property
    def _grad_z(self) -> Tensor:
        """dL/dZ = J^T g with its full graph, built on the first ``heff`` product."""
        with torch.enable_grad():
            return vjp(self._h, self._z, self._g, create_graph=True)  # (V, N, d)

    @functools.cached_property
    def _jt_g(self) -> Tensor:
        """J^T g with g held constant, built on the first ``m`` product."""
        with torch.enable_grad():
            return vjp(self._h, self._z, self._g.detach(), create_graph=True)  # (V, N, d)

    @property
    def dim(self) -> int:
        """Length V * N * d of the vectors the operators act on."""
        return self._z.numel()

    @property
    def shape(self) -> torch.Size:
        """Shape (V, N, d) of Z."""
        return self._z.shape

    @property
    def dtype(self) -> torch.dtype:
        """Dtype of the products."""
        return self._z.dtype

    def _as_z(self, v: Tensor) -> Tensor:
        check_vector(v, self.dim)
        return v.reshape(self._z.shape).to(self._z)  # (V, N, d)

    def jvp(self, v: Tensor) -> Tensor:
        """J v, of shape (V, N, p), by the double-vjp trick on the stored J^T u graph."""
        return vjp(self._jt_u, self._u, self._as_z(v))

    def vjp(self, w: Tensor) -> Tensor:
        """J^T w for w of shape (V, N, p); returns (V * N * d,)."""
        check_vector(w, self._h.numel(), "w", "V * N * p")
        return vjp(self._h, self._z, w.reshape(self._h.shape).to(self._h)).reshape(-1)

    def heff(self, v: Tensor) -> Tensor:
        """H_eff v = d2L/dZ2 v, (V * N * d,)."""
        return vjp(self._grad_z, self._z, self._as_z(v)).reshape(-1)

    def gn(self, v: Tensor) -> Tensor:
        """GN v = J^T (d2 loss/dH2) J v, (V * N * d,)."""
        loss_hvp = vjp(self._g, self._h, self.jvp(v))  # (V, N, p)
        return self.vjp(loss_hvp)

    def m(self, v: Tensor) -> Tensor:
        """M v = d/dZ <g, J(Z) v> with g = dloss/dH held constant, (V * N * d,)."""
        return vjp(self._jt_g, self._z, self._as_z(v)).reshape(-1)

    def pullback(self, v: Tensor) -> Tensor:
        """G v = J^T J v (batch-level pullback metric), (V * N * d,)."""
        return self.vjp(self.jvp(v))

    def batched(self, name: str) -> Callable[[Tensor], Tensor]:
        """Product ``name`` (``heff``, ``gn`` or ``m``) of B vectors at once, (B, dim) -> (B, dim).

        One backward pass per product of the B vectors (vmap over the stored graphs): on a CPU
        about 1.1 to 1.4 times cheaper than B single products for solo-learn's cifar heads
        (benchmarks/profile_record.py). Should vmap refuse a graph, the product falls back to B
        single products, the same numbers.
        """
        if name not in ("heff", "gn", "m"):
            raise ValueError(f"batched product must be one of ('heff', 'gn', 'm'); got {name!r}")
        single = getattr(self, name)

        def product(vs: Tensor) -> Tensor:
            check_vector(vs, vs.shape[0] * self.dim if vs.ndim else -1, "vs", "B x V * N * d")
            zs = vs.reshape(-1, *self._z.shape).to(self._z)  # (B, V, N, d)
            if name not in self._unbatched:
                try:
                    return self._batched_product(name, zs).reshape(zs.shape[0], -1)
                except RuntimeError:  # an op without a vmap rule: B single products instead
                    self._unbatched.add(name)
            return torch.stack([single(z) for z in zs])

        return product

    def _batched_product(self, name: str, zs: Tensor) -> Tensor:
        if name == "heff":
            return vjp(self._grad_z, self._z, zs, batched=True)
        if name == "m":
            return vjp(self._jt_g, self._z, zs, batched=True)
        jv = vjp(self._jt_u, self._u, zs, batched=True)  # (B, V, N, p)
        return vjp(self._h, self._z, vjp(self._g, self._h, jv, batched=True), batched=True)


def head_operators(
    head: nn.Module,
    loss_fn: LossFn,
    Z: Tensor,
    *,
    dtype: torch.dtype = torch.float64,
) -> HeadOperators:
    """Build the curvature operators of ``loss_fn(head(Z))`` at Z.

    The head is applied to each view separately, H[v] = head(Z[v]), in training mode if it holds
    BatchNorm or InstanceNorm layers (the statistics of that view or of each instance, as in
    training: :func:`runs_in_training_mode`) and in its current mode otherwise; running
    statistics are never changed and the mode is restored in ``finally``. Random layers
    (dropout) draw once, when the graph is built, from a forked global RNG, which is left
    exactly as found.

    Args:
        head: projection head mapping (N, d) to (N, p).
        loss_fn: loss of the head outputs, (V, N, p) -> scalar, every other quantity detached.
            It receives H in ``dtype``: captured targets should be cast with ``t.to(H)``.
        Z: backbone features (V, N, d); detached and cast to ``dtype`` internally.
        dtype: floating dtype of every product.

    Returns:
        The operators, their graphs built once and reused by every product.

    Raises:
        ValueError: if Z is not a finite floating (V, N, d) tensor with values (not on the
            ``meta`` device), the head holds meta tensors, or ``dtype`` is not floating.
        TypeError: if ``head`` is not an ``nn.Module``, Z not a tensor, or ``loss_fn`` does not
            return a scalar tensor.
    """
    check_head(head)
    check_features(Z)
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be floating; got {dtype}")
    was_training = head.training
    devices = [Z.device] if Z.device.type == "cuda" else []
    try:
        head.train(runs_in_training_mode(head))
        forward = frozen_module(head, dtype, Z.device)
        with torch.enable_grad(), torch.random.fork_rng(devices=devices):
            z = Z.detach().to(dtype).clone().requires_grad_(True)  # (V, N, d)
            h = torch.stack([forward(z[v]) for v in range(z.shape[0])])  # (V, N, p)
            return operators_at(z, h, loss_fn)
    finally:
        head.train(was_training)


def operators_at(z: Tensor, h: Tensor, loss_fn: LossFn) -> HeadOperators:
    """The operators of ``loss_fn(h)`` in the leaf ``z``: the loss's gradient and J^T u graphs."""
    loss = loss_fn(h)
    if not isinstance(loss, Tensor) or loss.numel() != 1:
        raise TypeError(f"loss_fn must return a scalar tensor; got {type(loss)}")
    (g,) = torch.autograd.grad(loss.reshape(()), h, create_graph=True)  # (V, N, p)
    u = torch.zeros_like(h, requires_grad=True)  # (V, N, p) dummy for J v
    jt_u = vjp(h, z, u, create_graph=True)  # (V, [N or block], d)
    return HeadOperators(z, h, g, jt_u, u)


def head_jvp(
    head: nn.Module, Z: Tensor, V: Tensor, *, dtype: torch.dtype = torch.float64
) -> Tensor:
    """Directional derivative J_h(Z) V of the head on one batch.

    Batch-level: with BatchNorm (run in training mode) the rows are coupled; without it row i is
    J_h(z_i) v_i. Leaves the head untouched, as :func:`head_operators` does.

    Args:
        head: projection head (N, d) -> (N, p).
        Z: features (N, d).
        V: directions (N, d).
        dtype: computation dtype.

    Returns:
        J V of shape (N, p).

    Raises:
        ValueError: Z or V is not a finite (N, d) tensor, or V's shape is not Z's.
        TypeError: ``head`` is not an ``nn.Module``.
    """
    check_features(Z, "Z", 2, "(N, d)")
    check_vector(V, Z.numel(), "V", "N * d, Z's shape")
    ops = head_operators(head, lambda h: h.sum() * 0.0, Z.unsqueeze(0), dtype=dtype)
    return ops.jvp(V.unsqueeze(0)).squeeze(0)  # (N, p)
