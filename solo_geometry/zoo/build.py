"""The digits zoo: its entries, building them reproducibly, and listing cards.

Every entry is the digits recipe of a supported method (``zoo/recipes/digits/<method>.yaml``,
package data) trained twice: with the recipe's own projector and with the smooth head
(``geometry.head.name=smooth_mlp``, swish). :func:`build_zoo` pretrains each with
``solo-geometry pretrain`` (solo-learn when importable, the lightly host otherwise) at a fixed
seed, writes its card folder and verifies it before moving on; an entry that fails verification
stops the build with the fields named. ``--quick`` shrinks training and measurements for CI.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from solo_geometry.config import MlpProbeConfig, OrbitsConfig, ProbesConfig
from solo_geometry.hosts.pretrain import pretrain
from solo_geometry.inputs.digits import make_digits
from solo_geometry.zoo.card import CARD_FILES, ZooCard
from solo_geometry.zoo.folder import write_card
from solo_geometry.zoo.measurements import MeasureSettings
from solo_geometry.zoo.verify import verify_card

__all__ = [
    "FULL",
    "HEAD_VARIANTS",
    "METHODS",
    "QUICK",
    "RECIPES",
    "BuildSize",
    "Entry",
    "build_zoo",
    "entries",
    "format_cards",
    "read_cards",
]

RECIPES = Path(str(files("solo_geometry") / "recipes" / "digits"))
METHODS = ("simclr", "byol", "vicreg", "barlow_twins")  # every method the lightly host runs too
HEAD_VARIANTS: dict[str, tuple[str, ...]] = {
    "projector": (),
    "smooth_mlp-swish": ("geometry.head.name=smooth_mlp", "geometry.head.activation=swish"),
}


@dataclass(frozen=True)
class BuildSize:
    """Sizes of a zoo build (the rest comes from the recipes)."""

    max_epochs: int
    limit_train_batches: int
    batch_size: int
    max_samples: int  # Hessian sub-block samples per measurement
    lanczos_max_steps: int
    augment_samples: int
    settings: MeasureSettings


_FULL_PROBES = ProbesConfig(
    targets=["class", "rotation"],
    mlp=MlpProbeConfig(max_epochs=30),
    orbits=OrbitsConfig(families=["rotation", "brightness"], images=16, k=6),
)
_QUICK_PROBES = ProbesConfig(
    targets=["class"],
    mlp=MlpProbeConfig(max_epochs=10),
    orbits=OrbitsConfig(families=["rotation"], images=8, k=4),
)
# 1 epoch of 12 steps of 32 images per entry; geometry measured before the first step and at
# the end of fit (every_n_steps beyond the run), validation off: sized for 2 shared cores (about
# 10 minutes an entry there, training, measurements, card and verification).
FULL = BuildSize(
    1,
    12,
    32,
    4,
    30,
    4,
    MeasureSettings(probes=dataclasses.asdict(_FULL_PROBES), stats_images=256, rho_images=16),
)
QUICK = BuildSize(
    1,
    2,
    16,
    4,
    20,
    2,
    MeasureSettings(
        probes=dataclasses.asdict(_QUICK_PROBES),
        stats_images=64,
        rho_images=8,
        rho_families=("brightness",),
    ),
)


@dataclass(frozen=True)
class Entry:
    """One zoo entry: a recipe and its head variant."""

    method: str
    head: str

    @property
    def name(self) -> str:
        """``<method>-digits-<head>``."""
        return f"{self.method}-digits-{self.head}"

    @property
    def recipe(self) -> Path:
        """The digits recipe of the method."""
        return RECIPES / f"{self.method}.yaml"

    def overrides(self, data: Path, size: BuildSize, seed: int) -> list[str]:
        """Hydra overrides of this entry's pretraining run."""
        return [
            f"data.train_path={(data / 'train').resolve()}",
            f"data.val_path={(data / 'val').resolve()}",
            "data.num_workers=0",
            f"++seed={seed}",
            f"max_epochs={size.max_epochs}",
            f"++limit_train_batches={size.limit_train_batches}",
            "++limit_val_batches=0",
            f"optimizer.batch_size={size.batch_size}",
            "+geometry=on",
            *HEAD_VARIANTS[self.head],
            "geometry.every_n_steps=100000",
            f"geometry.spectrum.max_samples={size.max_samples}",
            f"geometry.spectrum.max_steps={size.lanczos_max_steps}",
            f"geometry.measure.augment_samples={size.augment_samples}",
            "geometry.probes.enabled=false",  # the card measures probes itself
        ]


def entries(only: list[str] | None = None) -> list[Entry]:
    """The zoo's entries, optionally only those named.

    Raises:
        ValueError: for a name that is not an entry (the message lists them).
    """
    every = [Entry(m, h) for m in METHODS for h in HEAD_VARIANTS]  # both heads of a method in turn
    if not only:
        return every
    names = {e.name: e for e in every}
    bad = [n for n in only if n not in names]
    if bad:
        raise ValueError(f"unknown zoo entries {bad}; choose from {sorted(names)}")
    return [names[n] for n in only]


def build_zoo(
    out: str | Path,
    *,
    quick: bool = False,
    only: list[str] | None = None,
    host: str = "auto",
    seed: int = 5,
) -> list[ZooCard]:
    """Pretrain, card and verify every entry under ``out`` (``data/``, ``runs/``, ``cards/``).

    Args:
        out: the build folder; ``cards/<entry>/`` must not exist yet.
        quick: :data:`QUICK` sizes (CI) instead of :data:`FULL`.
        only: entry names to build (default: all).
        host: ``auto``, ``solo`` or ``lightly``.
        seed: the runs' seed.

    Returns:
        The verified cards.

    Raises:
        ValueError: an unknown entry, an existing card folder, or a card that fails
            verification (the fields named).
    """
    todo, size, out = entries(only), QUICK if quick else FULL, Path(out)
    for entry in todo:
        if (out / "cards" / entry.name).exists():
            raise ValueError(f"card folder {out / 'cards' / entry.name} exists already")
    data = make_digits(out / "data" / "digits", size=32)
    cards = []
    for i, entry in enumerate(todo, 1):
        print(f"[zoo {i}/{len(todo)}] {entry.name}: pretraining", flush=True)
        _, run = pretrain(
            entry.recipe, entry.overrides(data, size, seed), host=host, runs_root=out / "runs"
        )
        print(f"[zoo {i}/{len(todo)}] {entry.name}: card and verification", flush=True)
        folder = out / "cards" / entry.name
        cards.append(write_card(run, folder, data=data, settings=size.settings, name=entry.name))
        bad = verify_card(folder, data=data)
        if bad:
            raise ValueError(f"{folder} fails verification: " + "; ".join(map(str, bad)))
        print(f"[zoo {i}/{len(todo)}] {entry.name}: verified, {folder}", flush=True)
    return cards


def read_cards(root: str | Path) -> list[ZooCard]:
    """Every ``<root>/*/geometry.json``, sorted by name.

    Raises:
        ValueError: if ``root`` is not a folder.
    """
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"zoo cards folder {str(root)!r} does not exist")
    return [ZooCard.read(p) for p in sorted(root.glob(f"*/{CARD_FILES['geometry']}"))]


def _acc(card: ZooCard, space: str, probe: str, target: str) -> str:
    for row in card.measurements["probes"]["rows"]:
        if (row["features"], row["probe"], row["target"]) == (space, probe, target):
            return _num(row["accuracy"], ".3f")
    return "n/a"


def _num(value: float | None, form: str) -> str:
    return "n/a" if value is None else format(value, form)


def format_cards(cards: list[ZooCard]) -> str:
    """The cards as a Markdown table (README's model zoo table is this output)."""
    head = (
        "| entry | method | head | epochs | linear Z | linear H | rotation Z | rotation H "
        "| eff. rank Z | eff. rank H | rho brightness |"
    )
    lines = [head, "|" + "---|" * 11]
    for c in cards:
        st, rho = c.measurements["stats"], c.measurements["rho"].get("brightness")
        lines.append(
            f"| {c.name} | {c.method} | {c.head} | {c.epochs} | {_acc(c, 'z', 'linear', 'class')} "
            f"| {_acc(c, 'h', 'linear', 'class')} | {_acc(c, 'z', 'linear', 'rotation')} | "
            f"{_acc(c, 'h', 'linear', 'rotation')} | {_num(st.get('z/rankme_l2'), '.2f')} | "
            f"{_num(st.get('h/rankme_l2'), '.2f')} | {_num(rho, '.3g')} |"
        )
    return "\n".join(lines)
