"""Sweeps on Hydra's own launchers: joblib locally, submitit's executor, the progress callback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf

from solo_geometry.hosts.sweeps import (
    PROGRESS_CALLBACK,
    SweepProgress,
    available_cores,
    finish,
    launch_overrides,
    sweep_size,
)
from solo_geometry.reproduce.collapse import reproduce_collapse
from solo_geometry.reproduce.collapse.protocol import Block, Protocol

REPO = Path(__file__).resolve().parents[2]
# A user's own Hydra app: nothing of this package but the callback named on the command line.
APP = """
import hydra

@hydra.main(version_base=None, config_path=None, config_name=None)
def main(cfg):
    return f"a={cfg.a} b={cfg.b}"

main()
"""


class TestLaunchOverrides:
    def test_joblib_sized_by_cores_and_threads(self) -> None:
        cores = available_cores()
        assert launch_overrides(None, 1) == [
            "hydra/launcher=joblib",
            f"hydra.launcher.n_jobs={cores}",
            PROGRESS_CALLBACK,
        ]
        assert f"hydra.launcher.n_jobs={max(1, cores // 2)}" in launch_overrides(None, 2)
        assert "hydra.launcher.n_jobs=1" in launch_overrides(None, 10_000)
        assert "hydra.launcher.n_jobs=3" in launch_overrides(3, 4)

    def test_a_chosen_launcher_replaces_joblib(self) -> None:
        slurm = launch_overrides(None, 4, ["hydra/launcher=submitit_slurm"])
        assert slurm == [PROGRESS_CALLBACK, "hydra.launcher.cpus_per_task=4"]
        assert launch_overrides(2, 1, ["hydra/launcher=basic"]) == [PROGRESS_CALLBACK]

    @pytest.mark.parametrize(("jobs", "threads"), [(0, 1), (None, 0), (-1, 2)])
    def test_bad_sizes(self, jobs: int | None, threads: int) -> None:
        with pytest.raises(ValueError, match=f"jobs={jobs}, threads={threads}"):
            launch_overrides(jobs, threads)

    def test_sweep_size(self) -> None:
        assert sweep_size(["a=1,2,3", "b=x,y", "c=5", "hydra/launcher=joblib"]) == 6
        assert sweep_size(["a=range(0,4)"]) == 4
        assert sweep_size(["a=1"]) == 1


def test_jobs_that_finish_together_count_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Job 1's line lands after job 0's, and job 2's before job 1 reads the list back: 2nd."""
    (tmp_path / "finished").write_text("0\n")
    read = Path.read_text

    def another_job_first(self: Path, *args: object, **kwargs: object) -> str:
        with open(self, "a") as fh:
            fh.write("2\n")
        return read(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", another_job_first)
    assert finish(tmp_path, 1) == 2  # the file's length would say 3, job 2's count too


def test_a_jobs_line_is_one_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs of a sweep print to one stream at once: a line written in two parts (print() under
    PYTHONUNBUFFERED writes the newline apart) can land inside another job's line."""
    cfg = OmegaConf.create(
        {
            "hydra": {
                "sweep": {"dir": str(tmp_path)},
                "overrides": {"task": ["+a=1,2"]},
                "job": {"num": 1},
                "launcher": {"_target_": "hydra_plugins.JoblibLauncher"},
            }
        }
    )
    SweepProgress().on_multirun_start(cfg)
    writes: list[str] = []

    class Stream:
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    monkeypatch.setattr(sys, "stdout", Stream())
    job = JobReturn(overrides=["+a=2"], status=JobStatus.COMPLETED, _return_value="a=2")
    SweepProgress().on_job_end(cfg, job)
    assert len(writes) == 1 and re.fullmatch(r"\[sweep\] 1/2 done \(\d+ s\): a=2\n", writes[0])


def test_user_sweep_on_joblib_prints_progress(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    args = [
        sys.executable,
        "app.py",
        "--multirun",
        "+a=1,2",
        "+b=x,y",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        PROGRESS_CALLBACK,
        f"hydra.sweep.dir={tmp_path / 's'}",
    ]
    proc = subprocess.run(
        args,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("[sweep]")]
    assert lines[0] == "[sweep] 4 job(s) on JoblibLauncher", proc.stdout
    matches = [
        re.fullmatch(r"\[sweep\] (\d)/4 done \(\d+ s\): (a=\d b=\w)", ln) for ln in lines[1:]
    ]
    assert all(matches), proc.stdout  # each job's line whole, on its own
    done = sorted(m.groups() for m in matches if m)
    assert [d[0] for d in done] == ["1", "2", "3", "4"]
    assert sorted(d[1] for d in done) == ["a=1 b=x", "a=1 b=y", "a=2 b=x", "a=2 b=y"]


def test_collapse_sweep_on_submitit_local(tmp_path: Path) -> None:
    """Two cells through submitit's executor: the path a Slurm cluster takes, on one machine."""
    two = Protocol(
        epochs=1,
        steps_per_epoch=2,
        batch_size=16,
        every_n_steps=2,
        seeds=(0,),
        grid=(Block(("linear", "swish"), ("none",), (1.0,)),),
    )
    extra = ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=30"]
    summary = reproduce_collapse(tmp_path, quick=True, host="lightly", protocol=two, extra=extra)
    assert sorted(r.head for r in summary.rows) == ["linear", "swish"]
    for row in summary.rows:
        cell = json.loads((tmp_path / "cells" / f"{row.head}-none-lr0.05-s0.json").read_text())
        assert cell["row"]["final_std"] == row.final_std and row.steps == 2
    jobs = [p for p in (tmp_path / "hydra" / ".submitit").iterdir() if p.name != "%j"]
    assert len(jobs) == 2  # one submitit job per cell, each with its own logs
    logs = "".join(log.read_text() for log in (tmp_path / "hydra" / ".submitit").rglob("*.out"))
    assert len(re.findall(r"\[sweep\] [12]/2 done \(\d+ s\): \w+-none-lr0.05-s0: std", logs)) == 2
    assert (tmp_path / "hydra" / "multirun.yaml").is_file()
