"""The monitor's budget rule, replayed on measured costs (used by bench_overhead.py).

From the costs of a record with the SLQ density, without it and of the final one, in training
steps, :func:`projected` gives the overhead of an ``n``-step run at the default cadence and
budget, and :func:`projected_taken` the spectral records it takes.
"""

from __future__ import annotations

from solo_geometry.runtime.budget import RESERVE_RUNS

__all__ = ["BUDGET", "DENSITY_RUNS", "EVERY", "projected", "projected_taken"]

EVERY = 50  # the default cadence, GeometryConfig.every_n_steps
BUDGET = 0.02  # the default budget, GeometryConfig.budget
DENSITY_RUNS = 3  # Lanczos runs per operator of a density record: 1 + SpectrumConfig.density_probes


def projected(n: int, step: float, cost: float, first: float, final: float, budget: float) -> float:
    """Overhead of an ``n``-step run, projected from measured costs by the monitor's own rule.

    The bench's 'on' runs (budget off) give the cost of a record with the SLQ density
    (``first``, step 0), without it (``cost``, mid-run) and of the final one with it
    (``final``). A density is ``DENSITY_RUNS - 1`` extra Lanczos runs per operator, each
    ``(first - cost) / (DENSITY_RUNS - 1)``; so a final record without one costs ``final``
    less those runs. Under the budget (:meth:`GeometryMonitor._due`, ``TimeBudget.wants_density``,
    ``on_train_end``):

    * the first record runs at step 0 without a density (``cost``);
    * a measurement due every ``EVERY`` steps runs once the time spent plus its cost and the
      final record's spectra (``RESERVE_RUNS``, no density), estimated from the costliest
      measurement so far per Lanczos run, is within ``budget`` of the training time so far
      (deferred ones are retried at the next cadence step only); the first of them that
      fits with a density of its own too carries one (``first``);
    * the final record runs with a density if that fits, else without if that fits, else not.
    """
    return _simulated(n, step, cost, first, final, budget)[0] / (n * step)


def projected_taken(
    n: int, step: float, cost: float, first: float, final: float, budget: float
) -> tuple[int, int]:
    """Spectral records taken and records due of an ``n``-step run, by :func:`projected`'s rule.

    Due: every ``EVERY`` steps and the final record; the statistics are taken at every one.
    """
    return _simulated(n, step, cost, first, final, budget)[1], len(range(0, n, EVERY)) + 1


def _simulated(
    n: int, step: float, cost: float, first: float, final: float, budget: float
) -> tuple[float, int]:
    """Seconds spent and spectral records taken, by the rule of :func:`projected`."""
    extra = max(first - cost, 0.0) / (DENSITY_RUNS - 1)  # one more Lanczos run, in seconds
    final_plain = max(final - (DENSITY_RUNS - 1) * extra, cost)
    spent, per_run, densities, taken = cost, cost, 0, 1
    for due in range(EVERY, n, EVERY):
        room = budget * (due * step)
        if spent + (1 + RESERVE_RUNS) * per_run > room:
            continue
        taken += 1
        if not densities and spent + 2 * DENSITY_RUNS * per_run <= room:
            spent, per_run, densities = spent + first, max(per_run, first / DENSITY_RUNS), 1
        else:
            spent, per_run = spent + cost, max(per_run, cost)
    room = budget * n * step
    if spent + DENSITY_RUNS * per_run <= room:
        spent, taken = spent + final, taken + 1
    elif spent + per_run <= room:
        spent, taken = spent + final_plain, taken + 1
    return spent, taken
