from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from solo_geometry.cli import main
from tests.shared import orbit_arrays, paper_metrics


def run(*argv: str) -> int:
    """``solo-geometry orbits ARGV`` through the command's one error handler."""
    return main(["orbits", *argv])


def save(tmp_path: Path, arrays: dict, fmt: str) -> Path:
    path = tmp_path / f"orbits.{fmt}"
    if fmt == "npz":
        np.savez(path, **arrays)
    else:
        np.save(path, {**arrays, "class_names": ["a", "b", "c", "d", "e"]})  # the paper's extras
    return path


class TestOrbitsCommand:
    @pytest.mark.parametrize("fmt", ["npy", "npz"])
    def test_json_matches_the_papers_function(
        self, tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture
    ) -> None:
        arrays = orbit_arrays()
        assert run(str(save(tmp_path, arrays, fmt)), "--json") == 0
        got = json.loads(capsys.readouterr().out)
        assert set(got) == {"z", "h", "compression"}
        ids, labels = arrays["orbit_ids"], arrays["orbit_labels"]
        for space in ("z", "h"):
            ref = paper_metrics(arrays[f"orbits_{space}"].astype(np.float64), ids, labels)
            assert set(got[space]) == set(ref)
            for key, pair in ref.items():
                assert got[space][key] == pytest.approx(pair, rel=1e-6), (space, key)
        spread_z, spread_h = (
            paper_metrics(arrays[k].astype(np.float64), ids, labels)["spread"][0]
            for k in ("orbits_z", "orbits_h")
        )
        assert got["compression"] == pytest.approx(spread_z / (spread_h + 1e-10), rel=1e-6)
        assert got["compression"] > 10

    def test_table(self, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
        arrays = orbit_arrays()
        assert run(str(save(tmp_path, arrays, "npz"))) == 0
        out = capsys.readouterr().out
        ref = paper_metrics(
            arrays["orbits_z"].astype(np.float64), arrays["orbit_ids"], arrays["orbit_labels"]
        )
        assert f"{ref['d_intra'][0]:.4f} ± {ref['d_intra'][1]:.4f}" in out
        assert f"{ref['separation'][0]:.2f} ± {ref['separation'][1]:.2f}" in out
        assert "Orbit compression:" in out

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            (lambda a: a.pop("orbit_ids"), "no key 'orbit_ids'"),
            (lambda a: a.update(orbits_h=a["orbits_h"][:-1]), r"orbits_h must be \(180, p\)"),
            (lambda a: a.update(orbit_labels=a["orbit_labels"][:5]), r"orbit_labels .*\(5,\)"),
            (lambda a: a.update(orbit_angles=np.zeros(3)), r"orbit_angles .*\(3,\)"),
            (lambda a: a.update(orbits_z=a["orbits_z"][0]), r"orbits_z .*shape \(8,\)"),
            (lambda a: a.update(orbit_ids=a["orbit_ids"] * 0.5), "orbit_ids must hold integers"),
            (lambda a: a["orbits_z"].__setitem__((0, 0), np.nan), "orbits_z must hold finite"),
        ],
    )
    def test_bad_arrays_exit_2_with_one_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture, change, message: str
    ) -> None:
        arrays = orbit_arrays()
        change(arrays)
        assert run(str(save(tmp_path, arrays, "npz"))) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("solo-geometry orbits: error:") and len(err.splitlines()) == 1
        assert re.search(message, err), err

    @pytest.mark.parametrize(
        ("name", "content", "message"),
        [
            ("missing.npz", None, "no such file"),
            ("orbits.txt", b"x", r"expected a \.npy or an \.npz"),
            ("array.npy", np.zeros(3), r"holds an array of shape \(3,\)"),
            ("list.npy", np.array(["a"], dtype=object).reshape(()), "holds a str, expected a dict"),
        ],
    )
    def test_bad_files_exit_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture, name: str, content, message: str
    ) -> None:
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif content is not None:
            np.save(path, content, allow_pickle=True)
        assert run(str(path)) == 2
        err = capsys.readouterr().err
        assert re.search(message, err) and len(err.strip().splitlines()) == 1, err


class _Payload:
    """An object whose unpickling runs ``touch MARKER`` (what a crafted file would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        import os

        return (os.system, (f"touch {self.marker}",))


class TestUntrustedFiles:
    """A crafted file's code never runs; only --trust-pickle unpickles it in full."""

    def _crafted(self, tmp_path: Path, kind: str) -> tuple[Path, Path]:
        import pickle

        marker, path = tmp_path / "MARKER", tmp_path / f"{kind}.npy"
        payload = {**orbit_arrays(), "extra": _Payload(marker)}
        if kind == "dict":  # the paper's layout, one value carrying the payload
            np.save(path, np.array(payload, dtype=object), allow_pickle=True)
        else:  # a raw pickle renamed .npy (np.load with allow_pickle unpickles it too)
            path.write_bytes(pickle.dumps(payload))
        return path, marker

    @pytest.mark.parametrize("kind", ["dict", "raw"])
    def test_payload_never_runs(
        self, tmp_path: Path, capsys: pytest.CaptureFixture, kind: str
    ) -> None:
        path, marker = self._crafted(tmp_path, kind)
        assert run(str(path)) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(path) in err, err
        assert ("posix.system" in err) if kind == "dict" else ("not a .npy array" in err), err
        assert not marker.exists()

    def test_trust_pickle_is_the_only_door(self, tmp_path: Path) -> None:
        path, marker = self._crafted(tmp_path, "dict")
        run(str(path), "--trust-pickle")
        assert marker.exists()  # the check above can fail: a full pickle does run the payload

    def test_npz_object_member_refused(self, tmp_path: Path, capsys) -> None:
        marker = tmp_path / "MARKER"
        path = tmp_path / "o.npz"
        np.savez(path, **orbit_arrays(), extra=np.array([_Payload(marker)], dtype=object))
        assert run(str(path)) == 2
        assert "posix.system" in capsys.readouterr().err and not marker.exists()

    def test_paper_layout_with_plain_containers_loads(self, tmp_path: Path, capsys) -> None:
        # What the released arrays hold besides arrays: str, list, int, float, bool, None, tuple.
        extras = {
            "class_names": ["a", "b"],
            "dataset": "cifar10",
            "num_classes": 10,
            "lr": 0.05,
            "bn": False,
            "note": None,
            "pair": (1, 2.0),
            "scalar": np.float32(1),
        }
        path = tmp_path / "o.npy"
        np.save(path, {**orbit_arrays(), **extras})
        assert run(str(path), "--json") == 0
        from solo_geometry.inputs.npfiles import load_arrays

        got = load_arrays(path)
        assert {k: got[k] for k in extras} == extras


class TestDegenerateArrays:
    """Measurements the arrays leave undefined are named, never printed as a number."""

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            (
                lambda a: a.update(orbits_h=np.zeros_like(a["orbits_h"])),
                "every orbits_h measure: 180 of 180 rows are all zero",
            ),
            (
                lambda a: a.update(orbits_h=a["orbits_h"][a["orbit_ids"] * 12]),
                "compression: mean spread(H) is",
            ),
            (
                lambda a: a.update(orbit_labels=np.zeros(180, dtype=int)),
                "D_inter and separation: they need 2 classes, orbit_labels has only [0]",
            ),
            (
                lambda a: a.update(
                    orbit_ids=np.zeros(180, dtype=int), orbit_labels=np.zeros(180, dtype=int)
                ),
                "they need 2 classes",
            ),
            (
                lambda a: a.update(orbit_ids=np.arange(180)),
                "D_intra and separation: they need an orbit of 2 rows, every orbit has 1",
            ),
        ],
        ids=["all-zero H", "H one point per orbit", "one class", "one orbit", "one-row orbits"],
    )
    def test_undefined_is_an_error(
        self, tmp_path: Path, capsys: pytest.CaptureFixture, change, message: str
    ) -> None:
        arrays = orbit_arrays()
        change(arrays)
        assert run(str(save(tmp_path, arrays, "npz")), "--json") == 2
        captured = capsys.readouterr()
        assert captured.out == "" and message in captured.err, captured.err
        assert len(captured.err.strip().splitlines()) == 1

    def test_small_but_real_spread_is_a_number(self, tmp_path: Path, capsys) -> None:
        arrays = orbit_arrays()
        h = arrays["orbits_h"][arrays["orbit_ids"] * 12].astype(np.float64)  # one point per orbit
        h[:, 0] += 1e-6 * np.tile(np.arange(12.0), 15)  # now tiny orbits, not points
        arrays["orbits_h"] = h
        assert run(str(save(tmp_path, arrays, "npz")), "--json") == 0
        assert json.loads(capsys.readouterr().out)["compression"] > 1
