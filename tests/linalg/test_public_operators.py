"""The public operators (solo_geometry.geometry.operators) against independent references.

H_eff against curvlinops' ActivationHessianLinearOperator (the Hessian of the loss in an
intermediate feature, computed by its own double backward through the whole model); GN and M
against dense float64 Jacobians and Hessians of ``torch.autograd.functional`` (M as the Hessian
of <g, H(Z)> with g = dloss/dH frozen, not as H_eff - GN); the scipy operator, the sub-block,
the spectrum and the docs page's example.
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor, nn
from torch.autograd.functional import hessian, jacobian

from solo_geometry.geometry import curvature_operators

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from peers import PerView  # noqa: E402 - the benchmark's wrapper for curvlinops, shared

V, N, D, P = 2, 5, 4, 3


def _head(kind: str) -> nn.Module:
    torch.manual_seed(1)
    if kind == "bn":
        return nn.Sequential(nn.Linear(D, 7), nn.BatchNorm1d(7), nn.GELU(), nn.Linear(7, P))
    if kind == "tanh":
        return nn.Sequential(nn.Linear(D, 6), nn.Tanh(), nn.Linear(6, P))
    return nn.Sequential(nn.Linear(D, 6), nn.ReLU(), nn.Linear(6, P))


def _loss(H: Tensor) -> Tensor:
    """A nonconvex loss of two views: cosine alignment, a variance hinge and a coupling term."""
    a, b = nn.functional.normalize(H[0], dim=1), nn.functional.normalize(H[1], dim=1)
    std = torch.sqrt(H.var(dim=1) + 1e-4)
    return -(a * b).sum(1).mean() + torch.relu(1 - std).mean() + 0.1 * (H[0] * H[1]).mean()


def _features() -> Tensor:
    return torch.randn(V, N, D, generator=torch.Generator().manual_seed(2), dtype=torch.float64)


def _dense_references(head: nn.Module, Z: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Dense float64 H_eff, GN = J^T Hl J and M = Hessian of <g, H(Z)> with g frozen."""
    model = copy.deepcopy(head).double()
    model.train(True)  # a copy: its BatchNorm statistics may move

    def outputs(z: Tensor) -> Tensor:
        z = z.reshape(V, N, D)
        return torch.stack([model(z[v]) for v in range(V)])

    z0 = Z.reshape(-1)
    heff = hessian(lambda z: _loss(outputs(z)), z0)
    h0 = outputs(z0).detach()
    jac = jacobian(outputs, z0).reshape(h0.numel(), -1)  # (V N p, V N d)
    loss_h = hessian(lambda h: _loss(h.reshape(h0.shape)), h0.reshape(-1))
    g = torch.autograd.functional.jacobian(lambda h: _loss(h.reshape(h0.shape)), h0.reshape(-1))
    m = hessian(lambda z: (g.reshape(h0.shape) * outputs(z)).sum(), z0)
    return heff, jac.T @ loss_h @ jac, m


@pytest.mark.parametrize("kind", ["bn", "tanh", "relu"])
def test_gn_and_m_equal_dense_jacobian_references(kind: str) -> None:
    head, Z = _head(kind), _features()
    ops = curvature_operators(head, _loss, Z)
    heff, gn, m = _dense_references(head, Z)
    assert torch.allclose(heff, gn + m, atol=1e-10)  # the references are consistent
    for name, reference in (("heff", heff), ("gn", gn), ("m", m)):
        got = ops.dense(name)
        scale = float(heff.abs().max())
        assert float((got - reference).abs().max()) <= 1e-10 * scale, name
    if kind == "relu":
        assert float(m.abs().max()) <= 1e-12 * float(heff.abs().max())  # M = 0 a.e.
    else:
        assert float(m.abs().max()) > 1e-3 * float(heff.abs().max())  # a real M: can fail


class _LossOfOutputs(nn.Module):
    reduction = "sum"  # curvlinops scales a "mean" loss by batch / data size: 1 here

    def forward(self, H: Tensor, _y: Tensor) -> Tensor:
        return _loss(H)


@pytest.mark.parametrize("kind", ["bn", "tanh"])
def test_heff_equals_curvlinops_activation_hessian(kind: str) -> None:
    experimental = pytest.importorskip(
        "curvlinops.experimental", reason="curvlinops-for-pytorch: pip install -e '.[bench]'"
    )
    head, Z = _head(kind), _features()
    model = PerView(copy.deepcopy(head).double()).train(kind == "bn")
    theirs = experimental.ActivationHessianLinearOperator(
        model, _LossOfOutputs(), ("z", "output", 0), [(Z.clone().requires_grad_(), torch.zeros(V))]
    )  # Z a leaf that requires grad: the activation then lies on the graph of the loss
    assert theirs.shape == (V * N * D, V * N * D)
    eye = torch.eye(V * N * D, dtype=torch.float64)
    reference = theirs @ eye  # (dim, dim), column j = H e_j
    ops = curvature_operators(head, _loss, Z)
    got = ops.dense("heff")
    assert float((got - reference).abs().max()) <= 1e-10 * float(reference.abs().max())
    # and as scipy operators: the same products on random vectors
    x = np.random.default_rng(0).standard_normal((V * N * D, 3))
    ours, peer = ops.linear_operator("heff"), theirs.to_scipy()
    np.testing.assert_allclose(ours @ x, peer @ x, rtol=0, atol=1e-10 * np.abs(peer @ x).max())


def test_linear_operator_matvec_matmat_and_sub_block() -> None:
    head, Z = _head("bn"), _features()
    full = curvature_operators(head, _loss, Z)
    ops = curvature_operators(head, _loss, Z, max_samples=3)
    index = torch.tensor([0, 2, 4])  # evenly spaced of 5
    coords = torch.arange(V * N * D).reshape(V, N, D)[:, index, :].reshape(-1)
    for name in ("heff", "gn", "m"):
        dense = full.dense(name)
        sub = ops.dense(name)
        assert sub.shape == (V * 3 * D, V * 3 * D)
        assert torch.allclose(sub, dense[coords][:, coords], atol=1e-12)
        A = ops.linear_operator(name)
        x = np.random.default_rng(1).standard_normal((ops.dim, 4))
        np.testing.assert_allclose(A @ x, sub.numpy() @ x, atol=1e-10)
        np.testing.assert_allclose(A @ x[:, 0], sub.numpy() @ x[:, 0], atol=1e-10)
        np.testing.assert_allclose(A.matvec(x[:, :1]), sub.numpy() @ x[:, :1], atol=1e-10)


def test_spectrum_extremes_match_the_dense_spectrum() -> None:
    head, Z = _head("bn"), _features()
    ops = curvature_operators(head, _loss, Z)
    spectrum = ops.spectrum(density_probes=2, tol=1e-6)
    for name in ("heff", "gn", "m"):
        eigs = torch.linalg.eigvalsh(ops.dense(name))
        s = spectrum.operators[name]
        assert s.converged_min and s.converged_max
        scale = float(eigs.abs().max())
        assert abs(s.lambda_min - float(eigs[0])) <= 1e-5 * scale
        assert abs(s.lambda_max - float(eigs[-1])) <= 1e-5 * scale
        assert abs(float(s.density.weights.sum()) - 1.0) < 1e-12


def test_head_left_as_found() -> None:
    head = _head("bn").eval()
    before = copy.deepcopy(head.state_dict())
    ops = curvature_operators(head, _loss, _features().float(), dtype=torch.float32)
    ops.matvec("heff")(torch.randn(ops.dim))
    ops.spectrum(max_steps=8)
    assert not head.training
    for key, value in head.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert all(p.grad is None for p in head.parameters())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dtype": torch.float16}, "dtype must be one of"),
        ({"max_samples": 0}, "max_samples must be a positive integer or None"),
        ({"Z": torch.zeros(3, 4)}, r"Z must have shape \(V, N, d\); got \(3, 4\)"),
    ],
)
def test_bad_arguments_name_the_value(kwargs: dict, message: str) -> None:
    arguments = {"Z": _features(), **kwargs}
    with pytest.raises(ValueError, match=message):
        curvature_operators(_head("relu"), _loss, **arguments)


def test_unknown_operator_names_the_choices() -> None:
    ops = curvature_operators(_head("relu"), _loss, _features())
    with pytest.raises(ValueError, match=r"operator must be one of \('heff', 'gn', 'm'\); got 'h'"):
        ops.matvec("h")


def test_docs_page_example_runs() -> None:
    pytest.importorskip("scipy", reason="the example uses scipy's eigsh")
    page = (ROOT / "docs" / "operators.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", page, flags=re.M | re.S)
    assert blocks, "docs/operators.md has no python example"
    for block in blocks:
        exec(compile(block, "docs/operators.md", "exec"), {"__name__": "docs_example"})
