"""Key layouts of SSL checkpoints, loaded as backbone + head (docs/design.md section 2, ``zoo/``).

Each layout is a fact of the repository that writes it; the checkpoint is recognised by its keys
and every module is rebuilt from the tensors' shapes, then loaded with ``strict=True``:

* ``solo-learn``: a Lightning checkpoint of solo-learn's ``main_pretrain.py`` or of this
  package's lightly host, which writes the same keys by design (``state_dict`` with
  ``backbone.*``, ``projector.*``, ``classifier.*``, momentum copies); the recipe comes from
  ``args.json`` next to it or the run folder's ``config.yaml``; rebuilt by
  :func:`solo_geometry.models.checkpoint.load_model`.
* ``vicreg-resnet50``: facebookresearch/vicreg ``main_vicreg.py`` (the published
  ``resnet50_fullckpt.pth``): ``{"epoch", "model", "optimizer"}``, ``model`` the DDP state of
  ``VICReg``: ``module.backbone.*`` (its ``resnet.py``, torchvision key names, no ``fc``) and
  ``module.projector.{0,1,3,4,6}`` (Linear with bias, BatchNorm1d, ReLU, ..., last Linear
  without bias).
* ``barlowtwins-resnet50``: facebookresearch/barlowtwins ``main.py`` (the published
  ``checkpoint.pth``): ``{"epoch", "model", "optimizer"}``, ``module.backbone.*`` (torchvision
  ResNet-50, ``fc`` = Identity), ``module.projector.*`` (Linear without bias, BatchNorm1d, ReLU,
  ..., Linear without bias) and ``module.bn.*`` (the loss's affine-free BatchNorm, not the head).
* ``dino-resnet50`` and ``dino-vit_small16``: facebookresearch/dino ``main_dino.py`` (the
  published ``dino_*_pretrain_full_checkpoint.pth``): ``{"student", "teacher", "optimizer",
  "epoch", "args", "dino_loss"}``; each branch a ``MultiCropWrapper`` state, ``backbone.*`` and
  ``head.mlp.*`` + ``head.last_layer.weight_{g,v}`` (``DINOHead``: Linear-GELU blocks, L2
  normalisation, weight-normalised Linear), prefixed ``module.`` where DDP wrapped it (the
  student always, the teacher when it has BatchNorm). The ViT-S/16 backbone is DINO's
  ``vit_small`` (timm's ``VisionTransformer`` has the same keys); inputs of another size than
  224 interpolate the position embedding (timm's ``dynamic_img_size``, bicubic as DINO's).

Published checkpoints are normalised with ImageNet's statistics, as they were trained.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solo_geometry.inputs.datasets import IMAGENET_MEAN_STD
from solo_geometry.models.backbones import build_backbone
from solo_geometry.models.checkpoint import LoadedModel, load_model, read_checkpoint
from solo_geometry.models.solo_mlp import build_mlp

__all__ = ["BRANCHES", "LAYOUTS", "DINOHead", "Layout", "detect_layout", "load_checkpoint"]

BRANCHES = ("teacher", "student")  # DINO's two networks; the teacher is the one DINO evaluates
State = Mapping[str, Any]


@dataclass(frozen=True)
class Layout:
    """One checkpoint layout.

    Attributes:
        name: the layout's name (``--layout`` on the command line).
        source: the repository and file that writes it.
        matches: whether a loaded checkpoint object has this layout.
    """

    name: str
    source: str
    matches: Callable[[Any], bool]


class _WeightNormLinear(nn.Module):
    """A bias-free Linear stored as ``torch.nn.utils.weight_norm`` stores it: ``weight_{g,v}``."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.weight_g = nn.Parameter(torch.ones(out_dim, 1))
        self.weight_v = nn.Parameter(torch.randn(out_dim, in_dim))

    def forward(self, x: Tensor) -> Tensor:
        """(N, in) -> (N, out) with W = g * v / ||v|| row-wise."""
        return x @ (self.weight_g * self.weight_v / self.weight_v.norm(dim=1, keepdim=True)).T


class DINOHead(nn.Module):
    """DINO's projection head with DINO's key names: ``mlp.*``, ``last_layer.weight_{g,v}``.

    h(z) = W_last normalise(mlp(z)), with W_last = g * v / ||v|| row-wise (weight normalisation
    as ``torch.nn.utils.weight_norm`` stores it).

    Args:
        mlp: the Linear-[BN]-GELU stack ending in the bottleneck Linear, (N, d) -> (N, b).
        out_dim: number of prototypes K.
        bottleneck_dim: b.
    """

    def __init__(self, mlp: nn.Module, out_dim: int, bottleneck_dim: int) -> None:
        super().__init__()
        self.mlp = mlp
        self.last_layer = _WeightNormLinear(bottleneck_dim, out_dim)

    def forward(self, z: Tensor) -> Tensor:
        """(N, d) -> (N, K)."""
        return self.last_layer(F.normalize(self.mlp(z), dim=-1, p=2))  # (N, b) -> (N, K)


def _sub(state: State, prefix: str) -> dict[str, Tensor]:
    """``prefix.*`` entries with the prefix removed."""
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}


def _load_strict(module: nn.Module, state: Mapping[str, Tensor], what: str) -> None:
    """Load with every key accounted for; a mismatch names the missing and unexpected keys."""
    result = module.load_state_dict(dict(state), strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise ValueError(
            f"{what} keys do not match the rebuilt module: missing {result.missing_keys[:10]}, "
            f"unexpected {result.unexpected_keys[:10]}"
        )


def _linear_indices(state: State) -> list[int]:
    """Indices of the Linear layers of a Sequential state (2-D ``<i>.weight``)."""
    idx = [
        int(k.split(".")[0])
        for k, v in state.items()
        if k.endswith(".weight") and k.split(".")[0].isdigit() and v.ndim == 2
    ]
    return sorted(idx)


def _mlp_from_state(state: State, act_layer: Callable[..., nn.Module], what: str) -> nn.Sequential:
    """A Sequential of Linear-[BN]-act blocks rebuilt from its state (widths, norm, biases)."""
    linears = _linear_indices(state)
    if not linears:
        raise ValueError(f"{what}: no Linear layers among keys {sorted(state)[:10]}")
    dims = [int(state[f"{linears[0]}.weight"].shape[1])]
    dims += [int(state[f"{i}.weight"].shape[0]) for i in linears]
    norm = f"{linears[0] + 1}.running_mean" in state
    mlp = build_mlp(dims, norm=norm, act_layer=act_layer)
    for i in linears:  # the published heads drop some biases (before a norm, the last layer)
        layer = mlp[i]
        if f"{i}.bias" not in state and isinstance(layer, nn.Linear):
            layer.register_parameter("bias", None)
    _load_strict(mlp, state, what)
    return mlp


def _strip_module(state: State) -> dict[str, Any]:
    """Remove DDP's ``module.`` prefix (present on every key or on none)."""
    if state and all(k.startswith("module.") for k in state):
        return _sub(state, "module.")
    return dict(state)


def _resnet50(state: State, what: str) -> nn.Module:
    backbone, _ = build_backbone("resnet50")
    _load_strict(backbone, state, what)
    return backbone


def _vit_small16(state: State, what: str) -> nn.Module:
    try:
        timm = importlib.import_module("timm")
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "the dino-vit_small16 layout needs timm (pip install timm, or the 'solo' extra)"
        ) from err
    # DINO's vit_small: LayerNorm eps 1e-6 as timm's default
    model = timm.models.vision_transformer.VisionTransformer(
        img_size=224,
        patch_size=16,
        embed_dim=384,
        depth=12,
        num_heads=6,
        mlp_ratio=4.0,
        qkv_bias=True,
        num_classes=0,
        global_pool="token",
        dynamic_img_size=True,
    )
    for module in model.modules():  # DINO's explicit softmax attention: forward-mode AD works
        if hasattr(module, "fused_attn"):
            module.fused_attn = False
    _load_strict(model, state, what)
    return model


def _dino_branch(ckpt: Any, branch: str) -> dict[str, Any]:
    if branch not in BRANCHES:
        raise ValueError(f"unknown DINO branch {branch!r}; choose from {list(BRANCHES)}")
    return _strip_module(ckpt[branch])


def _is_dino(ckpt: Any, vit: bool) -> bool:
    if not (isinstance(ckpt, Mapping) and isinstance(ckpt.get("teacher"), Mapping)):
        return False
    state = _strip_module(ckpt["teacher"])
    if "head.last_layer.weight_v" not in state:
        return False
    return ("backbone.cls_token" in state) if vit else ("backbone.conv1.weight" in state)


def _model_state(ckpt: Any) -> dict[str, Any] | None:
    """``ckpt["model"]`` without DDP's prefix, for the VICReg and Barlow Twins layouts."""
    if not (isinstance(ckpt, Mapping) and isinstance(ckpt.get("model"), Mapping)):
        return None
    state = _strip_module(ckpt["model"])
    if "backbone.conv1.weight" not in state or "projector.0.weight" not in state:
        return None
    return state


def _is_vicreg(ckpt: Any) -> bool:
    state = _model_state(ckpt)
    return state is not None and "projector.0.bias" in state and "bn.running_mean" not in state


def _is_barlow(ckpt: Any) -> bool:
    state = _model_state(ckpt)
    return state is not None and "projector.0.bias" not in state and "bn.running_mean" in state


def _is_solo(ckpt: Any) -> bool:
    state = ckpt.get("state_dict") if isinstance(ckpt, Mapping) else None
    return (
        isinstance(state, Mapping)
        and any(k.startswith("backbone.") for k in state)
        and any(k.startswith("projector.") for k in state)
    )


LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in (
        Layout(
            "solo-learn",
            "vturrisi/solo-learn main_pretrain.py or solo-geometry's lightly "
            "host (Lightning .ckpt, state_dict backbone.* projector.*)",
            _is_solo,
        ),
        Layout(
            "vicreg-resnet50",
            "facebookresearch/vicreg main_vicreg.py (resnet50_fullckpt.pth)",
            _is_vicreg,
        ),
        Layout(
            "barlowtwins-resnet50",
            "facebookresearch/barlowtwins main.py (checkpoint.pth)",
            _is_barlow,
        ),
        Layout(
            "dino-resnet50",
            "facebookresearch/dino main_dino.py (dino_resnet50_pretrain_full_checkpoint.pth)",
            lambda c: _is_dino(c, vit=False),
        ),
        Layout(
            "dino-vit_small16",
            "facebookresearch/dino main_dino.py (dino_deitsmall16_pretrain_full_checkpoint.pth)",
            lambda c: _is_dino(c, vit=True),
        ),
    )
}


def _describe(ckpt: Any) -> str:
    if not isinstance(ckpt, Mapping):
        return f"a {type(ckpt).__name__}"
    return f"top-level keys {sorted(map(str, ckpt))[:12]}"


def detect_layout(ckpt: Any, where: str = "checkpoint") -> str:
    """The name of the one layout a loaded checkpoint object matches.

    Args:
        ckpt: what :func:`solo_geometry.models.checkpoint.read_checkpoint` returned.
        where: the file, for the error message.

    Returns:
        A key of :data:`LAYOUTS`.

    Raises:
        ValueError: when no layout matches; the message lists the known layouts.
    """
    found = [name for name, layout in LAYOUTS.items() if layout.matches(ckpt)]
    if len(found) != 1:
        known = "; ".join(f"{n} ({lay.source})" for n, lay in LAYOUTS.items())
        raise ValueError(
            f"{where}: unknown checkpoint layout ({_describe(ckpt)}); known layouts: {known}"
        )
    return found[0]


def _external(ckpt: Any, layout: str, branch: str) -> tuple[nn.Module, nn.Module, list[str]]:
    """Backbone, head and notes of a published layout."""
    if layout in ("vicreg-resnet50", "barlowtwins-resnet50"):
        state = _model_state(ckpt) or {}
        backbone = _resnet50(_sub(state, "backbone."), f"{layout} backbone.*")
        head = _mlp_from_state(_sub(state, "projector."), nn.ReLU, f"{layout} projector.*")
        ignored = sorted({k.split(".")[0] for k in state} - {"backbone", "projector"})
        widths = [m.out_features for m in head if isinstance(m, nn.Linear)]
        return backbone, head, [f"head: projector, Linear widths {widths}", f"ignored: {ignored}"]
    state = _dino_branch(ckpt, branch)
    build = _vit_small16 if layout == "dino-vit_small16" else _resnet50
    backbone = build(_sub(state, "backbone."), f"{layout} {branch} backbone.*")
    mlp_state = _sub(state, "head.mlp.")
    mlp = _mlp_from_state(mlp_state, nn.GELU, f"{layout} {branch} head.mlp.*")
    v = state["head.last_layer.weight_v"]
    dino = DINOHead(mlp, int(v.shape[0]), int(v.shape[1]))
    _load_strict(dino, _sub(state, "head."), f"{layout} {branch} head.*")
    return backbone, dino, [f"branch: {branch}", f"head: DINOHead, {int(v.shape[0])} prototypes"]


def load_checkpoint(
    path: str | Path,
    *,
    layout: str | None = None,
    branch: str = "teacher",
    trust_pickle: bool = False,
) -> tuple[LoadedModel, str]:
    """Rebuild backbone and head of a checkpoint of any known layout.

    Args:
        path: the checkpoint file (for solo-learn and the lightly host also a run folder).
        layout: a key of :data:`LAYOUTS`; None: detected from the keys.
        branch: DINO's ``teacher`` (default, the network DINO evaluates) or ``student``.
        trust_pickle: read a ``torch.save`` file with a full pickle (trusted files only).

    Returns:
        The loaded model (eval mode, CPU) and the layout's name.

    Raises:
        ValueError: unknown or mismatching layout, unknown branch, unreadable file, or keys
            that do not match the rebuilt modules.
        ModuleNotFoundError: timm missing for the ViT layout.
    """
    path = Path(path)
    if layout is not None and layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose from {sorted(LAYOUTS)}")
    if branch not in BRANCHES:
        raise ValueError(f"unknown DINO branch {branch!r}; choose from {list(BRANCHES)}")
    if path.is_dir():  # a run folder: solo-learn or the lightly host
        return load_model(path, trust_pickle=trust_pickle), layout or "run folder"
    ckpt = read_checkpoint(path, trust_pickle=trust_pickle)
    found = detect_layout(ckpt, str(path))
    if layout is not None and layout != found:
        raise ValueError(f"{path}: --layout {layout!r} given, but its keys are {found!r}")
    if found == "solo-learn":
        return load_model(path, trust_pickle=trust_pickle), found
    backbone, head, notes = _external(ckpt, found, branch)
    notes = [f"checkpoint {path}", f"layout {found} ({LAYOUTS[found].source})", *notes]
    model = LoadedModel(backbone.eval(), head.eval(), path, path.parent, IMAGENET_MEAN_STD, notes)
    return model, found
