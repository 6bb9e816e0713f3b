"""The paper's orbit table from saved orbit features (``solo-geometry orbits FILE [--json]``).

The file holds, in the layout of the paper's released arrays (experiments.py
``run_orbit_visualization_experiment``, saved as ``orbit_visualization.npy``; the head-depth
ablations save the same keys in ``.npz`` files):

* ``orbits_z`` (M, d): backbone features of every orbit member;
* ``orbits_h`` (M, p): head outputs of the same rows;
* ``orbit_ids`` (M,): integer orbit of each row;
* ``orbit_labels`` (M,): integer class of each row;
* ``orbit_angles`` (M,), optional: the augmentation parameter of each row (checked, not used).

Spread, D_intra, D_inter and separation of Z and of H and the compression are computed as the
paper's code computes them (:func:`solo_geometry.geometry.orbits.orbit_comparison`; rows are
L2-normalised first, which leaves the paper's arrays, already normalised, unchanged).

Files are read by :func:`solo_geometry.inputs.npfiles.load_arrays`: the dict an ``.npy`` holds is
unpickled by a restricted unpickler that admits only NumPy arrays and plain containers (what the
paper's released arrays hold), so a crafted file cannot run code; ``--trust-pickle`` allows a
full pickle. Measurements the arrays leave undefined (all-zero rows, one class, one-row orbits,
a head that maps every orbit to one point) are an error naming what is undefined and why, not
a number.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from solo_geometry.geometry.orbits import OrbitComparison, orbit_comparison, orbit_metrics
from solo_geometry.inputs.npfiles import load_arrays

__all__ = [
    "ORBIT_KEYS",
    "finite_or_none",
    "format_orbit_table",
    "load_orbit_arrays",
    "orbit_file_comparison",
    "undefined_measures",
]

ORBIT_KEYS = ("orbits_z", "orbits_h", "orbit_ids", "orbit_labels")  # required
_OPTIONAL_KEYS = ("orbit_angles",)


def _read(path: Path, trust_pickle: bool) -> dict[str, Any]:
    """The file's arrays by key (see the module docstring for the two formats)."""
    data = load_arrays(path, trust_pickle=trust_pickle)
    if set(data) == {""}:
        held = data[""]
        raise ValueError(
            f"{path} holds an array of shape {held.shape}, expected a dict of orbit arrays"
        )
    return data


def _check(data: dict[str, Any], path: Path) -> dict[str, np.ndarray]:
    """The orbit arrays, shapes and dtypes checked; errors name the key and the value."""
    for key in ORBIT_KEYS:
        if key not in data:
            raise ValueError(f"{path} has no key {key!r}; it has {sorted(map(str, data))}")
    out = {key: np.asarray(data[key]) for key in (*ORBIT_KEYS, *_OPTIONAL_KEYS) if key in data}
    z = out["orbits_z"]
    if z.ndim != 2 or z.shape[0] == 0 or z.dtype.kind not in "iuf":
        raise ValueError(
            f"orbits_z must be a numeric (M, d) array with M >= 1; got shape "
            f"{z.shape}, dtype {z.dtype}"
        )
    m = z.shape[0]
    if out["orbits_h"].ndim != 2 or out["orbits_h"].shape[0] != m:
        raise ValueError(
            f"orbits_h must be ({m}, p) to match orbits_z {z.shape}; got shape "
            f"{out['orbits_h'].shape}"
        )
    for key in ("orbits_z", "orbits_h"):
        if out[key].dtype.kind not in "iuf" or not np.isfinite(out[key]).all():
            raise ValueError(f"{key} must hold finite numbers; got dtype {out[key].dtype}")
    for key in ("orbit_ids", "orbit_labels", *(k for k in _OPTIONAL_KEYS if k in out)):
        if out[key].shape != (m,):
            raise ValueError(
                f"{key} must have shape ({m},) to match orbits_z {z.shape}; got {out[key].shape}"
            )
    for key in ("orbit_ids", "orbit_labels"):
        if out[key].dtype.kind not in "iu":
            raise ValueError(f"{key} must hold integers; got dtype {out[key].dtype}")
    return out


def load_orbit_arrays(path: str | Path, *, trust_pickle: bool = False) -> dict[str, np.ndarray]:
    """Read and check a saved orbit file (layout in the module docstring).

    Args:
        path: an ``.npz``, or an ``.npy`` holding a dict.
        trust_pickle: unpickle the ``.npy`` dict with a full pickle (trusted files only);
            otherwise only NumPy arrays and plain containers are rebuilt.

    Returns:
        ``orbits_z``, ``orbits_h``, ``orbit_ids``, ``orbit_labels`` and, when present,
        ``orbit_angles`` as arrays.

    Raises:
        ValueError: on a missing file, another format, a refused pickle, a missing key or a
            wrong shape or dtype, naming the key and the value received.
    """
    path = Path(path)
    return _check(_read(path, trust_pickle), path)


def _zero_tol(x: np.ndarray) -> float:
    """A distance below which two unit rows of ``x``'s dtype are one point (100 eps)."""
    return 100 * float(np.finfo(x.dtype if x.dtype.kind == "f" else np.float64).eps)


def undefined_measures(arrays: dict[str, np.ndarray]) -> list[str]:
    """What the paper's table cannot define on these arrays, each with its reason.

    Args:
        arrays: checked orbit arrays (:func:`load_orbit_arrays`).

    Returns:
        One phrase per undefined measurement (empty when every number is defined).
    """
    out = []
    ids, labels = arrays["orbit_ids"], arrays["orbit_labels"]
    for key in ("orbits_z", "orbits_h"):
        zero = int((np.linalg.norm(arrays[key].astype(np.float64), axis=1) == 0).sum())
        if zero:
            out.append(
                f"every {key} measure: {zero} of {len(ids)} rows are all zero, and a "
                f"zero row has no L2-normalised direction"
            )
    classes = np.unique(labels)
    if classes.size < 2:
        out.append(
            f"D_inter and separation: they need 2 classes, orbit_labels has only {classes.tolist()}"
        )
    if (np.unique(ids, return_counts=True)[1] < 2).all():
        out.append("D_intra and separation: they need an orbit of 2 rows, every orbit has 1")
    if not out:
        h = torch.from_numpy(np.ascontiguousarray(arrays["orbits_h"])).double()
        spread = orbit_metrics(h, torch.from_numpy(ids), torch.from_numpy(labels)).spread[0]
        if spread <= _zero_tol(arrays["orbits_h"]) ** 2:
            out.append(
                f"compression: mean spread(H) is {spread:.1e}, zero to round-off "
                f"(every orbit of orbits_h is one point)"
            )
    return out


def orbit_file_comparison(path: str | Path, *, trust_pickle: bool = False) -> OrbitComparison:
    """The paper's orbit statistics of a saved orbit file (see :func:`load_orbit_arrays`).

    Raises:
        ValueError: as :func:`load_orbit_arrays`, and when a measurement is undefined on the
            arrays (:func:`undefined_measures`), naming which and why.
    """
    arrays = load_orbit_arrays(path, trust_pickle=trust_pickle)
    undefined = undefined_measures(arrays)
    if undefined:
        raise ValueError(f"{path}: undefined: {'; '.join(undefined)}")
    z, h, ids, labels = (torch.from_numpy(np.ascontiguousarray(arrays[k])) for k in ORBIT_KEYS)
    return orbit_comparison(z, h, ids, labels)


def format_orbit_table(result: OrbitComparison) -> str:
    """The paper's table (plot_results.py's print-out): metric, backbone (z), head (h(z))."""
    rows = [
        ("Orbit spread", "{:.4e} ± {:.4e}", "spread"),
        ("Intra-orbit dist (D_intra)", "{:.4f} ± {:.4f}", "d_intra"),
        ("Inter-class dist (D_inter)", "{:.4f} ± {:.4f}", "d_inter"),
        ("Separation D_inter/D_intra", "{:.2f} ± {:.2f}", "separation"),
    ]
    lines = [f"{'Metric':<28} | {'Backbone (z)':<24} | Head (h(z))", "-" * 80]
    for name, form, key in rows:
        z, h = (form.format(*getattr(m, key)) for m in (result.z, result.h))
        lines.append(f"{name:<28} | {z:<24} | {h}")
    lines.append(f"Orbit compression: {result.compression:.2f}x (mean spread(Z) / mean spread(H))")
    return "\n".join(lines)


def finite_or_none(value: Any) -> Any:
    """``value`` for JSON, which has no NaN: non-finite floats become null, recursively."""
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite_or_none(v) for v in value]
    return value if not isinstance(value, float) or math.isfinite(value) else None
