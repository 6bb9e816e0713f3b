"""The operators' principal sub-block: the products on some samples' rows of the batch.

docs/design.md section 3 ("Which loss"): ``max_samples`` restricts an operator to the principal
sub-block of those samples' rows (every view); the loss still sees the whole batch. Two ways to
take it, the same numbers:

* :func:`restrict_to_block`: any operator of :mod:`~solo_geometry.linalg.operators`, its
  vectors padded with zeros to the whole batch and the product read back on the block's rows;
* :func:`row_operators`: for a :func:`row_wise` head (each output row depends on its own input
  row alone: Linear layers, elementwise activations, LayerNorm and GroupNorm, no BatchNorm),
  only the block's rows in the graph and the others' outputs constants of the loss, so the
  head's passes take the block's rows instead of the whole batch's.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from solo_geometry.linalg.checks import check_vector
from solo_geometry.linalg.operators import HeadOperators, LossFn, frozen_module, operators_at

__all__ = ["ROW_WISE", "block_indices", "restrict_to_block", "row_operators", "row_wise"]


def block_indices(
    n: int, max_samples: int | None, device: torch.device | str | None = None
) -> Tensor | None:
    """Evenly spaced sample indices of the operators' sub-block (on ``device``), or None."""
    if max_samples is None or max_samples >= n:
        return None
    return torch.linspace(0, n - 1, max_samples, dtype=torch.float64).round().long().to(device)


def restrict_to_block(
    matvec: Callable[[Tensor], Tensor],
    shape: torch.Size,
    index: Tensor | None,
    *,
    batched: bool = False,
) -> Callable[[Tensor], Tensor]:
    """Principal sub-block of ``matvec`` on the coordinates of samples ``index``.

    ``batched``: ``matvec`` and the sub-block's product map (B, dim) to (B, dim). The index is
    moved to the vectors' device once, on the first product there: no product indexes GPU
    vectors with a CPU tensor (a host-to-device copy each time).
    """
    if index is None:
        return matvec
    views, _, d = shape
    on_device = {index.device: index}

    def sub(v: Tensor) -> Tensor:
        block = views * index.numel() * d  # (V, m, d) flattened
        check_vector(v, block * (v.shape[0] if batched and v.ndim else 1), "v", "V * m * d")
        if v.device not in on_device:
            on_device[v.device] = index.to(v.device)
        index_ = on_device[v.device]
        lead = (v.shape[0],) if batched else ()
        full = v.new_zeros(*lead, *shape)  # ([B,] V, N, d)
        full[..., index_, :] = v.reshape(*lead, views, -1, d)  # ([B,] V, m, d) into the batch
        out = matvec(full.reshape(*lead, -1)).reshape(*lead, *shape)
        return out[..., index_, :].reshape(*lead, -1)

    return sub


# Modules that map each row of their input alone, matched by exact type. LayerNorm and GroupNorm
# normalise each row with its own statistics and hold no running ones. Left out: Dropout (its
# mask, drawn once per call, would be drawn for the block and the other rows apart), BatchNorm
# (batch statistics) and InstanceNorm, which reads a head's 2-D (N, p) rows as one unbatched
# sample whose channels are the rows: its affine weights and running statistics would be
# indexed by a row's position in the batch, which the block's rows alone do not keep.
ROW_WISE: tuple[type[nn.Module], ...] = (
    nn.Linear,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.ReLU,
    nn.LeakyReLU,
    nn.GELU,
    nn.SiLU,
    nn.Tanh,
    nn.Sigmoid,
    nn.Softplus,
    nn.Identity,
)


def row_wise(head: nn.Module) -> bool:
    """Whether ``head`` maps each sample's row alone, as a chain of modules shows it.

    True for an ``nn.Sequential`` (nested ones too) of Linear layers, elementwise activations,
    LayerNorm and GroupNorm (:data:`ROW_WISE`): no output row depends on another sample's input,
    so the operators' principal sub-block on some samples' rows is that of the loss with the
    other rows' outputs held constant (:func:`row_operators`). False for anything else:
    BatchNorm (its batch statistics couple the rows), InstanceNorm and Dropout
    (:data:`ROW_WISE`), any module whose forward this cannot see.
    """
    if type(head) is nn.Sequential:
        return all(row_wise(child) for child in head)
    return type(head) in ROW_WISE


def row_operators(
    head: nn.Module,
    loss_fn: LossFn,
    Z: Tensor,
    index: Tensor,
    *,
    dtype: torch.dtype = torch.float64,
) -> HeadOperators:
    """The operators' principal sub-block on samples ``index``, with only their rows in the graph.

    For a :func:`row_wise` head, the sub-block of d2L/dZ2 on the rows of ``index`` (every view)
    is the Hessian of L in those rows with the others fixed; the other rows' outputs do not
    depend on them, so they enter the loss as constants. The head's passes of every product
    then take ``len(index)`` of the N rows, and the products act on vectors of length
    V * len(index) * d: those of ``restrict_to_block(head_operators(...).<op>, ...)``, the same
    numbers. The loss sees the whole batch. Leaves the head as :func:`head_operators` does.

    Args:
        head: a row-wise projection head (:func:`row_wise`; not checked here).
        loss_fn: loss of the head outputs (V, N, p) -> scalar.
        Z: backbone features (V, N, d).
        index: the block's sample indices (:func:`block_indices`).
        dtype: floating dtype of every product.

    Returns:
        The operators on the block, of shape (V, len(index), d).
    """
    forward = frozen_module(head, dtype, Z.device)
    index = index.to(Z.device)
    rest = torch.ones(Z.shape[1], dtype=torch.bool, device=Z.device)
    rest[index] = False
    devices = [Z.device] if Z.device.type == "cuda" else []
    with torch.enable_grad(), torch.random.fork_rng(devices=devices):
        z = Z[:, index].detach().to(dtype).clone().requires_grad_(True)  # (V, s, d)
        rows = []
        for v in range(Z.shape[0]):
            block = forward(z[v])  # (s, p)
            with torch.no_grad():
                other = forward(Z[v, rest].detach().to(dtype))  # (N - s, p)
            h = block.new_zeros(Z.shape[1], block.shape[1]).index_put((index,), block)
            rows.append(h.index_put((rest,), other))
        return operators_at(z, torch.stack(rows), loss_fn)  # H (V, N, p)
