"""Measurements under DDP: the global batch measured once, with no collective inside.

Under Lightning's DDP every rank holds one chunk of the global batch. A measurement of the
training loss's geometry needs the whole global batch, and a collective inside it (solo-learn's
``gather`` in SimCLR or VICReg, Barlow Twins' ``all_reduce``, SyncBatchNorm) would run once per
Hessian-vector product: an exception on one rank in the middle of Lanczos would leave the others
blocked, and double backward through solo-learn's ``GatherLayer`` gives rank-local second
derivatives. :func:`measure_across_ranks` therefore runs, on every rank, in this order:

1. *rank-local* (collectives off): the module's :class:`ViewParts` of its own chunk (backbone
   features, the fixed quantities of its loss, its images), serialised, inside ``try``;
2. *agreement* (``all_reduce`` MIN of "ok"): if any rank failed, every rank learns every reason
   (``all_gather_object``) and raises :class:`MeasurementSkipped`;
3. *gather* (``gather_object`` to rank zero) of the serialised parts;
4. *rank zero only* (collectives off): the view of the global batch
   (``geometry_global_view``) and the measurement, serialised, inside ``try``;
5. *agreement* (``all_reduce`` MIN; the other ranks vote ok) and ``broadcast_object_list`` of
   rank zero's outcome: the result, or the reason, on every rank.

Every collective is outside the ``try`` blocks of steps 1 and 4 and is reached by every rank in
the same order whatever failed, so the protocol cannot deadlock. Inside steps 1 and 4,
:func:`collectives_off` makes ``torch.distributed`` look uninitialised to the code it runs
(``torch.distributed.is_initialized()`` returns False on the measuring thread), which is how
solo-learn's loss functions are handled without forking it: ``gather``, ``get_rank``,
``concat_all_gather_no_grad`` and Barlow Twins' ``all_reduce`` all test it and take their
single-process path on the global batch. Any collective still called there raises
:class:`CollectiveInMeasurement` (the measurement is skipped) instead of blocking.

The global batch is the concatenation of the ranks' chunks, rank by rank, within each view:
Z (V, R * N, d). Losses that gather (negatives, batch statistics) see all of it, as in training;
what training computes per rank (BatchNorm statistics of a head or predictor without sync BN,
Barlow Twins' standardisation, a host whose losses do not gather) is computed per rank chunk
(:func:`rank_chunks`, :class:`PerRankHead`), so the measured loss is the mean over ranks of
each rank's training loss, whose gradient DDP averages.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

import torch
import torch.distributed as dist
from torch import Tensor, nn

from solo_geometry.runtime.measure import GeometryView

__all__ = [
    "CollectiveInMeasurement",
    "DistributedAware",
    "MeasurementSkipped",
    "PerRankHead",
    "ViewParts",
    "collectives_off",
    "measure_across_ranks",
    "per_rank",
    "rank_chunks",
    "ranks_of",
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
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all",
    "all_to_all_single", "barrier", "broadcast", "broadcast_object_list", "gather",
    "gather_object", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter",
    "scatter_object_list", "send", "recv", "isend", "irecv", "_all_gather_base",
)  # fmt: skip
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


# ---------------------------------------------------------------- per-rank chunks
_CHUNKS: ContextVar[int] = ContextVar("solo_geometry_rank_chunks", default=1)


def rank_chunks() -> int:
    """Ranks whose chunks make up the batch being measured (1 outside :func:`ranks_of`)."""
    return _CHUNKS.get()


@contextmanager
def ranks_of(n: int) -> Iterator[None]:
    """Within the block, batches are the concatenation of ``n`` equal rank chunks."""
    token = _CHUNKS.set(n)
    try:
        yield
    finally:
        _CHUNKS.reset(token)


def _has_batch_norm(module: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules())


def per_rank(fn: Callable[[Tensor], Tensor], module: nn.Module, x: Tensor) -> Tensor:
    """``fn(x)`` for a module ``fn`` applies, per rank chunk when it has BatchNorm.

    Without sync BN, a rank's BatchNorm in training mode normalises with its own chunk's
    statistics; a module without BatchNorm acts per sample, so one call gives the same.

    Args:
        fn: the module's forward (or a functional copy of it).
        module: the module (to look for BatchNorm).
        x: rows (R * N, ...) of the global batch, R = :func:`rank_chunks`.

    Returns:
        ``fn`` of each chunk, concatenated in rank order.
    """
    chunks = rank_chunks()
    if chunks == 1 or not _has_batch_norm(module) or x.shape[0] % chunks:
        return fn(x)
    return torch.cat([fn(c) for c in x.chunk(chunks)])  # (R * N, ...)


class PerRankHead(nn.Module):
    """A head applied per rank chunk to the global batch's rows (BatchNorm as each rank had it).

    Inputs with any other number of rows (e.g. the few samples of augmentation tangents) go
    through the head in one call.

    Args:
        head: the measured head (it stays the same module: parameters are shared).
        ranks: R.
        rows: R * N, the global batch's rows per view.
    """

    def __init__(self, head: nn.Module, ranks: int, rows: int) -> None:
        super().__init__()
        self.head = head
        self.ranks, self.rows = ranks, rows

    def forward(self, x: Tensor) -> Tensor:
        """Apply the head per rank chunk ``(R * N, d) -> (R * N, p)``."""
        if x.shape[0] != self.rows:
            return self.head(x)
        return torch.cat([self.head(c) for c in x.chunk(self.ranks)])  # (R * N, p)


def global_head(head: nn.Module, ranks: int, rows: int) -> nn.Module:
    """The head as it acts on the global batch: per rank chunk if it has BatchNorm."""
    return PerRankHead(head, ranks, rows) if ranks > 1 and _has_batch_norm(head) else head


# ---------------------------------------------------------------- the protocol
def _dumps(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _loads(data: bytes, device: torch.device | str = "cpu") -> Any:
    return torch.load(io.BytesIO(data), map_location=device, weights_only=False)


def _agree(ok: bool) -> bool:
    """All ranks ok? (``all_reduce`` MIN; every rank must call it)."""
    device = (
        torch.device("cuda", torch.cuda.current_device())
        if dist.get_backend() == "nccl"
        else torch.device("cpu")
    )
    flag = torch.tensor([1 if ok else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def _why(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


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
    payload, reason = b"", ""
    try:  # 1. rank-local
        if not isinstance(module, DistributedAware):
            raise TypeError(f"{type(module).__name__} has no geometry_parts/geometry_global_view")
        with collectives_off():
            parts = module.geometry_parts(batch)
            if not bool(torch.isfinite(parts.features).all()):
                raise FloatingPointError("non-finite backbone features")
            payload = _dumps(_to_cpu(parts))
    except Exception as err:  # noqa: BLE001 - becomes the agreed skip below
        reason = f"rank {rank}: {_why(err)}"
    if not _agree(not reason):  # 2. agreement (every rank)
        reasons: list[Any] = [None] * size
        dist.all_gather_object(reasons, reason)
        raise MeasurementSkipped("; ".join(r for r in reasons if r))
    gathered: list[Any] | None = [None] * size if rank == 0 else None
    dist.gather_object(payload, gathered, dst=0)  # 3. gather (every rank)
    outcome, reason = b"", ""
    if rank == 0:  # 4. rank zero measures the global batch
        try:
            with collectives_off():
                assert gathered is not None
                view = module.geometry_global_view([_loads(p, device) for p in gathered])
                outcome = _dumps(run(view))
        except Exception as err:  # noqa: BLE001 - becomes the agreed skip below
            reason = f"rank 0: {_why(err)}"
    ok = _agree(not reason)  # 5. agreement and rank zero's outcome (every rank)
    box: list[Any] = [outcome if ok else reason]
    dist.broadcast_object_list(box, src=0)
    if not ok:
        raise MeasurementSkipped(box[0])
    return _loads(box[0])


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
