"""The collapse experiment: SimSiam from pseudo-collapse, heads x norms x learning rates x seeds.

* :mod:`.sweep`: the Hydra multirun and its summary;
* :mod:`.protocol`: the grid, its scales and the protocol of each cell;
* :mod:`.cell`: one cell (a pretrain with the monitor and the update-size callback);
* :mod:`.files`: the cells' records and the authors' released collapse files;
* :mod:`.verdicts` and :mod:`.summary`: the claims judged on the runs' numbers;
* :mod:`.mechanism`: whether lambda_min(M) at the start predicts the escape, over the cells;
* :mod:`.page`: the figures and ``index.html``.
"""

from __future__ import annotations

from solo_geometry.reproduce.collapse.cell import CellConfig, cell_overrides
from solo_geometry.reproduce.collapse.sweep import (
    DATA_CHOICES,
    cell_host,
    collapse_experiment,
    reproduce_collapse,
)

__all__ = [
    "DATA_CHOICES",
    "CellConfig",
    "cell_host",
    "cell_overrides",
    "collapse_experiment",
    "reproduce_collapse",
]
