"""Backbone and head rebuilt from a solo-learn or solo-geometry checkpoint, without solo-learn.

Keys are loaded by prefix (``backbone.*``, ``projector.*``) with ``strict=True``; a mismatch is an
error listing the missing and unexpected keys, never a silent partial load (STYLE.md rule 9).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from solo_geometry.features import IMAGENET_MEAN_STD, MEANS_STDS, MeanStd

__all__ = ["LoadedModel", "load_model"]

# Projector structure of solo-learn's methods (Linear sizes; BN after hidden Linears or not).
_PROJECTORS: dict[str, tuple[int, bool]] = {
    "simclr": (1, False),
    "byol": (1, True),
    "vicreg": (2, True),
    "barlow_twins": (2, True),
}


@dataclass(frozen=True)
class LoadedModel:
    """Backbone and head rebuilt from a checkpoint, with where they came from.

    Attributes:
        backbone: images (N, 3, H, W) -> Z (N, d).
        head: Z (N, d) -> H (N, p).
        checkpoint: the checkpoint file read.
        run_dir: the run folder (outputs go here).
        mean_std: the input normalisation of the recipe's dataset.
        notes: human-readable facts about the loading (ignored key prefixes, head kind).
    """

    backbone: nn.Module
    head: nn.Module
    checkpoint: Path
    run_dir: Path
    mean_std: MeanStd
    notes: list[str]


def _solo_projector(method: str, d: int, hidden: int, out: int) -> nn.Module:
    if method not in _PROJECTORS:
        raise ValueError(
            f"cannot rebuild the projector of method {method!r} without solo-learn; choose from "
            f"{sorted(_PROJECTORS)} or set geometry.head.name to one of this package's heads"
        )
    n_hidden, bn = _PROJECTORS[method]
    layers: list[nn.Module] = []
    for a in [d] + [hidden] * (n_hidden - 1):
        layers += [nn.Linear(a, hidden)] + ([nn.BatchNorm1d(hidden)] if bn else []) + [nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(hidden, out))


def _find_checkpoint(path: Path) -> tuple[Path, Path]:
    """(checkpoint file, run folder) for a run folder or a checkpoint path."""
    if path.is_dir():
        ckpts = sorted((path / "checkpoints").rglob("*.ckpt"), key=lambda p: p.stat().st_mtime)
        if not ckpts:
            raise ValueError(f"run folder {str(path)!r} has no checkpoints/**/*.ckpt")
        return ckpts[-1], path
    if not path.is_file():
        raise ValueError(f"{str(path)!r} is neither a run folder nor a checkpoint file")
    # the run folder holds checkpoints/ (lightly: checkpoints/x.ckpt; solo: checkpoints/<m>/<id>/)
    runs = [p.parent for p in path.parents if p.name == "checkpoints"]
    return path, runs[0] if runs else path.parent


def _read_config(ckpt: dict[str, Any], ckpt_path: Path, run_dir: Path) -> dict[str, Any]:
    """The recipe config: checkpoint hyper-parameters, <run>/config.yaml or args.json."""
    import json

    import yaml

    hp = ckpt.get("hyper_parameters") or {}
    cfg = hp.get("cfg", hp) if isinstance(hp, dict) else {}
    if isinstance(cfg, dict) and "backbone" in cfg:
        return cfg
    for candidate in (run_dir / "config.yaml", ckpt_path.parent / "args.json"):
        if candidate.is_file():
            text = candidate.read_text()
            loaded = json.loads(text) if candidate.suffix == ".json" else yaml.safe_load(text)
            if isinstance(loaded, dict):
                return loaded
    raise ValueError(
        f"no config for {str(ckpt_path)!r}: none in the checkpoint's hyper_parameters, "
        f"{str(run_dir / 'config.yaml')!r} or {str(ckpt_path.parent / 'args.json')!r}"
    )


def _load_prefix(module: nn.Module, state: dict[str, Tensor], prefix: str) -> None:
    """Load ``prefix.*`` keys strictly: a mismatch names the missing and unexpected keys."""
    sub = {k[len(prefix) + 1 :]: v for k, v in state.items() if k.startswith(prefix + ".")}
    result = module.load_state_dict(sub, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise ValueError(
            f"checkpoint keys {prefix}.* do not match the rebuilt module: missing "
            f"{result.missing_keys[:10]}, unexpected {result.unexpected_keys[:10]}"
        )


def _build_head(cfg: dict[str, Any], d: int) -> tuple[nn.Module, str]:

    from omegaconf import OmegaConf

    from solo_geometry.config import build_configured_head, geometry_config

    kwargs = cfg.get("method_kwargs") or {}
    hidden, out = kwargs.get("proj_hidden_dim"), kwargs.get("proj_output_dim")
    if hidden is None or out is None:
        raise ValueError("config lacks method_kwargs.proj_hidden_dim / proj_output_dim")
    gcfg = geometry_config(OmegaConf.create(cfg)) if "geometry" in cfg else None
    if gcfg is not None and gcfg.head.name != "projector":
        head = build_configured_head(gcfg.head, d, int(out), default_hidden=int(hidden))
        return head, f"head {gcfg.head.name} (geometry.head)"
    method = str(cfg.get("method"))
    return _solo_projector(method, d, int(hidden), int(out)), f"{method} projector"


def load_model(run_or_checkpoint: str | Path) -> LoadedModel:
    """Rebuild backbone and head from a run folder or checkpoint, without solo-learn.

    Args:
        run_or_checkpoint: a run folder (newest ``checkpoints/**/*.ckpt``) or a ``.ckpt`` file.

    Returns:
        The loaded model, in eval mode on CPU.

    Raises:
        ValueError: for a missing path, an unreadable checkpoint, no config, an unknown
            backbone or method, or checkpoint keys that do not match.
    """
    from solo_geometry.backbones import CIFAR_DATASETS, build_backbone

    ckpt_path, run_dir = _find_checkpoint(Path(run_or_checkpoint))
    try:
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
    except Exception as err:  # noqa: BLE001 - any unreadable file is the same user error
        raise ValueError(f"cannot read checkpoint {str(ckpt_path)!r}: {err}") from err
    if not isinstance(ckpt, dict):
        raise ValueError(f"checkpoint {str(ckpt_path)!r} is not a dictionary")
    state = ckpt.get("state_dict", ckpt)
    cfg = _read_config(ckpt, ckpt_path, run_dir)
    dataset = str((cfg.get("data") or {}).get("dataset", ""))
    cifar = dataset in CIFAR_DATASETS
    backbone, d = build_backbone(str((cfg.get("backbone") or {}).get("name")), cifar=cifar)
    _load_prefix(backbone, state, "backbone")
    head, kind = _build_head(cfg, d)
    _load_prefix(head, state, "projector")
    ignored = sorted({k.split(".")[0] for k in state} - {"backbone", "projector"})
    notes = [
        f"checkpoint {ckpt_path}",
        f"backbone {cfg['backbone']['name']} (cifar stem: {cifar})",
        kind,
        f"ignored key prefixes: {ignored}",
    ]
    mean_std = MEANS_STDS.get(dataset, IMAGENET_MEAN_STD)  # as the recipe's dataset trained it
    return LoadedModel(backbone.eval(), head.eval(), ckpt_path, run_dir, mean_std, notes)
