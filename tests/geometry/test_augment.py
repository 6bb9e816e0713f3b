from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor, nn
from torch.autograd.functional import jacobian

from solo_geometry.config.choices import FAMILY_CHOICES
from solo_geometry.geometry.augment import (
    COLOUR_FAMILIES,
    FAMILIES,
    GEOMETRIC_FAMILIES,
    apply_augmentation,
    apply_normalisation,
    augmentation_tangents,
    default_step,
    metric_singularity,
    undo_normalisation,
)


def test_families_are_the_configs_choices() -> None:
    # the config validates family names against FAMILY_CHOICES (torch-free); FAMILIES, keyed by
    # them, must hold the same names in the same order, split into colour and geometric ones
    assert tuple(FAMILIES) == FAMILY_CHOICES
    assert COLOUR_FAMILIES + GEOMETRIC_FAMILIES == FAMILY_CHOICES


def images(n: int = 3, size: int = 12) -> Tensor:
    return torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(0)).double()


def backbone(norm: bool = False) -> nn.Module:
    torch.manual_seed(0)
    layers = [nn.Conv2d(3, 6, 3, padding=1), nn.Tanh(), nn.Conv2d(6, 6, 3, stride=2)]
    if norm:
        layers.append(nn.BatchNorm2d(6))
    layers += [nn.Tanh(), nn.AdaptiveAvgPool2d(2), nn.Flatten()]
    return nn.Sequential(*layers).double()


def exact_tangent(net: nn.Module, x: Tensor, family: str) -> Tensor:
    """d net(aug(x, t)) / dt at 0 by reverse-over-reverse AD (grid_sample supports it)."""
    t = torch.zeros((), dtype=x.dtype, requires_grad=True)
    y = net(apply_augmentation(x, family, t))
    u = torch.zeros_like(y, requires_grad=True)
    (w,) = torch.autograd.grad(y, t, grad_outputs=u, create_graph=True)
    return torch.autograd.grad(w, u)[0]


def rel(a: Tensor, b: Tensor) -> float:
    return float((a - b).norm() / b.norm())


class TestFamilies:
    @pytest.mark.parametrize("family", sorted(FAMILIES))
    def test_zero_is_identity_and_per_sample_t(self, family: str) -> None:
        x = images()
        torch.testing.assert_close(apply_augmentation(x, family, 0.0), x, atol=1e-12, rtol=0)
        t = torch.tensor([0.0, 0.1, -0.2], dtype=torch.float64)
        out = apply_augmentation(x, family, t)
        torch.testing.assert_close(out[0], x[0], atol=1e-12, rtol=0)
        torch.testing.assert_close(out[1:2], apply_augmentation(x[1:2], family, 0.1))
        assert not torch.allclose(out[2], x[2])

    def test_partition_and_errors(self) -> None:
        assert set(COLOUR_FAMILIES) | set(GEOMETRIC_FAMILIES) == set(FAMILIES)
        with pytest.raises(ValueError, match="unknown augmentation family 'blur'"):
            apply_augmentation(images(), "blur", 0.1)
        with pytest.raises(ValueError, match="RGB"):
            apply_augmentation(torch.zeros(1, 1, 4, 4), "hue", 0.1)
        with pytest.raises(ValueError, match="step"):
            augmentation_tangents(backbone(), images(), "rotation", step=0.0)


CIFAR = ((0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261))


def pipeline_reference(
    net: nn.Module, pixels: Tensor, family: str, bn_training: bool
) -> tuple[Tensor, Tensor]:
    """Central differences (h = 1e-6) and reverse-over-reverse AD of the whole pipeline:
    augment the pixels, normalise with CIFAR's statistics, run a copy of the net in the mode."""
    net = copy.deepcopy(net).train(bn_training)  # the copy's running statistics may move
    mean, std = (torch.tensor(v, dtype=torch.float64).view(1, 3, 1, 1) for v in CIFAR)

    def f(t: Tensor | float) -> Tensor:
        return net((apply_augmentation(pixels, family, t) - mean) / std)

    h = 1e-6
    with torch.no_grad():
        cd = (f(h) - f(-h)) / (2 * h)
    t = torch.zeros((), dtype=torch.float64, requires_grad=True)
    y = f(t)
    u = torch.zeros_like(y, requires_grad=True)
    (w,) = torch.autograd.grad(y, t, grad_outputs=u, create_graph=True)
    return cd, torch.autograd.grad(w, u)[0]


class TestTangents:
    @pytest.mark.parametrize("family", sorted(FAMILIES))
    @pytest.mark.parametrize("bn_training", [True, False])
    @pytest.mark.parametrize("images_normalised", [True, False])
    def test_pixel_space_pipeline_in_the_batch_norm_mode(
        self, family: str, bn_training: bool, images_normalised: bool
    ) -> None:
        net, pixels = backbone(norm=True).train(bn_training), images(n=4)
        mean, std = (torch.tensor(v, dtype=torch.float64).view(1, 3, 1, 1) for v in CIFAR)
        given = (pixels - mean) / std if images_normalised else pixels
        got = augmentation_tangents(
            net, given, family, normalise=CIFAR, images_normalised=images_normalised
        )
        cd, exact = pipeline_reference(net, pixels, family, bn_training)
        assert got.shape == (4, 24)
        smooth = family in COLOUR_FAMILIES  # bicubic resampling is C1 only: cd error O(h)
        assert rel(cd, exact) < (1e-8 if smooth else 5e-5)
        assert rel(got, cd) < (1e-8 if smooth else 1e-4)
        assert rel(got, exact) < (1e-12 if smooth else 1e-5)

    def test_explicit_mode_overrides_the_flag(self) -> None:
        net, pixels = backbone(norm=True).eval(), images(n=4)
        got = augmentation_tangents(
            net, pixels, "brightness", normalise=CIFAR, images_normalised=False, bn_training=True
        )
        cd, _ = pipeline_reference(net, pixels, "brightness", bn_training=True)
        assert rel(got, cd) < 1e-8
        eval_cd, _ = pipeline_reference(net, pixels, "brightness", bn_training=False)
        assert rel(eval_cd, cd) > 1e-2  # the two modes are different functions

    @pytest.mark.parametrize("family", COLOUR_FAMILIES)
    def test_colour_equals_central_differences(self, family: str) -> None:
        net, x, h = backbone(), images(), 1e-5
        with torch.no_grad():
            cd = net(apply_augmentation(x, family, h)) - net(apply_augmentation(x, family, -h))
        got = augmentation_tangents(net, x, family)
        assert got.shape == (3, 24)
        assert rel(got, cd / (2 * h)) < 1e-4

    @pytest.mark.parametrize("family", GEOMETRIC_FAMILIES)
    @pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-4), (torch.float32, 5e-3)])
    def test_geometric_stable_under_halving(
        self, family: str, dtype: torch.dtype, tol: float
    ) -> None:
        net, x = backbone().to(dtype), images().to(dtype)
        step = default_step(dtype)
        full = augmentation_tangents(net, x, family)
        half = augmentation_tangents(net, x, family, step=step / 2)
        assert rel(half, full) < tol
        assert rel(full.double(), exact_tangent(backbone(), images(), family)) < tol

    @pytest.mark.parametrize("bn_training", [None, True, False])
    def test_backbone_left_untouched(self, bn_training: bool | None) -> None:
        net = nn.Sequential(backbone(norm=True), nn.Dropout(0.5)).train()
        net[0][1].eval()  # a mixed-mode module: each flag must come back as it was
        net(images())
        modes = [(m.training, getattr(m, "track_running_stats", None)) for m in net.modules()]
        state, rng = copy.deepcopy(net.state_dict()), torch.get_rng_state()
        for family in ("hue", "rotation"):
            augmentation_tangents(net, images(), family, normalise=CIFAR, bn_training=bn_training)
        assert torch.equal(torch.get_rng_state(), rng)  # dropout never drew
        assert modes == [
            (m.training, getattr(m, "track_running_stats", None)) for m in net.modules()
        ]
        for key, value in net.state_dict().items():
            assert torch.equal(value, state[key]), key
        assert all(p.grad is None for p in net.parameters())


class TestNormalisation:
    def test_round_trip_and_torchvision(self) -> None:
        normalise = pytest.importorskip("torchvision.transforms").Normalize(*CIFAR)
        x = images()
        torch.testing.assert_close(apply_normalisation(x, CIFAR), normalise(x))
        torch.testing.assert_close(undo_normalisation(apply_normalisation(x, CIFAR), CIFAR), x)

    @pytest.mark.parametrize("bad", [((0.5, 0.5), (0.2, 0.2)), ((0.5,) * 3, (0.2, 0.0, 0.2))])
    def test_rejects_bad_statistics(self, bad: tuple) -> None:
        with pytest.raises(ValueError, match="normalise must be"):
            augmentation_tangents(backbone(), images(), "hue", normalise=bad)


def per_sample_rho(head: nn.Module, z: Tensor, v: Tensor, generator: torch.Generator) -> float:
    """Dense reference: per-sample Jacobians, the same Gaussian draws as the implementation."""
    head = copy.deepcopy(head).double().eval()
    jac = [jacobian(head, z[i : i + 1])[0, :, 0] for i in range(z.shape[0])]  # (p, d) each

    def quotient(vv: Tensor) -> Tensor:
        return torch.stack(
            [(j @ r).pow(2).sum() / r.pow(2).sum() for j, r in zip(jac, vv, strict=True)]
        )

    rand = [
        quotient(torch.randn(z.shape, generator=generator, dtype=torch.float64)) for _ in range(8)
    ]
    return float(quotient(v).mean() / torch.cat(rand).mean())


class TestMetricSingularity:
    def test_matches_dense_per_sample(self) -> None:
        torch.manual_seed(0)
        head = nn.Sequential(nn.Linear(5, 7), nn.SiLU(), nn.Linear(7, 3))
        z = torch.randn(6, 5, dtype=torch.float64)
        v = torch.randn(6, 5, dtype=torch.float64)
        got = metric_singularity(head, z, v, generator=torch.Generator().manual_seed(1))
        ref = per_sample_rho(head, z, v, torch.Generator().manual_seed(1))
        assert got == pytest.approx(ref, rel=1e-10)

    def test_null_space_gives_zero(self) -> None:
        head = nn.Linear(4, 2, bias=False)
        with torch.no_grad():
            head.weight.copy_(torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0]]))
        z = torch.randn(5, 4, dtype=torch.float64)
        v = torch.zeros(5, 4, dtype=torch.float64)
        v[:, 2:] = torch.randn(5, 2, dtype=torch.float64)  # in the kernel of W
        assert metric_singularity(head, z, v, generator=None) == pytest.approx(0.0, abs=1e-14)
        along = torch.zeros(5, 4, dtype=torch.float64)
        along[:, 0] = 1.0
        assert metric_singularity(head, z, along, generator=None) > 1.0

    def test_batch_norm_head_is_batch_level(self) -> None:
        torch.manual_seed(0)
        head = nn.Sequential(nn.Linear(4, 6, bias=False), nn.BatchNorm1d(6), nn.Linear(6, 3))
        z = torch.randn(8, 4, dtype=torch.float64)
        v = torch.randn(8, 4, dtype=torch.float64)
        gen = torch.Generator().manual_seed(2)
        got = metric_singularity(head, z, v, generator=gen, probes=4)
        ref_head = copy.deepcopy(head).double().train()
        jac = jacobian(ref_head, z).reshape(8 * 3, 8 * 4)
        gen = torch.Generator().manual_seed(2)
        q = [
            (jac @ u.reshape(-1)).pow(2).sum() / u.pow(2).sum()
            for u in (torch.randn(8, 4, generator=gen, dtype=torch.float64) for _ in range(4))
        ]
        expected = (jac @ v.reshape(-1)).pow(2).sum() / v.pow(2).sum() / torch.stack(q).mean()
        assert got == pytest.approx(float(expected), rel=1e-10)
        assert head.training
