"""``resnet20``: He et al.'s CIFAR ResNet-20 as a backbone of the lightly host.

References: the parameter count recomputed layer by layer from the architecture's definition
(He et al. 2016, section 4.2: a 3x3 stem of 16 channels, 3 stages of n = 3 basic blocks of 16,
32 and 64 channels, 6n + 2 = 20 weighted layers with the classifier), and the paper's 0.27 M.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from solo_geometry.models.backbones import BACKBONES, LIGHTLY_ONLY, build_backbone


def _closed_form_params(n: int = 3) -> int:
    """Weights of ResNet-(6n + 2) without its classifier: 3x3 convs, BN (2 per channel), and
    a 1x1 conv + BN on each of the two strided shortcuts (torchvision's option B)."""
    total = 3 * 16 * 9 + 2 * 16  # stem
    inplanes = 16
    for planes in (16, 32, 64):
        for _ in range(n):
            total += 9 * inplanes * planes + 9 * planes * planes + 2 * 2 * planes
            if inplanes != planes:
                total += inplanes * planes + 2 * planes
            inplanes = planes
    return total


def test_resnet20_architecture() -> None:
    net, d = build_backbone("resnet20")
    assert d == 64 and isinstance(net.fc, nn.Identity)
    params = sum(p.numel() for p in net.parameters())
    assert params == _closed_form_params()
    assert params == pytest.approx(0.27e6, rel=0.02)  # He et al.'s 0.27 M
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d) and m.kernel_size == (3, 3)]
    assert len(convs) + 1 == 20  # 19 weighted 3x3 layers and the classifier
    # stride 1, 2, 2: an 8-pixel image leaves a 2x2 last map, a 32-pixel one an 8x8 map
    maps: list[torch.Size] = []
    net.layer3.register_forward_hook(lambda m, i, o: maps.append(o.shape))
    for size, last in ((8, 2), (32, 8)):
        out = net(torch.randn(4, 3, size, size))
        assert out.shape == (4, 64) and maps[-1][-1] == last


def test_stem_option_does_not_apply_and_solo_learn_lacks_it() -> None:
    a, _ = build_backbone("resnet20", stem="imagenet")
    b, _ = build_backbone("resnet20", stem="cifar")
    assert a.conv1.kernel_size == b.conv1.kernel_size == (3, 3) and a.conv1.stride == (1, 1)
    assert "resnet20" in BACKBONES and "resnet20" in LIGHTLY_ONLY
    from solo_geometry.hosts.pretrain import solo_available

    if solo_available():
        from solo.methods.base import BaseMethod

        assert "resnet20" not in BaseMethod._BACKBONES  # why the lightly host runs it
