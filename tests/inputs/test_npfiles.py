"""The restricted array reader checks sizes before it allocates (solo_geometry.inputs.npfiles).

An ``.npy`` or ``.npz`` member whose header declares far more bytes than follow it (before:
"Unable to allocate 7.11 PiB", a traceback) is one ``ValueError`` naming the member, the shape
and the bytes; an array declaring more than ``MAX_ARRAY_BYTES`` is refused by its cap; arrays
numpy wrote still read back equal.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from solo_geometry.inputs import npfiles
from solo_geometry.inputs.npfiles import load_arrays, read_npy


def _with_header(data: bytes, shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    """``data`` (a whole .npy) with its header replaced by one declaring ``shape``."""
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        head, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    old = io.BytesIO(data)
    np.lib.format.read_magic(old)
    np.lib.format.read_array_header_1_0(old)
    return head.getvalue() + data[old.tell() :]


def _npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


class TestDeclaredSizes:
    def test_npz_member_declaring_petabytes_refused(self, tmp_path: Path) -> None:
        path = tmp_path / "orbits.npz"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("ids.npy", _npy(np.arange(4)))
            archive.writestr("orbits_z.npy", _with_header(_npy(np.zeros(10)), (10**15,)))
        with pytest.raises(ValueError) as caught:
            load_arrays(path)
        assert str(caught.value) == (
            f"{path}[orbits_z]: header declares shape (1000000000000000,) of float64 "
            f"(8000000000000000 bytes) but only 80 bytes follow it; expected a complete array "
            f"written by numpy.save"
        )

    def test_npy_declaring_more_than_it_holds(self, tmp_path: Path) -> None:
        path = tmp_path / "a.npy"
        path.write_bytes(_with_header(_npy(np.zeros((3, 4))), (3, 5)))
        with pytest.raises(
            ValueError, match=r"shape \(3, 5\) of float64 \(120 bytes\) but only 96"
        ):
            read_npy(path)

    def test_cap_applies_to_what_the_header_declares(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(npfiles, "MAX_ARRAY_BYTES", 64)
        path = tmp_path / "a.npy"
        np.save(path, np.zeros(9))
        with pytest.raises(ValueError, match=r"is 72 bytes, over the cap of 64 bytes"):
            read_npy(path)

    def test_arrays_numpy_wrote_read_back_equal(self, tmp_path: Path) -> None:
        arrays = {"a": np.arange(12.0).reshape(3, 4), "b": np.array([], dtype=np.int32)}
        np.savez_compressed(tmp_path / "x.npz", **arrays)
        back = load_arrays(tmp_path / "x.npz")
        assert set(back) == set(arrays)
        for key, value in arrays.items():
            np.testing.assert_array_equal(back[key], value)
            assert back[key].dtype == value.dtype
