"""The monitor's schedule: which measurement is owed, which waits for its backward, what is queued.

:class:`MonitorState` is all that :class:`~solo_geometry.runtime.monitor.GeometryMonitor` carries
from one Lightning hook to the next (docs/design.md section 4 lists its states); its methods are
the transitions, and the hooks only call them. It knows nothing of Lightning, the time budget or
the module: the monitor asks the budget whether an owed measurement's spectra fit, and runs the
measurements.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

__all__ = ["MonitorState", "Pending"]


@dataclass(frozen=True)
class Pending:
    """A measurement waiting for its step's backward, the module's feature capture on.

    Attributes:
        step: the step it measures (parameters before that step's optimiser step).
        batch: the step's training batch.
        full: every configured part; else the statistics alone (the budget defers the rest).
    """

    step: int
    batch: Any
    full: bool


@dataclass
class MonitorState:
    """What is owed, pending, queued and kept between the monitor's hooks.

    Attributes:
        every: the cadence, ``geometry.every_n_steps``.
        queue_steps: ``geometry.stats.queue``: earlier batches pooled into the statistics.
        stats: ``geometry.measure.stats``: the statistics are written at every cadence step.
        owed: the cadence step a measurement is due since (its spectra deferred by the budget
            until it runs), None when none is owed.
        pending: the measurement waiting for this step's backward, None when none is.
        queuing: the batch whose features join the queue after this step's backward.
        final_batch: a CPU copy of the last batch a record was due for, measured again at the end of
            fit (None before the first, and once taken).
        queue: pooled (Z, H) of the last ``queue_steps`` queued batches.
    """

    every: int
    queue_steps: int = 0
    stats: bool = True
    owed: int | None = None
    pending: Pending | None = None
    queuing: Any = None
    final_batch: Any = None
    queue: deque[tuple[Tensor, Tensor]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.queue = deque(maxlen=self.queue_steps or 1)

    def due(self, step: int, last_step: int | None) -> bool:
        """Whether a measurement is owed before step ``step``; a cadence step becomes owed.

        Whether the budget holds its spectra is the monitor's question; a step already
        recorded (``last_step``, e.g. by a resumed run) owes nothing.
        """
        if step == last_step:
            return False
        if step % self.every == 0 and self.owed is None:
            self.owed = step
        return self.owed is not None

    def stats_due(self, step: int, last_step: int | None) -> bool:
        """Whether step ``step`` is a cadence step for the statistics, which never wait."""
        return self.stats and step % self.every == 0 and step != last_step

    def queues(self, step: int) -> bool:
        """Whether to queue step ``step``'s batch: owed, or due within ``queue_steps`` steps."""
        ahead = (-step) % self.every  # steps to the next cadence step
        return bool(self.queue_steps) and (self.owed is not None or ahead <= self.queue_steps)

    def queue_batch(self, batch: Any) -> None:
        """Queue ``batch``'s features after this step's backward (or at the batch's end)."""
        self.queuing = batch

    def take_queuing(self) -> Any:
        """The batch to queue now (None if none), no longer queuing."""
        batch, self.queuing = self.queuing, None
        return batch

    def enqueue(self, Z: Tensor, H: Tensor) -> None:
        """Keep a queued batch's pooled features Z (M, d) and outputs H (M, p)."""
        self.queue.append((Z, H))

    def history(self) -> list[tuple[Tensor, Tensor]]:
        """The queued (Z, H) that join the next record's statistics (none with the queue off)."""
        return list(self.queue) if self.queue_steps else []

    def hold_for_final(self, batch: Any) -> None:
        """Keep ``batch`` (a CPU copy) for the final record."""
        self.final_batch = batch

    def begin(self, step: int, batch: Any, full: bool) -> None:
        """Let step ``step``'s measurement wait for the step's backward."""
        self.pending = Pending(step, batch, full)

    def take_pending(self) -> Pending | None:
        """The measurement waiting for this step (None if none), no longer pending."""
        pending, self.pending = self.pending, None
        return pending

    def take_final(self, step: int, last_step: int | None) -> Any:
        """The held batch for the final record at step ``step``; None if none or recorded."""
        if self.final_batch is None or step == last_step:
            return None
        batch, self.final_batch = self.final_batch, None
        return batch

    def deferred(self, step: int, *, full: bool, final: bool) -> int:
        """Steps a full, not final, record at step ``step`` was deferred by to keep the budget."""
        return 0 if self.owed is None or final or not full else step - self.owed

    def taken(self, *, full: bool, final: bool) -> None:
        """A record was taken: a full or final one settles what was owed."""
        if full or final:
            self.owed = None
