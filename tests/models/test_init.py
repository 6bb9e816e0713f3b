import pytest
import torch
from torch import nn

from solo_geometry.geometry.stats import normalized_std
from solo_geometry.models.backbones import build_backbone
from solo_geometry.models.heads import MetricLinearHead, SmoothMLPHead
from solo_geometry.models.init import pseudo_collapse_, pseudo_collapse_backbone_


class TestPseudoCollapse:
    @pytest.mark.parametrize("activation", ["swish", "relu", "gelu"])
    def test_shrinks_normalized_std_of_outputs(self, activation):
        torch.manual_seed(0)
        head = SmoothMLPHead(32, 64, 16, activation=activation, norm="none")
        z = torch.randn(256, 32)
        before = normalized_std(head(z))
        weights = [m.weight.clone() for m in head.modules() if isinstance(m, nn.Linear)]
        assert pseudo_collapse_(head, alpha=0.1) is head
        after = normalized_std(head(z))
        assert after < 0.5 * before
        for w, m in zip(
            weights, [m for m in head.modules() if isinstance(m, nn.Linear)], strict=True
        ):
            torch.testing.assert_close(m.weight, 0.1 * w)

    @pytest.mark.parametrize("param", ["spectral", "factor"])
    def test_metric_head_is_scaled(self, param):
        head = MetricLinearHead(6, 4, parametrization=param).double()
        w = head.linear_map().detach().clone()
        pseudo_collapse_(head, alpha=0.1)
        torch.testing.assert_close(head.linear_map().detach(), 0.1 * w, rtol=1e-9, atol=1e-12)

    @pytest.mark.parametrize("alpha", [0, -1.0, True, "0.1"])
    def test_bad_alpha(self, alpha):
        with pytest.raises(ValueError, match="alpha must be"):
            pseudo_collapse_(nn.Linear(2, 2), alpha=alpha)

    def test_backbone_last_layer(self):
        torch.manual_seed(0)
        net, dim = build_backbone("resnet18", cifar=True)
        assert dim == 512
        last_bn = net.layer4[-1].bn2
        w = last_bn.weight.detach().clone()
        pseudo_collapse_backbone_(net, alpha=0.1)
        torch.testing.assert_close(last_bn.weight.detach(), 0.1 * w)
