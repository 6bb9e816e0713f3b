"""The collapse claims as the paper states them, judged on any set of runs: ours or the authors'.

A run is one seed of one configuration: its backbone and data set, head (``linear``, ``relu``,
``gelu``, ``swish``), norm (``bn`` or ``none``), learning rate (``small``, ``base``, ``large``:
0.1x, 1x, 10x the base rate 0.05) and its curve, the per-epoch mean of the per-step std of the
L2-normalised projector outputs over both views (experiments.py: ``torch.std(F.normalize(
cat(z1, z2)), dim=0).mean()``, every step, averaged per epoch), epoch 0 first.

Escape, as the paper plots it (the curve over its epoch-0 mean): a run escaped at the first epoch
e >= 1 whose mean reaches ``factor`` x the epoch-0 mean, at optimiser step (e + 1) x steps per
epoch. The statistic is at most sqrt(M / ((M - 1) d)) for M rows of width d
(:func:`solo_geometry.runtime.updates.std_ceiling`); where ``factor`` x the baseline is above
that ceiling no curve can reach it, and the run is "undecidable", never "not escaped".

The claims (:data:`CLAIMS`), each judged per backbone and data set, held / not held /
undecidable with its evidence:

* ``smooth_escape``: without BatchNorm at the base rate, the smooth heads (GELU, Swish) escape in
  at least 2 of 3 seeds and earlier than the linear head (median escape epoch, never = infinity);
  ReLU never escapes;
* ``relu_needs_bn``: ReLU relies on BatchNorm and the step size: without BatchNorm its final
  level (seed mean of the last epoch over epoch 0) falls as the rate grows; with BatchNorm every
  epoch of every seed stays within :data:`BN_BAND` of epoch 0;
* ``m_negative_at_start``: at the collapsed start M has eigenvalues below the floor for the smooth
  heads and none for linear and ReLU heads without BatchNorm (BatchNorm couples the batch, so a
  head with it is not linear in z and is left out).

Calibration: on the authors' released CIFAR-10 ResNet-18 results (``tests/fixtures/
collapse_authors.json``) the first two are "held" and the third "undecidable" (their file holds
no M); ``tests/reproduce/test_collapse_verdicts.py`` checks this.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from solo_geometry.inputs.npfiles import load_arrays
from solo_geometry.runtime.updates import std_ceiling

__all__ = [
    "BASE_LR",
    "BN_BAND",
    "CLAIMS",
    "ESCAPE_FACTOR",
    "LR_NAMES",
    "Escape",
    "Run",
    "escape",
    "authors_runs",
    "judge",
    "load_runs",
    "lr_name",
    "summary_runs",
    "verdicts_of_file",
]

ESCAPE_FACTOR = 2.0
BASE_LR = 0.05  # the paper's lr_collapse
LR_NAMES = {0.1: "small", 1.0: "base", 10.0: "large"}  # factor of the base rate -> the paper's
# With BatchNorm "std stays near its level": the authors' curves stay at 0.30 to 1.61 of epoch 0
# (DESIGN section 8: 0.4 to 1.3 at the end); without it ReLU falls to 0.10 and 0.03.
BN_BAND = (0.25, 2.0)
SMOOTH = ("gelu", "swish")
CLAIMS = {
    "smooth_escape": "without BatchNorm at the base lr, GELU and Swish heads escape the collapsed "
                     "start in at least 2 of 3 seeds and earlier than the linear head; ReLU "
                     "never escapes",
    "relu_needs_bn": "ReLU relies on BatchNorm and the step size: without BatchNorm its final "
                     f"std falls as the lr grows; with BatchNorm it stays within "
                     f"{BN_BAND[0]:g} to {BN_BAND[1]:g} x its epoch-0 level",
    "m_negative_at_start": "at the collapsed start M has eigenvalues below the floor for smooth "
                           "heads and none for linear and ReLU heads without BatchNorm",
}  # fmt: skip


def lr_name(lr: float, base_lr: float = BASE_LR) -> str:
    """``small``/``base``/``large`` for 0.1x/1x/10x ``base_lr``, else the rate itself."""
    for factor, name in LR_NAMES.items():
        if math.isclose(lr, factor * base_lr, rel_tol=1e-6):
            return name
    return f"{lr:g}"


@dataclass(frozen=True)
class Escape:
    """A run's escape: outcome ``escaped``, ``not escaped`` or ``undecidable``."""

    outcome: str
    baseline_std: float
    ceiling: float
    escape_epoch: int | None
    escape_step: int | None


def escape(
    curve: Sequence[float], *, rows: int, dim: int, steps_per_epoch: int,
    factor: float = ESCAPE_FACTOR,
) -> Escape:  # fmt: skip
    """The escape of one per-epoch curve (epoch 0 first; module docstring).

    Raises:
        ValueError: on a curve without epoch 0 or a factor that is not above 1.
    """
    if not curve:
        raise ValueError("an escape needs a curve with at least epoch 0")
    if not factor > 1:
        raise ValueError(f"the escape factor must be > 1, got {factor}")
    baseline, ceiling = float(curve[0]), std_ceiling(rows, dim)
    epoch = next((e for e, v in enumerate(curve) if e > 0 and v >= factor * baseline), None)
    if epoch is not None:
        return Escape("escaped", baseline, ceiling, epoch, (epoch + 1) * steps_per_epoch)
    outcome = "undecidable" if factor * baseline > ceiling else "not escaped"
    return Escape(outcome, baseline, ceiling, None, None)


@dataclass(frozen=True)
class Run:
    """One seed of one configuration (module docstring); ``m_neg_count_start`` None if unknown."""

    dataset: str
    backbone: str
    head: str
    norm: str
    lr: str
    seed: int
    curve: tuple[float, ...]
    rows: int
    dim: int
    steps_per_epoch: int
    m_neg_count_start: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def escape(self, factor: float = ESCAPE_FACTOR) -> Escape:
        """This run's escape at ``factor``."""
        return escape(self.curve, rows=self.rows, dim=self.dim,
                      steps_per_epoch=self.steps_per_epoch, factor=factor)  # fmt: skip

    def ratios(self) -> list[float]:
        """The curve over its epoch-0 mean."""
        return [v / self.curve[0] for v in self.curve]


def _select(runs: Sequence[Run], head: str, norm: str, lr: str | None = None) -> list[Run]:
    return [r for r in runs if r.head == head and r.norm == norm and (lr is None or r.lr == lr)]


def _verdict(cid: str, verdict: str, evidence: str) -> dict[str, str]:
    return {"id": cid, "claim": CLAIMS[cid], "verdict": verdict, "evidence": evidence}


def _epochs(escapes: Sequence[Escape]) -> str:
    return "[" + ", ".join("-" if e.escape_epoch is None else str(e.escape_epoch)
                           for e in escapes) + "]"  # fmt: skip


def _median_epoch(escapes: Sequence[Escape]) -> float:
    return statistics.median(math.inf if e.escape_epoch is None else e.escape_epoch
                             for e in escapes)  # fmt: skip


def smooth_escape(runs: Sequence[Run], factor: float = ESCAPE_FACTOR) -> dict[str, str]:
    """Claim ``smooth_escape`` on one backbone and data set's runs."""
    cells = {h: _select(runs, h, "none", "base") for h in ("linear", "relu", *SMOOTH)}
    smooth = [h for h in SMOOTH if cells[h]]
    missing = [h for h in ("linear", "relu") if not cells[h]] + ([] if smooth else list(SMOOTH))
    if missing:
        return _verdict("smooth_escape", "undecidable",
                        f"no runs without BN at the base lr for {missing}")  # fmt: skip
    esc = {h: [r.escape(factor) for r in cells[h]] for h in cells if cells[h]}
    parts = [f"{h} {sum(e.outcome == 'escaped' for e in es)}/{len(es)} at epochs {_epochs(es)}"
             for h, es in esc.items()]  # fmt: skip
    evidence = f"escaped (>= {factor:g} x epoch 0), no BN, base lr: " + "; ".join(parts)
    undecided = [h for h, es in esc.items() if any(e.outcome == "undecidable" for e in es)]
    if undecided:
        return _verdict(
            "smooth_escape",
            "undecidable",
            f"{evidence}; {factor:g} x epoch 0 is above the ceiling for {undecided}",
        )
    linear_median = _median_epoch(esc["linear"])
    held = all(3 * sum(e.outcome == "escaped" for e in esc[h]) >= 2 * len(esc[h])
               and _median_epoch(esc[h]) < linear_median for h in smooth)  # fmt: skip
    held = held and not any(e.outcome == "escaped" for e in esc["relu"])
    return _verdict("smooth_escape", "held" if held else "not held", evidence)


def relu_needs_bn(runs: Sequence[Run], factor: float = ESCAPE_FACTOR) -> dict[str, str]:
    """Claim ``relu_needs_bn`` on one backbone and data set's runs."""
    order = ("small", "base", "large")
    plain = {lr: _select(runs, "relu", "none", lr) for lr in order}
    plain = {lr: rs for lr, rs in plain.items() if rs}
    bn = _select(runs, "relu", "bn")
    if len(plain) < 2 or not bn:
        return _verdict("relu_needs_bn", "undecidable",
                        f"ReLU runs without BN at {sorted(plain)} (needs 2 lrs or more), "
                        f"with BN: {len(bn)}")  # fmt: skip
    finals = {lr: statistics.fmean(r.ratios()[-1] for r in rs) for lr, rs in plain.items()}
    levels = list(finals.values())
    falls = all(a > b for a, b in zip(levels, levels[1:], strict=False))
    lo, hi = BN_BAND
    bn_ratios = [v for r in bn for v in r.ratios()[1:]]
    inside = bool(bn_ratios) and all(lo <= v < hi for v in bn_ratios)
    evidence = (
        "no BN, final / epoch 0 (seed mean): "
        + ", ".join(f"lr {lr} {v:.3g}" for lr, v in finals.items())
        + f"; with BN ({len(bn)} runs), every epoch / epoch 0 in "
        f"[{min(bn_ratios, default=math.nan):.3g}, {max(bn_ratios, default=math.nan):.3g}]"
    )
    return _verdict("relu_needs_bn", "held" if falls and inside else "not held", evidence)


def m_negative_at_start(runs: Sequence[Run], factor: float = ESCAPE_FACTOR) -> dict[str, str]:
    """Claim ``m_negative_at_start`` on one backbone and data set's runs."""
    smooth = [r for r in runs if r.head in SMOOTH]
    flat = [r for r in runs if r.head in ("linear", "relu") and r.norm == "none"]
    neg_s = [r.m_neg_count_start for r in smooth]
    neg_f = [r.m_neg_count_start for r in flat]
    evidence = f"M's negative count at start: smooth {neg_s}, linear/ReLU without BN {neg_f}"
    if not (smooth and flat):
        return _verdict("m_negative_at_start", "undecidable", "no smooth or no linear/ReLU "
                        "runs without BN")  # fmt: skip
    if all(c is None for c in neg_s + neg_f):
        return _verdict("m_negative_at_start", "undecidable", "no run records M at the start")
    if any(c is None for c in neg_s + neg_f):
        return _verdict("m_negative_at_start", "undecidable",
                        f"{evidence} (None: an extreme of M did not converge)")  # fmt: skip
    held = all(c > 0 for c in neg_s) and all(c == 0 for c in neg_f)  # type: ignore[operator]
    return _verdict("m_negative_at_start", "held" if held else "not held", evidence)


RULES = (smooth_escape, relu_needs_bn, m_negative_at_start)


def judge(runs: Sequence[Run], factor: float = ESCAPE_FACTOR) -> list[dict[str, str]]:
    """Every claim on every backbone and data set in ``runs``.

    Returns:
        One object per claim and group: ``id``, ``claim``, ``verdict``, ``evidence``,
        ``dataset`` and ``backbone``.
    """
    groups = sorted({(r.dataset, r.backbone) for r in runs})
    out = []
    for dataset, backbone in groups:
        members = [r for r in runs if (r.dataset, r.backbone) == (dataset, backbone)]
        for rule in RULES:
            out.append({**rule(members, factor), "dataset": dataset, "backbone": backbone})
    return out


# The authors' setup (experiments.py ExperimentConfig): batch 512 in two views, 2048-wide
# projector outputs, 50,000 CIFAR training images with drop_last: 97 steps per epoch.
AUTHORS_SETUP = {"rows": 2 * 512, "dim": 2048, "steps_per_epoch": 50_000 // 512}
# Their keys: CIFAR-10's "<act>_bn_<True|False>_lr_<base|large|small>", CIFAR-100's "<act>"
# (no BN, base lr).
_AUTHORS_KEY = re.compile(r"^(linear|relu|gelu|swish)(?:_bn_(True|False)_lr_(small|base|large))?$")


def authors_runs(
    results: Mapping[str, Any], *, dataset: str, backbone: str,
    setup: Mapping[str, int] = AUTHORS_SETUP,
) -> list[Run]:  # fmt: skip
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
            raise ValueError(f"unknown key {key!r} in the authors' collapse results; expected "
                             "<act>_bn_<True|False>_lr_<small|base|large> or <act>, act in "
                             "['gelu', 'linear', 'relu', 'swish']")  # fmt: skip
        head, bn, lr = match.group(1), match.group(2), match.group(3) or "base"
        raw = value["raw"] if isinstance(value, Mapping) else value
        for seed, curve in enumerate(np.asarray(raw, dtype=float).tolist()):
            runs.append(Run(dataset, backbone, head, "bn" if bn == "True" else "none", lr, seed,
                            tuple(curve), int(setup["rows"]), int(setup["dim"]),
                            int(setup["steps_per_epoch"])))  # fmt: skip
    return runs


def summary_runs(summary: Mapping[str, Any]) -> list[Run]:
    """The runs of our ``summary.json`` (rows with ``std_curve``).

    Raises:
        ValueError: if a row lacks the per-epoch curve (a summary written before it existed).
    """
    runs = []
    for row in summary["rows"]:
        if not row.get("std_curve"):
            raise ValueError(f"summary row {row.get('head')}-{row.get('norm')}-lr{row.get('lr')}"
                             f"-s{row.get('seed')} has no std_curve: rerun the sweep with this "
                             "version")  # fmt: skip
        runs.append(Run(row["dataset"], row["backbone"], row["head"], row["norm"],
                        row.get("lr_name") or lr_name(float(row["lr"])), int(row["seed"]),
                        tuple(row["std_curve"]), int(row["output_rows"]),
                        int(row["output_dim"]), int(row["steps_per_epoch"]),
                        row.get("m_neg_count_start")))  # fmt: skip
    return runs


def _from_path(path: Path) -> tuple[str, str]:
    """``(dataset, backbone)`` from ``.../<dataset>/<backbone>/collapse_results.npy``."""
    parts = path.resolve().parts
    return (parts[-3], parts[-2]) if len(parts) >= 3 else ("unknown", "unknown")


def load_runs(path: str | Path, *, trust_pickle: bool = False) -> list[Run]:
    """Runs from our ``summary.json``, the authors' fixture JSON or their ``.npy``.

    The ``.npy`` is a pickled dict, read by :func:`solo_geometry.inputs.npfiles.load_arrays`: its
    restricted unpickler rebuilds NumPy arrays and plain containers only, unless
    ``trust_pickle``. Its data set and backbone come from its path, as the authors lay it out
    (``results/<dataset>/<backbone>/collapse_results.npy``).

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
        return authors_runs(results, dataset=dataset, backbone=backbone)
    data = json.loads(path.read_text())
    if isinstance(data, dict) and "rows" in data:
        return summary_runs(data)
    if isinstance(data, dict) and "results" in data and "provenance" in data:
        return [run for name, results in data["results"].items()
                for run in authors_runs(results, dataset=name.split("/")[0],
                                        backbone=name.split("/")[1],
                                        setup=data.get("setup", AUTHORS_SETUP))]  # fmt: skip
    raise ValueError(
        f"{str(path)!r}: neither a collapse summary.json (rows) nor the authors' "
        "results (provenance, results), nor a .npy"
    )


def verdicts_of_file(path: str | Path, *, trust_pickle: bool = False,
                     factor: float = ESCAPE_FACTOR) -> list[dict[str, str]]:  # fmt: skip
    """The claims judged on a file's runs (:func:`load_runs`), per backbone and data set.

    Raises:
        ValueError: a bad factor, or a file :func:`load_runs` rejects.
        FileNotFoundError: no such file.
    """
    if not factor > 1:
        raise ValueError(f"--factor must be > 1, got {factor}")
    return judge(load_runs(path, trust_pickle=trust_pickle), factor)


def _run_verdicts(args: argparse.Namespace) -> int:
    """Entry of ``solo-geometry reproduce verdicts collapse FILE``."""
    verdicts = verdicts_of_file(args.file, trust_pickle=args.trust_pickle, factor=args.factor)
    if args.json:
        print(json.dumps(verdicts, indent=1))
        return 0
    for v in verdicts:
        print(f"[{v['verdict']}] {v['id']} ({v['dataset']}, {v['backbone']}): {v['claim']}\n"
              f"    {v['evidence']}")  # fmt: skip
    return 0


def add_collapse_kind(kinds: argparse._SubParsersAction) -> None:
    """Register ``collapse`` under ``solo-geometry reproduce verdicts`` (:mod:`.verdicts`)."""
    collapse = kinds.add_parser(
        "collapse", help="the collapse claims on our summary.json or the authors' results",
        description="Judge smooth_escape, relu_needs_bn and m_negative_at_start, per backbone "
                    "and data set, on our summary.json, the authors' collapse_results.npy "
                    "(read by the restricted unpickler) or their curves as JSON (tests/fixtures).",
    )  # fmt: skip
    collapse.add_argument("file", type=Path, help="summary.json, collapse_results.npy or JSON")
    collapse.add_argument("--json", action="store_true",
                          help="a list of objects: id, claim, verdict, evidence, dataset, "
                               "backbone")  # fmt: skip
    collapse.add_argument(
        "--factor",
        type=float,
        default=ESCAPE_FACTOR,
        help="escape at the first epoch mean >= FACTOR x epoch 0 (default 2)",
    )
    collapse.add_argument(
        "--trust-pickle",
        action="store_true",
        help="unpickle a .npy with a full pickle (it can run code: trusted files only); without "
        "it only NumPy arrays and plain containers are rebuilt",
    )
    collapse.set_defaults(func=_run_verdicts)
