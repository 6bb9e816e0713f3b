"""GeometryMonitor: a host-agnostic Lightning Callback measuring the head's geometry.

The monitor needs one thing from the LightningModule: ``geometry_view(batch)`` returning a
:class:`GeometryView` (backbone features of the batch, the head, a loss closure). Every
``every_n_steps`` optimiser steps (step 0 is before the first step) and once at the end of fit
it measures, on a few samples of the current batch (DESIGN.md section 3):

* the extreme eigenvalues of H_eff, GN and M and ||M|| / ||H_eff||;
* normalised std, covariance condition number and effective rank of Z and of H;
* the metric singularity rho of the head along the tangents of colour augmentations;
* in the first and the final record, the SLQ spectral density of H_eff.

A module that also implements ``geometry_capture(enabled)`` (both hosts do) lets the monitor
reuse the features its training step computes: at a measured step the monitor switches capture
on before the step, and measures after the step's backward, before the optimiser changes any
parameter (``on_after_backward``), so ``geometry_view`` costs no second backbone forward. If no
backward comes (a skipped step), it measures at the end of the batch from a fresh forward.

It never changes training (no ``.backward()``; module modes, buffers such as BatchNorm running
statistics and every RNG state are restored in ``finally``) and never stops it (a failed or
non-finite measurement becomes a ``"skipped"`` record, warned about once and counted).
Between measurements its only per-step work is one modulo test.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import lightning.pytorch as pl
import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from lightning_utilities.core.apply_func import apply_to_collection
from torch import Tensor, nn
from typing_extensions import override

from solo_geometry.config import DTYPES, MeasureConfig

__all__ = [
    "GeometryAware",
    "GeometryMonitor",
    "GeometryView",
    "MonitorConfig",
    "kept",
    "measure",
    "preserved_state",
    "read_records",
    "subsample",
]

FILENAME = "geometry.jsonl"


@dataclass(frozen=True)
class GeometryView:
    """What the monitor needs from a module for one batch.

    Attributes:
        features: backbone features Z (V, N, d), detached.
        head: the projection head h, applied per view: H[v] = h(Z[v]).
        loss_of_features: Z (V, N, d) -> scalar loss, everything but Z held fixed and detached.
        backbone: the backbone f, for augmentation tangents (optional).
        images: one view's images (N, C, H, W) matching ``features[0]`` (optional).
        loss_of_outputs: H (V, N, p) -> scalar, the same loss as a function of the head's
            outputs, needed to split H_eff into GN + M (optional: without it only the H_eff
            spectrum is recorded). It may receive H in float64: cast captured tensors with
            ``t.to(H)``.
    """

    features: Tensor
    head: nn.Module
    loss_of_features: Callable[[Tensor], Tensor]
    backbone: nn.Module | None = None
    images: Tensor | None = None
    loss_of_outputs: Callable[[Tensor], Tensor] | None = None


@runtime_checkable
class GeometryAware(Protocol):
    """A LightningModule the monitor can measure.

    Optionally it also implements ``geometry_capture(enabled: bool) -> None``: while enabled, its
    training step keeps (detached) the features it computes, and ``geometry_view`` of the first
    samples of that step's batch uses them instead of running the backbone again. Disabling
    drops what was kept.
    """

    def geometry_view(self, batch: Any) -> GeometryView:
        """Return the :class:`GeometryView` of ``batch`` (a training batch)."""
        ...


@dataclass
class MonitorConfig:
    """Options of :class:`GeometryMonitor` (defaults keep its overhead under 2%)."""

    every_n_steps: int = 50
    max_samples: int = 16
    lanczos_steps: int = 12
    dtype: str = "float64"
    # Which measurements, shared with the ``geometry.measure`` node of the config group.
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    # Folder of geometry.jsonl; None: the trainer's default_root_dir.
    out_dir: str | None = None
    # Name recorded as "head" in every record; None: the head's class name.
    head_name: str | None = None
    # Seed of the monitor's own generator (Lanczos start vectors, random directions).
    seed: int = 0

    def __post_init__(self) -> None:
        counts = {
            "every_n_steps": self.every_n_steps,
            "lanczos_steps": self.lanczos_steps,
            "measure.augment_samples": self.measure.augment_samples,
            "measure.density_probes": self.measure.density_probes,
        }
        for name, value in counts.items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if not isinstance(self.max_samples, int) or self.max_samples < 2:
            raise ValueError(f"max_samples must be an int >= 2, got {self.max_samples!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be 'float64' or 'float32', got {self.dtype!r}")

    @classmethod
    def from_geometry(cls, gcfg: Any, **overrides: Any) -> MonitorConfig:
        """Build from a :class:`solo_geometry.config.GeometryConfig` (plus overrides)."""
        values = {
            "every_n_steps": gcfg.every_n_steps,
            "max_samples": gcfg.max_samples,
            "lanczos_steps": gcfg.lanczos_steps,
            "dtype": gcfg.dtype,
            "measure": MeasureConfig(**asdict(gcfg.measure)),
            "out_dir": gcfg.out_dir,
            "head_name": gcfg.head.name,
        }
        values.update(overrides)
        return cls(**values)


def _weight_norm(head: nn.Module) -> float:
    """Frobenius norm of the head's Linear weights (of all its parameters if it has none)."""
    weights = [m.weight for m in head.modules() if isinstance(m, nn.Linear)]
    weights = weights or list(head.parameters())
    with torch.no_grad():
        return float(sum(w.detach().double().pow(2).sum() for w in weights) ** 0.5)


def _hessian(view: GeometryView, Z: Tensor, cfg: MonitorConfig, gen: torch.Generator) -> dict:
    from solo_geometry.geometry.spectrum import effective_hessian_spectrum

    options = dict(steps=cfg.lanczos_steps, dtype=getattr(torch, cfg.dtype), tau=cfg.measure.tau,
                   max_samples=cfg.max_samples, generator=gen)  # fmt: skip
    if view.loss_of_outputs is None:  # no split into GN + M possible: H_eff alone

        def loss(Z_: Tensor) -> Tensor:  # the closure runs in the features' own dtype
            return view.loss_of_features(Z_.to(Z.dtype)).to(Z_.dtype)

        spec = effective_hessian_spectrum(nn.Identity(), loss, Z, **options)
        return {k: v for k, v in spec.as_record().items() if k.startswith("heff/")}
    spec = effective_hessian_spectrum(view.head, view.loss_of_outputs, Z, **options)
    return dict(spec.as_record())


def _stats(view: GeometryView, Z: Tensor) -> dict[str, float]:
    from solo_geometry.geometry.stats import stats_record

    with torch.no_grad():
        H = torch.stack([view.head(Z[v]) for v in range(Z.shape[0])])  # (V, n, p)
    return {**stats_record("z", Z), **stats_record("h", H)}  # each averaged over the views


def _rho(view: GeometryView, Z: Tensor, cfg: MonitorConfig, gen: torch.Generator) -> dict:
    from solo_geometry.geometry.augment import augmentation_tangents, metric_singularity

    if view.backbone is None or view.images is None:
        return {}
    m = min(cfg.measure.augment_samples, Z.shape[1])
    images, z0 = view.images[:m], Z[0, :m]  # (m, C, H, W), (m, d)
    out = {}
    for family in cfg.measure.augment_families:
        tangents = augmentation_tangents(view.backbone, images, family)  # (m, d)
        out[f"rho/{family}"] = float(metric_singularity(view.head, z0, tangents, generator=gen))
    return out


def _density(view: GeometryView, Z: Tensor, cfg: MonitorConfig, gen: torch.Generator) -> dict:
    from solo_geometry.linalg.lanczos import slq_density
    from solo_geometry.linalg.operators import head_operators

    assert view.loss_of_outputs is not None
    ops = head_operators(view.head, view.loss_of_outputs, Z, dtype=getattr(torch, cfg.dtype))
    probes = cfg.measure.density_probes
    dens = slq_density(ops.heff, ops.dim, steps=cfg.lanczos_steps, probes=probes,
                       generator=gen, dtype=ops.dtype, device=Z.device)  # fmt: skip
    return {"nodes": dens.nodes.tolist(), "weights": dens.weights.tolist()}


def measure(
    view: GeometryView, cfg: MonitorConfig, *, density: bool
) -> tuple[dict[str, float], dict[str, list[float]] | None]:
    """Take every configured measurement of one view.

    Args:
        view: the module's view of a batch.
        cfg: the monitor's options.
        density: also compute H_eff's SLQ density.

    Returns:
        The flat metrics, and the density (``nodes``, ``weights``) or None.
    """
    gen = torch.Generator().manual_seed(cfg.seed)  # CPU generator, the engine's convention
    Z = view.features.detach()  # (V, N, d)
    metrics: dict[str, float] = {"head/weight_norm": _weight_norm(view.head)}
    if cfg.measure.hessian:
        metrics.update(_hessian(view, Z, cfg, gen))
    if cfg.measure.stats:
        metrics.update(_stats(view, Z))
    if cfg.measure.augment:
        metrics.update(_rho(view, Z, cfg, gen))
    dens = None
    if density and cfg.measure.hessian and view.loss_of_outputs is not None:
        dens = _density(view, Z, cfg, gen)
    return {k: float(v) for k, v in metrics.items()}, dens


def _checked(metrics: dict[str, float]) -> dict[str, float | None]:
    """The metrics with an undefined condition number as None; raise on any other non-finite.

    ``<op>/cond`` is NaN by definition when no eigenvalue is above the floor (M of a linear or
    ReLU head is pure round-off): recorded as null, not a failed measurement.
    """
    out: dict[str, float | None] = dict(metrics)
    for key, value in metrics.items():
        if key.endswith("/cond") and math.isnan(value):
            out[key] = None
    bad = sorted(k for k, v in out.items() if v is not None and not math.isfinite(v))
    if bad:
        raise FloatingPointError(f"non-finite measurement(s): {bad}")
    return out


class GeometryMonitor(Callback):
    """Measure the head's geometry every ``every_n_steps`` steps and at the end of fit.

    Records go to ``<out_dir>/geometry.jsonl`` on rank zero, one JSON object per line:
    ``step``, ``epoch``, ``status`` (``"ok"`` or ``"skipped"``), ``n_skipped``, ``head``,
    ``seconds`` and the metrics below; the first and final records also hold ``density``
    (``nodes``, ``weights`` of H_eff's SLQ density) and ``final`` marks the last one; skipped
    records hold ``error``. The checkpoint keeps the monitor's state, so a resumed run continues
    the file with no gap and no duplicate (records after the checkpoint's step are dropped).

    Logged metrics (``self.log`` under ``geometry/``, and in the file without the prefix):
        ``heff/{lambda_min,lambda_max,neg_count,neg_mass,cond}``, the same for ``gn/`` and
        ``m/`` (``<op>/cond`` is null where no eigenvalue is above the negativity floor, e.g.
        M of a ReLU or linear head), ``interaction_ratio``,
        ``z/{normalized_std,cond,rank,effective_rank}``, the same for ``h/``,
        ``rho/<family>`` per configured colour family, ``head/weight_norm`` (norm of the
        head's Linear weights, which pseudo-collapse scales).

    Args:
        config: the options; None for the defaults.
        meta: plain-typed facts about the run stored in the checkpoint's ``geometry`` entry
            and in the first record (e.g. the full geometry config).

    Raises:
        TypeError: in ``setup`` if the module does not implement ``geometry_view``.
    """

    def __init__(self, config: MonitorConfig | None = None, meta: Mapping[str, Any] | None = None):
        super().__init__()
        self.config = config if config is not None else MonitorConfig()
        if not isinstance(self.config, MonitorConfig):
            raise TypeError(f"config must be a MonitorConfig, got {type(config).__name__}")
        self.meta: dict[str, Any] = json.loads(json.dumps(dict(meta or {})))  # plain types only
        self.last_step: int | None = None
        self.n_records = 0
        self.n_skipped = 0
        self.last: dict[str, Any] = {}
        self._resumed = False
        self._warned: set[str] = set()
        self._batch: Any = None
        self._pending: tuple[int, Any] | None = None  # (step, batch) waiting for its backward
        self._path: Path | None = None

    @property
    def path(self) -> Path | None:
        """The ``geometry.jsonl`` file, known after ``setup``."""
        return self._path

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if not isinstance(pl_module, GeometryAware):
            raise TypeError(
                f"GeometryMonitor needs a module with geometry_view(batch); "
                f"{type(pl_module).__name__} has none"
            )
        root = self.config.out_dir or trainer.default_root_dir
        self._path = Path(root) / FILENAME

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero and self._path is not None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._truncate()

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        if step % self.config.every_n_steps or step == self.last_step:
            return
        batch = subsample(batch, self.config.max_samples)
        self._batch = move_data_to_device(batch, "cpu")
        capture = getattr(pl_module, "geometry_capture", None)
        if callable(capture) and self._set_capture(pl_module, True):
            self._pending = (step, batch)  # measured after this step's backward, on its features
            return
        self._record(trainer, pl_module, batch, step=step, final=False)

    @override
    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._pending is None:
            return
        (step, batch), self._pending = self._pending, None
        try:
            self._record(trainer, pl_module, batch, step=step, final=False)
        finally:
            self._set_capture(pl_module, False)

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
        batch_idx: int,
    ) -> None:  # fmt: skip
        if self._pending is None:
            return
        self._set_capture(pl_module, False)  # no backward came: measure from a fresh forward
        (step, batch), self._pending = self._pending, None
        self._record(trainer, pl_module, batch, step=step, final=False)

    def _set_capture(self, pl_module: pl.LightningModule, enabled: bool) -> bool:
        """Switch the module's feature capture; False (warned once) if that raised."""
        try:
            pl_module.geometry_capture(enabled)  # type: ignore[operator]
            return True
        except Exception as err:  # noqa: BLE001 - capture is an optimisation, never fatal
            if "capture" not in self._warned:
                self._warned.add("capture")
                rank_zero_warn(f"GeometryMonitor: geometry_capture failed ({err!r})")
            return False

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._batch is None or trainer.global_step == self.last_step:
            return
        batch = move_data_to_device(self._batch, pl_module.device)
        self._record(trainer, pl_module, batch, step=trainer.global_step, final=True)
        self._batch = None

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        summary = {k: v for k, v in self.state_dict().items() if k != "last"}
        checkpoint["geometry"] = {"config": asdict(self.config), "meta": self.meta,
                                  "last": dict(self.last), "summary": summary}  # fmt: skip

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"n_records": self.n_records, "n_skipped": self.n_skipped,
                "last_step": self.last_step, "last": dict(self.last)}  # fmt: skip

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.last_step = state_dict["last_step"]
        self.n_records = int(state_dict["n_records"])
        self.n_skipped = int(state_dict["n_skipped"])
        self.last = dict(state_dict.get("last", {}))
        self._resumed = True

    def _truncate(self) -> None:
        """Start the file, or on resume keep only the records up to the checkpoint's step."""
        assert self._path is not None
        if not self._resumed:
            if self._path.exists():
                rank_zero_warn(f"GeometryMonitor: overwriting {self._path} (not a resumed run)")
            self._path.write_text("")
            return
        kept: list[str] = []
        if self._path.exists():
            for line in self._path.read_text().splitlines():
                if line.strip() and self.last_step is not None:
                    step = json.loads(line)["step"]
                    if step <= self.last_step:
                        kept.append(line)
        self._path.write_text("".join(f"{line}\n" for line in kept))

    def _record(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, *, step: int,
        final: bool,
    ) -> None:  # fmt: skip
        """Measure, write and log one record (parameters before step ``step``); never raises."""
        start = time.perf_counter()
        record: dict[str, Any] = {"step": step, "epoch": trainer.current_epoch}
        try:
            with preserved_state(pl_module):
                view = pl_module.geometry_view(batch)  # type: ignore[operator]
                metrics, density = measure(view, self.config, density=final or not self.n_records)
            record.update(status="ok", head=self._head_name(view), **_checked(metrics))
            if density is not None:
                record["density"] = density
        except Exception as err:  # noqa: BLE001 - a measurement must never stop training
            self.n_skipped += 1
            record.update(status="skipped", error=f"{type(err).__name__}: {err}")
            if "skip" not in self._warned:
                self._warned.add("skip")
                rank_zero_warn(
                    f"GeometryMonitor: measurement skipped at step {record['step']} "
                    f"({record['error']}); further skips are only counted"
                )
        record.update(n_skipped=self.n_skipped, seconds=time.perf_counter() - start)
        if not self.n_records and self.meta:
            record["meta"] = self.meta
        if final:
            record["final"] = True
        self._write(trainer, pl_module, record, final=final)

    def _head_name(self, view: GeometryView) -> str:
        return self.config.head_name or type(view.head).__name__

    def _write(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, record: dict, *, final: bool
    ) -> None:
        self.last_step = record["step"]
        self.n_records += 1
        if record["status"] == "ok":
            self.last = {k: v for k, v in record.items() if k not in ("density", "meta")}
        if trainer.is_global_zero and self._path is not None:
            with self._path.open("a") as fh:
                fh.write(json.dumps(record) + "\n")
        scalars = {
            f"geometry/{k}": float(v)
            for k, v in record.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and k not in ("step", "epoch")
        }
        try:
            if final:
                for logger in trainer.loggers:
                    logger.log_metrics(scalars, step=record["step"])
            else:
                for key, value in scalars.items():
                    pl_module.log(key, value, on_step=True, on_epoch=False, rank_zero_only=True)
        except Exception as err:  # noqa: BLE001 - logging must not stop training either
            if "log" not in self._warned:
                self._warned.add("log")
                rank_zero_warn(f"GeometryMonitor: could not log metrics: {err!r}")


def read_records(run_dir: str | Path) -> list[dict[str, Any]]:
    """Read ``<run_dir>/geometry.jsonl`` into a list of records."""
    path = Path(run_dir) / FILENAME
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@contextmanager
def preserved_state(module: nn.Module) -> Iterator[None]:
    """Restore ``module``'s train/eval modes, buffers, grad mode and RNG states on exit."""
    modes = [(m, m.training) for m in module.modules()]
    buffers = [(b, b.detach().clone()) for b in module.buffers()]
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


def kept(t: Tensor) -> Tensor:
    """A tensor as a module keeps it for ``geometry_capture``.

    Detached; half precision (an autocast output) is raised to float32, as the monitor's own
    forward, outside autocast, would give it.
    """
    t = t.detach()
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def subsample(batch: Any, n: int) -> Any:
    """The first ``n`` samples of a batch: every tensor whose first dim is the batch size."""
    sizes: list[int] = []
    apply_to_collection(batch, Tensor, lambda t: sizes.append(t.shape[0]) if t.ndim else None)
    if not sizes or max(sizes) <= n:
        return batch
    size = max(sizes)
    return apply_to_collection(batch, Tensor, lambda t: t[:n] if t.ndim and len(t) == size else t)
