"""``solo-geometry reproduce verdicts hessian FILE...``: the authors' Hessian tracker re-read.

The files behind the paper's Figure 3 (``raw_data_<init>_<activation>.npz`` of
hessian_tracker.py), read by the restricted reader of :mod:`solo_geometry.inputs.npfiles` (no
pickle runs), summarised per file (:class:`TrackerSummary`) and judged
(:func:`hessian_verdict`). What the files hold, each number of ``--json`` and what the
estimator resolves: docs/reproducing.md, "Figure 3: the authors' Hessian tracker, re-read".
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from solo_geometry.geometry.ranks import spearman
from solo_geometry.inputs.npfiles import load_arrays
from solo_geometry.reproduce.results import Verdict

__all__ = [
    "DEFAULT_LAMBDA_MAX",
    "ROUNDOFF_FACTOR",
    "TRACKER_KEYS",
    "TrackerSummary",
    "hessian_report",
    "hessian_verdict",
    "read_tracker",
    "resolution",
    "summarise_tracker",
]

TRACKER_KEYS = ("epochs", "min_eigenvalues", "variances", "condition_numbers")
# Round-off of the estimator's Rayleigh quotient in units of eps(float32) x lambda_max: the
# largest |theta_32 - theta_64| / (eps32 lambda_max) over the 12 states of
# benchmarks/bench_estimators.py (2026-12-06) was 2.85; rounded up.
ROUNDOFF_FACTOR = 4.0
# The spectrum's scale the resolution assumes when --lambda-max is not given: the order of the
# paper's spectrum (issue 53); the files hold no lambda_max. The package's cells read 2.3e-4 to
# 7.5e-3 at the pseudo-collapsed start (bench_estimators.py).
DEFAULT_LAMBDA_MAX = 1e-3
_FLOAT32_EPS = float(np.finfo(np.float32).eps)
_NAME = re.compile(r"raw_data_(normal|collapsed)_(swish|relu|gelu)\.npz$")
_SMOOTH = ("swish", "gelu")


def resolution(lambda_max: float) -> float:
    """The float32 estimator's round-off at spectral scale ``lambda_max``."""
    return ROUNDOFF_FACTOR * _FLOAT32_EPS * lambda_max


def read_tracker(path: str | Path) -> dict[str, np.ndarray]:
    """The four per-epoch arrays of a ``raw_data_*.npz``, checked.

    Raises:
        ValueError: naming the file: not a readable ``.npz`` (or a refused pickle), a missing
            key, an array that is not 1-D real numbers, lengths that differ, fewer than 3
            epochs or a value that is not finite.
    """
    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"{str(path)!r}: expected hessian_tracker.py's raw_data_*.npz")
    held = load_arrays(path)
    out: dict[str, np.ndarray] = {}
    for key in TRACKER_KEYS:
        if key not in held:
            raise ValueError(f"{str(path)!r} lacks {key!r}; expected the keys {list(TRACKER_KEYS)}")
        arr = np.asarray(held[key])
        if arr.dtype.kind not in "iuf" or arr.ndim != 1:
            raise ValueError(
                f"{str(path)!r}[{key!r}] is a {arr.dtype} array of shape {arr.shape}; "
                "expected one real number per epoch (1-D)"
            )
        if not np.isfinite(arr).all():
            raise ValueError(f"{str(path)!r}[{key!r}] holds a value that is not finite")
        out[key] = arr.astype(float)
    lengths = {k: len(v) for k, v in out.items()}
    if len(set(lengths.values())) != 1 or lengths["epochs"] < 3:
        raise ValueError(
            f"{str(path)!r}: per-epoch arrays of lengths {lengths}; expected one length >= 3"
        )
    return out


@dataclass(frozen=True)
class TrackerSummary:
    """One file's numbers (docs/reproducing.md, "Figure 3", defines each)."""

    init: str | None
    activation: str | None
    epochs: int
    spearman_var_cond: float | None
    spearman_epochs: int
    negative_epochs: int
    negative_epochs_below_1e_7: int
    negative_epochs_below_1e_6: int
    zero_epochs: int
    resolved_negative_epochs: int
    resolution: float
    min_eigenvalue: float
    min_eigenvalue_epoch: int
    first_min_eigenvalue: float
    var_ratio: float

    def as_json(self) -> dict[str, Any]:
        """The JSON object of ``--json`` (``_1e_7`` spelled ``_1e-7``)."""
        return {k.replace("_1e_", "_1e-"): v for k, v in asdict(self).items()}


def summarise_tracker(
    arrays: dict[str, np.ndarray], *, name: str = "", lambda_max: float = DEFAULT_LAMBDA_MAX
) -> TrackerSummary:
    """The numbers of one run (:func:`read_tracker`'s arrays); ``name`` gives init and head."""
    lam, var, cond = arrays["min_eigenvalues"], arrays["variances"], arrays["condition_numbers"]
    rho = spearman(var[1:], cond[1:])  # plot_hessian_composite: data[...][1:]
    match = _NAME.search(name)
    res = resolution(lambda_max)
    low = int(np.argmin(lam))
    return TrackerSummary(
        init=match.group(1) if match else None,
        activation=match.group(2) if match else None,
        epochs=len(lam),
        spearman_var_cond=None if math.isnan(rho) else rho,
        spearman_epochs=len(lam) - 1,
        negative_epochs=int((lam < 0).sum()),
        negative_epochs_below_1e_7=int((lam < -1e-7).sum()),
        negative_epochs_below_1e_6=int((lam < -1e-6).sum()),
        zero_epochs=int((lam == 0).sum()),
        resolved_negative_epochs=int((lam < -res).sum()),
        resolution=res,
        min_eigenvalue=float(lam[low]),
        min_eigenvalue_epoch=int(arrays["epochs"][low]),
        first_min_eigenvalue=float(lam[0]),
        var_ratio=float(var[-1] / var[0]) if var[0] else math.nan,
    )


CLAIM = "smooth heads inject negative eigenvalues into the effective Hessian, ReLU heads do not"


def _describe(name: str, s: TrackerSummary) -> str:
    return (
        f"{name}: {s.resolved_negative_epochs}/{s.epochs} epochs below -{s.resolution:.1e} "
        f"(below 0: {s.negative_epochs}, -1e-7: {s.negative_epochs_below_1e_7}, -1e-6: "
        f"{s.negative_epochs_below_1e_6}; exactly 0: {s.zero_epochs}; lowest "
        f"{s.min_eigenvalue:.3g} at epoch {s.min_eigenvalue_epoch})"
    )


def hessian_verdict(runs: dict[str, TrackerSummary]) -> Verdict:
    """The claim judged on the runs whose file names give the head (``raw_data_<i>_<a>``).

    Only a reading below ``-resolution`` counts (docs/reproducing.md, "Figure 3"): never held,
    not held on a smooth run without such a reading or a ReLU run with one, else undecidable.
    """
    smooth = {n: s for n, s in runs.items() if s.activation in _SMOOTH}
    relu = {n: s for n, s in runs.items() if s.activation == "relu"}
    evidence = "; ".join(_describe(Path(n).name, s) for n, s in {**smooth, **relu}.items())
    if not smooth or not relu:
        verdict = "undecidable"
        evidence = f"needs a smooth (swish, gelu) and a ReLU run, by file name; {evidence}"
    elif any(s.resolved_negative_epochs == 0 for s in smooth.values()):
        verdict = "not held"
    elif any(s.resolved_negative_epochs > 0 for s in relu.values()):
        verdict = "not held"
        evidence += "; a ReLU run reads a certified negative value"
    else:
        verdict = "undecidable"
        evidence += "; the estimator's readings bound lambda_min from above only: none shows "
        evidence += "that a ReLU run has no negative eigenvalue"
    flat = [Path(n).name for n, s in runs.items() if s.zero_epochs > s.epochs / 2]
    if flat:
        evidence += (
            f"; {', '.join(flat)}: most readings exactly 0, a spectrum under the estimator's "
            "1e-8 guard (its vector underflows), which says nothing of the signs"
        )
    return Verdict("hessian_negative_smooth_only", CLAIM, verdict, evidence)


def hessian_report(files: Sequence[Path], lambda_max: float) -> tuple[dict[str, Any], str]:
    """Each file's summary and the claim's verdict: as a plain object and as text.

    Raises:
        ValueError: ``lambda_max`` not above 0, or a file :func:`read_tracker` refuses.
    """
    if not lambda_max > 0:
        raise ValueError(f"--lambda-max must be > 0; got {lambda_max}")
    runs = {
        str(f): summarise_tracker(read_tracker(f), name=f.name, lambda_max=lambda_max)
        for f in files
    }
    verdict = hessian_verdict(runs)
    plain = {"runs": {n: s.as_json() for n, s in runs.items()}, "verdicts": [verdict.as_json()]}
    lines = []
    for name, s in runs.items():
        rho = "-" if s.spearman_var_cond is None else f"{s.spearman_var_cond:+.3f}"
        lines.append(
            f"{name}: Spearman(var, cond) {rho} over epochs 1-{s.epochs - 1}; "
            f"var final/initial {s.var_ratio:.4g}; " + _describe("lambda_min", s)
        )
    return plain, "\n".join([*lines, verdict.text()])
