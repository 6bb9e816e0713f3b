"""Extreme eigenvalues of the effective Hessian: dense eigvalsh vs Lanczos vs power iteration.

For n = V * N * d from 2,048 to 131,072 (V = 2 views, N = d) with a 2-layer Swish head
(Linear(d, d) - SiLU - Linear(d, d), no norm) under the NT-Xent loss, in float64, prints side by
side, for each n:

* ``dense``: H_eff built column by column from batched Hessian-vector products, then
  ``torch.linalg.eigvalsh`` (only up to ``--dense-max``; beyond, a note says why it is skipped);
* ``lanczos``: :func:`solo_geometry.linalg.lanczos` with ``--budget`` Hessian-vector products;
* ``power+shift``: the estimator of published code (e.g. PyHessian): ``budget / 2`` (20) power
  iterations for the dominant eigenvalue, then ``budget / 2`` on H - lambda_dom I for the other
  end, so the same number of Hessian-vector products as Lanczos;
* ``reference``: where dense is skipped, Lanczos with ``--ref-steps`` steps (the best reference).

Product-based methods run on ``--threads`` (default 1: their matrices are small, and a
second thread only adds synchronisation, badly so on a loaded machine), dense on
``--dense-threads`` (default: all of torch's threads), which favours dense in the speed-up.

Columns: wall time (the operator graph, built once per n, is not included; its time is printed
in the header line), peak extra resident memory (Linux VmHWM after resetting it through
/proc/self/clear_refs, minus the resident size before the method; the script re-executes
itself with ``MALLOC_MMAP_THRESHOLD_=65536`` so that tensors come from and return to mmap),
and the errors |estimate - reference| / |reference| of lambda_min and lambda_max, the
reference being dense where it ran and the long Lanczos run otherwise.

Run: ``python benchmarks/bench_spectrum.py`` (about 5 minutes on 2 cores, most of it the dense
n = 8,192 solve) or ``--quick`` (n = 2,048 and 8,192, dense only at 2,048: under a minute).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from solo_geometry.linalg import HeadOperators, head_operators, lanczos

SIZES = ((2, 32, 32), (2, 64, 64), (2, 128, 128), (2, 256, 256))  # n = 2,048 ... 131,072
QUICK_SIZES = ((2, 32, 32), (2, 64, 64))
_STATUS = Path("/proc/self/status")
_MMAP_ENV = "MALLOC_MMAP_THRESHOLD_"  # fixed threshold: freed tensors leave the RSS


def nt_xent(h: Tensor, temperature: float = 0.5) -> Tensor:
    """NT-Xent over the 2N samples of H (2, N, p)."""
    v, n, _ = h.shape
    z = F.normalize(h.reshape(v * n, -1), dim=1)  # (2N, p)
    sim = (z @ z.T / temperature).masked_fill(torch.eye(v * n, dtype=torch.bool), -math.inf)
    return F.cross_entropy(sim, (torch.arange(v * n) + n) % (v * n))


def _rss_kib(field: str) -> int | None:
    if not _STATUS.exists():
        return None
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


@dataclass
class Row:
    """One method at one size: its cost and its two extreme eigenvalue estimates."""

    method: str
    n: int
    hvps: int
    seconds: float
    peak_mib: float | None
    lambda_min: float
    lambda_max: float


def measure(
    method: str, n: int, hvps: int, fn: Callable[[], tuple[float, float]], threads: int
) -> Row:
    """Run ``fn`` -> (lambda_min, lambda_max) on ``threads`` threads, timed, with peak RSS."""
    torch.set_num_threads(threads)
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
        base = _rss_kib("VmRSS")
    except OSError:
        base = None
    start = time.perf_counter()
    lo, hi = fn()
    seconds = time.perf_counter() - start
    peak = _rss_kib("VmHWM")
    mib = max(0.0, (peak - base) / 1024) if peak is not None and base is not None else None
    return Row(method, n, hvps, seconds, mib, lo, hi)


def dense_extremes(ops: HeadOperators, chunk: int = 512) -> tuple[float, float]:
    """Build H_eff from batched products (columns of the identity) and solve it densely."""
    n = ops.dim
    matrix = torch.empty(n, n, dtype=torch.float64)
    z, grad_z = ops._z, ops._grad_z  # noqa: SLF001 - benchmark reaches into the graph
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        eye = torch.zeros(stop - start, n, dtype=torch.float64)
        eye[:, start:stop] = torch.eye(stop - start, dtype=torch.float64)
        (cols,) = torch.autograd.grad(
            grad_z, z, eye.reshape(-1, *z.shape), retain_graph=True, is_grads_batched=True
        )
        matrix[start:stop] = cols.reshape(stop - start, n)  # rows of a symmetric matrix
        del eye, cols
    values = torch.linalg.eigvalsh(matrix)
    return float(values[0]), float(values[-1])


def power_shift(ops: HeadOperators, budget: int, gen: torch.Generator) -> tuple[float, float]:
    """Power iteration (budget/2 steps) then on H - lambda_dom I (budget/2 steps)."""

    def power(matvec: Callable[[Tensor], Tensor], steps: int) -> float:
        v = torch.randn(ops.dim, generator=gen, dtype=torch.float64)
        v = v / v.norm()
        estimate = torch.zeros((), dtype=torch.float64)
        for _ in range(steps):
            w = matvec(v)
            estimate = v @ w  # Rayleigh quotient
            v = w / w.norm()
        return float(estimate)

    dominant = power(ops.heff, budget // 2)
    other = power(lambda v: ops.heff(v) - dominant * v, budget - budget // 2) + dominant
    return min(dominant, other), max(dominant, other)


def lanczos_extremes(ops: HeadOperators, steps: int, gen: torch.Generator) -> tuple[float, float]:
    """Lanczos with full reorthogonalisation, ``steps`` products."""
    ritz = lanczos(ops.heff, ops.dim, steps, generator=gen).ritz_values
    return float(ritz[0]), float(ritz[-1])


def run_size(shape: tuple[int, int, int], args: argparse.Namespace) -> list[Row]:
    """All methods at one size; the first row is the reference."""
    views, batch, d = shape
    torch.manual_seed(args.seed)
    head = nn.Sequential(nn.Linear(d, d), nn.SiLU(), nn.Linear(d, d))
    z = torch.randn(views, batch, d, dtype=torch.float64)
    start = time.perf_counter()
    ops = head_operators(head, nt_xent, z)
    n = ops.dim
    ops.heff(torch.ones(n, dtype=torch.float64))  # warm-up, not timed
    print(f"\nn = {n:,} (V, N, d) = {shape}: graph built in {time.perf_counter() - start:.2f} s")
    rows = []
    if n <= args.dense_max:
        rows.append(measure("dense", n, n, lambda: dense_extremes(ops), args.dense_threads))
    else:
        gib = n * n * 8 / 2**30
        print(
            f"  dense skipped: {gib:.1f} GiB matrix, {n:,} products and an O(n^3) eigvalsh "
            f"(~{(n / 8192) ** 3:.0f}x the n = 8,192 solve) exceed --dense-max {args.dense_max:,}"
        )
        gen = torch.Generator().manual_seed(args.seed + 1)
        rows.append(
            measure(
                "reference",
                n,
                args.ref_steps,
                lambda: lanczos_extremes(ops, args.ref_steps, gen),
                args.threads,
            )
        )
    gen = torch.Generator().manual_seed(args.seed)
    rows.append(
        measure(
            "lanczos", n, args.budget, lambda: lanczos_extremes(ops, args.budget, gen), args.threads
        )
    )
    gen = torch.Generator().manual_seed(args.seed)
    rows.append(
        measure(
            "power+shift", n, args.budget, lambda: power_shift(ops, args.budget, gen), args.threads
        )
    )
    return rows


def print_table(rows: list[Row]) -> None:
    """One table, errors against each size's first (reference) row."""
    header = (
        f"{'n':>8} {'method':>12} {'HVPs':>7} {'time s':>9} {'peak MiB':>9} "
        f"{'lambda_min':>13} {'lambda_max':>12} {'err min':>9} {'err max':>9} {'speed-up':>9}"
    )
    print("\n" + header + "\n" + "-" * len(header))
    ref: Row | None = None
    for row in rows:
        if row.method in ("dense", "reference"):
            ref = row
        assert ref is not None
        err_lo = abs(row.lambda_min - ref.lambda_min) / abs(ref.lambda_min)
        err_hi = abs(row.lambda_max - ref.lambda_max) / abs(ref.lambda_max)
        peak = f"{row.peak_mib:9.1f}" if row.peak_mib is not None else f"{'n/a':>9}"
        speed = f"{ref.seconds / row.seconds:8.0f}x" if ref.method == "dense" else f"{'-':>9}"
        print(
            f"{row.n:>8,} {row.method:>12} {row.hvps:>7,} {row.seconds:9.3f} {peak} "
            f"{row.lambda_min:13.6e} {row.lambda_max:12.6e} {err_lo:9.1e} {err_hi:9.1e} {speed}"
        )


def main() -> None:
    """Parse arguments, run every size and print the table."""
    if sys.platform == "linux" and _MMAP_ENV not in os.environ:
        # glibc otherwise raises its mmap threshold after large frees and serves later
        # tensors from already-resident heap pages, hiding them from the peak RSS.
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, _MMAP_ENV: "65536"})
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 2,048 and 8,192 only")
    parser.add_argument("--budget", type=int, default=40, help="HVPs for lanczos and power")
    parser.add_argument("--ref-steps", type=int, default=300, help="reference Lanczos steps")
    parser.add_argument(
        "--dense-max", type=int, default=None, help="largest n solved densely (8,192; quick 2,048)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads", type=int, default=1, help="threads of the product-based methods"
    )
    parser.add_argument(
        "--dense-threads", type=int, default=torch.get_num_threads(), help="threads of dense"
    )
    args = parser.parse_args()
    if args.dense_max is None:
        args.dense_max = 2048 if args.quick else 8192
    print(
        f"torch {torch.__version__}, float64, NT-Xent, 2-layer Swish head; threads: "
        f"{args.threads} for lanczos/power/reference, {args.dense_threads} for dense"
    )
    start = time.perf_counter()
    rows = [
        row for shape in (QUICK_SIZES if args.quick else SIZES) for row in run_size(shape, args)
    ]
    print_table(rows)
    print("\nerr = |estimate - reference| / |reference|; speed-up = dense time / method time")
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
