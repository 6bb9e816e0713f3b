"""Continuous augmentation families, their tangents in Z and the head's metric along them.

Each family is a function ``aug(x, t)`` of images x (N, C, H, W) and a parameter t (a float, a
0-d tensor or one value per image, shape (N,)), differentiable in t, with ``aug(x, 0) == x``:

* colour (pointwise, forward-mode AD works): brightness, contrast, saturation, hue;
* geometric (resampling with :func:`torch.nn.functional.grid_sample`, which has no forward-mode
  AD): rotation, scale, translation.

Families act on images in pixel space (unnormalised, as a data pipeline's transforms do before
its ``Normalize``). Nothing is clamped to [0, 1]: clamping would zero the derivative wherever a
pixel saturates.

The tangent of a family at x is v_aug(x) = d f(normalise(aug(x, t))) / dt at t = 0, in the
backbone's feature space Z, with the recipe's normalisation between the augmentation and the
backbone f, in the BatchNorm mode of the point it differentiates at (docs/design.md section 3).
``metric_singularity`` compares the head's pullback metric G = J^T J along these tangents with
random directions (rho_aug).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _NormBase

from solo_geometry.linalg.operators import has_batch_norm, head_operators

__all__ = [
    "COLOUR_FAMILIES",
    "FAMILIES",
    "GEOMETRIC_FAMILIES",
    "MeanStd",
    "apply_augmentation",
    "apply_normalisation",
    "augmentation_tangents",
    "default_step",
    "deterministic_mode",
    "metric_singularity",
    "undo_normalisation",
]

Augmentation = Callable[[Tensor, Tensor | float], Tensor]
MeanStd = tuple[Sequence[float], Sequence[float]]  # a recipe's per-channel (mean, std)

_LUMA = (0.299, 0.587, 0.114)  # ITU-R 601 luma weights, as torchvision's rgb_to_grayscale
_RGB_TO_YIQ = torch.tensor(
    [[0.299, 0.587, 0.114], [0.5959, -0.2746, -0.3213], [0.2115, -0.5227, 0.3112]],
    dtype=torch.float64,
)


def _param(t: Tensor | float, x: Tensor) -> Tensor:
    """Parameter t as a tensor broadcastable against x (N, C, H, W): () or (N, 1, 1, 1)."""
    t = torch.as_tensor(t, dtype=x.dtype, device=x.device)
    return t.reshape(-1, 1, 1, 1) if t.ndim == 1 else t


def _gray(x: Tensor) -> Tensor:
    """Luma (N, 1, H, W) for RGB, channel mean otherwise."""
    if x.shape[1] != 3:
        return x.mean(dim=1, keepdim=True)
    w = torch.tensor(_LUMA, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    return (x * w).sum(dim=1, keepdim=True)


def brightness(x: Tensor, t: Tensor | float) -> Tensor:
    """Multiply intensities by 1 + t."""
    return x * (1 + _param(t, x))


def contrast(x: Tensor, t: Tensor | float) -> Tensor:
    """Scale deviations from each image's mean luma by 1 + t."""
    mean = _gray(x).mean(dim=(-3, -2, -1), keepdim=True)  # (N, 1, 1, 1)
    return mean + (1 + _param(t, x)) * (x - mean)


def saturation(x: Tensor, t: Tensor | float) -> Tensor:
    """Scale deviations from each pixel's luma by 1 + t (t = -1: grayscale)."""
    gray = _gray(x)  # (N, 1, H, W)
    return gray + (1 + _param(t, x)) * (x - gray)


def hue(x: Tensor, t: Tensor | float) -> Tensor:
    """Rotate the chroma plane of YIQ space by 2 pi t (t in turns, as torchvision's hue factor).

    Raises:
        ValueError: if the images are not RGB.
    """
    if x.shape[1] != 3:
        raise ValueError(f"hue needs RGB images (C = 3); got C = {x.shape[1]}")
    angle = 2 * math.pi * _param(t, x)
    cos, sin = torch.cos(angle), torch.sin(angle)
    fwd = _RGB_TO_YIQ.to(x)
    yiq = torch.einsum("ij,njhw->nihw", fwd, x)  # (N, 3, H, W) in YIQ
    i, q = yiq[:, 1:2], yiq[:, 2:3]
    rotated = torch.cat([yiq[:, :1], cos * i - sin * q, sin * i + cos * q], dim=1)
    return torch.einsum("ij,njhw->nihw", torch.linalg.inv(fwd), rotated)


def _resample(x: Tensor, theta: Tensor) -> Tensor:
    """Resample x (N, C, H, W) on the affine grid theta (N, 2, 3).

    Bicubic (C1 in the grid, so tangents exist at t = 0), reflected borders.
    """
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)  # (N, H, W, 2)
    return F.grid_sample(x, grid, mode="bicubic", padding_mode="reflection", align_corners=False)


def _theta(x: Tensor, t: Tensor | float) -> tuple[Tensor, Tensor]:
    t = torch.as_tensor(t, dtype=x.dtype, device=x.device).expand(x.shape[0])  # (N,)
    theta = torch.zeros(x.shape[0], 2, 3, dtype=x.dtype, device=x.device)
    return t, theta


def rotation(x: Tensor, t: Tensor | float) -> Tensor:
    """Rotate by t radians about the image centre."""
    t, theta = _theta(x, t)
    cos, sin = torch.cos(t), torch.sin(t)
    theta = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], 1)  # (N,2,2)
    return _resample(x, F.pad(theta, (0, 1)))


def scale(x: Tensor, t: Tensor | float) -> Tensor:
    """Zoom by exp(t) about the image centre (t > 0 enlarges)."""
    t, _ = _theta(x, t)
    s = torch.exp(-t)  # the grid maps output to input coordinates
    theta = F.pad(torch.diag_embed(torch.stack([s, s], -1)), (0, 1))  # (N, 2, 3)
    return _resample(x, theta)


def translation(x: Tensor, t: Tensor | float) -> Tensor:
    """Shift right by a fraction t of the image width."""
    t, theta = _theta(x, t)
    eye = torch.eye(2, 3, dtype=x.dtype, device=x.device).expand_as(theta)
    shift = torch.stack([-2 * t, torch.zeros_like(t)], -1)  # normalised coordinates span 2
    return _resample(x, eye + F.pad(shift.unsqueeze(-1), (2, 0)))


FAMILIES: dict[str, Augmentation] = {
    "brightness": brightness,
    "contrast": contrast,
    "saturation": saturation,
    "hue": hue,
    "rotation": rotation,
    "scale": scale,
    "translation": translation,
}
COLOUR_FAMILIES = ("brightness", "contrast", "saturation", "hue")
GEOMETRIC_FAMILIES = ("rotation", "scale", "translation")


def _check_family(family: str) -> Augmentation:
    if family not in FAMILIES:
        raise ValueError(f"unknown augmentation family {family!r}; choose from {sorted(FAMILIES)}")
    return FAMILIES[family]


def apply_augmentation(x: Tensor, family: str, t: Tensor | float) -> Tensor:
    """Apply ``family`` with parameter t to images x (N, C, H, W).

    Raises:
        ValueError: on an unknown family.
    """
    return _check_family(family)(x, t)


def default_step(dtype: torch.dtype) -> float:
    """Central-difference step h of the geometric tangents.

    Images are resampled bicubically, which is C1 but not C2 in t at t = 0 (every sample sits
    on a pixel centre there), so a plain central difference has an O(h) error; the tangents use
    Richardson's 2 D(h/2) - D(h), whose error is O(h^2) in the displacement in pixels (t = 1e-3
    moves a pixel 16 px from the centre by 0.016 px). Round-off grows like eps / h. Measured on
    16-32 px images, the two balance near h = 2e-3 in float32 (relative error about 1e-3) and
    below 1e-4 in float64 (1e-6), so: 2e-3 for float32 and lower precision, 1e-4 for float64.
    """
    return 1e-4 if dtype == torch.float64 else 2e-3


def _channel_stats(x: Tensor, normalise: MeanStd) -> tuple[Tensor, Tensor]:
    """Mean and std of ``normalise`` as (1, C, 1, 1) tensors of x's dtype and device."""
    mean, std = (
        torch.as_tensor(v, dtype=x.dtype, device=x.device).reshape(1, -1, 1, 1) for v in normalise
    )
    if mean.numel() != x.shape[1] or std.numel() != x.shape[1] or not bool((std > 0).all()):
        raise ValueError(
            f"normalise must be (mean, std) with {x.shape[1]} values each and std > 0; "
            f"got {normalise!r}"
        )
    return mean, std


def apply_normalisation(x: Tensor, normalise: MeanStd) -> Tensor:
    """(x - mean) / std per channel, as ``torchvision.transforms.Normalize``.

    Args:
        x: images (N, C, H, W) in pixel space.
        normalise: ``(mean, std)``, C values each.

    Returns:
        Normalised images (N, C, H, W).

    Raises:
        ValueError: if ``normalise`` does not have C values each or a std is not positive.
    """
    mean, std = _channel_stats(x, normalise)
    return (x - mean) / std


def undo_normalisation(x: Tensor, normalise: MeanStd) -> Tensor:
    """Undo :func:`apply_normalisation`: x * std + mean, back to pixel space (N, C, H, W).

    Raises:
        ValueError: if ``normalise`` does not have C values each or a std is not positive.
    """
    mean, std = _channel_stats(x, normalise)
    return x * std + mean


@contextmanager
def deterministic_mode(module: nn.Module, *, batch_stats: bool) -> Iterator[nn.Module]:
    """Run ``module`` as a deterministic function of its input, leaving its state as found.

    Inside the context every submodule is in eval mode (dropout and other random layers off)
    except the normalisation layers with running statistics (BatchNorm and other ``_NormBase``),
    which use the batch's statistics when ``batch_stats`` (training mode with
    ``track_running_stats`` switched off, so running statistics and ``num_batches_tracked`` are
    never written, and forward-mode AD sees no in-place update) and their running statistics
    otherwise. Every module's ``training`` and ``track_running_stats`` are restored on exit.

    Args:
        module: the network.
        batch_stats: whether normalisation layers use batch statistics (training-mode BatchNorm).

    Yields:
        ``module`` itself.
    """
    modules = list(module.modules())
    saved = [(m.training, getattr(m, "track_running_stats", None)) for m in modules]
    try:
        for m in modules:
            m.training = False
            if batch_stats and isinstance(m, _NormBase):
                m.training, m.track_running_stats = True, False
        yield module
    finally:
        for m, (training, track) in zip(modules, saved, strict=True):
            m.training = training
            if track is not None:
                m.track_running_stats = track


def _central(f: Callable[[float], Tensor], h: float) -> Tensor:
    """Central difference (f(h) - f(-h)) / 2h."""
    return (f(h) - f(-h)) / (2 * h)


def augmentation_tangents(
    backbone: nn.Module,
    images: Tensor,
    family: str,
    *,
    normalise: MeanStd | None = None,
    images_normalised: bool = True,
    bn_training: bool | None = None,
    step: float | None = None,
) -> Tensor:
    """Tangents v_aug(x) = d backbone(normalise(aug(x, t))) / dt at t = 0, in Z.

    The augmentation acts on the unnormalised image (pixel space), then comes the recipe's
    normalisation, then the backbone (docs/design.md section 3). With ``normalise = (mean, std)``
    and ``images_normalised`` (a training batch, normalised by the recipe) the images are first
    mapped back to pixel space, x = images * std + mean; with ``images_normalised=False`` they are
    taken as pixels. With ``normalise=None`` the images are pixels the backbone reads as
    they are.

    The backbone runs in the BatchNorm mode of the point it differentiates at: batch statistics
    when ``bn_training`` (default: the backbone's own ``training`` flag, so a feature computed
    in a training step is differentiated in training mode), running statistics otherwise; other
    layers run in eval mode (no dropout), see :func:`deterministic_mode`. In batch-statistics
    mode every image of the batch moves with t, so the batch statistics move too: the tangent is
    that of the whole batch's pipeline, as in the training step. Running statistics,
    ``num_batches_tracked``, every module's mode, ``.grad`` and the RNG are left as found.
    Colour families use forward-mode AD (:func:`torch.func.jvp`); geometric ones central
    differences with ``step`` and ``step / 2`` combined by Richardson extrapolation (see
    :func:`default_step`), since ``grid_sample`` has no forward-mode AD.

    Args:
        backbone: images (N, C, H, W) -> features (N, d) (or (N, d, 1, 1), flattened).
        images: images (N, C, H, W), normalised or pixels (see above).
        family: one of ``FAMILIES``.
        normalise: the recipe's ``(mean, std)`` (C values each), or None.
        images_normalised: whether ``images`` are already normalised by ``normalise``.
        bn_training: BatchNorm on batch statistics (True) or running statistics (False);
            None: ``backbone.training``.
        step: central-difference step (geometric families); default :func:`default_step`.

    Returns:
        Tangents (N, d), detached.

    Raises:
        ValueError: on an unknown family, a non-positive step or a bad ``normalise``.
    """
    aug = _check_family(family)
    h = default_step(images.dtype) if step is None else step
    if h <= 0:
        raise ValueError(f"step must be positive; got {step}")
    x = images.detach()
    if normalise is not None and images_normalised:
        x = undo_normalisation(x, normalise)  # (N, C, H, W) in pixel space

    def pipeline(t: Tensor | float) -> Tensor:
        moved = aug(x, t)  # (N, C, H, W), pixel space
        return backbone(moved if normalise is None else apply_normalisation(moved, normalise))

    batch_stats = backbone.training if bn_training is None else bn_training
    with deterministic_mode(backbone, batch_stats=batch_stats):
        if family in COLOUR_FAMILIES:
            zero = torch.zeros((), dtype=x.dtype, device=x.device)
            out = torch.func.jvp(pipeline, (zero,), (torch.ones_like(zero),))
            return out[1].detach().flatten(1)  # (N, d), the tangent
        with torch.no_grad():
            coarse, fine = _central(pipeline, h), _central(pipeline, h / 2)
        return (2 * fine - coarse).flatten(1)  # (N, d), Richardson: O(h) error cancels


def _quadratic_form(jv: Tensor, v: Tensor, per_sample: bool) -> Tensor:
    """v^T G v / v^T v per sample (N,) or for the whole batch (1,), given J v."""
    if per_sample:
        return jv.pow(2).sum(-1) / v.pow(2).sum(-1)
    return (jv.pow(2).sum() / v.pow(2).sum()).reshape(1)


def metric_singularity(
    head: nn.Module,
    Z: Tensor,
    tangents: Tensor,
    *,
    generator: torch.Generator | None,
    probes: int = 8,
    dtype: torch.dtype = torch.float64,
) -> float:
    """rho_aug: the head's pullback metric along tangents relative to random directions.

    rho_aug = mean_i (v_i^T G v_i / v_i^T v_i) / mean_{i,k} (u_ik^T G u_ik / u_ik^T u_ik), with
    G = J^T J per sample for heads without BatchNorm; with BatchNorm (run in training mode, the
    batch coupled) the quotients are of the whole batch, v^T G v / v^T v with v = tangents
    flattened. u are ``probes`` Gaussian directions per sample (per batch with BatchNorm).
    Samples with a zero tangent are left out.

    Args:
        head: projection head (N, d) -> (N, p).
        Z: features (N, d).
        tangents: augmentation tangents (N, d).
        generator: draws the random directions (CPU generator; None: seeded 0).
        probes: random directions per sample.
        dtype: computation dtype.

    Returns:
        rho_aug as a float (NaN if every tangent is zero).

    Raises:
        ValueError: if Z and tangents differ in shape or are not (N, d).
    """
    if Z.ndim != 2 or Z.shape != tangents.shape:
        raise ValueError(f"Z and tangents must both be (N, d); got {Z.shape}, {tangents.shape}")
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    per_sample = not has_batch_norm(head)
    ops = head_operators(head, lambda h: h.sum() * 0.0, Z.unsqueeze(0), dtype=dtype)
    v = tangents.detach().to(dtype=dtype, device=Z.device)
    keep = v.pow(2).sum(-1) > 0
    if not bool(keep.any()):
        return math.nan
    jv = ops.jvp(v[None])[0]  # (N, p)
    if per_sample:
        jv, v = jv[keep], v[keep]
    q_aug = _quadratic_form(jv, v, per_sample)
    q_rand = []
    for _ in range(probes):
        u = torch.randn(Z.shape, generator=gen, dtype=torch.float64, device=gen.device)
        u = u.to(dtype=dtype, device=Z.device)  # (N, d)
        q_rand.append(_quadratic_form(ops.jvp(u[None])[0], u, per_sample))
    return float(q_aug.mean() / torch.cat(q_rand).mean())
