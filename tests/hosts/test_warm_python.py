"""The host tests' warm interpreter (tests/hosts/warm_python.py) and the environment each test
leaves (conftest.py's ``_environment_restored``, around every test)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hosts.warm_python import WarmPython, shared

# What a run of ``python SCRIPT ARGS`` sees: its arguments, working folder, environment and path.
SCRIPT = """
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
print(sys.argv[1:], os.getcwd(), repr(os.environ.get("SG_WARM_PROBE")), sys.path[0] == here)
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


def test_a_forked_run_is_the_cold_run(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "SG_WARM_PROBE": "seen"}
    args = [str(script), "3", "two words"]
    cold = subprocess.run(
        [sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    warm = WarmPython((), env)
    try:
        forked = warm.run(args, tmp_path, env)
    finally:
        warm.close()
    assert cold.returncode == 3 and "['3', 'two words']" in cold.stdout
    assert "'seen' True" in cold.stdout and cold.stderr == "to stderr\n"
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        cold.returncode,
        cold.stdout,
        cold.stderr,
    )


def test_shared_starts_again_under_a_changed_environment(tmp_path: Path) -> None:
    """A variable the test process gained since (Lightning's ``PL_GLOBAL_SEED``, say) starts a
    new interpreter under it, instead of every later run falling back to a cold process."""
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "SG_WARM_PROBE"}
    first = shared((), env)
    assert shared((), dict(env)) is first
    changed = {**env, "SG_WARM_PROBE": "5"}
    second = shared((), changed)
    assert second is not first and first._proc.poll() is not None  # the first one ended
    assert second.takes(changed) and not second.takes(env)
    assert "'5'" in second.run([str(script), "0"], tmp_path, changed).stdout


# Two tests run by an inner pytest with this suite's autouse fixture: the first changes the
# environment, the second reads it.
LEAKY = """
import os

def test_a_leaks():
    os.environ["SG_KEPT_CHANGED"] = "after"
    del os.environ["SG_KEPT_REMOVED"]
    os.environ["SG_KEPT_ADDED"] = "1"

def test_b_reads():
    assert os.environ["SG_KEPT_CHANGED"] == "before"
    assert os.environ["SG_KEPT_REMOVED"] == "there"
    assert "SG_KEPT_ADDED" not in os.environ
"""


def test_each_test_leaves_the_environment_as_it_found_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SG_KEPT_CHANGED", "before")
    monkeypatch.setenv("SG_KEPT_REMOVED", "there")
    monkeypatch.delenv("SG_KEPT_ADDED", raising=False)
    pytester.makeconftest("from tests.conftest import _environment_restored  # noqa: F401\n")
    pytester.makepyfile(test_leaky=LEAKY)
    pytester.runpytest("-p", "no:xdist", "-p", "no:cacheprovider").assert_outcomes(passed=2)
