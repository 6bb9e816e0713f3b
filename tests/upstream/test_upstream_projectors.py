"""The upstream patch's projectors equal this package's heads, layer by layer and output by output.

``solo_geometry/upstream/templates/projectors.py.tmpl`` becomes ``solo/utils/projectors.py`` in
solo-learn. It keeps solo-learn's own layout (a Linear keeps its bias before a norm, module
indices as the methods always numbered them), so it cannot be generated from
``models/heads.py`` (only its tables of names are, from ``config.choices``); it is tested equal
to it instead: same layers in the same order, and, with
the head's weights copied in, the same outputs in training and evaluation mode.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest
import torch
from torch import nn

from solo_geometry.config.choices import (
    ACTIVATION_CHOICES,
    ACTIVATION_LAYERS,
    FLAT_ACTIVATIONS,
    NORM_CHOICES,
    PARAMETRIZATION_CHOICES,
)
from solo_geometry.linalg.operators import PIECEWISE_LINEAR
from solo_geometry.models.heads import MetricLinearHead, SmoothMLPHead
from solo_geometry.upstream.series import UPSTREAM_NAMES, rendered


@pytest.fixture(scope="module")
def projectors(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    pytest.importorskip("solo.utils.misc", reason="solo-learn 1.0.6 is not importable")
    path = tmp_path_factory.mktemp("tmpl") / "projectors.py"
    path.write_text(rendered("projectors.py.tmpl"))
    spec = importlib.util.spec_from_file_location("upstream_projectors", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["upstream_projectors"] = module
    spec.loader.exec_module(module)
    return module


def _layers(module: nn.Module) -> list[nn.Module]:
    """The module's leaves in order, ``nn.Identity`` placeholders left out."""
    return [
        m for m in module.modules() if not list(m.children()) and not isinstance(m, nn.Identity)
    ]


def _copy_(head: nn.Module, projector: nn.Module) -> None:
    """Copy the head's tensors into the projector, layer by layer; a bias the head lacks is 0."""
    for a, b in zip(_layers(head), _layers(projector), strict=True):
        for name, tensor in b.named_parameters(recurse=False):
            source = getattr(a, name, None)
            with torch.no_grad():
                tensor.copy_(source if source is not None else torch.zeros_like(tensor))
        for name, buf in b.named_buffers(recurse=False):
            buf.copy_(getattr(a, name))


def _template_activation(name: str) -> str:
    return UPSTREAM_NAMES.get(name, name)


class TestChoiceLists:
    """The templates' prose lists come from config.choices, the one list of heads' choices."""

    def test_every_choice_is_listed(self) -> None:
        docs = rendered("projectors.rst.tmpl", methods="simclr", recipe="r.yaml")
        for value in (*ACTIVATION_CHOICES, *NORM_CHOICES, *PARAMETRIZATION_CHOICES):
            assert f"``{value}``" in docs, value
        assert "``silu`` (= ``swish``)" in docs
        module = rendered("projectors.py.tmpl")  # its docstring: smooth, then flat activations
        smooth, flat = module.split("do not.")[0].split("backbone features:")[1].split(".\n")
        assert all(f"``{a}``" in flat for a in FLAT_ACTIVATIONS)
        assert all(f"``{a}``" in smooth for a in ACTIVATION_CHOICES if a not in FLAT_ACTIVATIONS)

    def test_flat_activations_are_the_piecewise_linear_layers(self) -> None:
        flat = {
            a for a in ACTIVATION_CHOICES if getattr(nn, ACTIVATION_LAYERS[a]) in PIECEWISE_LINEAR
        }
        assert flat == set(FLAT_ACTIVATIONS)


class TestMLPProjector:
    @pytest.mark.parametrize("activation", ACTIVATION_CHOICES)
    @pytest.mark.parametrize("norm", NORM_CHOICES)
    @pytest.mark.parametrize("depth", [1, 2, 3])
    def test_equal_to_smooth_mlp_head(
        self, projectors: ModuleType, activation: str, norm: str, depth: int
    ) -> None:
        torch.manual_seed(0)
        head = SmoothMLPHead(12, 16, 8, depth=depth, activation=activation, norm=norm)
        projector = projectors.build_mlp_projector(
            12, 16, 8, depth=depth, norm=norm, activation=_template_activation(activation)
        )
        ours, theirs = _layers(head), _layers(projector)
        assert [type(m) for m in ours] == [type(m) for m in theirs]
        for a, b in zip(ours, theirs, strict=True):
            assert {n: p.shape for n, p in a.named_parameters() if n != "bias"} == {
                n: p.shape for n, p in b.named_parameters() if n != "bias"
            }
        _copy_(head, projector)
        x = torch.randn(10, 12, dtype=torch.float64)
        head, projector = head.double(), projector.double()
        for train in (True, False):
            head.train(train)
            projector.train(train)
            torch.testing.assert_close(projector(x), head(x), rtol=1e-12, atol=1e-12)

    def test_a_difference_is_caught(self, projectors: ModuleType) -> None:
        head = SmoothMLPHead(12, 16, 8, activation="gelu", norm="none")
        projector = projectors.build_mlp_projector(12, 16, 8, activation="relu")
        assert [type(m) for m in _layers(head)] != [type(m) for m in _layers(projector)]


class TestMetricLinearProjector:
    @pytest.mark.parametrize("parametrization", ["spectral", "factor"])
    @pytest.mark.parametrize(("d", "p"), [(12, 8), (8, 12)])
    def test_equal_to_metric_linear_head(
        self, projectors: ModuleType, parametrization: str, d: int, p: int
    ) -> None:
        torch.manual_seed(0)
        head = MetricLinearHead(d, p, parametrization=parametrization).double()
        projector = projectors.MetricLinearProjector(d, p, parametrization=parametrization)
        projector = projector.double()
        assert projector.load_state_dict(head.state_dict(), strict=True)  # same parameter names
        x = torch.randn(10, d, dtype=torch.float64)
        torch.testing.assert_close(projector(x), head(x), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(projector.metric(), head.metric(), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(
            projector.singular_values(), head.singular_values(), rtol=1e-12, atol=1e-12
        )
