import pytest
import torch
from torch import nn

from solo_geometry.config import HeadConfig
from solo_geometry.config.choices import ACTIVATION_CHOICES, HEAD_CHOICES, NO_NORM, NORM_CHOICES
from solo_geometry.models.heads import (
    ACTIVATIONS,
    HEADS,
    MetricLinearHead,
    ProjectionHead,
    SmoothMLPHead,
    build_configured_head,
    build_head,
    get_activation,
)

SMOOTH = ["swish", "gelu", "softplus", "tanh", "elu"]


def _second_derivative(head: nn.Module, z: torch.Tensor) -> torch.Tensor:
    """d^2 <c, h(z)> / dz^2 for a fixed random c: (d, d) dense, float64."""
    c = torch.randn(
        head(z[None]).shape[-1], dtype=torch.float64, generator=torch.Generator().manual_seed(1)
    )
    return torch.autograd.functional.hessian(lambda x: head(x[None])[0] @ c, z)


class TestMetricLinearHead:
    @pytest.mark.parametrize("param", ["spectral", "factor"])
    @pytest.mark.parametrize("dims", [(8, 8), (8, 5), (5, 12)])
    def test_metric_is_wtw_and_spectrum_is_eigvalsh(self, param, dims):
        torch.manual_seed(0)
        head = MetricLinearHead(*dims, parametrization=param).double()
        w = head.linear_map().detach()
        m = head.metric().detach()
        torch.testing.assert_close(m, w.T @ w, rtol=1e-10, atol=1e-12)
        ref = torch.linalg.eigvalsh(m)
        torch.testing.assert_close(head.metric_spectrum().detach(), ref, rtol=1e-10, atol=1e-10)
        z = torch.randn(4, dims[0], dtype=torch.float64)
        torch.testing.assert_close(head(z), z @ w.T, rtol=1e-12, atol=1e-12)

    @pytest.mark.parametrize("dims", [(6, 6), (6, 3), (3, 9)])
    def test_spectral_spectrum_is_exactly_s_squared(self, dims):
        torch.manual_seed(0)
        head = MetricLinearHead(*dims).double()
        with torch.no_grad():
            head.s_raw.copy_(torch.randn_like(head.s_raw))
        s2 = torch.sort(torch.nn.functional.softplus(head.s_raw) ** 2).values.detach()
        spec = head.metric_spectrum().detach()
        k = min(dims)
        assert spec.shape == (dims[0],)
        assert torch.equal(spec[-k:], s2)  # the parameters themselves, no solver
        assert torch.all(spec[: dims[0] - k] == 0)
        torch.testing.assert_close(
            spec, torch.linalg.eigvalsh(head.metric().detach()), rtol=1e-10, atol=1e-10
        )

    def test_spectral_gradients_reach_every_parameter(self):
        head = MetricLinearHead(5, 7)
        head(torch.randn(3, 5)).square().sum().backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in head.parameters())

    def test_bad_parametrization(self):
        with pytest.raises(ValueError, match="unknown parametrization 'svd'.*factor.*spectral"):
            MetricLinearHead(4, 4, parametrization="svd")


class TestSmoothMLPHead:
    @pytest.mark.parametrize("activation", SMOOTH)
    def test_smooth_heads_have_curvature(self, activation):
        torch.manual_seed(0)
        head = SmoothMLPHead(6, 16, 4, depth=2, activation=activation, norm="none").double()
        hess = _second_derivative(head, torch.randn(6, dtype=torch.float64))
        assert hess.abs().max() > 1e-3

    @pytest.mark.parametrize("depth", [2, 3])
    def test_relu_has_none_off_kinks(self, depth):
        torch.manual_seed(0)
        head = SmoothMLPHead(6, 16, 4, depth=depth, activation="relu", norm="none").double()
        z = torch.randn(6, dtype=torch.float64)
        pre = head.layers[0](z)
        assert pre.abs().min() > 1e-6  # off the kinks
        assert _second_derivative(head, z).abs().max() < 1e-12

    @pytest.mark.parametrize("activation", ["identity", "swish", "gelu"])
    def test_identity_and_depth_one_are_flat(self, activation):
        depth = 1 if activation != "identity" else 3
        head = SmoothMLPHead(6, 16, 4, depth=depth, activation=activation, norm="none").double()
        assert _second_derivative(head, torch.randn(6, dtype=torch.float64)).abs().max() < 1e-12

    def test_depth_counts_linear_layers_and_bias_dropped_before_norm(self):
        head = SmoothMLPHead(8, 16, 4, depth=3, activation="gelu", norm="bn")
        linears = [m for m in head.modules() if isinstance(m, nn.Linear)]
        assert len(linears) == 3
        assert [m.bias is None for m in linears] == [True, True, False]
        assert sum(isinstance(m, nn.BatchNorm1d) for m in head.modules()) == 2
        assert head(torch.randn(5, 8)).shape == (5, 4)

    def test_softplus_beta_is_used(self):
        head = SmoothMLPHead(4, 8, 2, activation="softplus", beta=5.0, norm="none")
        assert head.layers[2].beta == 5.0

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"activation": "mish"}, "unknown activation 'mish'; choose from"),
            ({"norm": "gn"}, "unknown norm 'gn'"),
            ({"norm": None}, "unknown norm None"),  # "none" is the one spelling
            ({"depth": 0}, "depth must be"),
            ({"activation": "softplus", "beta": 0.0}, "beta must be > 0"),
        ],
    )
    def test_bad_arguments(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            SmoothMLPHead(4, 8, 2, **kwargs)


class TestRegistry:
    def test_build_each_head(self):
        for name in HEAD_CHOICES[1:]:  # every head the config accepts but the host's own
            assert isinstance(build_configured_head(HeadConfig(name=name), 8, 4), HEADS[name])
        head = build_head("smooth_mlp", 8, 4, hidden_dim=16, activation="gelu")
        assert isinstance(head, SmoothMLPHead) and head.activation == "gelu"
        assert isinstance(
            build_head("metric_linear", 8, 4, parametrization="factor"), MetricLinearHead
        )

    def test_unknown_head_names_choices(self):
        with pytest.raises(
            ValueError, match=r"unknown head 'mlp'; choose from \['metric_linear', 'smooth_mlp'\]"
        ):
            build_head("mlp", 8, 4)

    def test_unknown_option_names_choices(self):
        with pytest.raises(ValueError, match=r"unknown option\(s\) \['widht'\].*hidden_dim"):
            build_head("smooth_mlp", 8, 4, widht=3)

    @pytest.mark.parametrize("norm", NORM_CHOICES)
    @pytest.mark.parametrize("activation", ACTIVATION_CHOICES)
    def test_every_configured_choice_builds(self, activation, norm):
        cfg = HeadConfig(name="smooth_mlp", activation=activation, norm=norm)
        head = build_configured_head(cfg, 8, 4, default_hidden=16)
        norms = [m for m in head.modules() if isinstance(m, nn.BatchNorm1d | nn.LayerNorm)]
        assert len(norms) == (0 if norm == NO_NORM else 1)
        assert any(type(m) is ACTIVATIONS[activation] for m in head.modules())

    def test_activation_lookup(self):
        assert get_activation("swish") is nn.SiLU
        with pytest.raises(ValueError, match="choose from"):
            get_activation("Swish")

    def test_projection_head_needs_blocks(self):
        with pytest.raises(ValueError, match="at least one block"):
            ProjectionHead([])
