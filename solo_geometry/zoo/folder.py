"""Writing a run as a zoo card folder, and reading its model back (``zoo card``).

See :mod:`solo_geometry.zoo.card` for the folder's files. Nothing is left half-written: the
folder is assembled in a temporary sibling and renamed into place; an existing ``--out`` is an
error unless it is empty.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors.torch import save_file

from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.inputs.digits import DIGITS_MARKER, make_digits
from solo_geometry.models.checkpoint import (
    LoadedModel,
    build_from_config,
    load_model,
    load_prefixed,
    read_checkpoint,
    read_recipe,
)
from solo_geometry.zoo.card import (
    CARD_FILES,
    METHOD_PAPERS,
    TOLERANCES,
    ZooCard,
    file_sha256,
    provenance,
    render_readme,
    tree_sha256,
)
from solo_geometry.zoo.measurements import MeasureSettings, check_data, measure_model

__all__ = ["digits_data", "head_name", "load_card_model", "write_card"]


def head_name(cfg: dict[str, Any]) -> str:
    """``projector`` or ``<geometry head>-<activation>`` of a resolved recipe."""
    head = ((cfg.get("geometry") or {}).get("head") or {}) if cfg.get("geometry") else {}
    name = str(head.get("name", "projector"))
    return name if name in ("projector", "metric_linear") else f"{name}-{head.get('activation')}"


def digits_data(root: Path, size: int) -> Path:
    """The embedded digits data set written under ``root`` (as ``solo-geometry data digits``)."""
    return make_digits(root / "digits", size=size)


def _data_record(data: Path) -> dict[str, Any]:
    """How the data was made: the embedded digits (regenerable) or a folder, with its hash."""
    digest = tree_sha256(data)
    marker = data / DIGITS_MARKER
    if marker.is_file():  # written by make_digits: regenerate at its size and compare
        size = int(json.loads(marker.read_text()).get("size", 32))
        with tempfile.TemporaryDirectory() as tmp:
            if tree_sha256(digits_data(Path(tmp), size)) == digest:
                return {"kind": "digits", "size": size, "sha256": digest}
    return {"kind": "folder", "path": str(data.resolve()), "sha256": digest}


def _final_record(run: RunFolder) -> dict[str, Any] | None:
    if not run.geometry.is_file():
        return None
    records = run.records(ok_only=True)
    return dataclasses.asdict(records[-1]) if records else None


def _host(run: RunFolder) -> str:
    return "solo" if any(run.checkpoints.rglob("args.json")) else "lightly"


def _write_folder(tmp: Path, model: LoadedModel, cfg: dict[str, Any], run: RunFolder) -> None:
    state = {f"backbone.{k}": v for k, v in model.backbone.state_dict().items()}
    state |= {f"projector.{k}": v for k, v in model.head.state_dict().items()}
    save_file(
        {k: v.contiguous() for k, v in state.items()},
        str(tmp / CARD_FILES["weights"]),
        metadata={"format": "pt", "layout": "solo-learn"},
    )
    recipe = run.config if run.config.is_file() else None
    text = recipe.read_text() if recipe else yaml.safe_dump(cfg, sort_keys=False)
    (tmp / CARD_FILES["recipe"]).write_text(text)


def write_card(
    run_dir: str | Path,
    out: str | Path,
    *,
    data: str | Path | None = None,
    settings: MeasureSettings | None = None,
    name: str | None = None,
    progress: bool = False,
) -> ZooCard:
    """Write ``out`` as a Hugging Face Hub folder for a finished run.

    Args:
        run_dir: the run folder (its newest checkpoint, ``config.yaml``, ``geometry.jsonl``).
        out: destination folder; must not exist or be empty.
        data: labelled image folder for the evaluation; None: the embedded digits.
        settings: measurement settings (default :class:`MeasureSettings`).
        name: entry name; default ``<method>-<dataset>-<head>``.
        progress: progress bars.

    Returns:
        The card written to ``geometry.json``.

    Raises:
        ValueError: bad run folder, checkpoint, data or a non-empty ``out``.
    """
    out, run = Path(out), RunFolder(Path(run_dir))
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--out {str(out)!r} exists and is not an empty folder")
    settings = settings or MeasureSettings()
    if data is not None:
        check_data(Path(data), settings)
    model = load_model(run.path)
    cfg = read_recipe(run.config) if run.config.is_file() else {}
    record = _final_record(run)  # an unreadable geometry.jsonl is refused before any work
    if settings.threads is None:  # recorded: verification measures with the same count
        settings = dataclasses.replace(settings, threads=torch.get_num_threads())
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(data) if data is not None else digits_data(Path(scratch), 32)
            results = measure_model(
                model.backbone,
                model.head,
                folder,
                settings,
                mean_std=model.mean_std,
                progress=progress,
            )
            data_record = _data_record(folder)
        _write_folder(tmp, model, cfg, run)
        card = _card(cfg, model, run, tmp, (data_record, record), settings, results, name)
        (tmp / CARD_FILES["geometry"]).write_text(card.to_json())
        (tmp / CARD_FILES["readme"]).write_text(render_readme(card))
        tmp.chmod(0o755)  # mkdtemp makes it private
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return card


def _card(
    cfg: dict[str, Any],
    model: LoadedModel,
    run: RunFolder,
    tmp: Path,
    records: tuple[dict[str, Any], dict[str, Any] | None],
    settings: MeasureSettings,
    results: dict[str, Any],
    name: str | None,
) -> ZooCard:
    data, training_record = records
    method = str(cfg.get("method"))
    dataset = "digits" if data["kind"] == "digits" else str((cfg.get("data") or {}).get("dataset"))
    head = head_name(cfg)
    recipe_sha = file_sha256(tmp / CARD_FILES["recipe"])
    return ZooCard(
        name=name or f"{method}-{dataset}-{head}",
        method=method,
        backbone=str((cfg.get("backbone") or {}).get("name")),
        head=head,
        dataset=dataset,
        epochs=int(cfg.get("max_epochs") or 0),
        license="mit",  # the package's license, as the Hub spells it
        papers=[METHOD_PAPERS[method]] if method in METHOD_PAPERS else [],
        files={"weights": file_sha256(tmp / CARD_FILES["weights"]), "recipe": recipe_sha},
        data=data,
        mean_std=[list(map(float, m)) for m in model.mean_std],
        provenance=provenance(recipe_sha, cfg.get("seed"), _host(run)),
        training_record=training_record,
        settings=settings.to_dict(),
        measurements=results,
        tolerances={k: list(v) for k, v in TOLERANCES.items()},
    )


def load_card_model(folder: str | Path) -> LoadedModel:
    """Backbone and head of a card folder, rebuilt from ``recipe.yaml`` and loaded strictly.

    Args:
        folder: the card folder (``recipe.yaml`` and ``model.safetensors``).

    Returns:
        The model in eval mode on CPU, with the recipe's normalisation.

    Raises:
        ValueError: missing files, a recipe that is not a plain YAML mapping (or a node of the
            wrong type), or weights that do not match the recipe's modules.
    """
    folder = Path(folder)
    recipe, weights = folder / CARD_FILES["recipe"], folder / CARD_FILES["weights"]
    if not recipe.is_file():
        raise ValueError(f"{folder}: no {CARD_FILES['recipe']}; is it a zoo card folder?")
    backbone, head, mean_std, notes = build_from_config(read_recipe(recipe))
    load_prefixed(backbone, head, read_checkpoint(weights))
    return LoadedModel(backbone.eval(), head.eval(), weights, folder, mean_std, notes)
