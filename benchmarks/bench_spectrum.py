"""Accuracy and cost of the spectrum measurement at its default settings.

Part 1, accuracy against dense float64 on small operators like the demo's (random features,
2 views of 16 samples, d = 32, the operator restricted to the sub-block of 8 samples while the
loss sees all 16): a Swish+BN head under a BYOL-like loss (a ReLU+BN predictor against fixed
targets), a Swish head under NT-Xent (SimCLR) and a ReLU+BN head under VICReg. For each of H_eff,
GN and M: :func:`effective_hessian_spectrum` at its defaults in float64 and float32 next to the
dense sub-block of the Hessian of the full-batch loss (``torch.autograd.functional``): steps,
convergence, the errors of lambda_min and lambda_max in units of max|lambda(H_eff)|, the true
fraction of eigenvalues below -floor against the estimate with its spread, and the condition
number.

Part 2, cost of one measurement at d = 512, 2 views of 32 samples, the operator restricted to
16 of them, on the demo's BYOL head (Swish+BN, 512 wide, p = 128) and on solo-learn's cifar VICReg
projector (3 Linear layers 2048 wide with BN and ReLU) under the VICReg loss. "before" is the
measurement as the monitor took it before issue 11, reproduced with today's kernel: 12 Lanczos
steps per operator without a convergence test, float64, and in the first and final records a
second graph and an SLQ density of H_eff with 2 probes of 12 steps. "after" is one
:func:`effective_hessian_spectrum` call at the defaults in float32 (``--tols`` to sweep the
tolerance). Steps and wall seconds per operator; total CPU seconds (the speed-ups: robust to
other load on the machine) and wall seconds, on ``--threads`` threads (default 1).

Run: ``python benchmarks/bench_spectrum.py`` (80 s on 2 idle cores), ``--quick``
(part 1 only) or ``--cost-only``.
"""

from __future__ import annotations

import argparse
import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.functional import hessian, jacobian

from solo_geometry.geometry.spectrum import (
    DEFAULT_TAU,
    DEFAULT_TOL,
    OPERATORS,
    HessianSpectrum,
    OperatorSpectrum,
    effective_hessian_spectrum,
)
from solo_geometry.linalg import head_operators, lanczos, slq_density
from solo_geometry.linalg.blocks import block_indices, restrict_to_block
from solo_geometry.models.heads import SmoothMLPHead

Loss = Callable[[Tensor], Tensor]


def nt_xent(h: Tensor, temperature: float = 0.5) -> Tensor:
    """NT-Xent over the 2N samples of H (2, N, p): every other sample is a negative."""
    v, n, _ = h.shape
    z = F.normalize(h.reshape(v * n, -1), dim=1)  # (2N, p)
    sim = (z @ z.T / temperature).masked_fill(torch.eye(v * n, dtype=torch.bool), -math.inf)
    return F.cross_entropy(sim, (torch.arange(v * n) + n) % (v * n))


def vicreg(h: Tensor) -> Tensor:
    """VICReg (solo-learn's weights): 25 invariance + 25 variance + 1 covariance."""
    n, p = h.shape[1:]
    loss = 25.0 * F.mse_loss(h[0], h[1])
    for x in h:
        loss = loss + 25.0 * F.relu(1.0 - torch.sqrt(x.var(dim=0) + 1e-4)).mean()
        xc = x - x.mean(dim=0)
        c = xc.T @ xc / (n - 1)  # (p, p)
        loss = loss + (c.pow(2).sum() - c.diagonal().pow(2).sum()) / p
    return loss


def byol_like(p: int, seed: int, n: int = 16) -> Loss:
    """Symmetrised 2 - 2 cos(predictor(H[v]), target[1 - v]) with fixed targets, as BYOL."""
    torch.manual_seed(seed)
    predictor = SmoothMLPHead(p, 4 * p, p, activation="relu", norm="bn").double().train()
    targets = torch.randn(2, n, p, dtype=torch.float64)

    def loss(h: Tensor) -> Tensor:
        pred = predictor.to(h.dtype)
        cos = [F.cosine_similarity(pred(h[v]), targets[1 - v].to(h), dim=-1) for v in (0, 1)]
        return (4.0 - 2.0 * (cos[0] + cos[1])).mean()

    return loss


@dataclass(frozen=True)
class Case:
    """A head, a loss and features; the operator is the sub-block of ``block`` samples."""

    name: str
    head: nn.Module
    loss: Loss
    z: Tensor  # (V, N, d)
    block: int


def accuracy_cases(seed: int) -> list[Case]:
    """The three small cases of part 1 (d = 32: dense sub-blocks of size 512)."""
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(2, 16, 32, generator=gen, dtype=torch.float64)
    torch.manual_seed(seed)
    heads = {
        "byol swish+bn": SmoothMLPHead(32, 64, 16, activation="swish", norm="bn"),
        "simclr swish": SmoothMLPHead(32, 64, 16, activation="swish", norm="none"),
        "vicreg relu+bn": SmoothMLPHead(32, 64, 64, depth=3, activation="relu", norm="bn"),
    }
    losses = {
        "byol swish+bn": byol_like(16, seed),
        "simclr swish": nt_xent,
        "vicreg relu+bn": vicreg,
    }
    return [Case(name, heads[name], losses[name], z, 8) for name in heads]


def dense_operators(case: Case) -> dict[str, Tensor]:
    """Dense float64 sub-blocks of H_eff, GN and M (= H_eff - GN) of the full-batch loss."""
    head = copy.deepcopy(case.head).double().train()
    views, n, d = case.z.shape

    def outputs(flat: Tensor) -> Tensor:
        z = flat.reshape(views, n, d)
        return torch.stack([head(z[v]) for v in range(views)])  # (V, N, p)

    z0 = case.z.reshape(-1)
    h_eff = hessian(lambda flat: case.loss(outputs(flat)), z0, vectorize=True)
    h0 = outputs(z0).detach()
    loss_h = hessian(lambda flat: case.loss(flat.reshape(h0.shape)), h0.reshape(-1), vectorize=True)
    jac = jacobian(lambda flat: outputs(flat).reshape(-1), z0, vectorize=True)  # (VNp, VNd)
    gn = jac.T @ loss_h @ jac
    index = block_indices(n, case.block)
    assert index is not None
    rows = torch.arange(views * n * d).reshape(views, n, d)[:, index].reshape(-1)
    block = {"heff": h_eff, "gn": gn, "m": h_eff - gn}
    return {name: a[rows][:, rows] for name, a in block.items()}


def accuracy(cases: list[Case]) -> None:
    """Part 1: print the table of estimates against dense."""
    print(f"\nPart 1: defaults (tol {DEFAULT_TOL:g}, no extra density probe) against dense float64")
    head = (
        f"{'case':>15} {'dtype':>7} {'op':>4} {'steps':>5} {'conv':>4} {'err min':>8} "
        f"{'err max':>8} {'neg frac':>8} {'estimate +- std (+quad)':>28} {'cond':>9} {'dense':>9}"
    )
    print(head + "\n" + "-" * len(head))
    for case in cases:
        dense = {k: torch.linalg.eigvalsh(a) for k, a in dense_operators(case).items()}
        scale = float(dense["heff"].abs().max())
        for dtype in (torch.float64, torch.float32):
            spec = effective_hessian_spectrum(
                case.head, case.loss, case.z, dtype=dtype, max_samples=case.block
            )
            for op in OPERATORS:
                _row(case.name, dtype, op, spec.operators[op], dense[op], scale, spec.floor)
    print(
        "err = |estimate - dense| / max|lambda(H_eff)| ('-': not converged, reported as None); "
        "neg frac = #{lambda < -floor} / dim;\ncond: on the numerical rank (None: not read off "
        "converged extremes, see OperatorSpectrum)"
    )


def _row(
    case: str,
    dtype: torch.dtype,
    op: str,
    s: OperatorSpectrum,
    exact: Tensor,
    scale: float,
    floor: float,
) -> None:
    """One line of part 1: estimate ``s`` against the dense eigenvalues ``exact``."""
    err = [
        f"{abs(v - float(e)) / scale:8.1e}" if v is not None else f"{'-':>8}"
        for v, e in ((s.lambda_min, exact[0]), (s.lambda_max, exact[-1]))
    ]
    true_frac = float((exact < -floor).double().mean())
    above = exact.abs()[exact.abs() > floor]
    dense_cond = float(above.max() / above.min()) if above.numel() else math.nan
    est = f"{s.neg_fraction:.4f} +- {s.neg_fraction_std:.4f} (+{s.neg_fraction_quad:.3f})"
    cond = "None" if s.cond is None else f"{s.cond:.2e}"
    conv = "yes" if s.converged_min and s.converged_max else "no"
    print(
        f"{case:>15} {str(dtype)[6:]:>7} {op:>4} {s.steps:>5} {conv:>4} {err[0]} {err[1]} "
        f"{true_frac:8.4f} {est:>28} {cond:>9} {dense_cond:9.2e}"
    )


def cost_cases(seed: int) -> list[Case]:
    """Part 2's cases, d = 512 and 2 x 32 samples, the operator restricted to 16 of them.

    The demo's BYOL head (Swish + BN, 512 wide, p = 128, a ReLU + BN predictor against fixed
    targets) and solo-learn's cifar VICReg projector (3 Linear layers 2048 wide, BN, ReLU).
    """
    torch.manual_seed(seed)
    w = 2048
    vicreg_head = nn.Sequential(
        nn.Linear(512, w),
        nn.BatchNorm1d(w),
        nn.ReLU(),
        nn.Linear(w, w),
        nn.BatchNorm1d(w),
        nn.ReLU(),
        nn.Linear(w, w),
    )
    byol_head = SmoothMLPHead(512, 512, 128, activation="swish", norm="bn")
    z = torch.randn(2, 32, 512, generator=torch.Generator().manual_seed(seed))
    byol = byol_like(128, seed, n=32)
    return [
        Case("byol demo", byol_head, byol, z, 16),
        Case("vicreg cifar", vicreg_head, vicreg, z, 16),
    ]


@dataclass
class Cost:
    """Steps and wall seconds per part of one measurement, and its total CPU and wall time."""

    parts: dict[str, tuple[int, float]]
    cpu: float
    wall: float


def _timed(fn: Callable[[], dict[str, tuple[int, float]]]) -> Cost:
    cpu, wall = time.process_time(), time.perf_counter()
    parts = fn()
    return Cost(parts, time.process_time() - cpu, time.perf_counter() - wall)


def before(case: Case) -> tuple[Cost, Cost]:
    """The pre-issue-11 measurement: 12 steps per operator in float64; then the density.

    Returns:
        The ordinary record's cost and the density's extra cost (first and final records).
    """
    gen = torch.Generator().manual_seed(0)
    index = block_indices(case.z.shape[1], case.block)
    dim = case.z.shape[0] * case.block * case.z.shape[2]

    def spectrum() -> dict[str, tuple[int, float]]:
        out = {}
        start = time.perf_counter()
        ops = head_operators(case.head, case.loss, case.z, dtype=torch.float64)
        out["graph"] = (0, time.perf_counter() - start)
        for op in OPERATORS:
            start = time.perf_counter()
            matvec = restrict_to_block(getattr(ops, op), ops.shape, index)
            lanczos(matvec, dim, max_steps=12, tol=0.0, generator=gen)
            out[op] = (12, time.perf_counter() - start)
        return out

    def density() -> dict[str, tuple[int, float]]:
        start = time.perf_counter()
        ops = head_operators(case.head, case.loss, case.z, dtype=torch.float64)  # a second graph
        slq_density(ops.heff, ops.dim, steps=12, probes=2, generator=gen)
        return {"density": (24, time.perf_counter() - start)}

    return _timed(spectrum), _timed(density)


def after(case: Case, dtype: torch.dtype, tol: float) -> Cost:
    """One call at the defaults (but ``dtype`` and ``tol``); graph: total minus operators."""
    spec: list[HessianSpectrum] = []

    def call() -> dict[str, tuple[int, float]]:
        start = time.perf_counter()
        spec.append(
            effective_hessian_spectrum(
                case.head, case.loss, case.z, dtype=dtype, tol=tol, max_samples=case.block
            )
        )
        out = {op: (s.steps, s.seconds) for op, s in spec[0].operators.items()}
        out["graph"] = (0, time.perf_counter() - start - sum(t for _, t in out.values()))
        return out

    result = _timed(call)
    ok = all(s.converged_min and s.converged_max for s in spec[0].operators.values())
    result.parts["converged"] = (int(ok), 0.0)
    return result


def _print_cost(label: str, cost: Cost) -> None:
    names = ("graph", *OPERATORS, "density")
    cells = "".join(
        f"{cost.parts[n][0]:>5} {cost.parts[n][1]:6.2f}s" if n in cost.parts else f"{'-':>13}"
        for n in names
    )
    print(f"{label:>34}{cells}{cost.cpu:9.2f}{cost.wall:9.2f}")


def _warm_up(case: Case) -> None:
    """One product of each operator in each dtype, so that no lazy initialisation is timed."""
    for dtype in (torch.float64, torch.float32):
        ops = head_operators(case.head, case.loss, case.z, dtype=dtype)
        v = torch.ones(ops.dim, dtype=dtype)
        for op in OPERATORS:
            getattr(ops, op)(v)


def cost(args: argparse.Namespace) -> None:
    """Part 2: steps and seconds per operator, before and after; the speed-ups."""
    torch.set_num_threads(args.threads)
    print(
        f"\nPart 2: cost of one measurement, {args.threads} thread(s); cells: Lanczos steps "
        "(products) and wall seconds"
    )
    names = ("graph", *OPERATORS, "density")
    print(f"{'':>34}" + "".join(f"{n:>13}" for n in names) + f"{'CPU s':>9}{'wall s':>9}")
    for case in cost_cases(args.seed):
        _warm_up(case)
        ordinary, density = before(case)
        both = Cost(
            {**ordinary.parts, **density.parts},
            ordinary.cpu + density.cpu,
            ordinary.wall + density.wall,
        )
        _print_cost(f"{case.name}: before, ordinary", ordinary)
        _print_cost(f"{case.name}: before, with density", both)
        for tol in args.tols:
            new = after(case, torch.float32, tol)
            ok = "" if new.parts.pop("converged")[0] else " (NOT converged)"
            _print_cost(f"{case.name}: after f32 tol {tol:g}{ok}", new)
            print(
                f"{'':>34}speed-up (CPU) {ordinary.cpu / new.cpu:.2f}x over an ordinary record, "
                f"{both.cpu / new.cpu:.2f}x over one with the density"
            )


def main() -> None:
    """Parse arguments and run both parts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="part 1 only")
    parser.add_argument("--cost-only", action="store_true", help="part 2 only")
    parser.add_argument(
        "--tols", type=float, nargs="+", default=[DEFAULT_TOL], help="tolerances of 'after'"
    )
    parser.add_argument("--threads", type=int, default=1, help="threads of part 2")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}; defaults: tol {DEFAULT_TOL:g}, "
        f"tau {DEFAULT_TAU[torch.float64]:g} (float64) / {DEFAULT_TAU[torch.float32]:g} (float32)"
    )
    start = time.perf_counter()
    if not args.cost_only:
        accuracy(accuracy_cases(args.seed))
    if not args.quick:
        cost(args)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
