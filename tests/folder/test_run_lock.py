"""One writer per run folder (solo_geometry.folder.lock): real processes holding and asking for it.

A holder process takes the lock of a run folder and waits; a second writer (the lock in this
process, or ``pretrain --resume`` of the folder on either host) is refused at once with one line
naming the folder and the holder's pid, exit 2, the folder left byte for byte as it was. The
kernel drops the lock with its holder, however it ends (SIGKILL included).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent.parent / "hosts"))
from lightly_support import write_recipe  # noqa: E402

from solo_geometry.folder.lock import RunFolderBusy, writer_lock  # noqa: E402
from solo_geometry.folder.run_folder import RunFolder  # noqa: E402
from solo_geometry.inputs.digits import make_digits  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
HAS_SOLO = importlib.util.find_spec("solo") is not None
HOLDER = (
    "import sys, time\nfrom pathlib import Path\n"
    "from solo_geometry.folder.lock import writer_lock\n"
    "from solo_geometry.folder.run_folder import RunFolder\n"
    "with writer_lock(RunFolder(Path(sys.argv[1]))):\n"
    "    Path(sys.argv[2]).write_text('held')\n    time.sleep(600)\n"
)
CLI = "import sys\nfrom solo_geometry.cli import main\nsys.exit(main(sys.argv[1:]))"


def _env() -> dict[str, str]:
    paths = [str(REPO), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def _hold(run: Path, tmp: Path) -> subprocess.Popen[bytes]:
    """A process holding ``run``'s lock until it is killed."""
    mark = tmp / "held.mark"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run), str(mark)], env=_env())
    deadline = time.monotonic() + 60
    while not mark.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the holder did not lock"
        time.sleep(0.05)
    return proc


def _snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def _fake_run(run: Path, host: str) -> Path:
    """A run folder whose newest checkpoint passes the resume checks (it is never trained)."""
    (run / "checkpoints").mkdir(parents=True)
    torch.save(
        {
            "state_dict": {"backbone.w": torch.zeros(1)},
            "epoch": 0,
            "global_step": 2,
            "pytorch-lightning_version": "2",
            "loops": {},
        },
        run / "checkpoints" / "last.ckpt",
    )
    (run / "geometry.jsonl").write_text("")
    if host == "solo":
        (run / ".hydra").mkdir()
        (run / ".hydra" / "config.yaml").write_text("method: simclr\n")
    else:
        (run / "config.yaml").write_text("method: simclr\n")
    return run


class TestWriterLock:
    def test_second_writer_is_refused_naming_the_holder(self, tmp_path: Path) -> None:
        run = RunFolder(tmp_path / "run")
        run.path.mkdir()
        holder = _hold(run.path, tmp_path)
        try:
            with pytest.raises(RunFolderBusy, match=rf"'{run.path}'.*\(pid {holder.pid},"):
                with writer_lock(run):
                    pass
        finally:
            holder.kill()
            holder.wait()
        with writer_lock(run):  # SIGKILL released it: the kernel drops a dead holder's lock
            assert run.lock_file.read_text() == f"{os.getpid()}\n"
        assert not run.lock_file.exists()  # removed on release

    def test_held_in_turn_by_one_process(self, tmp_path: Path) -> None:
        run = RunFolder(tmp_path)
        for _ in range(3):
            with writer_lock(run):
                assert run.lock_file.is_file()
        assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "host",
    [
        "lightly",
        pytest.param(
            "solo",
            marks=[
                pytest.mark.solo,
                pytest.mark.skipif(not HAS_SOLO, reason="solo-learn 1.0.6 is not importable"),
            ],
        ),
    ],
)
def test_second_resume_is_one_line_and_changes_nothing(host: str, tmp_path: Path) -> None:
    digits = make_digits(tmp_path / "digits", size=8)
    recipe = write_recipe(tmp_path / "recipes", "simclr", digits)
    run = _fake_run(tmp_path / "run", host)
    before = _snapshot(run)
    holder = _hold(run, tmp_path)
    try:
        done = subprocess.run(
            [sys.executable, "-c", CLI, "pretrain", "--resume", str(run), "--config", str(recipe)],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert f"run folder '{run}' is being written by another process (pid {holder.pid}," in last
    assert "Traceback" not in done.stderr
    after = _snapshot(run)
    after.pop(RunFolder.LOCK, None)  # the holder's own pid file, left by its SIGKILL
    assert after == before
