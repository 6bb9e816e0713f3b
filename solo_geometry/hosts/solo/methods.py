"""Geometry-aware solo-learn methods, and the in-place wrapping of ``solo.methods.METHODS``.

:func:`install` replaces each method entry of ``METHODS`` by a subclass of it (entries stay
classes, ``issubclass(METHODS["byol"], BYOL)`` holds). Constructing that subclass dispatches on
the config's ``geometry`` node (:func:`solo_geometry.config.geometry_config`):

* absent or off: ``__new__`` returns solo-learn's own class, built exactly as solo-learn builds it;
* on, for a method in :data:`~solo_geometry.hosts.solo.losses.SUPPORTED`: the geometry-aware
  subclass: the configured head swapped in (projector and momentum projector together, the
  latter re-initialised from the former), pseudo-collapse if asked, ``geometry_view`` over
  solo-learn's own losses, and the monitor (and probes) attached by ``configure_callbacks``;
* on, for any other method: a ``ValueError`` naming the supported ones.

Construction also makes CPU runs of solo-learn's ``main_pretrain.py`` work: solo-learn needs
``devices`` as a list (it scales the learning rate by its length) while Lightning's CPU
accelerator wants an int, so with ``accelerator: cpu`` a device list is replaced by its length
once solo-learn has used it.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from pathlib import Path
from typing import Any

import torch
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig, ListConfig, OmegaConf
from torch import Tensor, nn

from solo_geometry.config import GeometryConfig, geometry_config
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.hosts.base import GeometryHost, LossOfOutputs
from solo_geometry.hosts.solo.checks import geometry_of
from solo_geometry.hosts.solo.iternorm import differentiable_head
from solo_geometry.hosts.solo.launcher import die_with_parent
from solo_geometry.hosts.solo.losses import SUPPORTED, UNSUPPORTED, LossSpec
from solo_geometry.hosts.solo.spec import momentum_features
from solo_geometry.inputs.datasets import MeanStd, mean_std_of
from solo_geometry.models.heads import build_configured_head, build_configured_predictor
from solo_geometry.models.init import pseudo_collapse_, pseudo_collapse_backbone_
from solo_geometry.runtime.callbacks import geometry_callbacks
from solo_geometry.runtime.chunks import ranks_of, sync_batch_norm
from solo_geometry.runtime.monitor import GeometryMonitor
from solo_geometry.runtime.preempt import PreemptionCallback

__all__ = ["GeometryMethod", "fix_cpu_devices", "install", "is_wrapped", "run_dir_of", "wrap"]

_SKIP = ("base", "linear")  # METHODS entries that are not pretraining methods
_MOMENTUM = "momentum_feats"  # context key of the momentum features under sync BatchNorm


def fix_cpu_devices(cfg: Any) -> None:
    """With ``accelerator: cpu``, replace a device list by its length (Lightning wants an int)."""
    if not isinstance(cfg, DictConfig):
        return
    devices = OmegaConf.select(cfg, "devices", default=None)
    if str(OmegaConf.select(cfg, "accelerator", default="")) == "cpu" and isinstance(
        devices, ListConfig | list
    ):
        cfg.devices = max(1, len(devices))


def run_dir_of(gcfg: GeometryConfig) -> str | None:
    """The run folder: ``geometry.out_dir``, else Hydra's output dir when Hydra runs."""
    if gcfg.out_dir:
        return gcfg.out_dir
    if HydraConfig.initialized():
        return str(HydraConfig.get().runtime.output_dir)
    return None


class GeometryMethod(GeometryHost):
    """The geometry-aware side of a wrapped solo-learn method (placed before it by :func:`wrap`).

    Constructing a wrapped entry gives solo-learn's own class when geometry is off, this
    subclass when on: head swapped and initialised as configured, solo-learn's ``forward``,
    ``multicrop_forward`` and ``momentum_forward`` keeping their features while the monitor
    captures, the view built by :class:`~solo_geometry.hosts.base.GeometryHost` over the loss
    rebuilt from ``solo.losses``, and the geometry callbacks attached.
    """

    _solo_base: type
    _solo_name: str
    _loss_spec: LossSpec | None
    _geometry_fresh: list[Tensor] | None = None  # a fresh view's features, for the loss context

    def __new__(cls, cfg: Any = None, *args: Any, **kwargs: Any) -> Any:
        """solo-learn's own class when geometry is off or absent, else this subclass."""
        fix_cpu_devices(cfg)
        gcfg = geometry_of(cfg)
        if gcfg is None:
            return cls._solo_base(cfg, *args, **kwargs)
        if cls._loss_spec is None:
            why = UNSUPPORTED.get(cls._solo_name, "its loss cannot be rebuilt from solo.losses")
            raise ValueError(
                f"geometry is not supported for method {cls._solo_name!r} ({why}); "
                f"choose from {sorted(SUPPORTED)} or use +geometry=off"
            )
        return super().__new__(cls)

    def __init__(self, cfg: DictConfig, *args: Any, **kwargs: Any) -> None:
        gcfg = geometry_config(cfg)
        assert gcfg is not None  # __new__ dispatched on it
        super().__init__(cfg, *args, **kwargs)  # type: ignore[call-arg]
        self.geometry_cfg = gcfg
        self.geometry_run_dir = run_dir_of(gcfg)
        self._swap_head(cfg, gcfg)
        self._apply_init(gcfg)
        if self._spec.setup is not None:
            self._spec.setup(self)

    @property
    def _spec(self) -> LossSpec:
        assert self._loss_spec is not None  # __new__ refused methods without one
        return self._loss_spec

    def _swap_head(self, cfg: DictConfig, gcfg: GeometryConfig) -> None:
        """Replace the projector MLP (and its momentum copy) by the configured head."""
        model: Any = self
        if gcfg.predictor.name != "predictor" and hasattr(model, "predictor"):
            pred_hidden = OmegaConf.select(cfg, "method_kwargs.pred_hidden_dim", default=None)
            dim = int(cfg.method_kwargs.proj_output_dim)
            model.predictor = build_configured_predictor(
                gcfg.predictor, gcfg.head, dim, pred_hidden
            )
        if gcfg.head.name == "projector":
            return
        hidden = OmegaConf.select(cfg, "method_kwargs.proj_hidden_dim", default=None)
        out_dim = int(cfg.method_kwargs.proj_output_dim)
        for path in (self._spec.projector, f"momentum_{self._spec.projector}"):
            parent, _, name = path.rpartition(".")
            owner = attrgetter(parent)(model) if parent else model
            if hasattr(owner, name):
                setattr(
                    owner,
                    name,
                    build_configured_head(gcfg.head, model.features_dim, out_dim, hidden),
                )
        self._sync_momentum()

    def _apply_init(self, gcfg: GeometryConfig) -> None:
        if not gcfg.init.pseudo_collapse:
            return
        model: Any = self
        pseudo_collapse_(attrgetter(self._spec.projector)(model), alpha=gcfg.init.alpha)
        if gcfg.init.backbone:
            pseudo_collapse_backbone_(model.backbone, alpha=gcfg.init.alpha)
        self._sync_momentum()

    def _sync_momentum(self) -> None:
        """Copy the online head (and backbone) into the momentum branch."""
        from solo.utils.momentum import initialize_momentum_params

        model: Any = self
        head = self._spec.head
        if hasattr(model, f"momentum_{head}"):
            initialize_momentum_params(getattr(model, head), getattr(model, f"momentum_{head}"))
        if hasattr(model, "momentum_backbone"):
            initialize_momentum_params(model.backbone, model.momentum_backbone)

    def geometry_untrained(self) -> Any:
        """A new module from this one's constructor and config: the same network, untrained.

        solo-learn's constructor with the head swap and initialisers of the ``geometry`` node;
        the end-of-fit probes seed it (``evaluation.random_init_modules``) and probe its
        backbone and head beside the trained ones.
        """
        model: Any = self
        return type(self)(model.cfg)

    def geometry_head(self) -> nn.Module:
        """The measured head: the projector, or the module holding it and the prototypes."""
        return attrgetter(self._spec.head)(self)

    def geometry_measured_head(self) -> nn.Module:
        """The head with solo-learn's IterNorm (VIbCReg) as a twice-differentiable twin."""
        return differentiable_head(self.geometry_head())

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        """solo-learn's ``training_step``, the state it updates in place kept first.

        While capture is on, what the step reads and then updates in place (queues, DINO's
        centre: ``LossSpec.snapshots``) is cloned aside before it runs.
        """
        if self._geometry_captured is not None and getattr(self, "training", False):
            for path in self._spec.snapshots:
                self.capture(path, attrgetter(path)(self).clone())
        return super().training_step(batch, batch_idx)  # type: ignore[misc]

    def forward(self, X: Tensor, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """solo-learn's ``forward``, its backbone features kept while capture is on."""
        out = super().forward(X, *args, **kwargs)  # type: ignore[misc]
        self.capture("feats", out["feats"])
        return out

    def multicrop_forward(self, X: Tensor) -> dict[str, Any]:
        """solo-learn's ``multicrop_forward``, its features kept while capture is on."""
        out = super().multicrop_forward(X)  # type: ignore[misc]
        self.capture("feats", out["feats"])
        return out

    def geometry_crops(self, batch: Any) -> list[Tensor]:
        """The crops of a solo-learn batch ``[indexes, [X_1, ..., X_V], targets]``."""
        return [batch[1]] if isinstance(batch[1], Tensor) else list(batch[1])

    def geometry_forward(self, crops: list[Tensor]) -> list[Tensor]:
        """solo-learn's backbone forward of each crop (``BaseMethod.multicrop_forward``)."""
        from solo.methods.base import BaseMethod

        self._geometry_fresh = [BaseMethod.multicrop_forward(self, x)["feats"] for x in crops]
        return self._geometry_fresh

    def geometry_features(self, crops: list[Tensor]) -> list[Tensor]:
        """The backbone features (N, d) of each crop the view is built on (for loss contexts)."""
        feats = self.captured("feats", len(crops)) or self._geometry_fresh
        if feats is None or len(feats) != len(crops):
            with torch.no_grad():
                feats = self.geometry_forward(crops)
        return feats

    def geometry_normalisation(self) -> MeanStd:
        """The recipe's normalisation, as solo-learn's pretrain pipelines pick it."""
        model: Any = self
        aug = OmegaConf.select(model.cfg, "augmentations", default=None) or [{}]
        first = aug[0] if len(aug) else {}
        dataset = OmegaConf.select(model.cfg, "data.dataset", default=None)
        return mean_std_of(dataset, first.get("mean"), first.get("std"))

    def geometry_context(self, batch: Any, crops: list[Tensor]) -> Any:
        """What the method's loss holds fixed for this rank's batch (:mod:`.spec`).

        Under sync BatchNorm, a method whose momentum head makes its targets
        (``LossSpec.targets``) also passes on its momentum features, from which the global
        batch's targets are rebuilt (:meth:`geometry_global_loss`).
        """
        model: Any = self
        momentum = self.captured("momentum_feats", model.num_large_crops)
        try:
            context = self._spec.context(model, crops, batch, momentum)
            if self._spec.targets is not None and sync_batch_norm(model):
                context = {**context, _MOMENTUM: momentum_features(model, crops, momentum)}
            return context
        finally:
            self._geometry_fresh = None

    def geometry_global_loss(self, contexts: list[Any]) -> LossOfOutputs:
        """The method's SSL loss rebuilt from ``solo.losses`` (:mod:`.losses`), global batch.

        Under DDP (R contexts) the ranks' contexts are merged (``LossSpec.merge``) and the loss
        is evaluated on the global batch as if by one process (the monitor runs it with
        ``torch.distributed`` looking uninitialised, so solo-learn's gathers see the whole
        batch), with what each rank computes alone (BatchNorm of fixed modules without sync
        BN, Barlow Twins' standardisation) per rank chunk. Under sync BN the fixed modules see
        the whole global batch, and the momentum head's targets are rebuilt from every rank's
        momentum features (``LossSpec.targets``).
        """
        model: Any = self
        spec = self._spec
        ranks, synced = len(contexts), sync_batch_norm(model)
        feats = [c.get(_MOMENTUM) for c in contexts]  # each rank's, under sync BN
        contexts = [{k: v for k, v in c.items() if k != _MOMENTUM} for c in contexts]
        if ranks == 1:
            ctx = contexts[0]
            return lambda H: spec.loss(model, ctx, H)
        if spec.merge is None:
            raise ValueError(f"{self._solo_name} cannot be measured across ranks: {spec.ranks}")
        merged = spec.merge(contexts)
        if synced and spec.targets is not None and all(f is not None for f in feats):
            merged.update(spec.targets(model, [torch.cat(f) for f in zip(*feats, strict=True)]))

        def loss_of_outputs(H: Tensor) -> Tensor:
            with ranks_of(ranks, synced):
                return spec.loss(model, merged, H)

        return loss_of_outputs

    def configure_callbacks(self) -> list[Callback]:
        """The monitor, probes and report (:func:`geometry_callbacks`), then preemption's."""
        model: Any = self
        select = OmegaConf.select
        callbacks = geometry_callbacks(
            self.geometry_cfg,
            run_dir=self.geometry_run_dir,
            meta={"host": "solo", "method": self._solo_name},
            train_dir=select(model.cfg, "data.train_path", default=None),
            val_dir=select(model.cfg, "data.val_path", default=None),
            normalisation=self.geometry_normalisation(),
        )
        for callback in callbacks:  # solo-learn's main_pretrain.py: a failed write exits 3
            if isinstance(callback, GeometryMonitor):
                callback.exit_on_unwritten = True
        run_dir = self.geometry_run_dir
        return [*callbacks, PreemptionCallback(run_dir)] if run_dir else callbacks

    def on_fit_start(self) -> None:
        """Write the resolved config into the run folder (rank zero) before training."""
        model: Any = self
        super().on_fit_start()  # type: ignore[misc]
        if self.geometry_run_dir and model.trainer.is_global_zero:
            RunFolder(Path(self.geometry_run_dir)).write_config(model.cfg)


def wrap(name: str, base: type) -> type:
    """The METHODS entry for ``base``: a subclass dispatching on the ``geometry`` node."""
    attrs = {
        "_solo_base": base,
        "_solo_name": name,
        "_loss_spec": SUPPORTED.get(name),
        "__module__": __name__,
        "__qualname__": f"Geometry{base.__name__}",
        "__doc__": f"solo-learn's {base.__name__} with solo-geometry's instrumentation.",
    }
    if hasattr(base, "momentum_forward"):
        attrs["momentum_forward"] = _momentum_forward
    spec = SUPPORTED.get(name)
    for method, select in (spec.keeps if spec else {}).items():
        attrs[method] = _keeping(getattr(base, method), method, select)
    return type(f"Geometry{base.__name__}", (GeometryMethod, base), attrs)


def _keeping(
    solo_method: Callable[..., Any], key: str, select: Callable[[Any], list[Tensor]]
) -> Callable[..., Any]:
    """``solo_method`` whose result's selected tensors are kept under ``key`` while capturing."""

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = solo_method(self, *args, **kwargs)
        if self._geometry_captured is not None:
            for t in select(out):
                self.capture(key, t)
        return out

    method.__name__ = solo_method.__name__
    method.__doc__ = f"solo-learn's ``{key}``, its result kept while capture is on."
    return method


def _momentum_forward(self: Any, X: Tensor) -> dict[str, Any]:
    """solo-learn's ``momentum_forward``, its features kept while capture is on."""
    out = self._solo_base.momentum_forward(self, X)
    self.capture("momentum_feats", out["feats"])
    return out


def is_wrapped(cls: Any) -> bool:
    """Whether ``cls`` is an entry made by :func:`wrap`."""
    return isinstance(cls, type) and issubclass(cls, GeometryMethod)


def install() -> list[str]:
    """Wrap ``solo.methods.METHODS`` in place (idempotent).

    Returns:
        The names wrapped by this call (empty when already installed).
    """
    from solo.methods import METHODS

    die_with_parent()  # the trainer process of a launch: never outlive the launcher
    wrapped = []
    for name, cls in list(METHODS.items()):
        if name in _SKIP or is_wrapped(cls) or not isinstance(cls, type):
            continue
        METHODS[name] = wrap(name, cls)
        wrapped.append(name)
    return wrapped


assert not set(SUPPORTED) & set(UNSUPPORTED)
