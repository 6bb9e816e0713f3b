"""The collapse runs read from files: ours and the authors'.

Our ``summary.json``, the authors' released ``collapse_results.npy`` or their curves as JSON
(``tests/fixtures/collapse_authors.json``) become runs, :class:`~.result.CollapseRow` s
judged by :func:`~.verdicts.judge`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from solo_geometry.folder.safe_files import MAX_JSON_BYTES, read_bytes
from solo_geometry.inputs.npfiles import load_arrays
from solo_geometry.reproduce.collapse.protocol import BASE_LR, LR_NAMES, cell_id, lr_name
from solo_geometry.reproduce.collapse.result import CollapseRow, CollapseSummary, read_summary
from solo_geometry.reproduce.collapse.verdicts import ESCAPE_FACTOR, judge
from solo_geometry.reproduce.results import Verdict

__all__ = [
    "AUTHORS_SETUP",
    "authors_runs",
    "load_runs",
    "summary_runs",
    "verdicts_of_file",
]

# The authors' setup (experiments.py ExperimentConfig): batch 512 in two views, 2048-wide
# projector outputs, 50,000 CIFAR training images with drop_last: 97 steps per epoch.
AUTHORS_SETUP = {"rows": 2 * 512, "dim": 2048, "steps_per_epoch": 50_000 // 512}
# Their keys: CIFAR-10's "<act>_bn_<True|False>_lr_<base|large|small>", CIFAR-100's "<act>"
# (no BN, base lr).
_FACTORS = {name: factor for factor, name in LR_NAMES.items()}  # their lr names, as our factors
_AUTHORS_KEY = re.compile(r"^(linear|relu|gelu|swish)(?:_bn_(True|False)_lr_(small|base|large))?$")


def authors_runs(
    results: Mapping[str, Any],
    *,
    dataset: str,
    backbone: str,
    setup: Mapping[str, int] = AUTHORS_SETUP,
) -> list[CollapseRow]:
    """The authors' ``collapse_results.npy`` content as runs (either key layout).

    Args:
        results: key -> seeds x epochs of per-epoch mean std (the file's ``raw``), or a dict
            holding it under ``raw``.
        dataset: e.g. ``cifar10``.
        backbone: e.g. ``resnet18``.
        setup: ``rows``, ``dim`` and ``steps_per_epoch`` of their runs.

    Raises:
        ValueError: on a key of neither layout.
    """
    runs = []
    for key, value in results.items():
        match = _AUTHORS_KEY.match(key)
        if match is None:
            raise ValueError(
                f"unknown key {key!r} in the authors' collapse results; expected "
                "<act>_bn_<True|False>_lr_<small|base|large> or <act>, act in "
                "['gelu', 'linear', 'relu', 'swish']"
            )
        head, bn, lr = match.group(1), match.group(2), match.group(3) or "base"
        raw = value["raw"] if isinstance(value, Mapping) else value
        for seed, curve in enumerate(np.asarray(raw, dtype=float).tolist()):
            runs.append(
                CollapseRow(
                    head,
                    "bn" if bn == "True" else "none",
                    BASE_LR * _FACTORS[lr],
                    lr_name=lr,
                    seed=seed,
                    dataset=dataset,
                    backbone=backbone,
                    std_curve=tuple(curve),
                    output_rows=int(setup["rows"]),
                    output_dim=int(setup["dim"]),
                    steps_per_epoch=int(setup["steps_per_epoch"]),
                )
            )
    return runs


def summary_runs(summary: CollapseSummary) -> list[CollapseRow]:
    """The rows of our ``summary.json`` as judged runs (``lr_name`` read off ``lr`` if absent).

    Raises:
        ValueError: if a row lacks the per-epoch curve or its sizes (a summary written before
            they existed).
    """
    runs = []
    for row in summary.rows:
        if not (row.std_curve and row.output_rows and row.output_dim and row.steps_per_epoch):
            raise ValueError(
                f"summary row {cell_id(row.head, row.norm, row.lr, row.seed)} has no std_curve "
                "(or its sizes): rerun the sweep with this version"
            )
        runs.append(replace(row, lr_name=row.lr_name or lr_name(row.lr)))
    return runs


def _from_path(path: Path) -> tuple[str, str]:
    """``(dataset, backbone)`` from ``.../<dataset>/<backbone>/collapse_results.npy``."""
    parts = path.resolve().parts
    return (parts[-3], parts[-2]) if len(parts) >= 3 else ("unknown", "unknown")


def load_runs(path: str | Path, *, trust_pickle: bool = False) -> list[CollapseRow]:
    """Runs from our ``summary.json``, the authors' fixture JSON or their ``.npy``.

    The ``.npy`` (a pickled dict) is read by :func:`solo_geometry.inputs.npfiles.load_arrays`;
    its data set and backbone come from its path (``results/<dataset>/<backbone>/``).

    Raises:
        ValueError: a ``.npy`` whose pickle is refused or unreadable, or a JSON of neither kind.
        FileNotFoundError: no such file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {str(path)!r}")
    if path.suffix == ".npy":
        dataset, backbone = _from_path(path)
        results = load_arrays(path, trust_pickle=trust_pickle)
        if "" in results:  # a plain array, not the dict np.save wrote
            raise ValueError(f"{str(path)!r} holds a plain {results[''].dtype} array; {_EXPECTED}")
        return _authors(path, lambda: authors_runs(results, dataset=dataset, backbone=backbone))
    try:
        data = json.loads(read_bytes(path, MAX_JSON_BYTES, "results file").decode("utf-8"))
    except UnicodeDecodeError as err:  # a pickle, say
        raise ValueError(f"{str(path)!r} is not text (byte {err.start}); {_EXPECTED}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{str(path)!r} is not JSON ({err.msg}); {_EXPECTED}") from None
    if isinstance(data, dict) and ("rows" in data or data.get("kind") == "collapse"):
        return summary_runs(read_summary(path))
    if isinstance(data, dict) and "results" in data and "provenance" in data:
        return _authors(path, lambda: _fixture_runs(data))
    raise ValueError(
        f"{str(path)!r} holds a JSON {type(data).__name__} of neither kind; {_EXPECTED}"
    )


_EXPECTED = (
    "expected a collapse summary.json (rows), the authors' results as JSON (provenance, "
    "results) or their collapse_results.npy (a saved dict of <act>_bn_<True|False>_lr_<lr> -> "
    "seeds x epochs)"
)


def _fixture_runs(data: Mapping[str, Any]) -> list[CollapseRow]:
    """The runs of the authors' results as JSON (``tests/fixtures/collapse_authors.json``)."""
    return [
        run
        for name, results in data["results"].items()
        for run in authors_runs(
            results,
            dataset=name.split("/")[0],
            backbone=name.split("/")[1],
            setup=data.get("setup", AUTHORS_SETUP),
        )
    ]


def _authors(path: Path, runs: Callable[[], list[CollapseRow]]) -> list[CollapseRow]:
    """``runs()``; content of the wrong shape or types is one ``ValueError`` naming the file."""
    try:
        return runs()
    except ValueError as err:
        hint = "" if "expected" in str(err) else f"; {_EXPECTED}"
        raise ValueError(f"{str(path)!r}: {err}{hint}") from None
    except (KeyError, TypeError, AttributeError, IndexError) as err:
        raise ValueError(
            f"{str(path)!r}: unexpected content ({type(err).__name__}: {err}); {_EXPECTED}"
        ) from None


def verdicts_of_file(
    path: str | Path, *, trust_pickle: bool = False, factor: float = ESCAPE_FACTOR
) -> list[Verdict]:
    """The claims judged on a file's runs (:func:`load_runs`), per backbone and data set.

    Raises:
        ValueError: a bad factor, or a file :func:`load_runs` rejects.
        FileNotFoundError: no such file.
    """
    if not factor > 1:
        raise ValueError(f"--factor must be > 1, got {factor}")
    return judge(load_runs(path, trust_pickle=trust_pickle), factor)
