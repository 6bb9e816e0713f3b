"""Tests of solo_geometry.runtime.schedule.MonitorState, the monitor's state between its hooks.

The transitions are driven as the monitor's hooks drive them and compared with a reference
written from the contract in docs/design.md section 4 (a cadence step is owed until a full or
final record is taken; the statistics never wait; a batch is queued within ``stats.queue`` steps
of a due step, or while one is owed).
"""

from __future__ import annotations

import pytest
import torch

from solo_geometry.runtime.schedule import MonitorState, Pending


def _reference(every: int, steps: int, fits: list[bool]) -> list[tuple[int, bool, int]]:
    """(step, full, deferred by) of every record a budget ``fits[step]`` lets through."""
    out, since = [], None
    for step in range(steps):
        if step % every == 0 and since is None:
            since = step
        if since is not None and fits[step]:
            out.append((step, True, step - since))
            since = None
        elif step % every == 0:  # the statistics alone, the rest still owed
            out.append((step, False, 0))
    return out


def _drive(state: MonitorState, steps: int, fits: list[bool]) -> list[tuple[int, bool, int]]:
    """The monitor's on_train_batch_start / _record sequence on ``state``."""
    out = []
    for step in range(steps):
        full = state.due(step, None) and fits[step]
        if not full and not state.stats_due(step, None):
            continue
        state.begin(step, f"batch {step}", full)
        pending = state.take_pending()
        assert pending == Pending(step, f"batch {step}", full)
        out.append((step, full, state.deferred(step, full=full, final=False)))
        state.taken(full=full, final=False)
    return out


class TestOwed:
    @pytest.mark.parametrize("every", [1, 3, 4])
    def test_owed_until_a_full_record_as_the_reference(self, every: int) -> None:
        gen = torch.Generator().manual_seed(every)
        fits = (torch.rand(40, generator=gen) < 0.4).tolist()
        got = _drive(MonitorState(every), 40, fits)
        assert got == _reference(every, 40, fits)
        assert any(d > 0 for _, _, d in got)  # some record came late, and says by how much

    def test_cadence_marks_owed_and_a_recorded_step_owes_nothing(self) -> None:
        state = MonitorState(every=3)
        assert not state.due(1, None) and state.owed is None
        assert state.due(3, None) and state.owed == 3
        assert state.due(4, None) and state.owed == 3  # still owed since step 3
        assert not state.due(4, last_step=4)  # a resumed run's last step
        assert state.due(6, None) and state.owed == 3  # a later cadence step keeps the first
        assert state.deferred(6, full=True, final=False) == 3
        assert state.deferred(6, full=False, final=False) == 0
        assert state.deferred(6, full=True, final=True) == 0

    def test_statistics_alone_keep_it_owed_a_final_record_settles_it(self) -> None:
        state = MonitorState(every=2)
        state.due(2, None)
        state.taken(full=False, final=False)
        assert state.owed == 2
        state.taken(full=False, final=True)
        assert state.owed is None

    def test_stats_due_on_the_cadence_only_when_on(self) -> None:
        state = MonitorState(every=2)
        assert [s for s in range(7) if state.stats_due(s, last_step=4)] == [0, 2, 6]
        assert not any(MonitorState(2, stats=False).stats_due(s, None) for s in range(7))


class TestQueue:
    def test_queues_within_queue_steps_of_a_cadence_step_or_while_owed(self) -> None:
        state = MonitorState(every=5, queue_steps=2)
        assert [s for s in range(11) if state.queues(s)] == [0, 3, 4, 5, 8, 9, 10]
        state.due(5, None)
        assert all(state.queues(s) for s in range(6, 9))  # owed since 5: every batch counts
        assert not any(MonitorState(every=5).queues(s) for s in range(11))

    def test_queue_keeps_the_last_batches_history_off_without_it(self) -> None:
        state = MonitorState(every=5, queue_steps=2)
        for i in range(3):
            state.queue_batch(f"batch {i}")
            assert state.take_queuing() == f"batch {i}" and state.take_queuing() is None
            state.enqueue(torch.full((2, 3), float(i)), torch.full((2, 1), float(i)))
        assert [float(z[0, 0]) for z, _ in state.history()] == [1.0, 2.0]
        off = MonitorState(every=5)
        off.enqueue(torch.zeros(2, 3), torch.zeros(2, 1))
        assert off.history() == []


class TestPendingAndFinal:
    def test_pending_is_taken_once(self) -> None:
        state = MonitorState(every=2)
        assert state.take_pending() is None
        state.begin(4, "batch", full=False)
        assert state.take_pending() == Pending(4, "batch", False)
        assert state.take_pending() is None

    def test_final_batch_is_the_last_kept_and_not_a_recorded_step(self) -> None:
        state = MonitorState(every=2)
        assert state.take_final(5, None) is None  # nothing kept yet
        state.hold_for_final("batch 2")
        state.hold_for_final("batch 4")
        assert state.take_final(4, last_step=4) is None  # step 4 already recorded
        assert state.take_final(5, last_step=4) == "batch 4"
        assert state.take_final(5, last_step=4) is None  # taken
