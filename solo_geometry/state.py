"""The one state guard: whatever a measurement touches is as it was afterwards.

Measurements run inside training (docs/design.md section 4): they may switch modules to training
mode (BatchNorm batch statistics), run forwards that update running statistics, enable grad and
draw random numbers. :func:`preserved_state` puts all of that back on exit, normal or not, so
the step that follows is exactly the step that would have run without the measurement. It never
changes torch's global defaults (default dtype, deterministic flags) and never touches ``.grad``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

__all__ = ["preserved_state"]

# Buffers an enclosing guard already saved (by id): a nested guard (the host's feature forward
# inside the monitor's record) restores modes, grad and RNG but copies each buffer once only.
_SAVED: set[int] = set()


@contextmanager
def preserved_state(*modules: nn.Module) -> Iterator[None]:
    """Restore modules' train/eval modes and buffers, grad mode and every RNG state on exit.

    Args:
        *modules: the modules a measurement may touch (their submodules included). Buffers
            (BatchNorm running statistics, ``num_batches_tracked``) are restored in place, so
            references to them stay valid.

    Yields:
        Nothing; the block runs with a forked RNG (CPU and the current CUDA device).

    Nested guards save each buffer once: an inner guard leaves the buffers an outer one holds
    to the outer one (a record copies them once however many parts run under a guard).
    """
    modes = [(m, m.training) for module in modules for m in module.modules()]
    held = {id(b): b for module in modules for b in module.buffers() if id(b) not in _SAVED}
    buffers = [(b, b.detach().clone()) for b in held.values()]
    _SAVED.update(held)
    grad_enabled = torch.is_grad_enabled()
    cuda = [torch.cuda.current_device()] if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=cuda):
        try:
            yield
        finally:
            torch.set_grad_enabled(grad_enabled)
            for sub, mode in modes:
                sub.training = mode
            with torch.no_grad():
                for buf, saved in buffers:
                    buf.copy_(saved)
            _SAVED.difference_update(held)
