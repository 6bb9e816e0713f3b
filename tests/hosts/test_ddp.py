"""Real Lightning DDP on the CPU (gloo, 2 processes, ``strategy=ddp "devices=[0,1]"``).

Both hosts, geometry on, tiny digits runs. Each run goes through ``ddp_entry.py``, which
Lightning re-launches for rank 1; with ``DDP_FAULT=1`` it swaps the method for a real subclass
whose rank 1 fails (an exception while building its view at step 1, NaN features at step 2).
What must hold: training finishes, a failure on one rank is skipped on all with its reason, one
``geometry.jsonl`` written by rank zero, probes and report once, and for losses that gather
across ranks (SimCLR's negatives, VICReg's statistics) a 2-rank record equals a 1-rank run on
the same global batch.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest
from solo_helpers import RECIPES, SOLO_REASON, env, run, tail

from solo_geometry.folder.records import GeometryRecord, read_records
from tests.shared import digits_subset

ENTRY = Path(__file__).with_name("ddp_entry.py")
FAULT = "injected fault on rank 1"
DDP = ["++strategy=ddp", "++accelerator=cpu"]
TINY = [
    "data.num_workers=0",
    "max_epochs=1",
    "++enable_progress_bar=False",
    "method_kwargs.proj_hidden_dim=64",
    "method_kwargs.proj_output_dim=32",
    "+geometry=on",
    "geometry.every_n_steps=1",
    "geometry.spectrum.density_probes=1",
    "geometry.budget=null",
    "geometry.spectrum.dtype=float64",  # 1 vs 2 ranks agree to float64 round-off at step 0 (RTOL)
]
FAULTY = [
    "+limit_train_batches=2",
    "geometry.spectrum.max_steps=40",
    "geometry.spectrum.max_samples=4",
    "geometry.measure.augment_families=[brightness]",
    "geometry.measure.augment_samples=4",
    "optimizer.batch_size=4",
    "++devices=[0,1]",
]
# The same global batch of 8 on one rank and on two: a backbone and head without BatchNorm
# (ViT, LayerNorm), augmentations that draw nothing, DDP's seeded sampler in both runs.
SAME_BATCH = [
    "backbone.name=vit_tiny",
    "++backbone.kwargs.img_size=32",
    "++backbone.kwargs.patch_size=8",
    *(
        f"augmentations.{i}.{k}"
        for i in (0, 1)
        for k in (
            "rrc.enabled=False",
            "color_jitter.prob=0.0",
            "grayscale.prob=0.0",
            "gaussian_blur.prob=0.0",
            "solarization.prob=0.0",
            "equalization.prob=0.0",
            "horizontal_flip.prob=0.0",
        )
    ),
    "+limit_train_batches=1",
    "geometry.spectrum.max_steps=300",
    "geometry.spectrum.tol=1e-10",
    "geometry.measure.augment=false",
    "geometry.probes.enabled=false",
    "data.val_path=null",
]


def _ddp(host: str, args: list[str], cwd: Path, fault: bool = False) -> subprocess.CompletedProcess:
    cwd.mkdir(parents=True, exist_ok=True)
    environment = {
        **env(),
        "DDP_HOST": host,
        "DDP_FAULT": "1" if fault else "0",
        "OMP_NUM_THREADS": "1",  # one thread a rank: no oversubscription
    }
    environment.pop("LOCAL_RANK", None)
    return run([str(ENTRY), *args], cwd, timeout=900, env=environment)  # rank 0 forked warm


def _solo(method: str, overrides: list[str], run_dir: Path, fault: bool = False) -> Path:
    pytest.importorskip("solo", reason=SOLO_REASON)
    args = [
        "--config-path",
        str(RECIPES),
        "--config-name",
        method,
        f"hydra.run.dir={run_dir}",
        "checkpoint.enabled=False",
        *TINY,
        *DDP,
        *overrides,
    ]
    proc = _ddp("solo", args, run_dir, fault)
    assert proc.returncode == 0, tail(proc)
    return run_dir


@pytest.fixture(scope="module")
def few_digits(tmp_path_factory: pytest.TempPathFactory, digits: Path) -> Path:
    """180 of the digits (12 train and 6 val images a class): the end-of-fit probes' folders."""
    few = tmp_path_factory.mktemp("few")
    return digits_subset(digits, few, {"train": 12, "val": 6})


def _check_faulty(records: list[GeometryRecord], log: str, source: str = "batch") -> None:
    """Step 0 measured; step 1 (exception on rank 1) and 2 (NaN on rank 1) skipped on all."""
    assert [(r.step, r.status) for r in records] == [(0, "ok"), (1, "skipped"), (2, "skipped")]
    assert records[0].settings.n_batch == 8  # the global batch: 2 ranks x 4
    # with geometry.alert.heldout, the held-out batch measured on rank zero in eval mode (the
    # backbone's BatchNorm reads its running statistics; SyncBatchNorm runs no collective then,
    # but refuses CPU modules in training, so gloo cannot run it here)
    assert records[0].holds("heldout") == (source == "heldout")
    assert records[0].alert["source"] == source  # type: ignore[index]
    assert "rank 1" in records[1].reason and FAULT in records[1].reason, records[1].reason
    assert "rank 1" in records[2].reason and "non-finite" in records[2].reason, records[2].reason
    assert [r.n_skipped for r in records] == [0, 1, 2]
    assert log.count("report written to") == 1, log[-3000:]


@pytest.mark.solo
@pytest.mark.slow
class TestSoloDDP:
    """solo-learn's own main_pretrain.py and SimCLR under 2-process CPU DDP."""

    def test_fault_on_one_rank_is_skipped_on_all(self, few_digits: Path, tmp_path: Path) -> None:
        run_dir = tmp_path / "run"
        pytest.importorskip("solo", reason=SOLO_REASON)
        data = [f"data.train_path={few_digits / 'train'}", f"data.val_path={few_digits / 'val'}"]
        args = [
            "--config-path",
            str(RECIPES),
            "--config-name",
            "simclr",
            f"hydra.run.dir={run_dir}",
            "checkpoint.enabled=False",
            *TINY,
            *DDP,
            *FAULTY,
            *data,
            "geometry.alert.heldout=16",  # opt-in: the held-out batch of the validation folder
        ]
        proc = _ddp("solo", args, run_dir, fault=True)
        assert proc.returncode == 0, tail(proc)
        log = proc.stdout + proc.stderr
        assert [p.parent for p in tmp_path.rglob("geometry.jsonl")] == [run_dir]
        _check_faulty(read_records(run_dir), log, source="heldout")
        assert log.count("probes written to") == 1 and (run_dir / "probes.json").is_file()

    @pytest.mark.parametrize(
        ("method", "head"),
        [
            ("simclr", []),  # its projector has no BatchNorm
            ("vicreg", ["geometry.head.name=smooth_mlp", "geometry.head.norm=none"]),
        ],
    )
    def test_two_ranks_equal_one_rank(
        self, few_digits: Path, tmp_path: Path, method: str, head: list[str]
    ) -> None:
        common = [*SAME_BATCH, *head, f"data.train_path={few_digits / 'train'}"]
        one = _solo(method, [*common, "optimizer.batch_size=8", "++devices=[0]"], tmp_path / "1")
        two = _solo(method, [*common, "optimizer.batch_size=4", "++devices=[0,1]"], tmp_path / "2")
        _check_equal(read_records(one), read_records(two))


def _check_equal(one: list[GeometryRecord], two: list[GeometryRecord]) -> None:
    """Same steps, all ok, the global batch; stats and converged spectral extremes agree."""
    assert [r.step for r in one] == [r.step for r in two] == [0, 1]
    for a, b in zip(one, two, strict=True):
        assert a.ok and b.ok, (a.reason, b.reason)
        assert a.settings.n_batch == b.settings.n_batch == 8
        assert a.settings.dim == b.settings.dim
        stats = [k for k in a.metrics if k.startswith(("z/", "h/"))]
        spectra = [f"{op}/{q}" for op in ("heff", "gn") for q in ("lambda_min", "lambda_max")]
        assert len(stats) >= 6
        for key in [*stats, *spectra, "interaction_ratio"]:
            x, y = a.metrics[key], b.metrics[key]
            assert x is not None and y is not None, key
            assert math.isclose(x, y, rel_tol=RTOL[a.step], abs_tol=1e-12), (a.step, key, x, y)


# Step 0: identical parameters and batch, only the order of rows differs (rank-major in
# the 2-rank record) only. Step 1: one optimiser step later, gradients averaged by DDP's
# all-reduce (float32) rather than computed in one piece.
RTOL = {0: 1e-12, 1: 1e-4}


@pytest.mark.slow
class TestLightlyDDP:
    """The lightly host (``solo-geometry pretrain --host lightly``) under 2-process CPU DDP."""

    def test_fault_on_one_rank_is_skipped_on_all(self, few_digits: Path, tmp_path: Path) -> None:
        recipe = RECIPES / "simclr.yaml"
        args = [
            "--config",
            str(recipe),
            "--runs-root",
            str(tmp_path / "runs"),
            *TINY,
            *DDP,
            *FAULTY,
            f"data.train_path={few_digits / 'train'}",
            "data.val_path=null",
            "geometry.probes.enabled=false",
        ]
        proc = _ddp("lightly", args, tmp_path, fault=True)
        assert proc.returncode == 0, tail(proc)
        runs = list((tmp_path / "runs").iterdir())
        assert len(runs) == 1, runs  # the re-launched rank joins rank zero's folder
        assert [p.parent for p in tmp_path.rglob("geometry.jsonl")] == runs
        _check_faulty(read_records(runs[0]), proc.stdout + proc.stderr)
        assert (runs[0] / "checkpoints" / "last.ckpt").is_file()
