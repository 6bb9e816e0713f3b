"""What a collapse sweep runs: the paper's grid, its scales and the protocol of each cell.

The authors' grid (experiments.py ``activations_to_test``) is 14 configurations: linear and GELU
without BatchNorm at the base lr; Swish and ReLU x BatchNorm on/off x 3 lrs, 3 seeds each. It is
not a factorial (their ``ProjectionHead`` builds no BatchNorm for "linear"), so a grid is a tuple
of factorial :class:`Block` s, each one Hydra multirun.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from solo_geometry.config.choices import NORM_LAYERS

__all__ = [
    "ALPHA",
    "BASE_LR",
    "CELL_ACTIVATIONS",
    "CELL_NORMS",
    "CPU",
    "FULL_GRID",
    "GRIDS",
    "LR_FACTORS",
    "LR_NAMES",
    "PAPER",
    "PAPER_GRID",
    "QUICK",
    "QUICK_GRID",
    "SCALES",
    "SEEDS",
    "Block",
    "Protocol",
    "cell_id",
    "lr_name",
    "paper_head",
    "protocol_of",
]

# The paper's heads (its names) -> the package's activations (config.choices' names; a test
# holds them among ACTIVATION_CHOICES).
CELL_ACTIVATIONS = {"linear": "identity", "relu": "relu", "gelu": "gelu", "swish": "swish"}
# The paper's norms, BatchNorm or none, as config.choices names them.
CELL_NORMS = tuple(name for name, layer in NORM_LAYERS.items() if layer in ("BatchNorm1d", None))
LR_NAMES = {0.1: "small", 1.0: "base", 10.0: "large"}  # factor of BASE_LR -> the paper's name
LR_FACTORS = tuple(LR_NAMES)  # the paper's rates 0.005, 0.05, 0.5
SEEDS = (0, 1, 2)
ALPHA = 0.1  # the paper's collapse_init_scale
BASE_LR = 0.05  # the recipe's effective rate (0.2 x 64 / 256), the paper's lr_collapse


def lr_name(lr: float, base_lr: float = BASE_LR) -> str:
    """``small``/``base``/``large`` for 0.1x/1x/10x ``base_lr``, else the rate itself."""
    for factor, name in LR_NAMES.items():
        if math.isclose(lr, factor * base_lr, rel_tol=1e-6):
            return name
    return f"{lr:g}"


def cell_id(head: str, norm: str, lr: float, seed: int) -> str:
    """A cell's name (its folder's and its record's), e.g. ``swish-bn-lr0.05-s0``."""
    return f"{head}-{norm}-lr{lr:g}-s{seed}"


def paper_head(activation: str, depth: int = 2, norm: str = "bn") -> list[str]:
    """The paper's projection head as ``geometry.head`` overrides.

    Linear layers without biases, the activation between them and, with ``norm`` ``bn``,
    BatchNorm1d after each (the last included): experiments.py's ``ProjectionHead`` (depth 2)
    and head_depth_ablations.py's ``FlexibleProjectionHead`` (depth 1 is Linear + BatchNorm).
    Widths: the recipe's ``proj_hidden_dim`` and ``proj_output_dim``.
    """
    return [
        "geometry.head.name=smooth_mlp",
        f"geometry.head.activation={activation}",
        f"geometry.head.norm={norm}",
        "geometry.head.bias=false",
        f"geometry.head.out_norm={str(norm == 'bn').lower()}",
        f"geometry.head.depth={depth}",
    ]


@dataclass(frozen=True)
class Block:
    """A factorial block of the grid: every head x norm x lr factor in it."""

    heads: tuple[str, ...]
    norms: tuple[str, ...]
    lr_factors: tuple[float, ...]


PAPER_GRID = (  # the authors' 14 configurations (module docstring)
    Block(("linear", "gelu"), ("none",), (1.0,)),
    Block(("swish", "relu"), CELL_NORMS, LR_FACTORS),
)
FULL_GRID = (
    Block(tuple(CELL_ACTIVATIONS), CELL_NORMS, LR_FACTORS),
)  # --grid full: the whole factorial
QUICK_GRID = (
    Block(tuple(CELL_ACTIVATIONS), ("none",), (1.0,)),
)  # --quick: the four heads without BN
GRIDS = {"paper": PAPER_GRID, "full": FULL_GRID}


@dataclass(frozen=True)
class Protocol:
    """How long each cell trains, how often it is measured, its sizes, and the grid."""

    epochs: int
    steps_per_epoch: int
    batch_size: int
    every_n_steps: int
    seeds: tuple[int, ...]
    grid: tuple[Block, ...] = PAPER_GRID
    widths: tuple[int, int, int] = (512, 512, 128)  # projector hidden, output; predictor hidden
    crop_size: int = 32
    data: str = "digits"
    backbone: str = "resnet18"
    stem: str = "auto"  # backbone.stem (models.backbones.STEMS); "auto": the data set's

    def cells(self, base_lr: float = BASE_LR) -> list[tuple[str, str, float, int]]:
        """Every ``(head, norm, lr, seed)`` of the grid, in order."""
        return [
            (h, n, base_lr * f, s)
            for b in self.grid
            for h in b.heads
            for n in b.norms
            for f in b.lr_factors
            for s in self.seeds
        ]


# The scales and --quick, and why these sizes: docs/reproducing.md, "Collapse" ("Scales").
CPU = Protocol(
    epochs=34,
    steps_per_epoch=89,
    batch_size=16,
    every_n_steps=34 * 89,
    seeds=SEEDS,
    crop_size=8,
    backbone="resnet20",
)
QUICK = dataclasses.replace(CPU, epochs=26, every_n_steps=26 * 89, seeds=(0,), grid=QUICK_GRID)
PAPER = Protocol(  # the authors' setup, for a GPU
    epochs=50,
    steps_per_epoch=97,
    batch_size=512,
    every_n_steps=97 * 10,
    seeds=SEEDS,
    widths=(2048, 2048, 512),
    crop_size=32,
    data="cifar10",
    stem="cifar_paper",
)
SCALES = {"cpu": CPU, "paper": PAPER}


def protocol_of(quick: bool, scale: str, grid: str) -> Protocol:
    """The protocol of ``--quick``, ``--scale`` and ``--grid``.

    Raises:
        ValueError: on an unknown scale or grid.
    """
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; choose from {sorted(SCALES)}")
    if grid not in GRIDS:
        raise ValueError(f"unknown grid {grid!r}; choose from {sorted(GRIDS)}")
    if quick:
        if scale == "cpu":
            return QUICK
        return dataclasses.replace(SCALES[scale], seeds=(0,), grid=QUICK_GRID)
    return dataclasses.replace(SCALES[scale], grid=GRIDS[grid])
