"""Tests of the monitor's time budget (solo_geometry.runtime.budget through GeometryMonitor).

Real Lightning fits of the tiny modules of test_monitor.py; a test's own clock where the
decision is checked at given training times.
"""

from __future__ import annotations

import sys
from pathlib import Path

import lightning.pytorch as pl

sys.path.insert(0, str(Path(__file__).parent.parent))
from solo_geometry.folder.records import read_records  # noqa: E402
from solo_geometry.runtime.budget import RESERVE_RUNS  # noqa: E402
from solo_geometry.runtime.monitor import GeometryMonitor  # noqa: E402
from tests.monitor_helpers import STATS_KEYS, CapturingGeometry, fit_boring, small_config  # noqa: E402


class TestBudget:
    def test_budget_defers_the_spectra_not_the_statistics(self, tmp_path: Path) -> None:
        # a budget no spectrum can keep: statistics at every due step, spectra at step 0 only
        fit_boring(
            tmp_path,
            [GeometryMonitor(small_config(tmp_path, every_n_steps=1, budget=1e-9))],
            steps=6,
        )
        records = read_records(tmp_path)
        assert [r.step for r in records] == [0, 1, 2, 3, 4, 5, 6]
        assert all(r.ok for r in records)
        first, *mid, final = records
        assert first.settings.budget == 1e-9 and first.settings.deferred == 0
        assert first.parts == ["stats", "hessian", "augment"] and first.deferred_parts == {}
        assert first.density is None  # a density is taken only where the budget holds it
        for record in [*mid, final]:  # the statistics of every due step, the rest deferred
            assert record.parts == ["stats"], record
            assert sorted(record.deferred_parts) == ["augment", "hessian"]
            assert all(v.startswith("budget: ") for v in record.deferred_parts.values())
            assert all(record.value(k) is not None for k in STATS_KEYS)
            assert (
                record.value("heff/lambda_max") is None and "rho/brightness" not in record.metrics
            )
        assert final.final and final.n_skipped == 0
        # the statistics of a deferred step are those of its own batch, not a copy
        assert len({r.value("z/normalized_std") for r in records}) == len(records)

    def test_deferred_spectra_come_at_the_first_step_that_fits(self, tmp_path: Path) -> None:
        # the spectra due at step 2 wait; the stats of step 2 do not; at step 3 the budget
        # (simulated: the clock says so) holds the spectra, recorded as deferred by 1 step
        monitor = GeometryMonitor(
            small_config(tmp_path, augment=False, every_n_steps=2, budget=0.5)
        )
        fits = iter([False, True])
        monitor._fits = lambda trainer, runs: next(fits, True)  # type: ignore[method-assign]
        fit_boring(tmp_path, [monitor], CapturingGeometry, steps=4)
        records = read_records(tmp_path)
        assert [(r.step, r.parts) for r in records] == [
            (0, ["stats", "hessian"]),
            (2, ["stats"]),
            (3, ["stats", "hessian", "density"]),
            (4, ["stats", "hessian", "density"]),
        ]
        assert records[1].deferred_parts["hessian"].startswith("budget: ")
        assert "due since step 2" in records[1].deferred_parts["hessian"]
        assert records[2].settings.deferred == 1 and records[2].deferred_parts == {}

    def test_final_density_deferred_says_so(self, tmp_path: Path) -> None:
        # the budget holds one more Lanczos run, not a density's: the final record has the
        # spectra and says why it has no density
        monitor = GeometryMonitor(
            small_config(tmp_path, augment=False, every_n_steps=10, budget=0.5)
        )
        monitor._fits = lambda trainer, runs: runs == 1  # type: ignore[method-assign]
        fit_boring(tmp_path, [monitor], steps=3)
        first, final = read_records(tmp_path)
        assert (first.step, first.parts, first.deferred_parts) == (0, ["stats", "hessian"], {})
        assert final.final and final.parts == ["stats", "hessian"] and final.density is None
        assert list(final.deferred_parts) == ["density"]
        assert final.deferred_parts["density"].startswith("budget: the density")

    def test_budget_places_the_densities(self, tmp_path: Path) -> None:
        # density_probes = 1: a measurement with a density is 2 Lanczos runs, 1 s each
        monitor = GeometryMonitor(small_config(tmp_path, every_n_steps=1, budget=0.1))
        now = [0.0]
        monitor.budget.clock = lambda: now[0]
        trainer = pl.Trainer(logger=False, enable_checkpointing=False, accelerator="cpu")

        def wants(train: float, final: bool = False) -> bool:
            now[0] = train + monitor.budget.spent
            first = not monitor.n_records
            return monitor.budget.wants_density(final, first, lambda r: monitor._fits(trainer, r))

        assert not wants(0.0)  # the first measurement: its cost is not known yet
        monitor.budget.t0, monitor.budget.spent, monitor.budget.cost = 0.0, 1.0, 1.0
        monitor.n_records = 1
        # a later one carries a density when it and the final one's fit: 1 + 2 x 2 <= 0.1 x train
        assert [wants(t) for t in (49.9, 50.0)] == [False, True]
        monitor.budget.densities = 1
        assert not wants(1e6)  # one density mid-run is enough
        # the final one carries a density when it fits: 1 + 2 <= 0.1 x train
        assert [wants(t, final=True) for t in (29.9, 30.0)] == [False, True]
        monitor.config.budget = None  # without a budget: the first and the final record
        monitor.n_records = 0
        assert wants(0.0) and wants(0.0, final=True)
        monitor.n_records = 3
        assert not wants(0.0) and wants(0.0, final=True)

    def test_budget_counts_the_expected_cost_of_the_next_measurement(self, tmp_path: Path) -> None:
        # 1 s per Lanczos run, under a 10% budget, 3 s spent: the next measurement (1 s) and the
        # reserve for the final one's spectra (RESERVE_RUNS = 2 runs: not its density, which
        # would be 1 + density_probes = 3 runs) fit once 3 + 1 + 2 <= 0.1 x train
        monitor = GeometryMonitor(small_config(tmp_path, every_n_steps=1, budget=0.1))
        monitor.config.spectrum.density_probes = 2
        assert monitor.budget.density_runs == 3 and RESERVE_RUNS == 2
        now = [100.0]
        monitor.budget.clock = lambda: now[0]
        monitor.budget.t0, monitor.budget.spent, monitor.budget.cost = 0.0, 3.0, 1.0
        monitor.n_records = 2
        trainer = pl.Trainer(logger=False, enable_checkpointing=False, accelerator="cpu")
        decisions = []
        for train in (30.0, 59.9, 60.0, 69.9):
            now[0] = train + monitor.budget.spent  # wall time = training time + measurement time
            decisions.append(monitor._due(trainer, 3))
        assert decisions == [False, False, True, True]
