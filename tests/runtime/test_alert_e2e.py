"""The collapse alert on real runs: SimSiam without its predictor (Chen and He 2021) warns, with
the theory's diagnosis, through ``solo-geometry pretrain`` and through solo-learn's unmodified
``main_pretrain.py``, reading the training batch (the default); BYOL at its defaults does not.

Each run is the digits recipe for two epochs (44 steps of batch 64), a record every 4 steps with
the spectra of M on 16 samples (the diagnosis reads them), no probes. The SimSiam runs stop at
step 36 (``max_steps``; no learning-rate schedule, so the steps before it are those of the
full run), 12 steps after their first warning on lightly (step 24 on a CPU) and 8 after it on
solo-learn (step 28); BYOL's "does not warn" holds over the whole run. Asserted from what a
user sees: the warning lines on stderr (one per change of state, each with a diagnosis), the
states in ``geometry.jsonl``, ``geometry/alert`` in the CSV logger, and the report's banner.
"""

from __future__ import annotations

import csv
import re
import subprocess
from pathlib import Path

import pytest

from solo_geometry.folder.records import read_records
from solo_geometry.runtime.alert import FLAT, SADDLE, STATES

REPO = Path(__file__).resolve().parents[2]
SHORT = [
    "+geometry=on",
    "max_epochs=2",
    "data.num_workers=0",
    "geometry.every_n_steps=4",
    "geometry.spectrum.max_samples=16",
    "geometry.spectrum.max_steps=20",
    "geometry.measure.augment=false",
    "geometry.spectrum.density_probes=1",
    "geometry.probes.enabled=false",
    "geometry.budget=null",
]
# Where the SimSiam runs end: two records after the first warning of the slower host.
STOP = ["++max_steps=36"]
WARNING = re.compile(r"collapse alert (\w+) -> (\w+) at step (\d+)")


def _lightly(
    recipe: str, extra: list[str], digits: Path, root: Path
) -> subprocess.CompletedProcess:
    args = [
        "-m",
        "solo_geometry.cli",
        "pretrain",
        "--config",
        str(REPO / "solo_geometry" / "recipes" / "digits" / f"{recipe}.yaml"),
        "--host",
        "lightly",
        "--runs-root",
        str(root),
        f"data.train_path={digits / 'train'}",
        f"data.val_path={digits / 'val'}",
        *SHORT,
        *extra,
    ]
    from tests.hosts.solo_helpers import env, run

    # this checkout's package, not an installed one (PYTHONPATH); a process forked warm
    return run(args, root.parent, timeout=1800, env=env())


def _run_folder(root: Path) -> Path:
    (folder,) = [p for p in root.iterdir() if (p / "geometry.jsonl").is_file()]
    return folder


def _check_warned(proc: subprocess.CompletedProcess, folder: Path, source: str) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    records = [r for r in read_records(folder) if r.alert]
    # the training batch by default; the held-out one with geometry.alert.heldout (test_ddp.py)
    assert {r.alert["source"] for r in records} == {source}  # type: ignore[index]
    assert all(r.holds("heldout") == (source == "heldout") for r in records)
    states = [r.alert["state"] for r in records]  # type: ignore[index]
    changes = [(a, b) for a, b in zip(["healthy", *states], states, strict=False) if a != b]
    assert changes and changes[0][0] == "healthy", states  # it left healthy
    lines = WARNING.findall(out)
    assert [(a, b) for a, b, _ in lines] == changes  # one warning per change, in order
    first = next(r for r in records if r.alert["state"] != "healthy")  # type: ignore[index]
    assert first.alert["diagnosis"].startswith((SADDLE, FLAT))  # type: ignore[index]
    assert "lowest Ritz value of M" in out  # the diagnosis's numbers reach the user
    return None


class TestSimSiamWithoutPredictor:
    @pytest.mark.slow
    def test_pretrain_lightly_warns_with_diagnosis(self, tmp_path: Path, digits: Path) -> None:
        root = tmp_path / "runs"
        root.mkdir()
        proc = _lightly("simsiam", ["geometry.predictor.name=identity", *STOP], digits, root)
        folder = _run_folder(root)
        _check_warned(proc, folder, "batch")
        with open(next((folder / "logs").rglob("metrics.csv"))) as f:
            logged = {float(r["geometry/alert"]) for r in csv.DictReader(f) if r["geometry/alert"]}
        assert logged & {float(STATES.index("dimensional")), float(STATES.index("complete"))}
        banner = (folder / "report" / "index.html").read_text()
        assert "collapse alert" in banner and "first at" in banner

    @pytest.mark.slow
    def test_solo_main_pretrain_warns(self, tmp_path: Path, digits: Path) -> None:
        from tests.hosts.solo_helpers import RECIPES, run, solo_root

        run_dir = tmp_path / "run"
        run_dir.mkdir()
        args = [
            str(solo_root() / "main_pretrain.py"),
            "--config-path",
            str(RECIPES),
            "--config-name",
            "simsiam",
            f"hydra.run.dir={run_dir}",
            f"data.train_path={digits / 'train'}",
            "data.val_path=null",  # no validation epochs: the alert reads training records
            "checkpoint.enabled=False",
            "++enable_progress_bar=False",
            "geometry.report=false",
            "geometry.predictor.name=identity",
            *SHORT,
            *STOP,
        ]
        proc = run(args, run_dir, timeout=1800)
        _check_warned(proc, run_dir, "batch")


@pytest.mark.slow
def test_byol_at_its_defaults_does_not_warn(tmp_path: Path, digits: Path) -> None:
    root = tmp_path / "runs"
    root.mkdir()
    proc = _lightly("byol", ["geometry.report=false"], digits, root)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    records = [r for r in read_records(_run_folder(root)) if r.alert]
    assert {r.alert["state"] for r in records} == {"healthy"}  # type: ignore[index]
    assert {r.alert["source"] for r in records} == {"batch"}  # type: ignore[index]
    assert not WARNING.search(proc.stdout + proc.stderr)
