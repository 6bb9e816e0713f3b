"""Resume after a kill that came after the last checkpoint: the run is finished, not skipped.

A run killed while it wrote its final record, probes or report holds a checkpoint that ends
training; ``pretrain --resume`` restores it and Lightning runs no training loop. The resumed
run must still write the final record (the torn one dropped), the probes and the report. The
folder is left as such a kill leaves it (the final record torn half-way, no ``probes.json``, no
report, the ``.incomplete`` marker back) from a real finished run, then resumed as a user would.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "hosts"))
from lightly_support import write_recipe  # noqa: E402

from solo_geometry.folder.records import read_records  # noqa: E402
from solo_geometry.folder.run_folder import RunFolder  # noqa: E402
from solo_geometry.hosts.pretrain import pretrain  # noqa: E402
from tests.shared import digits_subset  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CLI = "import sys\nfrom solo_geometry.cli import main\nsys.exit(main(sys.argv[1:]))"
# Statistics at every step, the probes (class target, linear) and the report at their defaults.
CHEAP = [
    "+geometry=on",
    "geometry.every_n_steps=1",
    "geometry.budget=null",
    "geometry.measure.hessian=false",
    "geometry.measure.augment=false",
    "geometry.probes.targets=[class]",
    "geometry.probes.probes=[linear]",
    "geometry.probes.orbits.families=[]",
    "optimizer.batch_size=8",
]
HOSTS = [
    "lightly",
    pytest.param(
        "solo",
        marks=[
            pytest.mark.solo,
            pytest.mark.skipif(
                importlib.util.find_spec("solo") is None,
                reason="solo-learn 1.0.6 is not importable",
            ),
        ],
    ),
]


def _finish(args: list[str], log: Path) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    with log.open("wb") as out:
        status = subprocess.run(
            args, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=900
        ).returncode
    text = log.read_text()
    assert status == 0, text[-4000:]
    return text


@pytest.mark.slow
@pytest.mark.parametrize("host", HOSTS)
def test_resume_after_the_last_checkpoint_finishes_the_run(
    host: str, tmp_path: Path, digits: Path
) -> None:
    few = digits_subset(digits, tmp_path / "few", {"train": 4, "val": 3})
    checkpoint = {"enabled": True, "dir": "trained_models", "frequency": 1}
    recipe = write_recipe(tmp_path / "recipes", "simclr", few, checkpoint=checkpoint)
    runs = tmp_path / "runs"
    # the finished run the kill is staged in, made in this process (the solo host's own child
    # process runs it there); the resume below runs as a user runs it, in a new process
    used, made = pretrain(recipe, CHEAP, host=host, runs_root=runs)
    assert used == host
    (path,) = runs.iterdir()
    assert path == made
    run = RunFolder(path)
    whole = read_records(run.geometry)
    assert whole[-1].final and run.probes.is_file() and (run.report / "index.html").is_file()

    lines = run.geometry.read_text().splitlines(keepends=True)
    assert json.loads(lines[-1])["final"]  # the kill: inside the final record's line
    run.geometry.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    run.probes.unlink()
    shutil.rmtree(run.report)
    (path / RunFolder.INCOMPLETE).write_text("training\n")

    log = _finish(
        [sys.executable, "-c", CLI, "pretrain", "--resume", str(path)], tmp_path / "resumed.log"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no torn line left
        records = read_records(run.geometry)
    assert [r.step for r in records] == [r.step for r in whole]
    assert records[:-1] == whole[:-1]  # kept as written
    assert records[-1].final and records[-1].ok, records[-1].reason
    table = run.read_probes()
    assert table is not None and {r.features for r in table.rows} == {"z", "h"}, log[-4000:]
    assert (run.report / "index.html").is_file(), log[-4000:]
    assert not (path / RunFolder.INCOMPLETE).exists()
