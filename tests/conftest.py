"""Shared test fixtures: the four SSL losses written out by hand, as functions of H (V, N, p).

And ``digits``: the size-32 digits on disk, built once per session for every module that reads it.

Also the run's count of solo-learn tests (marked ``solo``), printed in the terminal summary, so a
CI log says whether the solo-learn host was tested at all.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

pytest_plugins = ("pytester",)  # tests/hosts/test_warm_python.py runs an inner pytest


def nt_xent(h: Tensor, temperature: float = 0.5) -> Tensor:
    """NT-Xent / InfoNCE over 2N samples (SimCLR)."""
    v, n, _ = h.shape
    z = F.normalize(h.reshape(v * n, -1), dim=1)  # (2N, p)
    sim = z @ z.T / temperature
    sim = sim.masked_fill(torch.eye(v * n, dtype=torch.bool), float("-inf"))
    targets = (torch.arange(v * n) + n) % (v * n)
    return F.cross_entropy(sim, targets)


def neg_cosine(h: Tensor) -> Tensor:
    """Symmetric negative cosine with stop-gradient targets (SimSiam / BYOL form)."""
    a = F.cosine_similarity(h[0], h[1].detach(), dim=-1).mean()
    b = F.cosine_similarity(h[1], h[0].detach(), dim=-1).mean()
    return -(a + b) / 2


def vicreg(h: Tensor) -> Tensor:
    """VICReg: 25 invariance + 25 variance + 1 covariance."""
    n, p = h.shape[1:]
    inv = F.mse_loss(h[0], h[1])
    var = sum(F.relu(1.0 - torch.sqrt(x.var(dim=0) + 1e-4)).mean() for x in h)
    cov = 0.0
    for x in h:
        xc = x - x.mean(dim=0)
        c = xc.T @ xc / (n - 1)
        cov = cov + (c.pow(2).sum() - c.diagonal().pow(2).sum()) / p
    return 25.0 * inv + 25.0 * var + cov


def barlow_twins(h: Tensor, lambd: float = 5e-3) -> Tensor:
    """Barlow Twins cross-correlation loss."""
    n = h.shape[1]
    a = (h[0] - h[0].mean(0)) / h[0].std(0)
    b = (h[1] - h[1].mean(0)) / h[1].std(0)
    c = a.T @ b / n
    on = (1 - c.diagonal()).pow(2).sum()
    off = c.pow(2).sum() - c.diagonal().pow(2).sum()
    return on + lambd * off


SSL_LOSSES: dict[str, Callable[[Tensor], Tensor]] = {
    "nt_xent": nt_xent,
    "neg_cosine": neg_cosine,
    "vicreg": vicreg,
    "barlow_twins": barlow_twins,
}


@pytest.fixture(params=sorted(SSL_LOSSES))
def ssl_loss(request: pytest.FixtureRequest) -> Callable[[Tensor], Tensor]:
    """Each of the four hand-written SSL losses in turn."""
    return SSL_LOSSES[request.param]


@pytest.fixture
def ssl_losses() -> dict[str, Callable[[Tensor], Tensor]]:
    """All four hand-written SSL losses by name."""
    return SSL_LOSSES


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    """Each test leaves ``os.environ`` as it found it.

    Code run in the test process sets variables and leaves them (Lightning's ``seed_everything``
    sets ``PL_GLOBAL_SEED``): a later test would run under them, and the warm interpreter of
    tests/hosts/warm_python.py, started under another environment, could not serve it (each run
    then paid its imports again). Fixtures of wider scope are set up before this snapshot.
    """
    with mock.patch.dict(os.environ):  # put back as it was on exit: set, changed or removed
        yield


@pytest.fixture(scope="session")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded digits written to disk at size 32 (train/ and val/ image folders), read-only.

    Built once per test session and shared by the pytest-xdist workers (``build_once``). Its
    tests carry no ``shared`` marker: the build takes seconds, so a worker that waits for it
    loses little, while the marker would move the long cases that read it after the others.
    A test that changes files of the data writes its own copy (``make_digits`` on a tmp_path).
    """
    from solo_geometry.inputs.digits import make_digits
    from tests.shared import build_once

    out = build_once(tmp_path_factory, "digits32", lambda f: make_digits(f / "digits", size=32))
    return out / "digits"


# The modules whose tests run a real recipe (a pretrain through the CLI, solo-learn's
# main_pretrain.py, a sweep, a DDP group): each of their tests is marked ``e2e``, and so is every
# ``slow`` case. ``make check`` (the fast layer) runs the rest: ``-m "not e2e"``.
E2E_MODULES = frozenset(
    {
        "tests/hosts/test_ddp.py",
        "tests/hosts/test_lightly_host.py",
        "tests/hosts/test_lightly_simsiam.py",
        "tests/hosts/test_solo_e2e.py",
        "tests/hosts/test_solo_methods_e2e.py",
        "tests/hosts/test_solo_methods_extra.py",
        "tests/hosts/test_solo_precision.py",
        "tests/reproduce/invariance/test_invariance.py",
        "tests/runtime/test_updates.py",
        "tests/test_bad_input.py",
        "tests/test_bench_gpu.py",
        "tests/hosts/test_demo.py",
        "tests/test_faults.py",
        "tests/test_hydra_plugin.py",
        "tests/analysis/test_probes.py",
        "tests/analysis/test_report.py",
        "tests/folder/test_resume.py",
        "tests/folder/test_resume_finish.py",
        "tests/reproduce/test_sweeps.py",
        "tests/reproduce/collapse/test_collapse.py",
        "tests/folder/test_run_lock.py",
        "tests/upstream/test_upstream.py",
        "tests/zoo/test_zoo_build.py",
    }
)


# The fuzzers (hypothesis, tests/fuzz/conftest.py's profiles): each of their tests is marked
# ``fuzz`` and ``slow`` (so ``e2e``): make test runs them first on a worker, make check skips
# them, make fuzz runs them alone with the long profile.
FUZZ_FOLDER = "tests/fuzz/"


def _is_e2e(item: Any) -> bool:
    """Whether a test runs a real recipe: its module is in E2E_MODULES, or it is slow."""
    path = str(getattr(item, "path", "")).replace("\\", "/")
    in_module = any(path.endswith(module) for module in E2E_MODULES)
    return in_module or item.get_closest_marker("slow") is not None


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Mark the end-to-end cases ``e2e``; long cases (marked ``slow``) first.

    ``make test`` hands tests to its workers one at a time (pytest-xdist ``--dist load
    --maxschedchunk 1``), so the end-to-end runs start first on every worker and the short cases
    fill the end: no worker finishes alone on a case of minutes. Before them all, the first test
    of each ``shared`` group: it builds the group's folder (``build_once`` in
    ``tests/shared.py``) while the other worker starts on the long cases; the group's other tests
    come after the long cases, when the folder is built, so no worker waits for it or builds it
    again. The order is the same on every worker (a stable sort), as xdist requires.
    """
    for item in items:
        if FUZZ_FOLDER in str(getattr(item, "path", "")).replace("\\", "/"):
            item.add_marker(pytest.mark.fuzz)
            item.add_marker(pytest.mark.slow)
        if _is_e2e(item):
            item.add_marker(pytest.mark.e2e)
    firsts: dict[str, Any] = {}
    for item in items:
        marker = item.get_closest_marker("shared")
        if marker is not None:
            firsts.setdefault(marker.args[0], item)
    builders = {id(item) for item in firsts.values()}

    def rank(item: Any) -> int:
        if id(item) in builders:
            return 0
        if item.get_closest_marker("shared") is not None:
            return 2  # after the long cases: the folder is built by then
        return 1 if item.get_closest_marker("slow") is not None else 3

    items.sort(key=rank)


def _solo_reason(report: Any) -> str | None:
    """The skip reason of a report if it names solo-learn, else None."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason if "solo-learn" in reason or "SOLO_LEARN_ROOT" in reason else None


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    """Print how many solo-learn tests passed, failed and skipped (and modules skipped whole)."""
    counts: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for outcome in ("passed", "failed", "error", "skipped"):
        for report in terminalreporter.stats.get(outcome, []):
            marked = "solo" in getattr(report, "keywords", {})
            reason = _solo_reason(report) if outcome == "skipped" else None
            if marked or reason:
                counts["modules skipped" if report.when == "collect" else outcome] += 1
            if reason:
                reasons[reason.removeprefix("Skipped: ")] += 1
    ran = counts["passed"] + counts["failed"] + counts["error"]
    line = ", ".join(
        f"{counts[k]} {k}"
        for k in ("passed", "failed", "error", "skipped", "modules skipped")
        if counts[k]
    )
    terminalreporter.write_sep("-", f"solo-learn tests: {ran} ran ({line or 'none collected'})")
    for reason, n in reasons.most_common():
        terminalreporter.write_line(f"  skipped ({n}): {reason}")
