"""Measurements under DDP: the global batch measured once, with no collective inside.

Under Lightning's DDP every rank holds one chunk of the global batch. A measurement of the
training loss's geometry needs the whole global batch, and a collective inside it (solo-learn's
``gather`` in SimCLR or VICReg, Barlow Twins' ``all_reduce``, SyncBatchNorm) would run once per
Hessian-vector product: an exception on one rank in the middle of Lanczos would leave the others
blocked, and double backward through solo-learn's ``GatherLayer`` gives rank-local second
derivatives. :func:`measure_across_ranks` therefore runs, on every rank, in this order:

1. *rank-local* (collectives off): the module's :class:`ViewParts` of its own chunk (backbone
   features, the fixed quantities of its loss; images on rank zero only: only they are used),
   serialised on the other ranks, inside ``try``;
2. *agreement* (``all_gather`` of each payload's size, -1 for a failure): if any rank failed,
   every rank learns every reason (``all_gather_object``) and raises :class:`MeasurementSkipped`;
3. *room* (rank zero, inside ``try``): the buffers the other ranks' payloads arrive in, then an
   agreement (``all_reduce`` MIN, every rank): an out-of-memory error here skips on all;
4. *transfer*: each other rank sends its payload to rank zero (``send``), which receives it
   (``recv``) into its buffer (sizes agreed, buffers allocated: the transfer allocates nothing);
5. *rank zero only* (collectives off, inside ``try``): the view of the global batch
   (``geometry_global_view``) and the measurement, serialised;
6. *outcome*: rank zero broadcasts the outcome's size (-1 and the reason on failure); every
   rank makes room for it (agreed), receives it and reads it back (agreed), so every rank
   returns the same result or raises the same :class:`MeasurementSkipped`.

Every collective is outside the ``try`` blocks and is reached by every rank in the same order
whatever failed where (out-of-memory, non-finite features, an exception in any part), so the
protocol cannot deadlock. Inside steps 1 and 5,
:func:`collectives_off` makes ``torch.distributed`` look uninitialised to the code it runs
(``torch.distributed.is_initialized()`` returns False on the measuring thread), which is how
solo-learn's loss functions are handled without forking it: ``gather``, ``get_rank``,
``concat_all_gather_no_grad`` and Barlow Twins' ``all_reduce`` all test it and take their
single-process path on the global batch (and ``SyncBatchNorm`` normalises the batch it is
given). Any collective still called there raises :class:`CollectiveInMeasurement` (the
measurement is skipped) instead of blocking.

The global batch is the concatenation of the ranks' chunks, rank by rank, within each view:
Z (V, R * N, d). Losses that gather (negatives, batch statistics) see all of it, as in training;
what training computes per rank (BatchNorm statistics of a head, predictor or momentum head
without sync BN, Barlow Twins' standardisation, a host whose losses do not gather) is computed
per rank chunk, and under sync BN the BatchNorm layers see the whole global batch
(:mod:`solo_geometry.runtime.chunks`).
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar, runtime_checkable

import torch
import torch.distributed as dist
from torch import Tensor

from solo_geometry.runtime.view import GeometryView

__all__ = [
    "CollectiveInMeasurement",
    "DistributedAware",
    "MeasurementSkipped",
    "ViewParts",
    "collectives_off",
    "measure_across_ranks",
    "world",
]

T = TypeVar("T")


class CollectiveInMeasurement(RuntimeError):
    """A collective was called inside a measurement (it would block the other ranks)."""


class MeasurementSkipped(RuntimeError):
    """A measurement failed on some rank; every rank raises it with every rank's reason."""


@dataclass(frozen=True)
class ViewParts:
    """One rank's share of a view: what the global view is assembled from.

    Attributes:
        features: backbone features Z (V, N, d) of this rank's chunk, detached.
        context: the fixed quantities of this rank's loss (tensors, lists and dicts of them).
        images: this rank's first-view images (N, C, H, W), or None.
    """

    features: Tensor
    context: Any
    images: Tensor | None = None


@runtime_checkable
class DistributedAware(Protocol):
    """A module whose view can be assembled from every rank's parts (both hosts are)."""

    def geometry_parts(self, batch: Any) -> ViewParts:
        """This rank's :class:`ViewParts` of ``batch``; must call no collective."""
        ...

    def geometry_global_view(self, parts: list[ViewParts]) -> Any:
        """The :class:`GeometryView` of the global batch from every rank's parts, in rank order."""
        ...


def world() -> tuple[int, int]:
    """``(rank, world size)`` of the default process group; ``(0, 1)`` when there is none."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


# ---------------------------------------------------------------- collectives off
_COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "gather",
    "gather_object",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "scatter_object_list",
    "send",
    "recv",
    "isend",
    "irecv",
    "_all_gather_base",
)
_local = threading.local()
_lock = threading.Lock()
_saved: dict[str, Any] = {}


def _off() -> bool:
    return getattr(_local, "depth", 0) > 0


def _guarded(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        if _off():
            raise CollectiveInMeasurement(
                f"torch.distributed.{name} called inside a measurement; it would block the "
                "other ranks"
            )
        return original(*args, **kwargs)

    return call


@contextmanager
def collectives_off() -> Iterator[None]:
    """Run code as if ``torch.distributed`` were not initialised (this thread only).

    ``torch.distributed.is_initialized()`` returns False and every collective raises
    :class:`CollectiveInMeasurement`; other threads and code after the block see
    ``torch.distributed`` unchanged (the functions are restored when the outermost block exits).
    """
    if not dist.is_available():
        yield
        return
    with _lock:
        if not _saved:
            _saved["is_initialized"] = dist.is_initialized
            original = dist.is_initialized
            dist.is_initialized = lambda: False if _off() else original()
            for name in _COLLECTIVES:
                if hasattr(dist, name):
                    _saved[name] = getattr(dist, name)
                    setattr(dist, name, _guarded(name, _saved[name]))
        _saved.setdefault("_users", 0)
        _saved["_users"] += 1
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        yield
    finally:
        _local.depth -= 1
        with _lock:
            _saved["_users"] -= 1
            if not _saved["_users"]:
                del _saved["_users"]
                for name, fn in _saved.items():
                    setattr(dist, name, fn)
                _saved.clear()


# ---------------------------------------------------------------- the protocol
def _dumps(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _loads(data: bytes, device: torch.device | str = "cpu") -> Any:
    return torch.load(io.BytesIO(data), map_location=device, weights_only=False)


def _device() -> torch.device:
    """Where the collectives' tensors live: the current CUDA device under NCCL, else the CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _as_tensor(data: bytes) -> Tensor:
    """Bytes as a uint8 tensor (n,) on the collectives' device."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(_device())


def _room(n: int) -> Tensor:
    """A buffer (n,) of bytes on the collectives' device, for a payload to arrive in."""
    return torch.empty(n, dtype=torch.uint8, device=_device())


def _why(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def _agreed(reason: str) -> None:
    """Every rank: return if no rank has a reason, else raise every rank's reasons on all.

    ``all_reduce`` MIN of "ok" (and ``all_gather_object`` of the reasons on failure); every
    rank must call it at the same point.
    """
    flag = torch.tensor([0 if reason else 1], dtype=torch.int32, device=_device())
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    if not flag.item():
        reasons: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(reasons, reason)
        raise MeasurementSkipped("; ".join(r for r in reasons if r))


def _own_parts(module: Any, batch: Any, rank: int) -> tuple[ViewParts | None, Tensor | None]:
    """Step 1: this rank's parts (rank zero keeps them) or payload (the others send it)."""
    if not isinstance(module, DistributedAware):
        raise TypeError(f"{type(module).__name__} has no geometry_parts/geometry_global_view")
    with collectives_off():
        parts = module.geometry_parts(batch)
        if not bool(torch.isfinite(parts.features).all()):
            raise FloatingPointError("non-finite backbone features")
        if rank == 0:
            return parts, None
        return None, _as_tensor(_dumps(_to_cpu(replace(parts, images=None))))  # no images


def _sizes(payload: Tensor | None, failed: bool, size: int) -> list[int]:
    """Step 2 (every rank): each rank's payload size in bytes (0 on rank zero, -1: failed)."""
    own = -1 if failed else (0 if payload is None else payload.numel())
    out = [torch.zeros(1, dtype=torch.int64, device=_device()) for _ in range(size)]
    dist.all_gather(out, torch.tensor([own], dtype=torch.int64, device=_device()))
    return [int(t.item()) for t in out]


def _transfer(rank: int, payload: Tensor | None, buffers: list[Tensor]) -> None:
    """Step 4: the other ranks' payloads into rank zero's buffers (sizes agreed)."""
    if rank == 0:
        for src, buffer in enumerate(buffers, start=1):
            dist.recv(buffer, src=src)
    else:
        assert payload is not None
        dist.send(payload, dst=0)


def _outcome(rank: int, outcome: bytes, reason: str) -> Any:
    """Step 6 (every rank): rank zero's outcome, or its reason, read back on every rank."""
    n = torch.tensor([-1 if reason else len(outcome)], dtype=torch.int64, device=_device())
    dist.broadcast(n, src=0)
    if n.item() < 0:
        box: list[Any] = [reason]
        dist.broadcast_object_list(box, src=0)
        raise MeasurementSkipped(box[0])
    buffer, reason = None, ""
    try:
        buffer = _as_tensor(outcome) if rank == 0 else _room(int(n.item()))
    except Exception as err:  # noqa: BLE001 - becomes the agreed skip below
        reason = f"rank {rank}: {_why(err)}"
    _agreed(reason)
    assert buffer is not None
    dist.broadcast(buffer, src=0)
    result = None
    try:
        result = _loads(buffer.cpu().numpy().tobytes())
    except Exception as err:  # noqa: BLE001 - becomes the agreed skip below
        reason = f"rank {rank}: {_why(err)}"
    _agreed(reason)
    return result


def measure_across_ranks(
    module: Any, batch: Any, run: Callable[[GeometryView], T], device: torch.device | str = "cpu"
) -> T:
    """``run`` on the view of the whole global batch, deadlock-free (module docstring).

    Single-process: ``run(module.geometry_view(batch))`` (collectives off). Under DDP the module
    must be :class:`DistributedAware`; rank zero runs ``run`` and every rank returns its result.

    Args:
        module: the LightningModule (``geometry_view``; ``geometry_parts`` and
            ``geometry_global_view`` under DDP).
        batch: this rank's training batch.
        run: the measurement of a view; its result must be serialisable by ``torch.save``.
        device: where rank zero puts the gathered parts.

    Returns:
        ``run``'s result, the same on every rank.

    Raises:
        MeasurementSkipped: on every rank, if the measurement failed on any (every reason).
    """
    rank, size = world()
    if size == 1:  # one process (a one-rank group too: its gathers are identities, skip them)
        with collectives_off():
            return run(module.geometry_view(batch))
    own, payload, reason = None, None, ""
    try:  # 1. rank-local
        own, payload = _own_parts(module, batch, rank)
    except Exception as err:  # noqa: BLE001 - becomes the agreed skip below
        reason = f"rank {rank}: {_why(err)}"
    sizes = _sizes(payload, bool(reason), size)  # 2. agreement on the parts (every rank)
    if min(sizes) < 0:
        _agreed(reason or "")  # every rank fails it: some rank has a reason
    buffers: list[Tensor] = []
    if rank == 0:  # 3. rank zero makes room for every payload
        try:
            buffers = [_room(n) for n in sizes[1:]]
        except Exception as err:  # noqa: BLE001 - becomes the agreed skip below
            reason = f"rank 0: {_why(err)}"
    _agreed(reason)  # (every rank)
    _transfer(rank, payload, buffers)  # 4. only the other ranks' payloads travel
    outcome = b""
    if rank == 0:  # 5. rank zero measures the global batch
        try:
            with collectives_off():
                parts = [own, *(_loads(b.cpu().numpy().tobytes(), device) for b in buffers)]
                del buffers[:]
                outcome = _dumps(run(module.geometry_global_view(parts)))
        except Exception as err:  # noqa: BLE001 - becomes the agreed skip below
            reason = f"rank 0: {_why(err)}"
    return _outcome(rank, outcome, reason)  # 6. every rank: the same result or skip


def _to_cpu(obj: Any) -> Any:
    """``obj`` with every tensor (in dataclasses, lists, tuples, dicts) moved to the CPU."""
    if isinstance(obj, Tensor):
        return obj.detach().cpu()
    if isinstance(obj, ViewParts):
        return ViewParts(_to_cpu(obj.features), _to_cpu(obj.context), _to_cpu(obj.images))
    if isinstance(obj, list | tuple):
        return type(obj)(_to_cpu(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    return obj
