"""``zoo verify DIR``: recompute a card's numbers from its weights and compare.

Checks, each failure a :class:`Mismatch` naming the field:

* ``files/weights`` and ``files/recipe``: sha256 of ``model.safetensors`` and ``recipe.yaml``;
* ``data/sha256``: the evaluation data is the one the card was measured on (the embedded digits
  are regenerated when no ``--data`` is given);
* every measured field (:func:`solo_geometry.zoo.measurements.flatten`): recomputed from the
  reloaded weights with the recorded settings, within the card's tolerance for its prefix (a
  schema-1 card, from before the quality metrics, on the statistics it holds);
* ``README.md``: equal to the card ``geometry.json`` renders (an edited card is caught).

The run's training-time geometry record is provenance (a training batch that is not stored),
rendered into the README and so covered by the README check, but not recomputed.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

from solo_geometry.zoo.card import CARD_FILES, ZooCard, file_sha256, render_readme, tree_sha256
from solo_geometry.zoo.folder import digits_data, load_card_model
from solo_geometry.zoo.measurements import MeasureSettings, flatten, measure_model

__all__ = ["Mismatch", "compare", "verify_card"]


@dataclass(frozen=True)
class Mismatch:
    """One field outside its tolerance (or a file that differs).

    Attributes:
        field: the field's name.
        recorded: the card's value.
        recomputed: the value found now.
        tolerance: ``(abs, rel)``, None for exact checks.
    """

    field: str
    recorded: object
    recomputed: object
    tolerance: tuple[float, float] | None = None

    def __str__(self) -> str:
        tol = (
            ""
            if self.tolerance is None
            else f" (tolerance abs {self.tolerance[0]:g}, rel {self.tolerance[1]:g})"
        )
        return f"{self.field}: recorded {self.recorded!r}, recomputed {self.recomputed!r}{tol}"


def _tolerance(name: str, tolerances: dict[str, list[float]]) -> tuple[float, float]:
    for prefix, (atol, rtol) in tolerances.items():
        if name.startswith(prefix):
            return float(atol), float(rtol)
    return 0.0, 0.0


def compare(
    recorded: dict[str, float | None],
    recomputed: dict[str, float | None],
    tolerances: dict[str, list[float]],
) -> list[Mismatch]:
    """Fields whose recomputed value lies outside ``abs + rel * |recorded|`` of the record.

    A field present on one side only, or null on one side only, is a mismatch.
    """
    out = []
    for name in sorted(set(recorded) | set(recomputed)):
        a, b = recorded.get(name, "missing"), recomputed.get(name, "missing")
        tol = _tolerance(name, tolerances)
        if a is None and b is None:
            continue
        if not isinstance(a, float) or not isinstance(b, float):
            out.append(Mismatch(name, a, b, tol))
        elif not math.isclose(a, b, rel_tol=0.0, abs_tol=tol[0] + tol[1] * abs(a)):
            out.append(Mismatch(name, a, b, tol))
    return out


def verify_card(folder: str | Path, *, data: str | Path | None = None) -> list[Mismatch]:
    """Recompute a card folder's numbers and list every field outside its tolerance.

    Args:
        folder: the card folder.
        data: the evaluation data folder; None: regenerate the embedded digits when the card
            was measured on them.

    Returns:
        The mismatches (empty: verified).

    Raises:
        ValueError: the folder is not a card, or ``data`` is needed and missing.
    """
    folder = Path(folder)
    card = ZooCard.read(folder / CARD_FILES["geometry"])
    found: list[Mismatch] = []
    for key in ("weights", "recipe"):
        path = folder / CARD_FILES[key]
        now = file_sha256(path) if path.is_file() else "missing"
        if now != card.files.get(key):
            found.append(Mismatch(f"files/{key}", card.files.get(key), now))
    readme = folder / CARD_FILES["readme"]
    if not readme.is_file() or readme.read_bytes() != render_readme(card).encode():
        found.append(Mismatch("README.md", "rendered from geometry.json", "differs"))
    model = load_card_model(folder)
    settings = MeasureSettings(**card.settings)
    with tempfile.TemporaryDirectory() as tmp:
        if data is None:
            if card.data.get("kind") != "digits":
                raise ValueError(f"{folder}: measured on {card.data.get('path')}; pass --data")
            data = digits_data(Path(tmp), int(card.data["size"]))
        digest = tree_sha256(Path(data))
        if digest != card.data.get("sha256"):
            found.append(Mismatch("data/sha256", card.data.get("sha256"), digest))
        results = measure_model(
            model.backbone,
            model.head,
            data,
            settings,
            mean_std=tuple(card.mean_std),  # type: ignore[arg-type]
        )
    recorded, recomputed = flatten(card.measurements), flatten(results)
    if card.schema == 1:  # a card from before the quality metrics: the statistics it holds
        recomputed = {
            k: v for k, v in recomputed.items() if not k.startswith("stats/") or k in recorded
        }
    return found + compare(recorded, recomputed, card.tolerances)
