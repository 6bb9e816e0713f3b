"""``benchmarks/bench_gpu.py`` on the CPU at a tiny size: the GPU bench's path runs end to end.

It trains solo-learn's own cifar SimCLR recipe twice (geometry off, on at its defaults) at
``bf16-mixed``, the CPU's mixed precision, and checks the row it prints: the records it took
are finite and counted against the records due, the costs are numbers, the memory column is
the CPU's (peak RSS). Without CUDA, ``--device gpu`` is one line and exit 2.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hosts.solo_helpers import solo_root

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "bench_gpu.py"


def _run(*argv: str, tmp: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'benchmarks'}",
        "OMP_NUM_THREADS": "1",
        **({"TMPDIR": str(tmp)} if tmp else {}),
    }
    return subprocess.run(
        [sys.executable, str(BENCH), *argv],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=900,
    )


def test_cpu_smoke_row(tmp_path: Path) -> None:
    root = solo_root()
    proc = _run(
        "--device",
        "cpu",
        "--recipes",
        "cifar/simclr",
        "--steps",
        "4",
        "--batch-size",
        "8",
        "--workers",
        "0",
        "--solo-root",
        str(root),
        "--json",
        tmp=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not list(tmp_path.glob("bench-geometry-*"))  # each run's folder removed once read
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    assert row["recipe"] == "cifar/simclr" and row["memory"] == "peak_rss_mb"
    assert row["statuses"] == ["ok"], row
    assert row["due"] == 2 and row["taken"] >= 1 and row["stats"] == 2  # step 0 and the final
    for key in ("step_ms", "off_step_ms", "overhead", "first", "final", "peak_mb"):
        assert math.isfinite(row[key]), (key, row)
    # "first" is a difference of wall times (the first record's step against its neighbours):
    # its sign is the machine's load, not the code's (a rehearsal beside another job read -0.12)
    assert row["step_ms"] > 0
    assert "precision bf16-mixed" in proc.stderr


def test_gpu_without_cuda_is_one_line() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: --device gpu would run the bench")
    proc = _run("--device", "gpu", "--steps", "1")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "bench_gpu: no CUDA device here; pass --device cpu for the CPU smoke run"
    ]
