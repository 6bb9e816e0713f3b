"""GeometryMonitor: a host-agnostic Lightning Callback measuring the head's geometry.

The monitor needs one thing from the LightningModule: ``geometry_view(batch)`` returning a
:class:`GeometryView` (backbone features of the batch, the head, a loss closure). Every
``every_n_steps`` optimiser steps (step 0 is before the first step) and once at the end of fit
it measures the current batch (:func:`solo_geometry.runtime.measure.measure`, docs/design.md
section 3): the extreme eigenvalues of H_eff, GN and M, the statistics and quality metrics of Z
and H, rho along colour augmentations, at the first and final records H_eff's density, and the
fixed held-out batch's statistics the collapse alert reads (:mod:`.heldout`).

Under the time budget (``geometry.budget``) only the costly parts wait: every step due on the
cadence writes the statistics (from the step's captured features); where the spectra and rho do
not fit, they are deferred (``deferred_parts``) to the first later step the budget holds them for.

A module that also implements ``geometry_capture(enabled)`` (both hosts do) lets the monitor
reuse the features its training step computes: at a measured step the monitor switches capture
on before the step, and measures after the step's backward, before the optimiser changes any
parameter (``on_after_backward``), so ``geometry_view`` costs no second backbone forward. If no
backward comes (a skipped step), it measures at the end of the batch from a fresh forward.

It never changes training (modes, buffers, RNG restored in ``finally``) nor stops it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.fabric.utilities.apply_func import move_data_to_device
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from typing_extensions import override

from solo_geometry.config import GeometryConfig
from solo_geometry.folder.records import GeometryRecord
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.runtime.alert import CollapseAlert
from solo_geometry.runtime.budget import TimeBudget
from solo_geometry.runtime.distributed import collectives_off, measure_across_ranks
from solo_geometry.runtime.finish import first_train_batch, lacks_final_record
from solo_geometry.runtime.heldout import HeldOutBatch, start_reading, with_heldout
from solo_geometry.runtime.measure import RunContext, checked, measure, outputs
from solo_geometry.runtime.precision import exact_matmul, full_precision
from solo_geometry.runtime.schedule import MonitorState
from solo_geometry.runtime.sink import exit_unwritten, log_record, one_line, write_record
from solo_geometry.runtime.view import GeometryAware
from solo_geometry.state import preserved_state

__all__ = ["GeometryMonitor"]


class GeometryMonitor(Callback):
    """Measure the head's geometry every ``every_n_steps`` steps and at the end of fit.

    One :class:`~solo_geometry.folder.records.GeometryRecord` per measurement goes to
    ``<run>/geometry.jsonl`` on rank zero (docs/run-folder.md). The checkpoint keeps the
    monitor's state, so a resumed run continues the file with no gap and no duplicate (records
    after the checkpoint's step are dropped, a torn last line repaired).

    Logged metrics: every numeric metric of the record under ``geometry/`` (docs/run-folder.md),
    with ``geometry/n_skipped``, ``geometry/seconds`` and ``geometry/alert`` (0 healthy,
    1 dimensional, 2 complete: :mod:`solo_geometry.runtime.alert`). A failed write is warned
    once and kept in ``unwritten``; with ``exit_on_unwritten`` the fit's end exits 3.

    Args:
        config: the ``geometry`` config node (validated); None for the defaults.
        meta: plain-typed facts about the run stored in the checkpoint's ``geometry`` entry
            and in the first record (e.g. the method and host).

    Raises:
        TypeError: if ``config`` is not a :class:`GeometryConfig`; in ``setup`` if the module
            does not implement ``geometry_view``.
    """

    def __init__(
        self, config: GeometryConfig | None = None, meta: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__()
        self.config = config if config is not None else GeometryConfig()
        if not isinstance(self.config, GeometryConfig):
            raise TypeError(f"config must be a GeometryConfig, got {type(config).__name__}")
        self.meta: dict[str, Any] = json.loads(json.dumps(dict(meta or {})))  # plain types only
        self.last_step: int | None = None
        self.n_records = 0
        self.n_skipped = 0
        self.last: dict[str, Any] = {}
        self._resumed = False
        self.trained = False  # whether this fit ran its training loop
        self._warned: set[str] = set()
        self._run: RunFolder | None = None
        self.unwritten: str | None = None  # the first failed write; exit_on_unwritten: exit 3
        self.exit_on_unwritten = False
        # what is owed, pending, queued between the hooks (runtime/schedule.py)
        self.state = MonitorState(
            self.config.every_n_steps, self.config.stats.queue, self.config.measure.stats
        )
        self.budget = TimeBudget(self.config)  # time spent, cost estimate, the budget's rule
        self.alert = CollapseAlert(self.config.alert)  # the collapse state across records
        self.heldout: HeldOutBatch | None = None  # the alert's clean images (runtime/heldout.py)

    @property
    def run(self) -> RunFolder | None:  # noqa: D102 - the run folder, known after setup
        return self._run

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if not isinstance(pl_module, GeometryAware):
            raise TypeError(
                f"GeometryMonitor needs a module with geometry_view(batch); "
                f"{type(pl_module).__name__} has none"
            )
        self._run = RunFolder(Path(self.config.out_dir or trainer.default_root_dir))

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.trained = True
        self.budget.start()
        if self.config.alert.enabled and not self.alert.started:  # its held-out reference
            self.alert.begin(start_reading(self.heldout, pl_module))
        if not trainer.is_global_zero or self._run is None:
            return
        try:
            self._run.path.mkdir(parents=True, exist_ok=True)
            if not self._resumed and self._run.geometry.exists():
                rank_zero_warn(f"GeometryMonitor: overwriting {self._run.geometry} (not resumed)")
            self._run.start_records(self.last_step if self._resumed else None)
        except OSError as err:  # an unwritable folder never stops training
            self.unwritten = self.unwritten or f"{one_line(err)}; no record was written"
            self._warn_once(
                "write",
                f"GeometryMonitor: cannot write {self._run.geometry}: "
                f"{err!r}; measurements continue, unrecorded",
            )

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        full = self._due(trainer, step)
        if not full and not self.state.stats_due(step, self.last_step):
            if self.state.queues(step):  # a measurement is due within ``stats.queue`` steps
                self._capture(pl_module)  # else ``geometry_view`` runs its own forward
                self.state.queue_batch(batch)
            return
        self.state.hold_for_final(move_data_to_device(batch, "cpu"))
        if self._capture(pl_module) is True:
            self.state.begin(step, batch, full)  # measured after this step's backward
            return
        self._record(trainer, pl_module, batch, step=step, final=False, full=full)

    def _capture(self, pl_module: pl.LightningModule) -> bool | None:
        """Switch the module's capture on; None if it has none, False if that raised."""
        if not callable(getattr(pl_module, "geometry_capture", None)):
            return None
        return self._set_capture(pl_module, True)

    def _enqueue(self, pl_module: pl.LightningModule) -> None:
        """Keep the pooled (Z, H) of the batch being queued, if any; never raises."""
        batch = self.state.take_queuing()
        if batch is None:
            return
        try:
            with preserved_state(pl_module), collectives_off(), exact_matmul():  # rank-local
                view = full_precision(pl_module.geometry_view(batch))  # type: ignore[operator]
                self.state.enqueue(*(t.detach() for t in outputs(view)))
        except Exception as err:  # noqa: BLE001 - the queue is an extra, never fatal
            self._warn_once("queue", f"GeometryMonitor: could not queue a batch ({err!r})")
        finally:
            if callable(getattr(pl_module, "geometry_capture", None)):
                self._set_capture(pl_module, False)

    @override
    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._enqueue(pl_module)
        pending = self.state.take_pending()
        if pending is None:
            return
        try:
            self._record(
                trainer, pl_module, pending.batch, step=pending.step, final=False, full=pending.full
            )
        finally:
            self._set_capture(pl_module, False)

    @override
    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        self._enqueue(pl_module)
        pending = self.state.take_pending()
        if pending is None:
            return
        self._set_capture(pl_module, False)  # no backward came: measure from a fresh forward
        self._record(
            trainer, pl_module, pending.batch, step=pending.step, final=False, full=pending.full
        )

    def _due(self, trainer: pl.Trainer, step: int) -> bool:
        """Whether to measure before step ``step`` (cadence; budget: :mod:`.budget`)."""
        if not self.state.due(step, self.last_step):  # a cadence step becomes owed
            return False
        if self.config.budget is None or not self.n_records:
            return True
        return self._fits(trainer, self.budget.due_runs)

    def _fits(self, trainer: pl.Trainer, runs: int) -> bool:
        """Whether ``runs`` more Lanczos runs per operator keep the budget; ranks agree."""
        if self.config.budget is None:
            return True
        fits = self.budget.fits(runs)
        if trainer.world_size > 1:
            fits = bool(trainer.strategy.broadcast(fits, src=0))
        return fits

    def _set_capture(self, pl_module: pl.LightningModule, enabled: bool) -> bool:
        """Switch the module's feature capture; False (warned once) if that raised."""
        try:
            pl_module.geometry_capture(enabled)  # type: ignore[operator]
            return True
        except Exception as err:  # noqa: BLE001 - capture is an optimisation, never fatal
            self._warn_once("capture", f"GeometryMonitor: geometry_capture failed ({err!r})")
            return False

    def _warn_once(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            rank_zero_warn(message)

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        kept = self.state.take_final(trainer.global_step, self.last_step)
        if kept is None:
            return
        batch = move_data_to_device(kept, pl_module.device)
        full = self.config.budget is None or self._fits(trainer, 1)
        if not full and not self.config.measure.stats:
            self._over_budget(trainer, pl_module, step=trainer.global_step)
            return
        self._record(trainer, pl_module, batch, step=trainer.global_step, final=True, full=full)

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A resume that ran no loop: the final record it lacks; then a failed write's exit."""
        if not self.trained and self._resumed and lacks_final_record(trainer, self._run):
            batch = first_train_batch(trainer)
            if batch is not None:
                self.on_train_start(trainer, pl_module)  # the records up to the checkpoint's
                batch = move_data_to_device(batch, pl_module.device)
                self._record(trainer, pl_module, batch, step=trainer.global_step, final=True)
        if self.unwritten and self.exit_on_unwritten and trainer.is_global_zero:
            exit_unwritten(self.unwritten)  # one line, exit 3: training is over

    def _over_budget(self, trainer: pl.Trainer, pl_module: pl.LightningModule, step: int) -> None:
        """Write the final record as skipped: it would break the time budget, stats are off."""
        self.n_skipped += 1
        reason = self.budget.deferral("the final measurement", self.state.owed)
        fields = {**self._fields(trainer, step, final=True), "status": "skipped", "reason": reason}
        self._write(
            trainer, pl_module, GeometryRecord(n_skipped=self.n_skipped, seconds=0.0, **fields)
        )

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        summary = {k: v for k, v in self.state_dict().items() if k not in ("last", "alert")}
        checkpoint["geometry"] = {
            "config": asdict(self.config),
            "meta": self.meta,
            "last": dict(self.last),
            "summary": summary,
        }

    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            "n_records": self.n_records,
            "n_skipped": self.n_skipped,
            "last_step": self.last_step,
            "last": dict(self.last),
            "alert": self.alert.state_dict(),
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.last_step = state_dict["last_step"]
        self.n_records = int(state_dict["n_records"])
        self.n_skipped = int(state_dict["n_skipped"])
        self.last = dict(state_dict.get("last", {}))
        self.alert.load_state_dict(state_dict.get("alert") or {})
        self._resumed = True

    def _fields(self, trainer: pl.Trainer, step: int, *, final: bool) -> dict[str, Any]:
        """What every record of step ``step`` says of itself, whatever its status."""
        return {
            "step": step,
            "epoch": trainer.current_epoch,
            "final": final,
            "head": self.config.head.name,
        }

    def _record(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        batch: Any,
        *,
        step: int,
        final: bool,
        full: bool = True,
    ) -> None:
        """Measure, write and log one record (parameters before step ``step``); never raises.

        ``full``: every configured part; else the statistics alone, the rest deferred by the
        budget (still owed, unless this is the final record).
        """
        density = full and self.budget.wants_density(
            final, not self.n_records, lambda runs: self._fits(trainer, runs)
        )
        fields = self._fields(trainer, step, final=final)
        fields["deferred_parts"] = self.budget.deferred_parts(full, final, density, self.state.owed)
        start = self.budget.clock()
        try:
            with preserved_state(pl_module), exact_matmul() as user:
                deferred = self.state.deferred(step, full=full, final=final)
                run = RunContext(str(trainer.precision), user, self.config.budget, deferred)
                history = self.state.history()
                # under DDP: the global batch, measured on rank zero, skips agreed (distributed.py)
                result = measure_across_ranks(
                    pl_module,
                    batch,
                    with_heldout(
                        lambda view: measure(
                            view,
                            self.config.measure,
                            self.config.spectrum,
                            seed=self.config.seed,
                            density=density,
                            history=history,
                            stats_only=not full,
                            run=run,
                        ),
                        self.heldout,
                        pl_module,
                    ),
                    pl_module.device,
                )
            fields.update(
                status="ok",
                metrics=checked(result.metrics),
                settings=result.settings,
                density=result.density,
                parts=result.parts,
                failed_parts=result.failed,
            )
            if result.failed:
                self._warn_once(
                    "part",
                    f"GeometryMonitor: part(s) of the record at step {step} "
                    f"failed, the others kept: {result.failed}",
                )
        except Exception as err:  # noqa: BLE001 - a measurement must never stop training
            self.n_skipped += 1
            fields.update(status="skipped", reason=f"{type(err).__name__}: {err}")
            self._warn_once(
                "skip",
                f"GeometryMonitor: measurement skipped at step {step} "
                f"({fields['reason']}); further skips are only counted",
            )
        if not self.n_records:
            fields["meta"] = {**self.meta, "geometry": asdict(self.config)}
        self.state.taken(full=full, final=final)
        self.alert.attach(trainer, fields)
        seconds = self.budget.clock() - start
        self.budget.add(seconds, full=full, density=fields.get("density") is not None)
        self._write(
            trainer, pl_module, GeometryRecord(n_skipped=self.n_skipped, seconds=seconds, **fields)
        )

    def _write(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, record: GeometryRecord
    ) -> None:
        self.last_step = record.step
        self.n_records += 1
        if record.ok:
            self.last = {"step": record.step, **record.metrics}
        if trainer.is_global_zero:
            failed = write_record(self._run, record, self._warn_once)
            self.unwritten = self.unwritten or failed
        log_record(trainer, pl_module, record, self.alert.scalars(record), self._warn_once)
