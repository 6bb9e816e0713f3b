"""Faults inside training never stop it, nor change what it trains.

Each run meets, one per measurement, an out-of-memory error raised inside the measurement
(``torch.OutOfMemoryError``), non-finite backbone features, a non-finite loss and an exception
(``fault_hooks.faulty``); or an unwritable run folder. The run must finish, every measurement
must be a ``skipped`` record saying why (or, with nothing writable, one warning), and the final
parameters must equal bit for bit those of the same run without the monitor: the
``BoringGeometry`` module of ``test_monitor`` in this process, the lightly host in this process
(a real recipe on the digits data, geometry on vs off), and solo-learn's own ``main_pretrain.py``
in a subprocess with the faults installed there.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent / "hosts"))
from fault_hooks import REASONS, faulty, hooked_env  # noqa: E402
from lightly_support import write_recipe  # noqa: E402

import solo_geometry.runtime.monitor as monitor_module  # noqa: E402
from solo_geometry.folder.records import GeometryRecord, read_records  # noqa: E402
from solo_geometry.runtime.monitor import GeometryMonitor  # noqa: E402
from tests.monitor_helpers import fit_boring, small_config, training_state  # noqa: E402

HAS_SOLO = importlib.util.find_spec("solo") is not None
SOLO_REASON = "solo-learn 1.0.6 is not importable (pip install '.[solo]', docs/getting-started.md)"
FAULTS = ["oom", "nan_features", "nan_loss", "error"]
# Faults that fail one part alone: the record keeps the others (a NaN loss: no spectra).
PART_FAULTS = {"nan_loss": "hessian"}
# Statistics and H_eff spectra at every step, 4 steps: one fault per measurement, then a final one.
GEOMETRY = [
    "+geometry=on",
    "geometry.every_n_steps=1",
    "geometry.budget=null",
    "geometry.spectrum.max_samples=4",
    "geometry.spectrum.max_steps=20",
    "geometry.measure.augment=false",
    "geometry.probes.enabled=false",
    "geometry.report=false",
]
SHORT = ["optimizer.batch_size=8", "++limit_train_batches=4"]


def _check_skipped(records: list[GeometryRecord], faults: list[str]) -> None:
    """Each measurement met its fault and says so; nothing else was skipped or failed."""
    assert len(records) >= len(faults)
    for record, kind in zip(records, faults * len(records), strict=False):
        if kind in PART_FAULTS:  # that part failed alone, the statistics kept
            part = PART_FAULTS[kind]
            assert record.ok and part not in record.parts and "stats" in record.parts, record
            assert REASONS[kind] in record.failed_parts[part], (kind, record.failed_parts)
            continue
        assert record.status == "skipped", (kind, record.metrics)
        assert REASONS[kind] in str(record.reason), (kind, record.reason)
        assert record.metrics == {}


def _assert_same(a: dict[str, Tensor], b: dict[str, Tensor]) -> None:
    assert a.keys() == b.keys()
    differ = [k for k in a if a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k])]
    assert differ == [], differ


class TestMonitorFaults:
    """The monitor alone, on the BoringGeometry module of test_monitor (real Trainer)."""

    def test_faults_are_skipped_and_training_unchanged(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        ref_model, ref_trainer = fit_boring(tmp_path / "ref", [])
        ref = training_state(ref_model, ref_trainer)
        monkeypatch.setattr(monitor_module, "measure", faulty(monitor_module.measure, FAULTS))
        monitor = GeometryMonitor(small_config(tmp_path, every_n_steps=1))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model, trainer = fit_boring(tmp_path, [monitor])
        records = read_records(tmp_path)
        assert [r.step for r in records] == list(range(7))  # every step, and the final record
        _check_skipped(records, FAULTS)
        skipped = sum(kind not in PART_FAULTS for kind in (FAULTS * 2)[:7])
        assert monitor.n_skipped == skipped and records[-1].n_skipped == skipped
        # one warning for the skipped records, one for the failed parts
        assert len([w for w in caught if "GeometryMonitor" in str(w.message)]) == 2
        _assert_same(ref, training_state(model, trainer))  # parameters, optimiser moments, RNG


def _lightly(recipe: Path, overrides: list[str], root: Path) -> Path:
    from solo_geometry.hosts.lightly import launch

    return launch(recipe, [*SHORT, *overrides], runs_root=root)


def _weights(ckpt: Path) -> dict[str, Tensor]:
    return torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]


@pytest.mark.slow
class TestLightlyHostFaults:
    """The lightly host's real training loop, geometry on with faults vs geometry off."""

    def test_faults_never_change_the_trained_model(
        self, digits: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        recipe = write_recipe(tmp_path / "recipes", "simclr", digits)
        off = _lightly(recipe, ["+geometry=off"], tmp_path / "off")
        monkeypatch.setattr(monitor_module, "measure", faulty(monitor_module.measure, FAULTS))
        on = _lightly(recipe, GEOMETRY, tmp_path / "on")
        records = read_records(on)
        assert [r.step for r in records] == [0, 1, 2, 3, 4]
        _check_skipped(records, FAULTS)
        _assert_same(
            _weights(off / "checkpoints" / "last.ckpt"), _weights(on / "checkpoints" / "last.ckpt")
        )

    def test_unwritable_run_folder_warns_once(
        self, digits: Path, tmp_path: Path, recwarn: pytest.WarningsRecorder
    ) -> None:
        recipe = write_recipe(tmp_path / "recipes", "simclr", digits)
        off = _lightly(recipe, ["+geometry=off"], tmp_path / "off")
        blocked = tmp_path / "blocked"
        blocked.write_text("a file where the geometry folder should be")
        from solo_geometry.runtime.sink import Unwritten

        overrides = [*GEOMETRY, f"geometry.out_dir={blocked / 'run'}"]
        with pytest.raises(Unwritten, match="no record was written") as failed:
            _lightly(recipe, overrides, tmp_path / "on")  # trained to the end, then exit 3
        assert str(blocked / "run") in str(failed.value)
        ours = [w for w in recwarn if "cannot write" in str(w.message)]
        assert len(ours) == 1, [str(w.message) for w in recwarn]
        assert str(blocked / "run") in str(ours[0].message)
        (on,) = (tmp_path / "on").iterdir()
        _assert_same(
            _weights(off / "checkpoints" / "last.ckpt"), _weights(on / "checkpoints" / "last.ckpt")
        )


@pytest.mark.slow
@pytest.mark.solo
@pytest.mark.skipif(not HAS_SOLO, reason=SOLO_REASON)
class TestSoloHostFaults:
    """solo-learn's own main_pretrain.py, the faults installed in its process."""

    def test_faults_never_change_the_trained_model(self, digits: Path, tmp_path: Path) -> None:
        import solo

        root = Path(solo.__file__).resolve().parents[1]
        recipe = write_recipe(tmp_path / "recipes", "simclr", digits)
        checkpoint = {"enabled": True, "dir": "trained_models", "frequency": 1}
        recipe = write_recipe(tmp_path / "recipes", "simclr", digits, checkpoint=checkpoint)
        repo = Path(__file__).resolve().parents[1]
        weights = {}
        for name, extra in (("off", ["+geometry=off"]), ("on", GEOMETRY)):
            run = tmp_path / name
            args = [
                sys.executable,
                str(root / "main_pretrain.py"),
                "--config-path",
                str(recipe.parent),
                "--config-name",
                recipe.stem,
                f"hydra.run.dir={run}",
                f"checkpoint.dir={run / 'ckpt'}",
                f"++default_root_dir={run}",
                *SHORT,
                *extra,
            ]
            env = hooked_env(tmp_path / "hooks", SG_FAULTS=",".join(FAULTS))
            if name == "off":
                env = {**os.environ, "PYTHONPATH": str(repo)}
            proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
            assert proc.returncode == 0, proc.stderr[-4000:]
            weights[name] = _weights(next((run / "ckpt").rglob("*.ckpt")))
        records = read_records(tmp_path / "on")
        assert [r.step for r in records] == [0, 1, 2, 3, 4]
        _check_skipped(records, FAULTS)
        _assert_same(weights["off"], weights["on"])
