"""The demo (``make demo``): findings read back from run files, and the reduced form end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from solo_geometry.folder.probe_table import OrbitRow, ProbeRow, ProbeTable
from solo_geometry.folder.records import GeometryRecord
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.hosts.demo import (
    FULL,
    QUICK,
    QUICK_ENV,
    demo_overrides,
    findings,
    format_findings,
    run_demo,
)

REPO = Path(__file__).resolve().parents[2]


def _fake_run(run: Path) -> Path:
    run.mkdir(parents=True)
    folder = RunFolder(run)
    for record in (
        GeometryRecord(
            0,
            0,
            "ok",
            metrics={"m/lambda_min": -0.25, "interaction_ratio": 0.5},
            parts=["stats", "hessian"],
        ),
        GeometryRecord(5, 0, "skipped", reason="x"),
        GeometryRecord(
            10,
            1,
            "ok",
            metrics={"m/lambda_min": -0.125, "interaction_ratio": 0.75},
            parts=["stats", "hessian"],
            alert={"state": "dimensional"},
        ),
        # the budget deferred the final record's spectra: the findings skip it
        GeometryRecord(
            12,
            1,
            "ok",
            metrics={"z/cond": 3.0},
            parts=["stats"],
            final=True,
            deferred_parts={"hessian": "budget: ..."},
            alert={"state": "healthy", "diagnosis": None},
        ),
    ):
        folder.append_record(record)
    rows = [
        ProbeRow("z", "linear", "class", 0.9, 0.1, random_init=0.95),  # below its random init
        ProbeRow("h", "linear", "class", 0.8, 0.1, random_init=0.5),
        ProbeRow("z", "linear", "rotation", 0.7, 0.25),  # random init not measured
    ]
    orbit = OrbitRow("brightness", 0.4, 8, {}, {}, 2.5, [2.75, 0.5])
    folder.write_probes(ProbeTable(rows, [orbit]))
    return run


class TestFindings:
    def test_reads_first_and_last_ok_record(self, tmp_path: Path) -> None:
        result = findings(_fake_run(tmp_path / "run"))
        assert result["n_records"] == 3
        assert [g["step"] for g in result["geometry"]] == [0, 10]
        assert result["geometry"][1]["m/lambda_min"] == -0.125
        assert result["orbits"] == {"brightness": (2.5, 2.75, 0.5)}
        # (target, probe, Z, H, Z at random init, H at random init)
        assert ("class", "linear", 0.9, 0.8, 0.95, 0.5) in result["probes"]
        assert ("rotation", "linear", 0.7, None, None, None) in result["probes"]
        assert result["random_init"] == (
            "below its random initialisation: Z linear class (0.900 against 0.950)"
        )
        # the collapse alert: the last record's state, the worst one over the run
        assert result["alert"] == {"last": "healthy", "worst": "dimensional", "diagnosis": None}
        assert "collapse alert" in format_findings(result)

    def test_table_text(self, tmp_path: Path) -> None:
        result = findings(_fake_run(tmp_path / "run"))
        text = format_findings({**result, "host": "lightly", "run": "R"})
        assert "host used:  lightly" in text and "run folder: R" in text
        assert "-2.500e-01" in text and "+7.500e-01" in text
        assert "brightness" in text and "2.500    [2.750 +- 0.500]" in text
        class_line = next(line for line in text.splitlines() if line.startswith("  class"))
        # Z, its random init, Z - random init, H, its random init, H - random init, Z - H
        assert class_line.split()[2:] == [
            "0.900",
            "0.950",
            "-0.050",
            "0.800",
            "0.500",
            "+0.300",
            "+0.100",
        ]
        assert "below its random initialisation: Z linear class (0.900 against 0.950)" in text

    def test_one_spectral_record_is_shown_once(self, tmp_path: Path) -> None:
        run = tmp_path / "run"
        run.mkdir()
        folder = RunFolder(run)
        folder.append_record(
            GeometryRecord(0, 0, "ok", parts=["stats", "hessian"], metrics={"m/lambda_min": -0.25})
        )
        folder.append_record(GeometryRecord(30, 0, "ok", metrics={"z/cond": 3.0}, parts=["stats"]))
        result = findings(run)
        assert [g["step"] for g in result["geometry"]] == [0]
        text = format_findings({**result, "host": "lightly", "run": "R"})
        assert text.count("step 0") == 1 and "the one record with spectra" in text
        assert text.count("-2.500e-01") == 1

    def test_missing_files(self, tmp_path: Path) -> None:
        result = findings(tmp_path)
        none = {"last": None, "worst": None, "diagnosis": None}
        assert result == {
            "geometry": [],
            "n_records": 0,
            "orbits": {},
            "probes": [],
            "random_init": None,
            "alert": none,
        }
        assert "no successful measurement" in format_findings(result)


class TestSettings:
    def test_quick_is_smaller(self) -> None:
        assert (
            QUICK.max_epochs * QUICK.limit_train_batches
            < FULL.max_epochs * FULL.limit_train_batches
        )
        assert QUICK.max_samples < FULL.max_samples
        assert set(QUICK.probes) < set(FULL.probes) and QUICK.orbit_images < FULL.orbit_images

    def test_overrides_switch_geometry_on_with_smooth_head(self, tmp_path: Path) -> None:
        ov = demo_overrides(tmp_path, QUICK)
        assert "+geometry=on" in ov
        assert "geometry.head.name=smooth_mlp" in ov and "geometry.head.activation=swish" in ov
        assert f"data.train_path={(tmp_path / 'train').resolve()}" in ov

    def test_missing_recipe(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError, match="nope"):
            run_demo(tmp_path, quick=True, recipe=tmp_path / "nope.yaml")


@pytest.mark.slow
class TestQuickDemo:
    def test_lightly_host(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        result = run_demo(tmp_path / "demo", quick=True, host="lightly")
        out = capsys.readouterr().out
        run = Path(result["run"])
        assert result["host"] == "lightly"
        assert run.is_dir() and str(run) in out
        for stage in range(1, 5):
            assert f"[demo {stage}/4]" in out
        assert result["n_records"] >= 2  # first and last measurement
        assert result["geometry"][0]["m/lambda_min"] is not None
        assert result["orbits"] and result["probes"]
        assert (run / "report" / "index.html").is_file()
        assert "lambda_min(M)" in out and "Z - H" in out
        # the same network at random initialisation beside Z and H (the lightly host's constructor)
        assert all(None not in row[2:] for row in result["probes"]), result["probes"]
        assert "Z - rand" in out and result["random_init"] in out
        assert "random init" in (run / "report" / "index.html").read_text()

    def test_regular_install_outside_the_source_tree(self, tmp_path: Path) -> None:
        """``pip install .`` (not editable), run elsewhere: recipes and data are package data.

        The package is installed without dependencies into its own folder, put first on the path
        (the dependencies come from this environment), and the demo runs from another folder,
        cut down by the environment variable as ``make demo`` would be.
        """
        site = tmp_path / "site"
        install = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(REPO),
        ]
        assert subprocess.run(install, capture_output=True, timeout=600).returncode == 0
        env = {**os.environ, QUICK_ENV: "1", "PYTHONPATH": str(site)}
        # one process: where the package and its recipe were imported from, then the demo as
        # `python -m solo_geometry.cli demo` runs it (runpy, what -m calls); not a second
        # process that pays the imports for the first line only
        demo = ["solo_geometry.cli", "demo", "--out", str(tmp_path / "d")]
        code = (
            "import runpy, sys\n"
            "import solo_geometry.hosts.demo as d\n"
            "print('imported from', d.__file__, d.RECIPE, flush=True)\n"
            f"sys.argv = {demo!r}\n"
            "runpy.run_module('solo_geometry.cli', run_name='__main__', alter_sys=True)\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=900,
        )
        where = proc.stdout.splitlines()[0].split() if proc.stdout else []
        assert where[:2] == ["imported", "from"], proc.stdout[:3000] + proc.stderr[-3000:]
        module, recipe = where[2:]
        assert module.startswith(str(site)) and recipe.startswith(str(site)), where
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "quick form" in proc.stdout
        assert "host used:" in proc.stdout and "run folder:" in proc.stdout
        assert "probe accuracy" in proc.stdout
