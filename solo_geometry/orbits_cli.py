"""``solo-geometry orbits FILE [--json]``: the paper's orbit table from saved orbit features.

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

An ``.npz`` is read without pickle. A ``.npy`` holding a dict can only be read with
``allow_pickle=True``, which can run code stored in the file: open only ``.npy`` files you trust.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from solo_geometry.geometry.orbits import OrbitComparison, orbit_comparison

__all__ = [
    "ORBIT_KEYS",
    "add_orbits_parser",
    "format_orbit_table",
    "load_orbit_arrays",
    "orbit_file_comparison",
]

ORBIT_KEYS = ("orbits_z", "orbits_h", "orbit_ids", "orbit_labels")  # required
_OPTIONAL_KEYS = ("orbit_angles",)


def _read(path: Path) -> dict[str, Any]:
    """The file's arrays by key (see the module docstring for the two formats)."""
    if not path.is_file():
        raise ValueError(f"no such file: {path}")
    if path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as arrays:
                return {key: arrays[key] for key in arrays.files}
        except (ValueError, OSError, EOFError) as err:
            raise ValueError(f"{path}: not a readable .npz of orbit arrays ({err})") from err
    if path.suffix != ".npy":
        raise ValueError(f"{path}: expected a .npy holding a dict or an .npz; got {path.suffix!r}")
    held = np.load(path, allow_pickle=True)  # a pickled dict: trusted files only
    if not (isinstance(held, np.ndarray) and held.dtype == object and held.shape == ()):
        raise ValueError(
            f"{path} holds an array of shape {getattr(held, 'shape', '?')}, "
            f"not a dict of orbit arrays"
        )
    data = held.item()
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds a {type(data).__name__}, not a dict of orbit arrays")
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


def load_orbit_arrays(path: str | Path) -> dict[str, np.ndarray]:
    """Read and check a saved orbit file (layout in the module docstring).

    Args:
        path: an ``.npz``, or an ``.npy`` holding a dict (read with pickle: trusted files only).

    Returns:
        ``orbits_z``, ``orbits_h``, ``orbit_ids``, ``orbit_labels`` and, when present,
        ``orbit_angles`` as arrays.

    Raises:
        ValueError: on a missing file, another format, a missing key or a wrong shape or dtype,
            naming the key and the value received.
    """
    path = Path(path)
    return _check(_read(path), path)


def orbit_file_comparison(path: str | Path) -> OrbitComparison:
    """The paper's orbit statistics of a saved orbit file (see :func:`load_orbit_arrays`)."""
    arrays = load_orbit_arrays(path)
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


def _finite_or_none(value: Any) -> Any:
    """JSON has no NaN: non-finite floats become null, recursively."""
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_or_none(v) for v in value]
    return value if not isinstance(value, float) or math.isfinite(value) else None


def _cmd_orbits(args: argparse.Namespace) -> int:
    """``solo-geometry orbits``: print the table (or JSON); bad input: one line, status 2."""
    try:
        result = orbit_file_comparison(args.file)
    except ValueError as err:
        print(f"solo-geometry orbits: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(_finite_or_none(result.paper_table())))
    else:
        print(format_orbit_table(result))
    return 0


def add_orbits_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``solo-geometry orbits FILE [--json]`` (sets ``func``).

    Args:
        subparsers: the object returned by ``ArgumentParser.add_subparsers()``.

    Returns:
        The sub-parser; ``args.func(args)`` returns 0, or 2 on bad input (one line on stderr).
    """
    parser = subparsers.add_parser(
        "orbits",
        help="the paper's orbit table of saved orbit features",
        description="Spread, D_intra, D_inter and separation of Z and H and the compression, "
        "as the paper's code computes them, from an .npz or an .npy holding a dict with keys "
        "orbits_z, orbits_h, orbit_ids, orbit_labels (optional orbit_angles). An .npy dict is "
        "read with pickle: use only files you trust.",
    )
    parser.add_argument("file", metavar="FILE", help="orbit arrays (.npz, or .npy dict)")
    parser.add_argument(
        "--json",
        action="store_true",
        help='print {"z": {...}, "h": {...}, "compression": x} instead',
    )
    parser.set_defaults(func=_cmd_orbits)
    return parser
