"""A write that fails during training (a full disk): training goes on, the run ends non-zero.

The failure is the operating system's own: the child process's file-size limit
(``RLIMIT_FSIZE``, ``SIGXFSZ`` ignored) is set after the second record, so the next append stops
part way with ``EFBIG`` as a full disk stops it with ``ENOSPC``. No write function is mocked.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")

REPO = Path(__file__).resolve().parents[2]
_CHILD = textwrap.dedent(
    """
    import os, resource, signal, sys
    from pathlib import Path
    import lightning.pytorch as pl
    sys.path.insert(0, {repo!r})
    from tests.monitor_helpers import fit_boring, small_config
    from solo_geometry.runtime.monitor import GeometryMonitor

    class FullDisk(pl.Callback):  # the disk fills after the second record
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 2:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                size = os.path.getsize(Path(sys.argv[1]) / "geometry.jsonl")
                resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, size + 100))

    out = Path(sys.argv[1])
    monitor = GeometryMonitor(small_config(out, augment=False, every_n_steps=1))
    monitor.exit_on_unwritten = sys.argv[2] == "exit"
    _, trainer = fit_boring(out, [monitor, FullDisk()], steps=4)
    print("fit returned", trainer.global_step)
    """
)


@pytest.mark.parametrize("exit_on_unwritten", [True, False])
def test_full_disk_ends_the_run_non_zero_with_one_line(
    tmp_path: Path, exit_on_unwritten: bool
) -> None:
    child = _CHILD.format(repo=str(REPO))
    arg = "exit" if exit_on_unwritten else "keep"
    proc = subprocess.run(
        [sys.executable, "-c", child, str(tmp_path), arg],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    lines = (tmp_path / "geometry.jsonl").read_text().splitlines(keepends=True)
    records = [json.loads(line) for line in lines]  # every line whole: none half-written
    assert all(line.endswith("\n") for line in lines)
    assert [r["step"] for r in records] == [0, 1]  # the disk filled before step 2's record
    if exit_on_unwritten:  # the solo host's setting: solo-learn's main_pretrain.py exits 3
        assert proc.returncode == 3, proc.stderr[-3000:]
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("solo-geometry: cannot write "), last
        assert "geometry.jsonl" in last and "File too large" in last
        assert "the record of step 2 is missing" in last
        assert "fit returned" not in proc.stdout
    else:  # the monitor alone (a user's own Trainer) warns once and training ends normally
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "fit returned 4" in proc.stdout
        assert proc.stderr.count("GeometryMonitor: cannot write") == 1  # warned once


# Both hosts, as users run them: solo-learn's own main_pretrain.py, and the lightly host through
# the command line; the disk is full for the record of step 1 only (tests/fault_hooks.py).
sys.path.insert(0, str(Path(__file__).parent.parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "hosts"))
from fault_hooks import hooked_env  # noqa: E402
from lightly_support import write_recipe  # noqa: E402
from solo_helpers import GEOMETRY_TINY, RECIPES, TINY, solo_root  # noqa: E402

HAS_SOLO = importlib.util.find_spec("solo") is not None
CLI = "import sys\nfrom solo_geometry.cli import main\nsys.exit(main(sys.argv[1:]))"


def _check_whole(geometry: Path) -> None:
    lines = geometry.read_text().splitlines(keepends=True)
    steps = [json.loads(line)["step"] for line in lines]  # every line whole
    assert all(line.endswith("\n") for line in lines) and 1 not in steps and 0 in steps, steps


@pytest.mark.slow
@pytest.mark.parametrize(
    "host",
    ["lightly", pytest.param("solo", marks=pytest.mark.skipif(not HAS_SOLO, reason="no solo"))],
)
def test_a_full_disk_is_one_line_and_exit_3_on_both_hosts(
    host: str, tmp_path: Path, digits: Path
) -> None:
    env = hooked_env(tmp_path / "hooks", SG_FULL_AT="1")
    if host == "solo":
        run = tmp_path / "run"
        data = [f"data.train_path={digits / 'train'}"]
        args = [str(solo_root() / "main_pretrain.py"), "--config-path", str(RECIPES)]
        args += ["--config-name", "byol", f"hydra.run.dir={run}", *TINY, *data, *GEOMETRY_TINY]
    else:
        recipe = write_recipe(tmp_path / "recipes", "simclr", digits)
        args = ["-c", CLI, "pretrain", "--config", str(recipe), "--host", "lightly"]
        args += ["--runs-root", str(tmp_path / "runs"), "+geometry=on", "geometry.every_n_steps=1"]
        args += ["geometry.measure.hessian=false", "geometry.probes.enabled=false"]
    proc = subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert proc.returncode == 3, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "cannot write " in last and "geometry.jsonl': File too large" in last, last
    assert "the record of step 1 is missing" in last
    assert proc.stderr.count("the record of step 1 is missing") == 1  # one line, not two
    folder = run if host == "solo" else next((tmp_path / "runs").iterdir())
    _check_whole(folder / "geometry.jsonl")
