"""Resume after a kill: real runs killed with SIGKILL inside the write of a record, then resumed;
and after a preemption (SIGTERM or SIGUSR1 to the process group, data-loader workers running).

Each case trains the same tiny digits recipe three times, as subprocesses: once uninterrupted,
once killed (the hook of ``fault_hooks`` writes half of the record of a step after the first
checkpoint, flushes it and sleeps; the test then sends SIGKILL to the whole process group), and
once resumed. The resumed ``geometry.jsonl`` must hold the uninterrupted run's steps, each
once, in increasing order, every line whole: the torn record repaired, the records up to the
checkpoint kept as written, those after it written again by the resumed run.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent.parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "hosts"))
from fault_hooks import hooked_env  # noqa: E402
from lightly_support import recipe_dict, write_recipe  # noqa: E402

from solo_geometry.folder.records import GeometryRecord, read_records  # noqa: E402
from solo_geometry.folder.run_folder import RunFolder  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
HAS_SOLO = importlib.util.find_spec("solo") is not None
SOLO_REASON = "solo-learn 1.0.6 is not importable (pip install '.[solo]', docs/getting-started.md)"
# Cheap records (statistics only) at every step; 2 epochs of 2 steps, a checkpoint per epoch:
# records at steps 0, 1, 2, 3 and the final one at 4; the checkpoint of epoch 0 holds step 2.
CHEAP = [
    "+geometry=on",
    "geometry.every_n_steps=1",
    "geometry.budget=null",
    "geometry.measure.hessian=false",
    "geometry.measure.augment=false",
    "geometry.probes.enabled=false",
    "geometry.report=false",
    "optimizer.batch_size=8",
]
STEPS = [0, 1, 2, 3, 4]
TEAR_AT = 3  # after the checkpoint of epoch 0 (global step 2)
CLI = "import sys\nfrom solo_geometry.cli import main\nsys.exit(main(sys.argv[1:]))"
HOSTS = [
    "lightly",
    pytest.param(
        "solo", marks=[pytest.mark.solo, pytest.mark.skipif(not HAS_SOLO, reason=SOLO_REASON)]
    ),
]


def _recipe(folder: Path, digits: Path) -> Path:
    checkpoint = {"enabled": True, "dir": "trained_models", "frequency": 1}
    return write_recipe(folder, "simclr", digits, checkpoint=checkpoint, max_epochs=2)


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A process in its own session (so the kill reaches solo-learn's child too)."""
    with log.open("wb") as out:
        return subprocess.Popen(
            args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _finish(args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
    proc = _start(args, env or _env(), log)
    assert proc.wait(timeout=900) == 0, log.read_text()[-4000:]


def _kill_inside_record(args: list[str], tmp: Path) -> None:
    """Run ``args`` until it is half-way through the record of TEAR_AT, then SIGKILL it."""
    mark = tmp / "torn.mark"
    env = hooked_env(tmp / "hooks", SG_TEAR_AT=str(TEAR_AT), SG_TEAR_MARK=str(mark))
    log = tmp / "killed.log"
    proc = _start(args, env, log)
    deadline = time.monotonic() + 900
    while not mark.exists():
        assert proc.poll() is None, f"exited before the tear: {log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, "no tear within 15 minutes"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL


def _whole_records(run: Path) -> list[GeometryRecord]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a torn line left over would warn
        records = read_records(run)
    assert RunFolder(run).geometry.read_text().endswith("\n")
    return records


def _only_run(root: Path) -> Path:
    runs = [p for p in root.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def _checkpoint_step(run: Path) -> int:
    latest = RunFolder(run).latest_checkpoint()
    assert latest is not None, sorted(run.rglob("*"))
    ckpt = torch.load(latest, map_location="cpu", weights_only=False)
    return int(ckpt["geometry"]["summary"]["last_step"])


def _check_resumed(run: Path, before: dict[int, float], kept_through: int) -> None:
    records = _whole_records(run)
    steps = [r.step for r in records]
    assert steps == STEPS  # the uninterrupted run's steps: none missing, none twice
    assert all(a < b for a, b in zip(steps, steps[1:], strict=False))
    assert records[-1].final and all(r.ok for r in records), [r.reason for r in records]
    # kept as written up to the checkpoint's last record; measured again after it
    assert all(r.seconds == before[r.step] for r in records if r.step <= kept_through)
    assert all(r.seconds != before.get(r.step) for r in records if r.step > kept_through)


@pytest.mark.slow
class TestResumeAfterKill:
    @pytest.mark.parametrize("host", HOSTS)
    def test_pretrain_resume(self, host: str, digits: Path, tmp_path: Path) -> None:
        """``solo-geometry pretrain --resume RUN`` after a SIGKILL inside a record."""
        recipe = _recipe(tmp_path / "recipes", digits)
        base = [sys.executable, "-c", CLI, "pretrain", "--config", str(recipe), "--host", host]
        # no uninterrupted run to compare with: STEPS are its steps by the cadence (CHEAP)
        _kill_inside_record([*base, "--runs-root", str(tmp_path / "runs"), *CHEAP], tmp_path)
        run = _only_run(tmp_path / "runs")
        text = RunFolder(run).geometry.read_text()
        assert not text.endswith("\n")  # the kill landed inside the record of TEAR_AT
        kept_through = _checkpoint_step(run)
        assert kept_through < TEAR_AT
        with pytest.warns(UserWarning, match="torn last record"):
            before = {r.step: r.seconds for r in read_records(run)}
        assert sorted(before) == list(range(TEAR_AT))
        hydra = {p: p.read_bytes() for p in sorted(run.glob(".hydra/*.yaml"))}
        assert bool(hydra) == (host == "solo")

        _finish(
            [sys.executable, "-c", CLI, "pretrain", "--resume", str(run)], tmp_path / "resumed.log"
        )
        assert "resuming" in (tmp_path / "resumed.log").read_text()
        _check_resumed(run, before, kept_through)
        assert {p: p.read_bytes() for p in sorted(run.glob(".hydra/*.yaml"))} == hydra
        assert not (run / RunFolder.INCOMPLETE).exists()
        assert [p.name for p in (tmp_path / "runs").iterdir()] == [run.name]  # resumed in place


@pytest.mark.slow
@pytest.mark.solo
@pytest.mark.skipif(not HAS_SOLO, reason=SOLO_REASON)
class TestSoloAutoResume:
    def test_main_pretrain_auto_resume(self, digits: Path, tmp_path: Path) -> None:
        """solo-learn's own main_pretrain.py with ``auto_resume``, run again after the kill."""
        import solo

        root = Path(solo.__file__).resolve().parents[1]
        recipe = _recipe(tmp_path / "recipes", digits)
        run = tmp_path / "run"
        run.mkdir()
        args = [
            sys.executable,
            str(root / "main_pretrain.py"),
            "--config-path",
            str(recipe.parent),
            "--config-name",
            recipe.stem,
            f"hydra.run.dir={run}",
            f"checkpoint.dir={tmp_path / 'ckpt'}",
            "auto_resume.enabled=True",
            "++default_root_dir=" + str(run),
            *CHEAP,
        ]
        _kill_inside_record(args, tmp_path)
        assert not RunFolder(run).geometry.read_text().endswith("\n")
        ckpt = next((tmp_path / "ckpt").rglob("*.ckpt"))
        state = torch.load(ckpt, map_location="cpu", weights_only=False)
        kept_through = int(state["geometry"]["summary"]["last_step"])
        with pytest.warns(UserWarning, match="torn last record"):
            before = {r.step: r.seconds for r in read_records(run)}
        _finish(args, tmp_path / "resumed.log")  # the same command: auto_resume finds the ckpt
        assert "Resuming from previous checkpoint" in (tmp_path / "resumed.log").read_text()
        _check_resumed(run, before, kept_through)


# What Slurm sets in a batch job of one task (Lightning's SLURMEnvironment then manages it).
SLURM_JOB = {
    "SLURM_NTASKS": "1",
    "SLURM_NTASKS_PER_NODE": "1",
    "SLURM_NNODES": "1",
    "SLURM_JOB_NAME": "sg-requeue",
    "SLURM_JOB_ID": "4242",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_NODELIST": "127.0.0.1",
}
PAUSE_AT = 2  # the first step of epoch 1: after the checkpoint of epoch 0, mid-epoch
PREEMPT = [
    pytest.param("lightly", signal.SIGTERM, id="lightly-SIGTERM"),
    pytest.param("lightly", signal.SIGUSR1, id="lightly-SIGUSR1"),
    pytest.param(
        "solo",
        signal.SIGTERM,
        id="solo-SIGTERM",
        marks=[pytest.mark.solo, pytest.mark.skipif(not HAS_SOLO, reason=SOLO_REASON)],
    ),
]


def _processes_with(text: str) -> list[int]:
    """Pids of live processes whose environment holds ``text`` (the run's own processes)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _wait_for(path: Path, proc: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + 900
    while not path.exists():
        assert proc.poll() is None, f"exited before {what}: {log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"no {what} within 15 minutes"
        time.sleep(0.1)


def _preempt_inside_step(
    args: list[str],
    tmp: Path,
    signum: int,
    extra: dict[str, str] | None = None,
    first: tuple[int, Path] | None = None,
) -> tuple[int, str]:
    """Run ``args`` until the record of PAUSE_AT, signal its process group; status and log.

    ``extra`` joins the environment; ``first``: a signal sent before, and the file whose
    appearance says it was handled.
    """
    mark, go, log = tmp / "paused.mark", tmp / "go.mark", tmp / "preempted.log"
    env = {
        **hooked_env(
            tmp / "hooks", SG_PAUSE_AT=str(PAUSE_AT), SG_PAUSE_MARK=str(mark), SG_PAUSE_GO=str(go)
        ),
        **(extra or {}),
    }
    proc = _start(args, env, log)
    _wait_for(mark, proc, log, "the pause")
    if first is not None:
        os.killpg(proc.pid, first[0])
        _wait_for(first[1], proc, log, f"the effect of {signal.Signals(first[0]).name}")
    os.killpg(proc.pid, signum)  # as a scheduler: every process of the job, workers included
    time.sleep(0.5)
    go.write_text("go")
    status = proc.wait(timeout=300)
    deadline = time.monotonic() + 30  # no orphan: the trainer and its workers end with it
    while _processes_with(str(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _processes_with(str(mark)), "processes of the run outlived it"
    return status, log.read_text()


@pytest.mark.slow
class TestPreemption:
    @pytest.mark.parametrize(("host", "signum"), PREEMPT)
    def test_signal_checkpoints_at_the_step_then_resume_completes(
        self, host: str, signum: int, digits: Path, tmp_path: Path
    ) -> None:
        """SIGTERM (SIGUSR1) to the process group mid-run, data-loader workers running."""
        data = {**recipe_dict("simclr", digits)["data"], "num_workers": 2}
        checkpoint = {"enabled": True, "dir": "trained_models", "frequency": 1}
        recipe = write_recipe(
            tmp_path / "recipes", "simclr", digits, checkpoint=checkpoint, max_epochs=2, data=data
        )
        args = [
            sys.executable,
            "-c",
            CLI,
            "pretrain",
            "--config",
            str(recipe),
            "--host",
            host,
            "--runs-root",
            str(tmp_path / "runs"),
            *CHEAP,
        ]
        status, log = _preempt_inside_step(args, tmp_path, signum)
        run = _only_run(tmp_path / "runs")
        name = signal.Signals(signum).name
        assert status == 128 + signum, log[-4000:]
        line = (
            f"solo-geometry pretrain: preempted by {name} after step {PAUSE_AT}: checkpoint "
            f"'{run}/checkpoints/preempted.ckpt' written; resume with: solo-geometry pretrain "
            f"--resume {run}"
        )  # stdout and stderr share the log: a progress bar may close after it
        assert log.splitlines().count(line) == 1, log[-4000:]
        assert "Traceback" not in log and "killed by signal" not in log, log[-4000:]
        assert RunFolder(run).latest_checkpoint() == RunFolder(run).preempted_checkpoint
        assert _checkpoint_step(run) == PAUSE_AT  # the monitor's state, through the paused step
        before = {r.step: r.seconds for r in _whole_records(run)}
        assert sorted(before) == list(range(PAUSE_AT + 1))

        _finish(
            [sys.executable, "-c", CLI, "pretrain", "--resume", str(run)], tmp_path / "resumed.log"
        )
        _check_resumed(run, before, PAUSE_AT)  # the uninterrupted run's steps (the kill test)
        assert not (run / RunFolder.INCOMPLETE).exists()
        assert not RunFolder(run).preempted.exists()

    def test_slurm_requeue_resumes_the_jobs_own_run(self, digits: Path, tmp_path: Path) -> None:
        """Lightning's SLURM environment: SIGUSR1 saves ``hpc_ckpt_1.ckpt`` and requeues the job
        (``scontrol requeue``), Slurm's SIGTERM stops it; the requeued job's same command resumes
        that run in place, with the uninterrupted run's records."""
        scontrol, calls = tmp_path / "bin" / "scontrol", tmp_path / "scontrol.calls"
        scontrol.parent.mkdir()
        scontrol.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')  # Slurm's side, on PATH
        scontrol.chmod(0o755)
        slurm = {**SLURM_JOB, "PATH": f"{scontrol.parent}{os.pathsep}{os.environ['PATH']}"}
        recipe = _recipe(tmp_path / "recipes", digits)
        args = [
            sys.executable,
            "-c",
            CLI,
            "pretrain",
            "--config",
            str(recipe),
            "--host",
            "lightly",
            "--runs-root",
            str(tmp_path / "runs"),
            *CHEAP,
        ]
        status, log = _preempt_inside_step(
            args, tmp_path, signal.SIGTERM, slurm, first=(signal.SIGUSR1, calls)
        )
        run = _only_run(tmp_path / "runs")
        assert status == 128 + signal.SIGTERM, log[-4000:]
        assert calls.read_text() == f"requeue {SLURM_JOB['SLURM_JOB_ID']}\n"
        assert (run / "hpc_ckpt_1.ckpt").is_file() and (run / RunFolder.SLURM_JOB).is_file()
        before = {r.step: r.seconds for r in _whole_records(run)}

        requeued = {**_env(), **slurm, "SLURM_RESTART_COUNT": "1"}
        _finish(args, tmp_path / "requeued.log", requeued)  # the job script again, unchanged
        text = (tmp_path / "requeued.log").read_text()
        assert f"Slurm requeued job 4242: resuming its run {run}" in text, text[-4000:]
        assert _only_run(tmp_path / "runs") == run
        _check_resumed(run, before, PAUSE_AT)
