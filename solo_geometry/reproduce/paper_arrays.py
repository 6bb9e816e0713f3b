"""The authors' released result arrays, read without running their pickles' code.

``results/<dataset>/<backbone>/`` of github farischaudhry/projection-head-geometry holds
``guillotine_results.npy``, ``curvature_results.npy`` and ``orbit_visualization.npy`` (each a
dict saved by ``np.save``, so a pickle) and
``head_depth_ablations/geometric_ablation_depth_<k>.npz`` (plain arrays), read by
:mod:`solo_geometry.inputs.npfiles`'s restricted unpickler (a file that names a function is an
error, not a call). :func:`paper_evidence` turns them into the evidence the verdicts judge.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from solo_geometry.analysis.orbit_files import ORBIT_KEYS, load_orbit_arrays
from solo_geometry.inputs.npfiles import load_arrays
from solo_geometry.reproduce.invariance.evidence import Evidence, OrbitSummary, ProbeEvidence

__all__ = ["KNOWN_FILES", "TEST_IMAGES", "paper_evidence", "read_npy_dict"]

KNOWN_FILES = ("guillotine_results.npy", "curvature_results.npy", "orbit_visualization.npy")
_DEPTH = re.compile(r"geometric_ablation_depth_(\d+)\.npz$")
# The rotation probes are scored on every test image (RotationDataset(train=False)).
TEST_IMAGES = {"cifar10": 10000, "cifar100": 10000}


def read_npy_dict(path: str | Path) -> Mapping[str, object]:
    """A dict saved by ``np.save``, read by the restricted unpickler (no code from the file runs).

    Raises:
        ValueError: the file is not such a dict, or its pickle names a global other than
            NumPy's array reconstruction.
    """
    try:
        held = load_arrays(path)
    except ValueError as err:
        raise ValueError(f"cannot read {str(path)!r} as the authors' results: {err}") from err
    if "" in held:  # a plain array, not a saved dict
        raise ValueError(f"{str(path)!r} holds a {held[''].dtype} array, not a saved dict")
    return held


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


def _array(d: Mapping[str, object], key: str, path: Path) -> np.ndarray:
    """``d[key]`` as an array; ValueError naming the file and the key."""
    if key not in d:
        raise ValueError(f"{str(path)!r} lacks {key!r}")
    return np.asarray(d[key])


def _orbits(path: Path) -> OrbitSummary:
    arrays = load_orbit_arrays(path)  # checked as ``solo-geometry orbits FILE`` checks them
    return OrbitSummary.from_arrays(*(arrays[k] for k in ORBIT_KEYS))


def _probes(d: Mapping[str, object], f: Path) -> ProbeEvidence:
    linear, mlp = (
        tuple(float(_array(d, f"{part}_acc_{probe}", f)) for part in ("backbone", "head"))
        for probe in ("linear", "mlp")
    )
    return ProbeEvidence(linear, mlp, n=TEST_IMAGES.get(str(d.get("dataset"))))


def paper_evidence(paths: list[str | Path]) -> Evidence:
    """Evidence from the authors' arrays (folders are searched for the known file names).

    The orbit tables are the paper's code's (the head fed unit z): reading ``unit_z`` only.

    Raises:
        ValueError: a path that is missing or unknown, or a file that cannot be read.
    """
    ev = Evidence(source="authors' arrays")
    for f in _files([Path(p) for p in paths]):
        ev.files.append(str(f))
        depth = _DEPTH.search(f.name)
        if depth is not None:
            ev.depth.setdefault("unit_z", {})[int(depth.group(1))] = [_orbits(f)]
        elif f.name == "orbit_visualization.npy":
            ev.orbits["unit_z"] = [_orbits(f)]
        elif f.name == "guillotine_results.npy":
            ev.probes["paper"] = _probes(read_npy_dict(f), f)
        elif f.name == "curvature_results.npy":
            ratios = _array(read_npy_dict(f), "ratios_per_seed", f)
            ev.curvature = [float(r) for r in ratios.ravel()]
        else:
            raise ValueError(f"{str(f)!r} is not one of {[*KNOWN_FILES, _DEPTH.pattern]}")
    return ev
