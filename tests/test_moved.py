"""The old module names of the flat layout: the same module objects, one DeprecationWarning.

Each case runs in a fresh interpreter, so the import system, not a module cached by an earlier
test, answers the old name.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from solo_geometry._moved import MOVED

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "solo_geometry"


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def test_every_old_name_is_gone_and_every_new_one_is_there() -> None:
    for old, new in MOVED.items():
        assert not (PACKAGE / f"{old}.py").exists(), old
        assert (PACKAGE / (new.replace(".", "/") + ".py")).is_file(), new


def test_old_names_are_the_new_modules() -> None:
    code = (
        "import importlib, warnings\n"
        "from solo_geometry._moved import MOVED\n"
        "warnings.simplefilter('ignore', DeprecationWarning)\n"
        "for old, new in MOVED.items():\n"
        "    a = importlib.import_module('solo_geometry.' + old)\n"
        "    b = importlib.import_module('solo_geometry.' + new)\n"
        "    assert a is b and b.__spec__.name == b.__name__ == 'solo_geometry.' + new, old\n"
        "from solo_geometry.heads import HEADS\n"
        "from solo_geometry.models.heads import HEADS as NEW\n"
        "assert HEADS is NEW\n"
        "print('ok')\n"
    )
    done = _run(code)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@pytest.mark.parametrize(
    ("statement", "old", "new"),
    [
        ("import solo_geometry.monitor", "monitor", "runtime.monitor"),
        ("from solo_geometry.records import read_records", "records", "run.records"),
        ("from solo_geometry import callbacks", "callbacks", "runtime.callbacks"),
    ],
)
def test_old_name_warns(statement: str, old: str, new: str) -> None:
    code = (
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    {statement}\n"
        "for w in caught:\n"
        "    if w.category is DeprecationWarning and 'deprecated alias' in str(w.message):\n"
        "        print(w.message)\n"
    )
    done = _run(code)
    assert done.returncode == 0, done.stderr
    message = (
        f"solo_geometry.{old} moved to solo_geometry.{new}; the old name is a deprecated alias"
    )
    assert done.stdout.splitlines() == [message]


def test_pickled_old_path_loads() -> None:
    """A pickle written before the move names solo_geometry.heads.<class>: it still loads."""
    code = (
        "import pickle, warnings\n"
        "from solo_geometry.models.heads import HEADS\n"
        "cls = next(c for c in HEADS.values() if isinstance(c, type))\n"
        "new, old = b'solo_geometry.models.heads', b'solo_geometry.heads'\n"
        "data = pickle.dumps(cls, protocol=0).replace(new, old)\n"
        "assert b'solo_geometry.heads' in data\n"
        "warnings.simplefilter('ignore', DeprecationWarning)\n"
        "assert pickle.loads(data) is cls\n"
        "print('ok')\n"
    )
    done = _run(code)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
