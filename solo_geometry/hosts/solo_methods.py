"""Geometry-aware solo-learn methods, and the in-place wrapping of ``solo.methods.METHODS``.

:func:`install` replaces each method entry of ``METHODS`` by a subclass of it (entries stay
classes, ``issubclass(METHODS["byol"], BYOL)`` holds). Constructing that subclass dispatches on
the config's ``geometry`` node (:func:`solo_geometry.config.geometry_config`):

* absent or off: ``__new__`` returns solo-learn's own class, built exactly as solo-learn builds it;
* on, for a method in :data:`~solo_geometry.hosts.solo_losses.SUPPORTED`: the geometry-aware
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

import dataclasses
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig, ListConfig, OmegaConf

from solo_geometry.config import GeometryConfig, build_configured_head, geometry_config
from solo_geometry.hosts.solo_losses import SUPPORTED, UNSUPPORTED, LossSpec, default_dtype
from solo_geometry.monitor import GeometryMonitor, GeometryView, MonitorConfig, kept

__all__ = ["GeometryMethod", "fix_cpu_devices", "install", "is_wrapped", "run_dir_of", "wrap"]

_SKIP = ("base", "linear")  # METHODS entries that are not pretraining methods


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
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            return str(HydraConfig.get().runtime.output_dir)
    except Exception:  # noqa: BLE001 - no Hydra run: the trainer's root dir is used
        pass
    return None


class GeometryMethod:
    """Mixin placed before a solo-learn method class by :func:`wrap`."""

    _solo_base: type
    _solo_name: str
    _loss_spec: LossSpec | None
    # Features kept from the training step while the monitor asks (``geometry_capture``).
    _geometry_kept: dict[str, list[torch.Tensor]] | None = None

    def __new__(cls, cfg: Any = None, *args: Any, **kwargs: Any) -> Any:
        """solo-learn's own class when geometry is off or absent, else this subclass."""
        fix_cpu_devices(cfg)
        gcfg = geometry_config(cfg) if isinstance(cfg, DictConfig) else None
        if gcfg is None:
            return cls._solo_base(cfg, *args, **kwargs)
        if cls._loss_spec is None:
            raise ValueError(
                f"geometry is not supported for method {cls._solo_name!r} (its loss cannot be "
                f"rebuilt from solo.losses); choose from {sorted(SUPPORTED)} or use +geometry=off"
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

    def _swap_head(self, cfg: DictConfig, gcfg: GeometryConfig) -> None:
        if gcfg.head.name == "projector":
            return
        model: Any = self
        hidden = OmegaConf.select(cfg, "method_kwargs.proj_hidden_dim", default=None)
        out_dim = int(cfg.method_kwargs.proj_output_dim)
        model.projector = build_configured_head(gcfg.head, model.features_dim, out_dim, hidden)
        if hasattr(model, "momentum_projector"):
            model.momentum_projector = build_configured_head(
                gcfg.head, model.features_dim, out_dim, hidden
            )
        self._sync_momentum()

    def _apply_init(self, gcfg: GeometryConfig) -> None:
        if not gcfg.init.pseudo_collapse:
            return
        from solo_geometry.init import pseudo_collapse_, pseudo_collapse_backbone_

        model: Any = self
        pseudo_collapse_(model.projector, alpha=gcfg.init.alpha)
        if gcfg.init.backbone:
            pseudo_collapse_backbone_(model.backbone, alpha=gcfg.init.alpha)
        self._sync_momentum()

    def _sync_momentum(self) -> None:
        """Copy the online projector (and backbone) into the momentum branch."""
        from solo.utils.momentum import initialize_momentum_params

        model: Any = self
        if hasattr(model, "momentum_projector"):
            initialize_momentum_params(model.projector, model.momentum_projector)
        if hasattr(model, "momentum_backbone"):
            initialize_momentum_params(model.backbone, model.momentum_backbone)

    def geometry_capture(self, enabled: bool) -> None:
        """Keep (or stop keeping and drop) the features the training step computes.

        While enabled, the features of every crop from the backbone (``forward``,
        ``multicrop_forward``) and from the momentum backbone (``momentum_forward``) are kept
        detached, in call order, and ``geometry_view`` uses them instead of a second forward.
        """
        self._geometry_kept = {"feats": [], "momentum_feats": []} if enabled else None

    def _keep(self, key: str, out: dict[str, Any]) -> dict[str, Any]:
        model: Any = self
        if self._geometry_kept is not None and model.training:
            self._geometry_kept[key].append(kept(out["feats"]))
        return out

    def forward(self, X: torch.Tensor, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """solo-learn's ``forward``, its backbone features kept while capture is on."""
        return self._keep("feats", super().forward(X, *args, **kwargs))  # type: ignore[misc]

    def multicrop_forward(self, X: torch.Tensor) -> dict[str, Any]:
        """solo-learn's ``multicrop_forward``, its features kept while capture is on."""
        return self._keep("feats", super().multicrop_forward(X))  # type: ignore[misc]

    def _kept(self, key: str, count: int, n: int) -> list[torch.Tensor] | None:
        """The kept tensors, if exactly ``count`` of at least ``n`` rows were kept."""
        tensors = (self._geometry_kept or {}).get(key, [])
        if len(tensors) != count or any(f.shape[0] < n for f in tensors):
            return None
        return tensors

    def geometry_view(self, batch: Any) -> GeometryView:
        """The view of a solo-learn batch ``[indexes, [X_1, ..., X_V], targets]``.

        Z holds the backbone features of every crop (V, N, d): those the training step computed
        when capture is on (the batch being the first N samples of that step's), else computed
        here in the module's current mode without gradients. The loss closures rebuild the
        method's SSL loss.
        """
        model: Any = self
        spec = model._loss_spec
        crops = [batch[1]] if isinstance(batch[1], torch.Tensor) else list(batch[1])
        from solo.methods.base import BaseMethod

        n = crops[0].shape[0]
        reuse = self._kept("feats", len(crops), n)
        reuse_momentum = self._kept("momentum_feats", model.num_large_crops, n)
        with torch.no_grad():
            if reuse is not None:
                feats = [f[:n] for f in reuse]  # the step's batch's first n samples
            else:
                feats = [BaseMethod.multicrop_forward(model, x)["feats"].detach() for x in crops]
            ctx = spec.context(model, crops, batch, reuse_momentum)
        Z = torch.stack(feats)  # (V, N, d)

        def loss_of_outputs(H: torch.Tensor) -> torch.Tensor:
            with default_dtype(H.dtype):
                return spec.loss(model, ctx, H)

        def loss_of_features(Z_: torch.Tensor) -> torch.Tensor:
            return loss_of_outputs(torch.stack([model.projector(Z_[v]) for v in range(len(Z_))]))

        return GeometryView(
            features=Z,
            head=model.projector,
            loss_of_features=loss_of_features,
            backbone=model.backbone,
            images=crops[0],
            loss_of_outputs=loss_of_outputs,
        )

    def configure_callbacks(self) -> list[Callback]:
        """Attach the monitor (and the probes when enabled and a labelled val set exists)."""
        gcfg = self.geometry_cfg
        meta = {"method": self._solo_name, "geometry": dataclasses.asdict(gcfg)}
        config = MonitorConfig.from_geometry(gcfg, out_dir=self.geometry_run_dir)
        callbacks: list[Callback] = [GeometryMonitor(config, meta=meta)]
        if gcfg.probes.enabled:
            from solo_geometry.probe_callback import ProbeCallback

            model: Any = self
            data = gcfg.probes.data or OmegaConf.select(model.cfg, "data.val_path", default=None)
            train = OmegaConf.select(model.cfg, "data.train_path", default=None)
            callbacks.append(ProbeCallback(gcfg.probes, data, self.geometry_run_dir, train))
        return callbacks

    def on_fit_start(self) -> None:
        """Write the resolved config into the run folder (rank zero) before training."""
        model: Any = self
        super().on_fit_start()  # type: ignore[misc]
        if self.geometry_run_dir and model.trainer.is_global_zero:
            from solo_geometry.rundir import write_config

            write_config(self.geometry_run_dir, model.cfg)


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
    return type(f"Geometry{base.__name__}", (GeometryMethod, base), attrs)


def _momentum_forward(self: Any, X: torch.Tensor) -> dict[str, Any]:
    """solo-learn's ``momentum_forward``, its features kept while capture is on."""
    return self._keep("momentum_feats", self._solo_base.momentum_forward(self, X))


def is_wrapped(cls: Any) -> bool:
    """Whether ``cls`` is an entry made by :func:`wrap`."""
    return isinstance(cls, type) and issubclass(cls, GeometryMethod)


def install() -> list[str]:
    """Wrap ``solo.methods.METHODS`` in place (idempotent).

    Returns:
        The names wrapped by this call (empty when already installed).
    """
    from solo.methods import METHODS

    wrapped = []
    for name, cls in list(METHODS.items()):
        if name in _SKIP or is_wrapped(cls) or not isinstance(cls, type):
            continue
        METHODS[name] = wrap(name, cls)
        wrapped.append(name)
    return wrapped


assert not set(SUPPORTED) & set(UNSUPPORTED)
