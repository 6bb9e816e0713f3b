"""benchmarks/bench_peers.py at a tiny size: every peer measures our operator, the table reads it.

The peers' adapters (benchmarks/peers.py) must act on the very operator this package builds:
each adapter's dense matrix is compared with ``curvature_operators(...).dense("heff")`` on the
same sub-block. Then the whole comparison runs on a tiny problem and, with solo-learn, on a
real cifar recipe at batch 8.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor, nn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_peers  # noqa: E402
import peers  # noqa: E402

from solo_geometry.geometry import curvature_operators  # noqa: E402

LIBRARIES = ("curvlinops", "hessian_eigenthings", "pyhessian", "scipy")


def _need_peers() -> None:
    for name in LIBRARIES:
        pytest.importorskip(name, reason="the peers: pip install -e '.[bench]'")


def _problem() -> peers.Problem:
    torch.manual_seed(0)
    head = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.GELU(), nn.Linear(16, 4))

    def loss(H: Tensor) -> Tensor:
        a, b = nn.functional.normalize(H[0], dim=1), nn.functional.normalize(H[1], dim=1)
        return -(a * b).sum(1).mean() + torch.relu(1 - torch.sqrt(H.var(dim=1) + 1e-4)).mean()

    return head, loss, torch.randn(2, 8, 6)


def test_adapters_act_on_our_operator() -> None:
    _need_peers()
    problem = _problem()
    ops = curvature_operators(*problem, dtype=torch.float32, max_samples=3)
    ours = ops.dense("heff").double()
    scale = float(ours.abs().max())
    eye = torch.eye(ops.dim)
    he_op, count = peers.eigenthings_operator(problem, ops.index)
    theirs = torch.stack([he_op.matvec(e) for e in eye]).T.double()
    assert count[0] == ops.dim
    assert float((theirs - ours).abs().max()) <= 1e-5 * scale
    hess, count = peers.pyhessian_hessian(problem, ops.index)
    from pyhessian.utils import hessian_vector_product

    columns = [
        hessian_vector_product(hess.gradsH, hess.params, [e.reshape(hess.params[0].shape)])[0]
        for e in eye
    ]
    theirs = torch.stack([c.reshape(-1) for c in columns]).T.double()
    assert float((theirs - ours).abs().max()) <= 1e-5 * scale
    assert problem[0].training  # the module's .eval() left the head's mode alone
    theirs = torch.from_numpy(peers.curvlinops_operator(problem, ops.index) @ eye.double().numpy())
    assert float((theirs - ours).abs().max()) <= 1e-5 * scale


def test_tiny_comparison_and_its_table() -> None:
    _need_peers()
    rows, dens = bench_peers.run({"toy": _problem()}, samples=4, small=2)
    methods = {r.method for r in rows}
    assert methods == {
        "reference f64",
        "ours",
        "arpack (our products)",
        "curvlinops + eigsh",
        "hessian-eigenthings",
        "pyhessian",
    }
    dense = [r for r in rows if r.block.endswith("(dense)")]
    ops = curvature_operators(*_problem(), max_samples=2)
    eigs = torch.linalg.eigvalsh(ops.dense("heff"))
    reference = next(r for r in dense if r.method == "reference f64")
    assert reference.lambda_min == pytest.approx(float(eigs[0]), abs=1e-12)
    for r in rows:
        if r.converged == "yes":  # a converged extreme is within the tolerance of the scale
            assert r.err_min is not None and r.err_min < bench_peers.TOL, r
            assert r.err_max is not None and r.err_max < bench_peers.TOL, r
        assert r.hvps > 0 and r.seconds >= 0
    ours = next(r for r in dense if r.method == "ours")
    assert ours.converged == "yes"
    text = bench_peers.table(rows)
    assert text.count("\n") == len(rows) + 1
    arpack = next(r for r in dense if r.method.startswith("arpack"))
    line = next(t for t in text.splitlines() if "(dense) | arpack" in t)
    assert line.endswith(f"| {ours.hvps / arpack.hvps:.2f} | {ours.seconds / arpack.seconds:.2f} |")
    assert {d.method.split()[0] for d in dens} == {"ours", "pyhessian", "hessian-eigenthings"}
    for d in dens:
        assert np.isfinite(d.w1) and 0 <= d.w1 < 0.5, d
    assert "W1 / scale" in bench_peers.density_table(dens)


def test_density_part_alone_and_its_ratios() -> None:
    _need_peers()
    rows, dens = bench_peers.run({"toy": _problem()}, samples=4, small=2, parts="density")
    assert not rows and len(dens) == 3
    ours = next(d for d in dens if d.method.startswith("ours"))
    text = bench_peers.density_table(dens).splitlines()
    assert next(t for t in text if "| ours" in t).endswith("| - | - | - |")
    for d in dens:
        if d is not ours:
            line = next(t for t in text if f"| {d.method} |" in t)
            expected = f"| {ours.hvps / d.hvps:.2f} | {ours.seconds / d.seconds:.2f} | "
            assert line.endswith(expected + f"{ours.w1 / d.w1:.2f} |"), line
    assert bench_peers.run({"toy": _problem()}, samples=4, small=2, parts="extremes")[1] == []


@pytest.mark.slow
def test_runs_on_a_solo_recipe(tmp_path: Path) -> None:
    _need_peers()
    sys.path.insert(0, str(ROOT / "tests" / "hosts"))
    from solo_helpers import solo_root

    out = tmp_path / "peers.json"
    rows, dens = bench_peers.main(
        [
            "--recipes",
            "simclr",
            "--solo-root",
            str(solo_root()),
            "--batch-size",
            "8",
            "--samples",
            "2",
            "--small",
            "0",
            "--json",
            str(out),
        ]
    )
    assert out.is_file() and not dens
    assert {r.block for r in rows} == {"2 of 8"}
    ours = next(r for r in rows if r.method == "ours")
    assert ours.converged == "yes" and ours.err_min is not None and ours.err_min < 1e-3
