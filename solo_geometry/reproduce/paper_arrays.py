"""The authors' released result arrays, read without running their pickles' code.

``results/<dataset>/<backbone>/`` of github farischaudhry/projection-head-geometry holds
``guillotine_results.npy``, ``curvature_results.npy`` and ``orbit_visualization.npy`` (each a
dict saved by ``np.save``, so a pickle) and
``head_depth_ablations/geometric_ablation_depth_<k>.npz`` (plain arrays).
:func:`read_npy_dict` unpickles with a restricted unpickler that builds numpy arrays, dtypes,
scalars and plain containers and refuses any other global: a file that names a function is an
error, not a call. (A project-wide restricted loader is being written elsewhere; this one is
local to the verdicts until the two are unified.)

:func:`paper_evidence` turns one such folder (or its files) into the evidence that
:mod:`solo_geometry.reproduce.invariance_verdicts` judges.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib import format as npy_format

from solo_geometry.reproduce.orbit_evidence import OrbitSummary

__all__ = ["KNOWN_FILES", "TEST_IMAGES", "paper_evidence", "read_npy_dict"]

_ALLOWED = {
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
}
KNOWN_FILES = ("guillotine_results.npy", "curvature_results.npy", "orbit_visualization.npy")
_DEPTH = re.compile(r"geometric_ablation_depth_(\d+)\.npz$")
# The rotation probes are scored on every test image (RotationDataset(train=False)).
TEST_IMAGES = {"cifar10": 10000, "cifar100": 10000}


class _Restricted(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")
        return super().find_class(module, name)


def read_npy_dict(path: str | Path) -> dict[str, Any]:
    """A dict saved by ``np.save`` (an object array of shape ()), restricted unpickling.

    Raises:
        ValueError: the file is not such a dict, or its pickle names a global other than
            numpy's array reconstruction.
    """
    path = Path(path)
    try:
        with path.open("rb") as f:
            version = npy_format.read_magic(f)
            read = (
                npy_format.read_array_header_1_0
                if version == (1, 0)
                else npy_format.read_array_header_2_0
            )
            shape, _, dtype = read(f)
            if not dtype.hasobject or shape != ():
                raise ValueError(f"holds a {dtype} array of shape {shape}, not a saved dict")
            value = _Restricted(f).load()
    except (pickle.UnpicklingError, EOFError, OSError, ValueError) as err:
        raise ValueError(f"cannot read {str(path)!r} as the authors' results: {err}") from err
    item = value.item() if isinstance(value, np.ndarray) else value
    if not isinstance(item, dict):
        raise ValueError(f"{str(path)!r} holds a {type(item).__name__}, not a dict")
    return item


def _files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += [p / n for n in KNOWN_FILES if (p / n).is_file()]
            out += sorted(q for q in p.rglob("*.npz") if _DEPTH.search(q.name))
        elif p.is_file():
            out.append(p)
        else:
            raise ValueError(f"{str(p)!r} is neither a results folder nor a file")
    return out


def _orbits(d: dict[str, Any] | Any) -> OrbitSummary:
    return OrbitSummary.from_arrays(d["orbits_z"], d["orbits_h"], d["orbit_ids"], d["orbit_labels"])


def paper_evidence(paths: list[str | Path]) -> dict[str, Any]:
    """Evidence from the authors' arrays (folders are searched for the known file names).

    The orbit tables are the paper's code's (the head fed unit z): reading ``unit_z`` only.

    Raises:
        ValueError: a path that is missing or unknown, or a file that cannot be read.
    """
    ev: dict[str, Any] = {"source": "authors' arrays", "files": [], "probes": {}, "orbits": {},
                          "curvature": None, "depth": {}}  # fmt: skip
    for f in _files([Path(p) for p in paths]):
        ev["files"].append(str(f))
        depth = _DEPTH.search(f.name)
        if depth is not None:
            with np.load(f, allow_pickle=False) as d:
                ev["depth"].setdefault("unit_z", {})[int(depth.group(1))] = [_orbits(d)]
            continue
        d = read_npy_dict(f)
        if f.name == "guillotine_results.npy":
            n = TEST_IMAGES.get(str(d.get("dataset")))
            ev["probes"]["paper"] = {
                "linear": (float(d["backbone_acc_linear"]), float(d["head_acc_linear"])),
                "mlp": (float(d["backbone_acc_mlp"]), float(d["head_acc_mlp"])),
                "n": n,
            }
        elif f.name == "curvature_results.npy":
            ev["curvature"] = [float(r) for r in np.asarray(d["ratios_per_seed"]).ravel()]
        elif f.name == "orbit_visualization.npy":
            ev["orbits"]["unit_z"] = [_orbits(d)]
        else:
            raise ValueError(f"{str(f)!r} is not one of {[*KNOWN_FILES, _DEPTH.pattern]}")
    return ev
