"""Zoo cards: a run as a Hugging Face Hub folder with its geometry (``zoo card RUN --out DIR``).

The folder holds

* ``model.safetensors``: backbone (``backbone.*``) and head (``projector.*``), as solo-learn
  names them, so :func:`solo_geometry.models.checkpoint.load_prefixed` reads them back strictly;
* ``recipe.yaml``: the run's resolved recipe;
* ``geometry.json``: a :class:`ZooCard` (schema version 2): identity, provenance, the run's final
  geometry record, the measurement settings, the measured probe and orbit tables, statistics
  (a record's ``stats`` part, quality metrics included) and rho_aug, and the tolerance of every
  field; version 1 (no quality metrics, ``<p>/effective_rank`` for ``<p>/rankme_l2``) is still
  read, its keys renamed, and verified on the fields it holds;
* ``README.md``: the model card, rendered from ``geometry.json`` alone (YAML front matter with
  license, library_name, tags, datasets, metrics and model-index; sections Model, Intended use
  and limitations, Training recipe, Evaluation, Geometry), so ``zoo verify`` can re-render it
  and catch an edited card.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
import yaml

from solo_geometry import __version__
from solo_geometry.folder.records import RecordsError, renamed_metrics
from solo_geometry.folder.safe_files import MAX_JSON_BYTES, read_bytes
from solo_geometry.zoo.card_schema import check_card

__all__ = [
    "CARD_FILES",
    "CARD_SCHEMA",
    "METHOD_PAPERS",
    "TOLERANCES",
    "ZooCard",
    "file_sha256",
    "provenance",
    "render_readme",
    "tree_sha256",
]

CARD_SCHEMA = 2
READABLE_CARD_SCHEMAS = (1, 2)  # 1: before the quality metrics and ``rankme_l2``
CARD_FILES = {
    "readme": "README.md",
    "weights": "model.safetensors",
    "recipe": "recipe.yaml",
    "geometry": "geometry.json",
}
# Field-name prefix -> (absolute, relative) tolerance of a recomputed value: |a - b| <= abs +
# rel * |b|. Probe accuracies: 1% of the held-out split (L-BFGS and Adam differ across BLAS
# builds by a sample or two); statistics, orbits and rho: float32 round-off across machines.
TOLERANCES: dict[str, tuple[float, float]] = {
    "probe/": (0.01, 0.0),
    "stats/": (1e-6, 1e-3),
    "orbit/": (1e-6, 1e-3),
    "rho/": (1e-6, 1e-2),
}
# arXiv ids of the methods (the card's ``papers``).
METHOD_PAPERS = {
    "simclr": "2002.05709",
    "byol": "2006.07733",
    "vicreg": "2105.04906",
    "barlow_twins": "2103.03230",
}


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_sha256(root: Path) -> str:
    """Hex sha256 over a folder's files: relative path and content, in sorted order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(root).rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(file_sha256(path).encode())
    return digest.hexdigest()


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _commit() -> str | None:
    """The git commit of this package's source tree, None when it is not a checkout."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def provenance(recipe_sha256: str, seed: int | None, host: str | None) -> dict[str, Any]:
    """Package version and commit, recipe hash, seed and library versions of this machine."""
    return {
        "solo_geometry": __version__,
        "commit": _commit(),
        "recipe_sha256": recipe_sha256,
        "seed": seed,
        "host": host,
        "torch": torch.__version__,
        "lightning": _version("lightning"),
        "solo_learn": _version("solo-learn"),
        "lightly": _version("lightly"),
        "python": platform.python_version(),
    }


@dataclass(frozen=True)
class ZooCard:
    """``geometry.json``: one zoo entry, the schema ``zoo verify`` checks against.

    Attributes:
        name: entry name, e.g. ``simclr-digits-projector``.
        method: solo-learn method name.
        backbone: backbone name.
        head: ``projector`` (the recipe's own) or the geometry head's name and activation.
        dataset: training data set name.
        epochs: training epochs.
        license: SPDX id of the weights' license.
        papers: arXiv ids of the method and of the geometry measured.
        files: sha256 of ``model.safetensors`` and ``recipe.yaml``.
        data: how the evaluation data was made (``kind``, ``size``) and its tree sha256.
        mean_std: input normalisation.
        provenance: see :func:`provenance`.
        training_record: the run's final ok geometry record (``geometry.jsonl``), as written.
        settings: :class:`~solo_geometry.zoo.measurements.MeasureSettings` as a dict.
        measurements: what :func:`~solo_geometry.zoo.measurements.measure_model` returned.
        tolerances: field-name prefix -> [abs, rel].
        schema: :data:`CARD_SCHEMA`.
    """

    name: str
    method: str
    backbone: str
    head: str
    dataset: str
    epochs: int
    license: str
    papers: list[str]
    files: dict[str, str]
    data: dict[str, Any]
    mean_std: list[list[float]]
    provenance: dict[str, Any]
    training_record: dict[str, Any] | None
    settings: dict[str, Any]
    measurements: dict[str, Any]
    tolerances: dict[str, list[float]]
    schema: int = CARD_SCHEMA

    def to_json(self) -> str:
        """The JSON text written to ``geometry.json`` (NaN written as null)."""
        return json.dumps(_finite(dataclasses.asdict(self)), indent=2, sort_keys=True) + "\n"

    @classmethod
    def read(cls, path: Path) -> ZooCard:
        """Read ``geometry.json``.

        Raises:
            RecordsError: not JSON, an unknown schema version, unknown/missing fields, or a
                field of the wrong type or shape
                (:func:`~solo_geometry.zoo.card_schema.check_card`).
        """
        try:
            data = json.loads(read_bytes(path, MAX_JSON_BYTES, "zoo card").decode("utf-8"))
        except UnicodeDecodeError as err:
            raise RecordsError(
                f"{path}: cannot read a zoo card (not UTF-8 text at byte {err.start}); expected "
                f"the JSON file `zoo card` wrote"
            ) from None
        except (OSError, json.JSONDecodeError) as err:
            raise RecordsError(f"{path}: cannot read a zoo card ({err})") from err
        if not isinstance(data, dict) or data.get("schema") not in READABLE_CARD_SCHEMAS:
            got = data.get("schema") if isinstance(data, dict) else None
            raise RecordsError(
                f"{path}: zoo card schema {got!r} unknown (expected one of {READABLE_CARD_SCHEMAS})"
            )
        names = {f.name for f in dataclasses.fields(cls)}
        unknown, missing = sorted(set(data) - names), sorted(names - set(data) - {"schema"})
        if unknown or missing:
            raise RecordsError(f"{path}: unknown fields {unknown}, missing fields {missing}")
        try:
            check_card(data)
        except RecordsError as err:
            raise RecordsError(f"{path}: {err}; expected a card `zoo card` wrote") from None
        if data["schema"] == 1:  # today's names; the schema kept: verify compares its fields
            data["measurements"] = {
                **data["measurements"],
                "stats": renamed_metrics(data["measurements"]["stats"]),
            }
            record = data.get("training_record")
            if isinstance(record, dict) and isinstance(record.get("metrics"), dict):
                data["training_record"] = {**record, "metrics": renamed_metrics(record["metrics"])}
        return cls(**data)


def _finite(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, float) and value != value or value in (float("inf"), float("-inf")):
        return None
    return value


def _fmt(value: Any, form: str = "{:.4f}") -> str:
    return "n/a" if value is None else form.format(value)


def _probe_rows(card: ZooCard) -> list[dict[str, Any]]:
    return list(card.measurements["probes"]["rows"])


def _front_matter(card: ZooCard) -> str:
    results = []
    for row in _probe_rows(card):
        results.append(
            {
                "task": {
                    "type": "image-classification",
                    "name": f"{row['probe']} probe on {row['features'].upper()}, "
                    f"target {row['target']}",
                },
                "dataset": {"type": card.dataset, "name": f"{card.dataset} (held-out split)"},
                "metrics": [
                    {
                        "type": "accuracy",
                        "value": round(float(row["accuracy"]), 4),
                        "name": f"{row['features']}/{row['probe']}/{row['target']}",
                    }
                ],
            }
        )
    front = {
        "license": card.license,
        "library_name": "solo-geometry",
        "tags": [
            "self-supervised-learning",
            "solo-learn",
            "projection-head",
            "geometry",
            card.method,
            card.backbone,
            f"head-{card.head}",
        ],
        "datasets": [card.dataset],
        "metrics": ["accuracy"],
        "model-index": [{"name": card.name, "results": results}],
    }
    return "---\n" + yaml.safe_dump(front, sort_keys=False, width=100) + "---\n"


def _evaluation(card: ZooCard) -> list[str]:
    lines = ["| target | probe | backbone Z | head H | chance |", "|---|---|---|---|---|"]
    rows = {(r["features"], r["probe"], r["target"]): r for r in _probe_rows(card)}
    for _, probe, target in sorted(k for k in rows if k[0] == "z"):
        z, h = rows[("z", probe, target)], rows.get(("h", probe, target))
        lines.append(
            f"| {target} | {probe} | {_fmt(z['accuracy'])} | "
            f"{_fmt(h['accuracy'] if h else None)} | {_fmt(z['chance'])} |"
        )
    return lines


def _geometry(card: ZooCard) -> list[str]:
    st = card.measurements["stats"]
    lines = ["| statistic | backbone Z | head H |", "|---|---|---|"]
    for key in ("normalized_std", "rankme_l2", "rank", "cond"):
        lines.append(
            f"| {key} | {_fmt(st.get(f'z/{key}'), '{:.4g}')} | "
            f"{_fmt(st.get(f'h/{key}'), '{:.4g}')} |"
        )
    score = _fmt(st.get("whitening/score"), "{:.4g}")
    lines += [
        "",
        f"Whitening score cond_k(H)/cond_k(Z): {score}"
        f" (k = {_fmt(st.get('whitening/rank'), '{:.0f}')}).",
        "",
    ]
    rho = card.measurements["rho"]
    lines += ["| family | rho_aug (head metric along the tangent / random) |", "|---|---|"]
    lines += [f"| {fam} | {_fmt(v, '{:.4g}')} |" for fam, v in rho.items()]
    lines += [
        "",
        "| orbit family | spread Z | spread H | separation Z | separation H | compression |",
        "|---|---|---|---|---|---|",
    ]
    for row in card.measurements["probes"]["orbits"]:
        z, h = row["z"], row["h"]
        lines.append(
            f"| {row['family']} | {_fmt(z['spread'][0], '{:.3e}')} | "
            f"{_fmt(h['spread'][0], '{:.3e}')} | {_fmt(z['separation'][0], '{:.3f}')} | "
            f"{_fmt(h['separation'][0], '{:.3f}')} | "
            f"{_fmt(row['compression'], '{:.3f}')} |"
        )
    rec = card.training_record
    if rec:
        m = rec.get("metrics", {})
        lines += [
            "",
            f"Final training-time record (step {rec.get('step')}, whole batch of "
            f"{(rec.get('settings') or {}).get('n_batch')}): lambda_min(H_eff) "
            f"{_fmt(m.get('heff/lambda_min'), '{:+.3e}')}, lambda_min(M) "
            f"{_fmt(m.get('m/lambda_min'), '{:+.3e}')}, ||M||/||H_eff|| "
            f"{_fmt(m.get('interaction_ratio'), '{:.3e}')} (as the run wrote it; a "
            "training batch, not recomputed by `zoo verify`).",
        ]
    return lines


def render_readme(card: ZooCard) -> str:
    """The model card ``README.md``, a pure function of the :class:`ZooCard`."""
    p = card.provenance
    s = card.settings
    body = [
        f"# {card.name}",
        "",
        "## Model",
        "",
        f"A {card.backbone} backbone and its projection head ({card.head}) pretrained with "
        f"{card.method} on {card.dataset} for {card.epochs} epoch(s), with solo-geometry's "
        f"monitor on. `model.safetensors` holds both: `backbone.*` and `projector.*` (the head), "
        "as solo-learn names them.",
        "",
        "```python",
        "from solo_geometry.zoo import load_card_model",
        "model = load_card_model('.')   # backbone, head, normalisation; verified: "
        "solo-geometry zoo verify .",
        "```",
        "",
        "## Intended use and limitations",
        "",
        "A reference point for measuring projection-head geometry (probes on Z vs H, orbits, "
        "curvature, representation statistics) and for checking that a measurement pipeline "
        f"reproduces. Trained at CPU scale on {card.dataset} (32x32 renders of scikit-learn's "
        "8x8 digits): not a general-purpose feature extractor, not for deployment. Numbers are "
        "for this data and these settings only.",
        "",
        "## Training recipe",
        "",
        f"`recipe.yaml` (sha256 `{card.files['recipe']}`), seed {p.get('seed')}, host "
        f"{p.get('host')}; solo-geometry {p.get('solo_geometry')} (commit {p.get('commit')}), "
        f"torch {p.get('torch')}, lightning {p.get('lightning')}, solo-learn "
        f"{p.get('solo_learn')}, lightly {p.get('lightly')}.",
        "",
        "## Evaluation",
        "",
        f"Probes fitted on the train split and scored on the held-out split of {card.dataset} "
        f"(data sha256 `{card.data.get('sha256')}`), seed "
        f"{(s.get('probes') or {}).get('seed')}; linear: multinomial logistic regression "
        "(standardised, L2, L-BFGS), mlp: one hidden layer.",
        "",
        *_evaluation(card),
        "",
        "## Geometry",
        "",
        f"Representation statistics over {s.get('stats_images')} held-out images (rows "
        f"L2-normalised), rho_aug over {s.get('rho_images')} images, orbit table as docs/design.md "
        "section 3 defines it. `zoo verify` recomputes every number below within the "
        "tolerances of `geometry.json`.",
        "",
        *_geometry(card),
        "",
    ]
    return _front_matter(card) + "\n" + "\n".join(body)
