from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn
from torch.autograd.functional import hessian, jacobian

from solo_geometry.linalg.blocks import restrict_to_block, row_operators, row_wise
from solo_geometry.linalg.operators import (
    has_batch_norm,
    head_jvp,
    head_operators,
    runs_in_training_mode,
)

V, N, D, HID, P = 2, 6, 4, 8, 5
VEC = True  # vmap-vectorised references


def make_head(kind: str) -> nn.Module:
    torch.manual_seed(3)
    acts: dict[str, type[nn.Module]] = {"swish": nn.SiLU, "gelu": nn.GELU, "relu": nn.ReLU}
    if kind == "linear":
        return nn.Linear(D, P)
    if kind in NORMS:
        return nn.Sequential(
            nn.Linear(D, HID, bias=False), *NORMS[kind](), nn.SiLU(), nn.Linear(HID, P)
        )
    return nn.Sequential(nn.Linear(D, HID), acts[kind](), nn.Linear(HID, P))


# Normalisation layers on the head's (N, HID) rows. InstanceNorm takes (N, C, L) samples: two
# channels of HID / 2 each, normalised per sample and channel.
NORMS: dict[str, Callable[[], list[nn.Module]]] = {
    "bn_swish": lambda: [nn.BatchNorm1d(HID)],
    "sync_bn_swish": lambda: [nn.SyncBatchNorm(HID)],
    "in_swish": lambda: [
        nn.Unflatten(1, (2, HID // 2)),
        nn.InstanceNorm1d(2, affine=True, track_running_stats=True),
        nn.Flatten(),
    ],
    "gn_swish": lambda: [nn.GroupNorm(2, HID)],
    "ln_swish": lambda: [nn.LayerNorm(HID)],
}


def features() -> Tensor:
    return torch.randn(V, N, D, generator=torch.Generator().manual_seed(7), dtype=torch.float64)


class DenseReference:
    """Dense float64 matrices built with torch.autograd.functional, independently of the code."""

    def __init__(self, head: nn.Module, loss_fn: Callable[[Tensor], Tensor], z: Tensor) -> None:
        self.head = copy.deepcopy(head).double()
        if has_batch_norm(self.head):
            self.head.train()
        self.loss_fn = loss_fn
        self.z = z.reshape(-1).clone()

    def outputs(self, zf: Tensor) -> Tensor:
        zz = zf.reshape(V, N, D)
        return torch.stack([self.head(zz[v]) for v in range(V)])  # (V, N, P)

    def heff(self) -> Tensor:
        return hessian(lambda zf: self.loss_fn(self.outputs(zf)), self.z, vectorize=VEC)

    def jac(self) -> Tensor:
        flat = lambda zf: self.outputs(zf).reshape(-1)  # noqa: E731
        return jacobian(flat, self.z, vectorize=VEC)  # (V*N*P, n)

    def gn(self) -> Tensor:
        h0 = self.outputs(self.z).detach().reshape(-1)
        hl = hessian(lambda hf: self.loss_fn(hf.reshape(V, N, P)), h0, vectorize=VEC)
        j = self.jac()
        return j.T @ hl @ j

    def m(self) -> Tensor:
        h0 = self.outputs(self.z).detach().requires_grad_(True)
        (g,) = torch.autograd.grad(self.loss_fn(h0), h0)
        return hessian(lambda zf: (g * self.outputs(zf)).sum(), self.z, vectorize=VEC)


def dense(matvec: Callable[[Tensor], Tensor], n: int) -> Tensor:
    eye = torch.eye(n, dtype=torch.float64)
    return torch.stack([matvec(eye[i]) for i in range(n)], dim=1)


def rel(a: Tensor, b: Tensor) -> float:
    return float((a - b).norm() / b.norm())


class TestHeadOperators:
    @pytest.mark.parametrize(
        "kind", ["swish", "gelu", "relu", "linear", "bn_swish", "in_swish", "gn_swish"]
    )
    def test_products_match_dense(self, kind: str, ssl_loss: Callable[[Tensor], Tensor]) -> None:
        head, z = make_head(kind), features()
        ops = head_operators(head, ssl_loss, z)
        ref = DenseReference(head, ssl_loss, z)
        n = ops.dim
        h_ref, gn_ref, m_ref = ref.heff(), ref.gn(), ref.m()
        assert rel(dense(ops.heff, n), h_ref) < 1e-10
        assert rel(dense(ops.gn, n), gn_ref) < 1e-10
        m_op = dense(ops.m, n)
        if kind in ("relu", "linear"):
            assert float(m_op.norm()) <= 1e-12 * float(h_ref.norm())
            assert float(m_ref.norm()) <= 1e-12 * float(h_ref.norm())
        else:
            assert float(m_op.norm()) > 1e-3 * float(h_ref.norm())
            assert rel(m_op, m_ref) < 1e-10
        assert rel(gn_ref + m_ref, h_ref) < 1e-10  # the chain rule split itself

    @pytest.mark.parametrize("kind", ["swish", "relu", "bn_swish"])
    def test_batched_products_match_dense(
        self, kind: str, ssl_loss: Callable[[Tensor], Tensor]
    ) -> None:
        """B vectors in one pass: the dense float64 matrices' columns, BatchNorm rows coupled."""
        head, z = make_head(kind), features()
        ops = head_operators(head, ssl_loss, z)
        ref = DenseReference(head, ssl_loss, z)
        gen = torch.Generator().manual_seed(1)
        vs = torch.randn(3, ops.dim, generator=gen, dtype=torch.float64)
        h_ref = ref.heff()
        for name, matrix in (("heff", h_ref), ("gn", ref.gn()), ("m", ref.m())):
            out = ops.batched(name)(vs)
            assert out.shape == (3, ops.dim) and not ops._unbatched
            error = float((out - vs @ matrix).norm())
            assert error <= 1e-10 * float((vs @ h_ref).norm())  # M of a ReLU head is 0
            if float(matrix.norm()) > 1e-3 * float(h_ref.norm()):
                assert rel(out, vs @ matrix) < 1e-10
        index = torch.tensor([0, 3])
        sub = restrict_to_block(ops.batched("heff"), ops.shape, index, batched=True)
        one = restrict_to_block(ops.heff, ops.shape, index)
        w = torch.randn(2, V * 2 * D, dtype=torch.float64)
        assert rel(sub(w), torch.stack([one(x) for x in w])) < 1e-12
        with pytest.raises(ValueError, match="heff"):
            ops.batched("pullback")

    @pytest.mark.parametrize("kind", ["swish", "bn_swish"])
    def test_pullback_and_jvp(self, kind: str) -> None:
        head, z = make_head(kind), features()
        ops = head_operators(head, lambda h: h.pow(2).sum(), z)
        j = DenseReference(head, lambda h: h.sum(), z).jac()
        assert rel(dense(ops.pullback, ops.dim), j.T @ j) < 1e-10
        v = torch.randn(V, N, D, dtype=torch.float64)
        assert rel(ops.jvp(v).reshape(-1), j @ v.reshape(-1)) < 1e-10
        w = torch.randn(N, D, dtype=torch.float64)
        j0 = DenseReference(head, lambda h: h.sum(), z).jac().reshape(V, N * P, V, N * D)[0, :, 0]
        assert rel(head_jvp(head, z[0], w).reshape(-1), j0 @ w.reshape(-1)) < 1e-10

    def test_float32_products(self) -> None:
        head, z = make_head("swish"), features()
        ops = head_operators(head, SSL_LOSS_SQ, z, dtype=torch.float32)
        ref = DenseReference(head, SSL_LOSS_SQ, z).heff()
        out = dense(lambda v: ops.heff(v).double(), ops.dim)
        assert ops.dtype == torch.float32
        assert rel(out, ref) < 1e-5

    def test_works_under_no_grad(self) -> None:
        head, z = make_head("swish"), features()
        with torch.no_grad():
            ops = head_operators(head, SSL_LOSS_SQ, z)
            out = ops.heff(torch.ones(ops.dim, dtype=torch.float64))
        assert torch.isfinite(out).all() and out.norm() > 0

    def test_rejects_bad_input(self) -> None:
        head = make_head("swish")
        with pytest.raises(ValueError, match="V, N, d"):
            head_operators(head, SSL_LOSS_SQ, torch.zeros(N, D))
        with pytest.raises(TypeError, match="scalar"):
            head_operators(head, lambda h: h, features())


def SSL_LOSS_SQ(h: Tensor) -> Tensor:  # noqa: N802 - a constant-like simple loss
    return (h[0] - h[1]).pow(2).sum() + h.pow(3).mean()


class TestNoSideEffects:
    @pytest.mark.parametrize("training", [True, False])
    def test_module_rng_and_grads_untouched(self, training: bool) -> None:
        head = make_head("bn_swish").train()
        head(torch.randn(N, D))  # non-trivial running statistics
        head.train(training)
        for p in head.parameters():
            p.grad = torch.randn_like(p)
        before = copy.deepcopy(head.state_dict())
        grads = [p.grad.clone() for p in head.parameters()]  # type: ignore[union-attr]
        rng = torch.get_rng_state()
        ops = head_operators(head, SSL_LOSS_SQ, features())
        ops.heff(torch.ones(ops.dim, dtype=torch.float64))
        ops.gn(torch.ones(ops.dim, dtype=torch.float64))
        assert head.training is training
        assert torch.equal(torch.get_rng_state(), rng)
        for key, value in head.state_dict().items():
            assert torch.equal(value, before[key]), key
        for p, g in zip(head.parameters(), grads, strict=True):
            assert torch.equal(p.grad, g)  # type: ignore[arg-type]

    def test_dropout_head_draws_from_a_forked_rng(self) -> None:
        torch.manual_seed(0)
        head = nn.Sequential(nn.Linear(D, HID), nn.Dropout(0.5), nn.SiLU(), nn.Linear(HID, P))
        rng = torch.get_rng_state()
        ops = head_operators(head, SSL_LOSS_SQ, features())
        v = torch.ones(ops.dim, dtype=torch.float64)
        assert torch.equal(ops.heff(v), ops.heff(v))  # one graph, one dropout mask
        assert torch.equal(torch.get_rng_state(), rng) and head.training


class TestRowOperators:
    """The sub-block with only the block's rows in the graph, against the dense float64 block."""

    @pytest.mark.parametrize("kind", ["linear", "relu", "swish", "gelu", "gn_swish", "ln_swish"])
    def test_block_of_the_dense_matrices(
        self, kind: str, ssl_loss: Callable[[Tensor], Tensor]
    ) -> None:
        head, z, index = make_head(kind), features(), torch.tensor([0, 2, 5])
        assert row_wise(head)
        self._check_block(head, z, index, ssl_loss)

    def test_instance_norm_rows_are_independent(self, ssl_loss: Callable[[Tensor], Tensor]) -> None:
        """Not :func:`row_wise` by its modules (Unflatten), yet each row alone: the same block."""
        head, z, index = make_head("in_swish"), features(), torch.tensor([1, 3])
        assert not row_wise(head) and not has_batch_norm(head)
        self._check_block(head, z, index, ssl_loss)

    @staticmethod
    def _check_block(
        head: nn.Module, z: Tensor, index: Tensor, ssl_loss: Callable[[Tensor], Tensor]
    ) -> None:
        ops = row_operators(head, ssl_loss, z, index)
        ref = DenseReference(head, ssl_loss, z)
        rows = torch.arange(V * N * D).reshape(V, N, D)[:, index].reshape(-1)
        assert ops.shape == (V, len(index), D) and ops.dim == rows.numel()
        vs = torch.randn(ops.dim, 2, generator=torch.Generator().manual_seed(2)).double()
        h_ref = ref.heff()
        for name, matrix in (("heff", h_ref), ("gn", ref.gn()), ("m", ref.m())):
            out = torch.stack([getattr(ops, name)(v) for v in vs.T], dim=1)
            expected = matrix[rows][:, rows] @ vs
            assert float((out - expected).norm()) <= 1e-10 * float(
                (h_ref[rows][:, rows] @ vs).norm()
            )

    def test_same_products_as_the_restricted_whole_batch(
        self, ssl_loss: Callable[[Tensor], Tensor]
    ) -> None:
        head, z, index = make_head("gelu"), features(), torch.tensor([1, 4])
        whole, rows = head_operators(head, ssl_loss, z), row_operators(head, ssl_loss, z, index)
        v = torch.randn(V * 2 * D, generator=torch.Generator().manual_seed(5)).double()
        for name in ("heff", "gn", "m"):
            expected = restrict_to_block(getattr(whole, name), whole.shape, index)(v)
            assert rel(getattr(rows, name)(v), expected) < 1e-12

    def test_row_wise_by_its_modules(self) -> None:
        assert row_wise(nn.Sequential(nn.Sequential(nn.Linear(2, 3), nn.GELU()), nn.Linear(3, 1)))
        assert not row_wise(make_head("bn_swish"))  # batch statistics couple the rows
        assert row_wise(make_head("gn_swish")) and row_wise(make_head("ln_swish"))
        # InstanceNorm reads 2-D rows as one sample's channels, indexed by row position
        assert not row_wise(nn.Sequential(nn.Linear(2, 3), nn.InstanceNorm1d(3)))
        assert not row_wise(nn.Sequential(nn.Linear(2, 3), nn.Dropout(), nn.Linear(3, 1)))
        assert not row_wise(type("Custom", (nn.Linear,), {})(2, 3))  # forward unseen


class TestHasBatchNorm:
    """True exactly where a row's training-mode output moves with another row's input."""

    @pytest.mark.parametrize("kind", sorted(NORMS))
    def test_answers_whether_rows_are_coupled(self, kind: str) -> None:
        head = make_head(kind).double().train()
        x = torch.randn(N, D, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
        moved = x.clone()
        moved[1:] += 1.0  # every row but the first
        with torch.no_grad():
            coupled = not torch.allclose(head(x)[0], head(moved)[0], rtol=0, atol=1e-12)
        assert has_batch_norm(head) is coupled is (kind in ("bn_swish", "sync_bn_swish"))

    @pytest.mark.parametrize("kind", sorted(NORMS))
    def test_training_mode_for_the_norms_that_have_one(self, kind: str) -> None:
        head = make_head(kind).eval()
        assert runs_in_training_mode(head) is (kind in ("bn_swish", "sync_bn_swish", "in_swish"))
        assert runs_in_training_mode(head.train())
