"""The monitor's time budget: which parts of a due record fit, and why the others wait.

Measurements may take at most ``geometry.budget`` of the training time so far (wall time less
the measurements'). The cost of a record is estimated per Lanczos run of each operator, from
the costliest record with the spectra so far; a record with H_eff's SLQ density is
``1 + spectrum.density_probes`` runs, one without it a single run.

The rule (docs/design.md section 4):

* a due measurement's spectra and rho run when the time spent, plus their expected cost (one
  run), plus the reserve for the final record's spectra (``RESERVE_RUNS``), fit the budget.
  The reserve does not count the final record's density: reserving its 1 + ``density_probes``
  runs from the start of training kept a CIFAR epoch of five of solo-learn's six cifar recipes
  at two spectral records (docs/benchmarks.md); the final record takes its density only if it
  fits then, and says so in ``deferred_parts`` when it does not. The reserve is two runs, not
  one: the cost per run is the costliest record's so far, and a record's Lanczos steps vary up
  to twice from one batch to the next, so one run's reserve let the final record's spectra take
  a CIFAR epoch over the budget (2.3% for BYOL); two keep it under;
* the first record carries no density (its cost is unknown until it ran); the first later one
  that fits a density and the final record's takes one; the final one takes its own if it fits.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from solo_geometry.config import GeometryConfig

__all__ = ["RESERVE_RUNS", "TimeBudget"]

RESERVE_RUNS = 2  # runs per operator kept for the final record's spectra (x2 margin), no density


class TimeBudget:
    """Time spent measuring, the cost estimate, and the budget's decisions.

    Args:
        config: the geometry config (``budget``, ``measure``).
        clock: wall clock in seconds (a test's own clock).
    """

    def __init__(
        self, config: GeometryConfig, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.config = config
        self.clock = clock
        self.t0 = clock()  # training time is counted from start()
        self.spent = 0.0  # seconds measurements took in this process
        self.cost = 0.0  # seconds of the costliest measurement, per Lanczos run of each operator
        self.densities = 0  # measurements in this process that carried a density

    def start(self) -> None:
        """Start counting training time (``on_train_start``)."""
        self.t0, self.spent, self.cost = self.clock(), 0.0, 0.0

    @property
    def density_runs(self) -> int:
        """Lanczos runs per operator of a measurement with a density: its own and the probes'."""
        return 1 + self.config.spectrum.density_probes

    @property
    def due_runs(self) -> int:
        """Runs that must fit for a due measurement's spectra: its own and the reserve."""
        return 1 + RESERVE_RUNS

    def training(self) -> float:
        """Training time so far: wall time since :meth:`start` less the measurements'."""
        return max(self.clock() - self.t0 - self.spent, 0.0)

    def fits(self, runs: int) -> bool:
        """Whether ``runs`` more Lanczos runs per operator keep the budget (this rank's view)."""
        budget = self.config.budget
        return budget is None or self.spent + runs * self.cost <= budget * self.training()

    def wants_density(self, final: bool, first: bool, fits: Callable[[int], bool]) -> bool:
        """Whether a record also computes H_eff's SLQ density (``fits``: the ranks' agreed view).

        Without a budget: the first and the final record. With one, a density costs
        :attr:`density_runs`, so it is taken only where the budget holds it: the first record
        carries none (its cost is unknown until it ran); the first later one that fits a
        density and the final one's does; the final one does if it fits.
        """
        if self.config.budget is None:
            return final or first
        if final:
            return fits(self.density_runs)
        if first or self.densities:
            return False
        return fits(2 * self.density_runs)

    def deferral(self, what: str, owed: int | None) -> str:
        """The ``budget:`` reason a part of a record is deferred for."""
        since = "" if owed is None else f", due since step {owed}"
        return (
            f"budget: {what} (about {self.cost:.3g} s per Lanczos run) would take the "
            f"measurements' {self.spent:.3g} s over {self.config.budget:g} of the "
            f"{self.training():.3g} s of training{since}"
        )

    def deferred_parts(
        self, full: bool, final: bool, density: bool, owed: int | None
    ) -> dict[str, str]:
        """``part -> reason`` for each configured part the budget defers from a record."""
        if self.config.budget is None:
            return {}
        measure, out = self.config.measure, {}
        if not full:
            for part, on in (("hessian", measure.hessian), ("augment", measure.augment)):
                if on:
                    out[part] = self.deferral("the measurement", owed)
        elif final and measure.hessian and not density:  # the final record's density is due
            out["density"] = self.deferral("the density", owed)
        return out

    def add(self, seconds: float, *, full: bool, density: bool) -> None:
        """Count a record's time; one with the spectra also updates the cost per run."""
        self.spent += seconds
        if full:  # the cost estimate is of the Lanczos runs: a statistics record has none
            self.densities += density
            self.cost = max(self.cost, seconds / (self.density_runs if density else 1))
