"""A checkpoint write cut short by a full disk leaves no truncated ``.ckpt``.

Lightning (2.6) writes a checkpoint in an fsspec transaction (a temporary file, moved into place
when whole), so a full disk leaves the previous checkpoint the newest, and a resume takes it
(``RunFolder.latest_checkpoint``). This guards that, on the operating system's own failure in a
child process: its file-size limit (``RLIMIT_FSIZE``, ``SIGXFSZ`` ignored) is set below a
checkpoint's size before the second step's checkpoint, whose write then stops part way
(``EFBIG``, as a full disk gives ``ENOSPC``).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")

REPO = Path(__file__).resolve().parents[2]
_CHILD = textwrap.dedent(
    """
    import os, resource, signal, sys
    from pathlib import Path
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
    sys.path.insert(0, {repo!r})
    from tests.monitor_helpers import fit_boring

    class FullDisk(pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 2:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    out = Path(sys.argv[1])
    ckpt = ModelCheckpoint(dirpath=out / "ckpt", every_n_train_steps=1, save_top_k=-1)
    fit_boring(out, [FullDisk(), ckpt], steps=4)
    """
)


def test_a_checkpoint_cut_short_leaves_the_previous_one_newest(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD.format(repo=str(REPO)), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode != 0 and "File too large" in proc.stderr, proc.stderr[-2000:]
    files = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert files == ["epoch=0-step=1.ckpt"], files  # no partial file, no temporary left
    ckpt = torch.load(tmp_path / "ckpt" / files[0], map_location="cpu", weights_only=False)
    assert ckpt["global_step"] == 1  # whole: the checkpoint a resume takes
