"""A record's metrics are the registry's: every key :func:`measure` writes is in METRICS."""

from __future__ import annotations

import torch
from test_precision import _cfg, _measured, _modules, _view

from solo_geometry.geometry.metrics import METRICS, unregistered
from solo_geometry.models.heads import build_head


class TestRegisteredKeys:
    def test_every_part_of_a_record(self) -> None:
        backbone, head = _modules(torch.float32)
        result = _measured(_view(backbone, head, torch.float32), _cfg(), density=False)
        assert result.parts == ["stats", "hessian", "augment"] and not result.failed
        assert unregistered(result.metrics) == []
        for part in ("stats", "head"):  # these parts record every entry of theirs
            want = {k for m in METRICS.values() if m.measured_with == part for k in m.keys()}
            want -= {k for k in want if k.startswith("metric/")}  # a metric-linear head's
            assert want <= set(result.metrics), sorted(want - set(result.metrics))

    def test_a_metric_linear_head(self) -> None:
        backbone, _ = _modules(torch.float32)
        head = build_head("metric_linear", 4, 4)
        result = _measured(_view(backbone, head, torch.float32), _cfg(hessian=False), density=False)
        assert unregistered(result.metrics) == [] and "metric/effective_rank" in result.metrics
