"""Reading ``.npy`` and ``.npz`` files from users without running code stored in them.

A ``.npy`` that holds a dict (the paper's released results, ``orbit_visualization.npy`` and
the rest) is an object array whose payload is a pickle, and a pickle can call any function
importable here: ``np.load(path, allow_pickle=True)`` runs whatever a crafted file asks for,
and falls back to unpickling a file that is not ``.npy`` at all. Every command that reads a
user's arrays goes through :func:`load_arrays` instead:

* a numeric array is read by NumPy with ``allow_pickle=False``;
* an object array is unpickled by :class:`RestrictedUnpickler`, which admits NumPy arrays,
  dtypes and scalars and the plain containers the pickle opcodes build themselves (dict, list,
  tuple, str, bytes, int, float, bool, None), exactly what the paper's released arrays hold,
  and refuses any other global with an error naming it;
* a file without NumPy's header (a raw pickle renamed ``.npy``) is refused;
* sizes are checked before anything is allocated: a numeric array whose header declares more
  bytes than follow it (``shape=(10**15,)`` in a 100-byte file) or more than
  :data:`~solo_geometry.folder.safe_files.MAX_ARRAY_BYTES` is refused, naming the shape, the bytes
  and the cap, as is an ``.npz`` member larger than the cap once decompressed;
* ``trust_pickle=True`` (the commands' ``--trust-pickle``) is the only way to a full pickle.

Example:
    >>> data = load_arrays("results/cifar10/resnet18/orbit_visualization.npy")
    >>> sorted(data)[:2]
    ['orbit_angles', 'orbit_ids']
"""

from __future__ import annotations

import io
import math
import pickle
import tokenize
import zipfile
import zlib
from pathlib import Path
from typing import IO, Any

import numpy as np

from solo_geometry.folder.safe_files import MAX_ARRAY_BYTES, check_size

__all__ = ["ALLOWED_GLOBALS", "RestrictedUnpickler", "load_arrays", "read_npy"]

# The globals a pickled NumPy array, dtype or scalar names (NumPy 2 writes ``numpy._core``,
# NumPy 1 ``numpy.core``; ``_frombuffer`` is protocol 5's out-of-band layout).
ALLOWED_GLOBALS = frozenset(
    (core, name)
    for core in ("numpy.core.multiarray", "numpy._core.multiarray")
    for name in ("_reconstruct", "scalar")
) | frozenset(
    {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
    }
)
_TRUST_HINT = (
    "a restricted load admits only NumPy arrays, dtypes, scalars and plain containers; if you "
    "trust the file, pass --trust-pickle (a full pickle runs code stored in the file)"
)


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that rebuilds only :data:`ALLOWED_GLOBALS` (and the plain containers)."""

    def find_class(self, module: str, name: str) -> Any:
        """Return an admitted global; refuse every other one.

        Raises:
            pickle.UnpicklingError: naming ``module.name``.
        """
        if (module, name) in ALLOWED_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"the pickle in it needs {module}.{name}")


def _header(fh: IO[bytes], name: str) -> tuple[tuple[int, ...], np.dtype]:
    """Read NumPy's magic and header; the file position is left after the header."""
    try:
        version = np.lib.format.read_magic(fh)
        read = {(1, 0): np.lib.format.read_array_header_1_0}.get(
            version, np.lib.format.read_array_header_2_0
        )
        shape, _, dtype = read(fh)
    except (ValueError, EOFError, OSError, SyntaxError, TypeError, tokenize.TokenError) as err:
        raise ValueError(
            f"{name}: not a .npy array (no readable NumPy header: {err}); expected a file "
            f"written by numpy.save"
        ) from None
    return shape, dtype


def _check_declared(fh: IO[bytes], name: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """Refuse a header declaring more bytes than follow it, or more than the cap."""
    declared = math.prod(shape) * dtype.itemsize
    here = fh.tell()
    held = fh.seek(0, io.SEEK_END) - here
    fh.seek(here)
    if declared > held:
        raise ValueError(
            f"{name}: header declares shape {shape} of {dtype} ({declared} bytes) but only "
            f"{held} bytes follow it; expected a complete array written by numpy.save"
        )
    check_size(name, declared, MAX_ARRAY_BYTES, "array")


def _read(fh: IO[bytes], name: str, trust_pickle: bool) -> np.ndarray:
    """One ``.npy`` stream: numeric arrays by NumPy, object arrays by the restricted unpickler."""
    start = fh.tell()
    shape, dtype = _header(fh, name)
    if not dtype.hasobject:
        _check_declared(fh, name, shape, dtype)
        fh.seek(start)
        try:
            return np.lib.format.read_array(fh, allow_pickle=False)
        except (ValueError, EOFError, OSError) as err:
            raise ValueError(f"{name}: truncated or corrupt .npy array ({err})") from None
    payload = fh.read(MAX_ARRAY_BYTES + 1)  # a length the pickle states never exceeds its bytes
    check_size(name, len(payload), MAX_ARRAY_BYTES, "array")
    try:
        held = (pickle.Unpickler if trust_pickle else RestrictedUnpickler)(
            io.BytesIO(payload)
        ).load()
    except pickle.UnpicklingError as err:
        raise ValueError(f"{name}: refused: {err}; {_TRUST_HINT}") from None
    except (EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as err:
        raise ValueError(f"{name}: truncated or corrupt pickled array ({err})") from None
    except (OverflowError, MemoryError, RecursionError) as err:  # a length or depth it lacks
        raise ValueError(
            f"{name}: corrupt pickled array ({type(err).__name__}: {err or 'out of memory'})"
        ) from None
    if not isinstance(held, np.ndarray):
        raise ValueError(f"{name}: holds a {type(held).__name__}, expected a NumPy array")
    return held


def read_npy(path: str | Path, *, trust_pickle: bool = False) -> np.ndarray:
    """Read one ``.npy`` file (an object array through :class:`RestrictedUnpickler`).

    Args:
        path: the file.
        trust_pickle: unpickle an object array with a full pickle (trusted files only).

    Returns:
        The array.

    Raises:
        ValueError: a missing file, no NumPy header (a raw pickle, say), a refused global, or a
            truncated file, naming the file.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no such file: {path}")
    with path.open("rb") as fh:
        return _read(fh, str(path), trust_pickle)


def _read_npz(path: Path, trust_pickle: bool) -> dict[str, Any]:
    """Every member of an ``.npz``, each read as :func:`read_npy` reads a file."""
    out: dict[str, Any] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                member = info.filename
                key = member[:-4] if member.endswith(".npy") else member
                check_size(f"{path}[{key}]", info.file_size, MAX_ARRAY_BYTES, "array")
                data = io.BytesIO(archive.read(member))
                out[key] = _read(data, f"{path}[{key}]", trust_pickle)
    except (
        zipfile.BadZipFile,
        OSError,
        EOFError,
        NotImplementedError,
        RuntimeError,
        zlib.error,
    ) as err:
        raise ValueError(f"{path}: not a readable .npz ({err})") from None
    return out


def load_arrays(path: str | Path, *, trust_pickle: bool = False) -> dict[str, Any]:
    """The arrays of a user's ``.npz``, or the dict an ``.npy`` holds, by key.

    Args:
        path: an ``.npz``, or an ``.npy`` holding a dict (a 0-d object array) or an array
            (returned under the key ``""``).
        trust_pickle: unpickle object arrays with a full pickle (trusted files only).

    Returns:
        The file's values by key.

    Raises:
        ValueError: on a missing file, another suffix, a refused or unreadable pickle, naming
            the file and what was expected.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no such file: {path}")
    if path.suffix == ".npz":
        return _read_npz(path, trust_pickle)
    if path.suffix != ".npy":
        raise ValueError(f"{path}: expected a .npy or an .npz; got suffix {path.suffix!r}")
    held = read_npy(path, trust_pickle=trust_pickle)
    if held.dtype.hasobject and held.shape == ():
        value = held.item()
        if not isinstance(value, dict):
            raise ValueError(f"{path} holds a {type(value).__name__}, expected a dict of arrays")
        return value
    return {"": held}
