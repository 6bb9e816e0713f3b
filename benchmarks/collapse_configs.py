"""The runs of benchmarks/collapse_detection.py: digits configurations known to collapse or not.

Each is a recipe of ``solo_geometry/recipes/digits`` and Hydra overrides, run through
``solo-geometry pretrain --host lightly``, with its citation and a one-line reason. ``expect``
is the literature's expectation only: the benchmark's labels come from
:mod:`benchmarks.collapse_labels`, never from this field.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CONFIGS", "QUICK", "Config"]

PSEUDO = [
    "geometry.head.name=smooth_mlp",
    "geometry.head.norm=none",
    "geometry.head.out_norm=false",
    "geometry.predictor.name=smooth_mlp",
    "geometry.init.pseudo_collapse=true",
    "optimizer.lr=2.0",
]
PAPER = (
    "the paper (docs/reproducing.md, Collapse): heads without BatchNorm from the collapsed start"
)


@dataclass(frozen=True)
class Config:
    """One benchmark run: a digits recipe, its overrides, and why it is here."""

    name: str
    recipe: str
    overrides: tuple[str, ...]
    expect: str  # "collapse" or "healthy": the literature's, not the label
    citation: str
    reason: str


CONFIGS = (
    Config(
        "simsiam_no_predictor",
        "simsiam",
        ("geometry.predictor.name=identity",),
        "collapse",
        "Chen and He 2021, arXiv 2011.10566, Table 1",
        "without the predictor SimSiam's output collapses (0.1% accuracy)",
    ),
    Config(
        "byol_no_predictor",
        "byol",
        ("geometry.predictor.name=identity",),
        "collapse",
        "Grill et al. 2020, arXiv 2006.07733, Table 5(b)",
        "BYOL without its predictor collapses even with the moving average (0.2%)",
    ),
    Config(
        "byol_no_predictor_no_ema",
        "byol",
        ("geometry.predictor.name=identity", "momentum.base_tau=0.0", "momentum.final_tau=0.0"),
        "collapse",
        "Grill et al. 2020, arXiv 2006.07733, Table 5(a)",
        "tau = 0 (target = online network) and no predictor: the trivial solution",
    ),
    Config(
        "simsiam_relu_nobn_pseudo_lr10x",
        "simsiam",
        (*PSEUDO, "geometry.head.activation=relu", "geometry.predictor.activation=relu"),
        "collapse",
        PAPER,
        "a ReLU head without BN from the pseudo-collapsed start at 10x lr stays collapsed",
    ),
    Config(
        "simsiam_linear_nobn_pseudo_lr10x",
        "simsiam",
        (*PSEUDO, "geometry.head.activation=identity", "geometry.predictor.activation=identity"),
        "collapse",
        PAPER,
        "a linear head (M = 0) has no curvature to leave the collapsed start by",
    ),
    Config(
        "simclr_strong_aug_wd",
        "simclr",
        ("optimizer.weight_decay=0.05", "optimizer.lr=1.0"),
        "collapse",
        "Jing et al. 2022, arXiv 2110.09348, sections 3-4",
        "strong augmentation with (implicit or explicit) regularisation collapses dimensions",
    ),
    Config(
        "simsiam_width2",
        "simsiam",
        ("method_kwargs.proj_output_dim=2",),
        "collapse",
        "Chen and He 2021, arXiv 2011.10566, section 4.5 (output width)",
        "a 2-wide projector output can hold at most 2 dimensions",
    ),
    Config(
        "byol_width1",
        "byol",
        ("method_kwargs.proj_output_dim=1",),
        "collapse",
        "Grill et al. 2020, arXiv 2006.07733 (projection width ablation, Table 14)",
        "a 1-wide projector output: the cosine loss is met by a constant sign",
    ),
    Config(
        "simsiam_lr50x",
        "simsiam",
        ("optimizer.lr=10.0",),
        "collapse",
        "Chen and He 2021, arXiv 2011.10566 (lr 0.05 x batch/256 chosen); folklore",
        "a learning rate 50x the recipe's",
    ),
    *(
        Config(
            f"{recipe}_defaults",
            recipe,
            (),
            "healthy",
            "the recipe (solo_geometry/recipes/digits)",
            "each method at its digits defaults",
        )
        for recipe in ("barlow_twins", "byol", "simclr", "simclr_invariance", "simsiam", "vicreg")
    ),
    Config("byol_seed1", "byol", ("++seed=1",), "healthy", "the recipe", "BYOL defaults, seed 1"),
    Config(
        "simsiam_seed1",
        "simsiam",
        ("++seed=1",),
        "healthy",
        "the recipe",
        "SimSiam defaults, seed 1",
    ),
    # appended last: the halves of the runs above keep their positions
    Config(
        "simsiam_no_stop_gradient",
        "simsiam",
        ("++method_kwargs.stop_gradient=false",),
        "collapse",
        "Chen and He 2021, arXiv 2011.10566, Figure 2",
        "without the stop-gradient SimSiam's output collapses at once (std 0, accuracy 0.1%)",
    ),
)
QUICK = (
    "simsiam_no_predictor",
    "simsiam_relu_nobn_pseudo_lr10x",
    "byol_defaults",
    "simsiam_defaults",
)
