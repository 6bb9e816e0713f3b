"""Accuracy and cost of the spectrum measurement at its default settings.

Part 1, accuracy against dense float64 on small operators like the demo's (random features,
2 views of 16 samples, the operator restricted to the sub-block of 8 samples while the loss sees
all 16): a Swish+BN head under a BYOL-like loss (a Swish+BN predictor against fixed targets), a
Swish head under NT-Xent (SimCLR) and a ReLU+BN head under VICReg. For each of H_eff, GN and M:
the dense extremes and the fraction of eigenvalues below -floor (from the dense float64
sub-block of the Hessian of the full-batch loss, built with ``torch.autograd.functional``),
next to :func:`effective_hessian_spectrum` at its defaults (float64 and float32): the errors of
lambda_min and lambda_max in units of max|lambda(H_eff)|, the negative fraction with its stated
spread, the number of steps, and whether both extremes converged.

Part 2, cost on a VICReg-like case (solo-learn's cifar VICReg projector: 3 Linear layers 2048
wide with BatchNorm and ReLU, d = 512, 2 views of 32 samples, the operator restricted to 16):
"before" is the measurement as the monitor took it before issue 11 (12 Lanczos steps per
operator, no convergence test, float64, and in the first and final records a second graph and
an SLQ density of H_eff with 2 probes of 12 steps), reproduced with today's kernel; "after" is
one :func:`effective_hessian_spectrum` call at the defaults in float32. Steps and seconds per
operator; wall times on ``--threads`` threads, the best of ``--repeats``.

Run: ``python benchmarks/bench_spectrum.py`` (under 2 minutes on 2 cores) or ``--quick``
(part 1 only).
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
    OperatorSpectrum,
    _restrict,
    effective_hessian_spectrum,
    subsample_indices,
)
from solo_geometry.heads import SmoothMLPHead
from solo_geometry.linalg import head_operators, lanczos, slq_density

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


def byol_like(p: int, seed: int) -> Loss:
    """Symmetrised 2 - 2 cos(predictor(H[v]), target[1 - v]) with fixed targets, as BYOL."""
    torch.manual_seed(seed)
    predictor = SmoothMLPHead(p, 2 * p, p, activation="swish", norm="bn").double().train()
    targets = torch.randn(2, 16, p, dtype=torch.float64)

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
        "simclr swish": SmoothMLPHead(32, 64, 16, activation="swish", norm=None),
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
    index = subsample_indices(n, case.block)
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


def vicreg_case(seed: int) -> Case:
    """Part 2's case: solo-learn's cifar VICReg projector on d = 512, 2 x 32 samples."""
    torch.manual_seed(seed)
    w = 2048
    head = nn.Sequential(
        nn.Linear(512, w), nn.BatchNorm1d(w), nn.ReLU(),
        nn.Linear(w, w), nn.BatchNorm1d(w), nn.ReLU(),
        nn.Linear(w, w),
    )  # fmt: skip
    z = torch.randn(2, 32, 512, generator=torch.Generator().manual_seed(seed))
    return Case("vicreg cifar", head, vicreg, z, 16)


def before(case: Case, density: bool, gen: torch.Generator) -> dict[str, tuple[int, float]]:
    """The pre-issue-11 measurement: 12 steps per operator in float64 (+ the density)."""
    out = {}
    start = time.perf_counter()
    ops = head_operators(case.head, case.loss, case.z, dtype=torch.float64)
    index = subsample_indices(case.z.shape[1], case.block)
    dim = case.z.shape[0] * case.block * case.z.shape[2]
    out["graph"] = (0, time.perf_counter() - start)
    for op in OPERATORS:
        start = time.perf_counter()
        matvec = _restrict(getattr(ops, op), ops.shape, index)
        lanczos(matvec, dim, max_steps=12, tol=0.0, generator=gen)
        out[op] = (12, time.perf_counter() - start)
    if density:
        start = time.perf_counter()
        ops = head_operators(case.head, case.loss, case.z, dtype=torch.float64)
        slq_density(ops.heff, ops.dim, steps=12, probes=2, generator=gen)
        out["density"] = (24, time.perf_counter() - start)
    return out


def after(case: Case, dtype: torch.dtype, gen: torch.Generator) -> dict[str, tuple[int, float]]:
    """One call at the defaults; the graph time is the total minus the operators'."""
    start = time.perf_counter()
    spec = effective_hessian_spectrum(
        case.head, case.loss, case.z, dtype=dtype, max_samples=case.block, generator=gen
    )
    total = time.perf_counter() - start
    out = {op: (s.steps, s.seconds) for op, s in spec.operators.items()}
    out["graph"] = (0, total - sum(s.seconds for s in spec.operators.values()))
    conv = {op: s.converged_min and s.converged_max for op, s in spec.operators.items()}
    print(f"  after {dtype}: converged {conv}, interaction ratio {spec.interaction_ratio:.3f}")
    return out


def best(fn: Callable[[], dict[str, tuple[int, float]]], repeats: int) -> dict[str, tuple]:
    """The run with the smallest total time among ``repeats``."""
    runs = [fn() for _ in range(repeats)]
    return min(runs, key=lambda r: sum(t for _, t in r.values()))


def cost(args: argparse.Namespace) -> None:
    """Part 2: print steps and seconds per operator, before and after."""
    print(f"\nPart 2: cost on the VICReg-like case, {args.threads} threads, best of {args.repeats}")
    case = vicreg_case(args.seed)
    torch.set_num_threads(args.threads)
    rows = {
        "before (ordinary record)": best(
            lambda: before(case, False, torch.Generator().manual_seed(0)), args.repeats
        ),
        "before (+ density record)": best(
            lambda: before(case, True, torch.Generator().manual_seed(0)), args.repeats
        ),
        "after float32": best(
            lambda: after(case, torch.float32, torch.Generator().manual_seed(0)), args.repeats
        ),
    }
    if args.float64:
        rows["after float64"] = best(
            lambda: after(case, torch.float64, torch.Generator().manual_seed(0)), args.repeats
        )
    names = ("graph", *OPERATORS, "density")
    print(f"{'':>26}" + "".join(f"{n:>16}" for n in names) + f"{'total s':>10}")
    for label, row in rows.items():
        cells = "".join(
            f"{row[n][0]:>6} {row[n][1]:8.2f}s" if n in row else f"{'-':>16}" for n in names
        )
        print(f"{label:>26}{cells}{sum(t for _, t in row.values()):10.2f}")
    after_total = sum(t for _, t in rows["after float32"].values())
    for label in ("before (ordinary record)", "before (+ density record)"):
        ratio = sum(t for _, t in rows[label].values()) / after_total
        print(f"speed-up of 'after float32' over '{label}': {ratio:.2f}x")
    print("cells: Lanczos steps (products) and seconds; graph: head, loss and first-order graph")


def main() -> None:
    """Parse arguments and run both parts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="part 1 only")
    parser.add_argument("--float64", action="store_true", help="also time 'after' in float64")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}; defaults: tol {DEFAULT_TOL:g}, "
        f"tau {DEFAULT_TAU[torch.float64]:g} (float64) / {DEFAULT_TAU[torch.float32]:g} (float32)"
    )
    start = time.perf_counter()
    accuracy(accuracy_cases(args.seed))
    if not args.quick:
        cost(args)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
