"""The DDP protocol on a real 2-process gloo group with real solo-learn modules (no Trainer).

Each test starts two processes of ``ddp_ranks_entry.py`` (one rank each) under a timeout, so a
rank left waiting in a collective fails the test instead of hanging it.

* BatchNorm heads (SimCLR with a BatchNorm projector; BYOL: projector, predictor and momentum
  targets): the 2-rank record equals a 1-process record of the concatenated batch with each
  rank's BatchNorm statistics (no sync BN) and with the global batch's (sync BN, declared by
  the host), to float64 round-off; and the two differ.
* Faults: out-of-memory on rank zero making room for the gather, on rank one making room for
  and reading back rank zero's outcome of the products, NaN features on rank one, an exception
  inside the products on rank zero: every rank skips each of those records with the same
  reason, naming the rank, and the group goes on (an ``all_reduce`` after each record, a good
  record at the end).
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from solo_helpers import SOLO_REASON, env

ENTRY = Path(__file__).with_name("ddp_ranks_entry.py")
KEYS = [f"{op}/{q}" for op in ("heff", "gn") for q in ("lambda_min", "lambda_max")]


def _ranks(scenario: str, tmp_path: Path, timeout: int = 480) -> list[Any]:
    """Both ranks' outcomes of ``scenario``; fails (never hangs) if either does not finish."""
    pytest.importorskip("solo", reason=SOLO_REASON)
    store = tmp_path / "store"
    environment = {**env(), "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(ENTRY),
                str(r),
                "2",
                str(store),
                scenario,
                str(tmp_path / f"rank{r}.pt"),
            ],
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    try:
        logs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, log in zip(procs, logs, strict=True):
        assert p.returncode == 0, log[-4000:]
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]


def _close(a: dict[str, Any], b: dict[str, Any], rtol: float) -> list[str]:
    """The keys (statistics, spectral extremes) where two records differ beyond ``rtol``."""
    keys = [k for k in a if k.startswith(("z/", "h/"))] + KEYS + ["interaction_ratio"]
    assert len(keys) > 8
    return [k for k in keys if not math.isclose(a[k], b[k], rel_tol=rtol, abs_tol=1e-12)]


@pytest.mark.solo
@pytest.mark.slow
def test_batch_norm_heads_two_ranks_equal_one_process(tmp_path: Path) -> None:
    zero, one = _ranks("bn", tmp_path)
    for method in ("simclr", "byol"):
        for sync in (False, True):
            status, metrics = zero[f"{method}/{sync}/ranks"]
            assert status == "ok", metrics
            assert one[f"{method}/{sync}/ranks"] == (status, metrics)  # every rank, same record
            reference = zero[f"{method}/{sync}/one"]
            assert _close(metrics, reference, rtol=1e-9) == [], (method, sync)
        own, synced = zero[f"{method}/False/ranks"][1], zero[f"{method}/True/ranks"][1]
        assert set(_close(own, synced, rtol=1e-6)) & set(KEYS), method  # BN statistics matter


@pytest.mark.solo
@pytest.mark.slow
def test_a_fault_on_any_rank_skips_the_record_on_all(tmp_path: Path) -> None:
    zero, one = _ranks("faults", tmp_path)
    assert zero["records"] == one["records"]  # the same records on both ranks
    assert zero["steps"] == one["steps"] == [2.0] * 7  # and the group trains on
    statuses = [status for status, _ in zero["records"]]
    assert statuses == ["ok", *["skipped"] * 5, "ok"], zero["records"]
    reasons = [reason for _, reason in zero["records"][1:6]]
    expected = [
        ("rank 0", "OutOfMemoryError: injected"),
        ("rank 1", "OutOfMemoryError: injected"),
        ("rank 1", "OutOfMemoryError: injected"),
        ("rank 1", "FloatingPointError: non-finite backbone features"),
        ("rank 0", "RuntimeError: injected inside the products"),
    ]
    for reason, (rank, what) in zip(reasons, expected, strict=True):
        assert f"{rank}: {what}" in reason, reason
    first, last = (
        {k: v for k, v in zero["records"][i][1].items() if not k.endswith("/seconds")}
        for i in (0, -1)
    )
    assert first == last  # same parameters and batch: the skips changed nothing
