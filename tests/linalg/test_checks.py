"""The public operators refuse bad arguments at entry (solo_geometry.linalg.checks).

NaN features, features or a head on the ``meta`` device, a plain function as the head and
vectors of the wrong length are a ``ValueError``/``TypeError`` naming the argument, the value and
what was expected, raised before any graph is built; a valid call is unchanged (its products
equal a dense float64 Hessian's).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn
from torch.autograd.functional import hessian

from solo_geometry.geometry import curvature_operators
from solo_geometry.linalg.operators import head_jvp, head_operators

V, N, D, P = 2, 5, 4, 3


def _head() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(D, 6), nn.Tanh(), nn.Linear(6, P))


def _loss(h: Tensor) -> Tensor:
    return (h**2).sum() / h.shape[1]


def _z() -> Tensor:
    return torch.randn(V, N, D, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


class TestEntryChecks:
    @pytest.mark.parametrize(
        ("call", "error", "message"),
        [
            (
                lambda: curvature_operators(
                    _head(), _loss, _z().index_fill(1, torch.tensor([2]), float("nan"))
                ),
                ValueError,
                "Z holds 8 non-finite value(s) (NaN or inf) of 40; expected finite features",
            ),
            (
                lambda: curvature_operators(lambda z: z, _loss, _z()),
                TypeError,
                "head must be a torch.nn.Module, got function",
            ),
            (
                lambda: curvature_operators(_head(), _loss, torch.empty(V, N, D, device="meta")),
                ValueError,
                "Z is on the meta device (shape (2, 5, 4), no values); expected features with",
            ),
            (
                lambda: curvature_operators(nn.Linear(D, P, device="meta"), _loss, _z()),
                ValueError,
                "head holds tensors on the meta device (['weight', 'bias'])",
            ),
            (
                lambda: curvature_operators(_head(), _loss, _z().long()),
                ValueError,
                "Z must be a real floating tensor; got dtype torch.int64",
            ),
            (
                lambda: head_operators(_head(), _loss, [[1.0]]),  # type: ignore[arg-type]
                TypeError,
                "Z must be a torch.Tensor of shape (V, N, d), got list",
            ),
            (
                lambda: curvature_operators(_head(), _loss, _z()).matvec("heff")(torch.ones(41)),
                ValueError,
                "v must have 40 elements (V * N * d); got shape (41,) (41 elements)",
            ),
            (
                lambda: curvature_operators(_head(), _loss, _z(), max_samples=3).matmat("gn")(
                    torch.ones(2, 25)
                ),
                ValueError,
                "v must have 48 elements (V * m * d); got shape (2, 25) (50 elements)",
            ),
            (
                lambda: head_operators(_head(), _loss, _z()).m(torch.ones(7)),
                ValueError,
                "v must have 40 elements (V * N * d); got shape (7,)",
            ),
            (
                lambda: head_operators(_head(), _loss, _z()).vjp(torch.ones(7)),
                ValueError,
                "w must have 30 elements (V * N * p); got shape (7,)",
            ),
            (
                lambda: head_jvp(_head(), _z()[0], torch.ones(N, D + 1)),
                ValueError,
                "V must have 20 elements (N * d, Z's shape); got shape (5, 5)",
            ),
        ],
        ids=[
            "nan-features",
            "function-head",
            "meta-features",
            "meta-head",
            "integer-features",
            "list-features",
            "wrong-length-vector",
            "wrong-length-batch-in-block",
            "wrong-length-m",
            "wrong-length-vjp",
            "wrong-shape-jvp-direction",
        ],
    )
    def test_refused_at_entry(
        self, call: Callable[[], object], error: type[Exception], message: str
    ) -> None:
        with pytest.raises(error) as caught:
            call()
        assert message in str(caught.value)
        assert "\n" not in str(caught.value)

    def test_valid_call_still_equals_the_dense_hessian(self) -> None:
        head, Z = _head().double(), _z()
        ops = curvature_operators(head, _loss, Z)
        dense = hessian(lambda z: _loss(torch.stack([head(z[v]) for v in range(V)])), Z)
        dense = dense.reshape(V * N * D, V * N * D)
        v = torch.randn(V * N * D, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
        torch.testing.assert_close(ops.matvec("heff")(v), dense @ v)
