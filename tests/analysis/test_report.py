"""The run report (solo_geometry.analysis.report and .plots) from hand-written run folders."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from solo_geometry.analysis import plots
from solo_geometry.analysis.report import write_report
from solo_geometry.cli import main as cli_main
from solo_geometry.folder.probe_table import OrbitRow, ProbeRow, ProbeTable
from solo_geometry.folder.records import GeometryRecord, Settings
from solo_geometry.folder.run_folder import RunFolder
from tests.shared import digits_subset

FAMILIES = ("brightness", "contrast", "saturation", "hue")


def _record(
    step: int, head_scale: float, rng: np.random.Generator, density: bool, tau: float = 1e-10
) -> GeometryRecord:
    lmax = 2.0 * head_scale * (1 + 0.1 * step / 50)
    rec: dict = {}
    for op, lo in (("heff", -0.3), ("gn", 1e-12), ("m", -0.4)):
        rec |= {
            f"{op}/lambda_min": lo * head_scale,
            f"{op}/lambda_max": lmax * (0.5 + (op == "heff")),
            f"{op}/neg_fraction": 0.1 * (lo < 0),
            f"{op}/neg_fraction_std": 0.01,
            f"{op}/cond": float(10 ** rng.uniform(2, 5)),
        }
    rec["interaction_ratio"] = 0.2 + 0.01 * step / 50
    for x, dim in (("z", 512), ("h", 128)):
        rec |= {
            f"{x}/normalized_std": 1 / np.sqrt(dim) * (1 - np.exp(-step / 100 - 0.1)),
            f"{x}/cond": 1e3,
            f"{x}/rank": dim // 2,
            f"{x}/rankme_l2": dim / 3 + step / 10,
        }
    rec |= {f"rho/{f}": float(10 ** rng.uniform(-3, 0)) for f in FAMILIES}
    dens = None
    if density:
        nodes = np.sort(rng.normal(0.5, 0.6, 40)) * head_scale
        dens = {"nodes": nodes.tolist(), "weights": (np.ones(40) / 40).tolist()}
    floor = tau * max(abs(rec["heff/lambda_min"]), abs(rec["heff/lambda_max"]))
    settings = Settings(dtype="float64" if tau == 1e-10 else "float32", tau=tau, floor=floor)
    parts = ["stats", "hessian", "augment"] + ["density"] * density
    return GeometryRecord(
        step,
        step // 100,
        "ok",
        settings=settings,
        metrics=rec,
        density=dens,
        head="smooth_mlp",
        parts=parts,
    )


def _statistics_only(record: GeometryRecord) -> GeometryRecord:
    """``record`` as the monitor writes it when the budget defers its spectra and rho."""
    kept = {k: v for k, v in record.metrics.items() if k.startswith(("z/", "h/"))}
    why = "budget: the measurement would take the measurements over 0.02"
    return dataclasses.replace(
        record,
        metrics=kept,
        density=None,
        parts=["stats"],
        settings=Settings(dtype=record.settings.dtype),
        deferred_parts={"hessian": why, "augment": why},
    )


def _probe_table() -> ProbeTable:
    rows = [
        ProbeRow(f, p, t, acc, 0.1)
        for f, base in (("z", 0.9), ("h", 0.7))
        for p in ("linear", "mlp")
        for t, acc in (("class", base), ("rotation", base - 0.3), ("jitter", base - 0.4))
    ]
    metrics = {
        k: [0.5, 0.1]
        for k in ("spread", "d_intra", "d_inter", "separation", "separation_per_orbit")
    }
    orbits = [
        OrbitRow(f, 0.4, 8, metrics, metrics, 2.0 + i, [2.1 + i, 0.3])
        for i, f in enumerate(FAMILIES)
    ]
    return ProbeTable(rows, orbits)


def _features(n: int) -> dict:
    gen = torch.Generator().manual_seed(0)
    labels = torch.arange(n) % 5
    z = torch.randn(n, 16, generator=gen) + labels[:, None].float()
    k = 4
    t = torch.linspace(-0.4, 0.4, k).repeat(n // k)
    sets = {
        "test/class": {"z": z, "h": z[:, :8], "labels": labels},
        "test/orbit/brightness": {
            "z": z,
            "h": z[:, :8] * 0.1,
            "labels": labels,
            "orbit": torch.arange(n // k).repeat_interleave(k),
            "t": t,
        },
    }
    return {"format": 1, "tag": None, "sets": sets, "meta": {}}


def make_run(
    root: Path,
    name: str,
    *,
    scale: float = 1.0,
    corrupt: bool = False,
    probes: bool = True,
    n_features: int | None = 40,
    tau: float = 1e-10,
) -> Path:
    run = root / name
    run.mkdir(parents=True)
    rng = np.random.default_rng(int(scale * 10))
    steps = list(range(0, 301, 50))
    lines = [_record(s, scale, rng, s in (0, 300), tau).to_json() for s in steps]
    skipped = GeometryRecord(125, 1, "skipped", reason="non-finite Lanczos", n_skipped=1)
    lines.insert(3, skipped.to_json())
    if corrupt:
        lines.insert(2, '{"step": 75, "heff/lambda_')  # a cut write in the middle of the file
        lines.insert(5, "[1, 2, 3]")
    (run / "geometry.jsonl").write_text("\n".join(lines) + "\n")
    (run / "config.yaml").write_text(f"method: simclr\ngeometry:\n  head:\n    name: {name}\n")
    if probes:
        RunFolder(run).write_probes(_probe_table())
    if n_features:
        torch.save(_features(n_features), run / "features.pt")
    return run


def _check_pngs(index: Path) -> list[str]:
    page = index.read_text()
    sources = re.findall(r"src='([^']+)'", page)
    for src in sources:
        assert not Path(src).is_absolute()
        path = index.parent / src
        assert path.is_file(), src
        with Image.open(path) as img:
            img.verify()
        with Image.open(path) as img:
            assert np.asarray(img.convert("L"), dtype=float).std() > 0, src
    return sources


class TestWriteReport:
    def test_single_run_renders_every_figure(self, tmp_path: Path) -> None:
        run = make_run(tmp_path, "swish")
        index = write_report([run])
        assert index == run / "report" / "index.html"
        sources = _check_pngs(index)
        assert set(sources) == {
            "spectra.png",
            "interaction.png",
            "cond.png",
            "stats.png",
            "density.png",
            "rho.png",
            "orbits.png",
            "umap_class.png",
            "umap_orbit.png",
        }
        page = index.read_text()
        assert "Z - H" in page and "compression" in page and "method: simclr" in page
        assert "step 125: non-finite Lanczos" in page

    def test_statistics_of_every_due_step_spectra_where_taken(self, tmp_path: Path) -> None:
        # the budget deferred the spectra of steps 30, 60, 90 and the final 130 (taken at 95)
        rng = np.random.default_rng(0)
        full = {0: _record(0, 1.0, rng, False), 95: _record(95, 1.0, rng, True)}
        records = [
            full.get(s) or _statistics_only(_record(s, 1.0, rng, False))
            for s in (0, 30, 60, 90, 95, 120, 130)
        ]
        run = tmp_path / "run"
        run.mkdir()
        (run / "geometry.jsonl").write_text("".join(r.to_json() + "\n" for r in records))
        read = RunFolder(run).records(ok_only=True)
        assert [r.parts for r in read][:3] == [
            ["stats", "hessian", "augment"],
            ["stats"],
            ["stats"],
        ]
        drawn: list[tuple[str, list[float]]] = []
        real = plots.plt.Axes.plot

        def spy(ax: Any, x: Any, y: Any, *args: Any, **kwargs: Any) -> Any:
            drawn.append((str(kwargs.get("label", "")), list(np.asarray(x, dtype=float))))
            return real(ax, x, y, *args, **kwargs)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(plots.plt.Axes, "plot", spy)
            index = write_report([run])
        every = [0, 30, 60, 90, 95, 120, 130]
        # std and effective rank of Z and H, condition numbers of Z and H: every due step
        assert sum(x == every for label, x in drawn if label == "run") == 6, drawn
        spectra = [x for label, x in drawn if label.startswith("run lambda")]
        assert spectra and all(x == [0, 95] for x in spectra)  # where they were taken
        page = index.read_text()
        assert "7 measurements, 2 with spectra" in page and "deferred the spectra" in page
        assert "spectra from step 95" in page

    def test_corrupt_lines_named_and_rest_drawn(self, tmp_path: Path) -> None:
        run = make_run(tmp_path, "relu", corrupt=True, n_features=None)
        with pytest.warns(UserWarning, match="unusable lines 3, 6"):
            index = write_report([run], tmp_path / "out")
        page = index.read_text()
        assert "line 3: not JSON" in page and "line 6: expected a JSON object" in page
        assert "spectra.png" in _check_pngs(index)
        assert "no features.pt" in page

    def test_missing_files_render_with_notes(self, tmp_path: Path) -> None:
        run = tmp_path / "empty"
        run.mkdir()
        index = write_report([run])
        page = index.read_text()
        assert _check_pngs(index) == []
        for missing in ("no geometry.jsonl", "no probes.json", "no features.pt", "not drawn"):
            assert missing in page

    def test_overlay_of_runs_and_pca_fallback(self, tmp_path: Path) -> None:
        runs = [
            make_run(tmp_path, n, scale=s, n_features=12)
            for n, s in (("swish", 1.0), ("relu", 2.0), ("linear", 0.5))
        ]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            index = write_report(runs)
        assert index.parent == tmp_path / "report-swish-vs-relu-vs-linear"
        _check_pngs(index)
        page = index.read_text()
        assert all(f"<h3>{n} " in page for n in ("swish", "relu", "linear"))

    def test_empty_list_raises(self) -> None:
        with pytest.raises(ValueError, match="at least one run"):
            write_report([])


class TestFloor:
    """The spectra plot draws each record's own floor (its dtype's tau), not a default."""

    @staticmethod
    def _floor_curve(run: Path, tmp: Path) -> np.ndarray:

        drawn: list[np.ndarray] = []
        real = plots.plt.Axes.plot

        def spy(ax, x, y, *args, **kwargs):  # type: ignore[no-untyped-def]
            if str(kwargs.get("label", "")).endswith("-floor"):
                drawn.append(np.asarray(y, dtype=float))
            return real(ax, x, y, *args, **kwargs)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(plots.plt.Axes, "plot", spy)
            plots.plot_spectra([("r", RunFolder(run).records(ok_only=True))], tmp / "s.png")
        return drawn[0]

    @pytest.mark.parametrize("tau", [1e-10, 1e-5, 3e-3])
    def test_each_records_floor(self, tmp_path: Path, tau: float) -> None:
        run = make_run(tmp_path, "swish", probes=False, n_features=None, tau=tau)
        records = RunFolder(run).records(ok_only=True)
        expected = [
            -tau * max(abs(r.metrics["heff/lambda_min"]), abs(r.metrics["heff/lambda_max"]))
            for r in records
        ]
        np.testing.assert_allclose(self._floor_curve(run, tmp_path), expected, rtol=1e-12)


class TestReportCommand:
    def _run(self, *argv: str) -> int:
        return cli_main(["report", *argv])

    def test_cli_writes_report(self, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
        run = make_run(tmp_path, "gelu", probes=False, n_features=None)
        assert self._run(str(run), "--out", str(tmp_path / "r")) == 0
        assert (tmp_path / "r" / "index.html").is_file()
        assert "index.html" in capsys.readouterr().out

    @staticmethod
    def _records_run(tmp_path: Path, tail: str) -> Path:
        """A run folder: two records written as the monitor writes them, then ``tail``."""
        run = tmp_path / "run"
        run.mkdir()
        lines = [
            GeometryRecord(
                step=s, epoch=0, status="ok", parts=["stats"], metrics={"z/rankme_l2": 1.0 + s}
            ).to_json()
            for s in (0, 1)
        ]
        (run / "geometry.jsonl").write_text("\n".join(lines) + "\n" + tail)
        return run

    def test_torn_last_line_one_warning_and_noted(
        self, tmp_path: Path, capsys: pytest.CaptureFixture
    ) -> None:
        run = self._records_run(tmp_path, '{"schema": 2, "step": 2, "ep')  # a killed writer
        assert self._run(str(run)) == 0
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        where = f"{run / 'geometry.jsonl'}:3"
        assert err == [
            f"solo-geometry report: warning: {where}: torn last record dropped (not "
            "JSON (Unterminated string starting at)): a write cut short, e.g. by a "
            "killed writer"
        ]
        page = (run / "report" / "index.html").read_text()
        assert "2 measurements" in page and f"{where}: torn last record dropped" in page

    @pytest.mark.parametrize(
        ("tail", "reason"),
        [
            (
                '{"schema": 2, "step": 2, "epoch": 0, "status": "ok", "metrics": {"m": NaN}}\n',
                "non-finite number NaN",
            ),
            (
                '{"schema": 2, "step": 2, "epoch": 0, "status": "ok", '
                '"metrics": {"m": Infinity}}\n',
                "non-finite number Infinity",
            ),
            ("{garbage\n", "not JSON (Expecting property name enclosed in double quotes)"),
        ],
        ids=["NaN", "Infinity", "not JSON"],
    )
    def test_unusable_line_reported_as_skipped(
        self, tmp_path: Path, capsys: pytest.CaptureFixture, tail: str, reason: str
    ) -> None:
        after = GeometryRecord(step=3, epoch=0, status="ok").to_json()
        run = self._records_run(tmp_path, tail + after + "\n")
        assert self._run(str(run)) == 0
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1, err
        assert err[0].startswith(
            f"solo-geometry report: warning: {run / 'geometry.jsonl'}: "
            f"unusable lines 3 skipped, drawing the rest (line 3: {reason}"
        )
        page = (run / "report" / "index.html").read_text()
        assert "3 measurements" in page  # the lines before and after it are read
        assert "1 unusable line(s), not drawn" in page and f"line 3: {reason}" in page

    def test_missing_run_exits_nonzero(self, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
        assert self._run(str(tmp_path / "nope")) == 2
        assert "does not exist" in capsys.readouterr().err
        assert not (tmp_path / "nope").exists()


@pytest.mark.slow
class TestRealRun:
    """A real short run (lightly host, 2 steps) through probe command and report."""

    def test_report_and_probe_of_a_real_run(self, tmp_path: Path, digits: Path) -> None:
        pytest.importorskip("lightly", reason="the lightly host needs lightly")
        support = pytest.importorskip(
            "tests.hosts.lightly_support", reason="tests/hosts helpers not importable"
        )
        from solo_geometry.cli import main as cli_main
        from solo_geometry.hosts.lightly import launch

        data = digits
        recipe = support.write_recipe(tmp_path / "recipes", "byol", data)
        run = launch(
            recipe,
            [
                "+geometry=on",
                "geometry.every_n_steps=1",
                "geometry.spectrum.max_samples=8",
                "geometry.spectrum.max_steps=60",
                "geometry.measure.augment_samples=4",
                "geometry.spectrum.density_probes=1",
                # every step measured, densities included: the report reads them
                "geometry.budget=null",
                "geometry.probes.enabled=false",
                "geometry.report=false",  # drawn below, once, after the probe command
            ],
            runs_root=tmp_path / "runs",
        )
        assert not (run / "report").exists()
        few = digits_subset(data, tmp_path / "few", {"train": 12, "val": 6})  # 180 images
        assert (
            cli_main(
                ["probe", str(run), "--data", str(few), "--quiet", "--targets", "class", "rotation"]
            )
            == 0
        )
        assert (run / "features.pt").is_file() and (run / "probes.json").is_file()
        index = write_report([run])
        sources = _check_pngs(index)
        assert {"spectra.png", "density.png", "orbits.png", "umap_class.png"} <= set(sources)


_EMBED = """
import json, sys
import numpy as np
import umap.umap_ as u
from solo_geometry.analysis.plots import _embed
emb, how = _embed(np.random.default_rng(0).normal(size=(40, 16)), 0)
s = u.smooth_knn_dist.stats  # compiled without cache=True by umap-learn itself
print(json.dumps({"how": how, "hits": sum(s.cache_hits.values()),
                  "misses": sum(s.cache_misses.values()), "embedding": emb.tolist()}))
"""


class TestUmapCache:
    @pytest.mark.slow  # two processes, the first compiling UMAP: 35 s in make test
    def test_second_process_loads_the_compiled_umap_and_draws_the_same(
        self, tmp_path: Path
    ) -> None:
        pytest.importorskip("umap", reason="umap-learn not installed")
        env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
        out = []
        for _ in range(2):
            proc = subprocess.run(
                [sys.executable, "-c", _EMBED],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert proc.returncode == 0, proc.stderr[-2000:]
            out.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        first, second = out
        assert first["how"] == second["how"] == "UMAP"
        assert first["misses"] >= 1 and first["hits"] == 0  # compiled, written to the cache
        assert second["hits"] >= 1 and second["misses"] == 0  # loaded, not compiled again
        assert second["embedding"] == first["embedding"]

    def test_no_writable_cache_folder_still_draws(self, monkeypatch: pytest.MonkeyPatch) -> None:
        pytest.importorskip("umap", reason="umap-learn not installed")
        from numba.core.dispatcher import Dispatcher

        def refuse(self: Dispatcher) -> None:  # what numba raises where no folder is writable
            raise RuntimeError(f"cannot cache function {self.py_func!r}: no locator available")

        monkeypatch.setattr(Dispatcher, "enable_caching", refuse)
        plots.umap_cached.cache_clear()
        try:
            emb, how = plots._embed(np.random.default_rng(0).normal(size=(40, 16)), 0)
        finally:
            plots.umap_cached.cache_clear()
        assert how == "UMAP" and emb.shape == (40, 2) and np.isfinite(emb).all()


class TestQualityAndAlerts:
    def test_quality_panels_shading_and_banner(self, tmp_path: Path) -> None:
        rng = np.random.default_rng(0)
        states = ["healthy", "healthy", "dimensional", "complete", "complete"]
        records = []
        for i, state in enumerate(states):
            rec = _record(50 * i, 1.0, rng, False)
            quality = {
                f"{x}/{k}": 1.0 + i
                for x in ("z", "h")
                for k in ("rankme", "lidar", "alpha_req", "collapse_level")
            }
            why = "strict saddle: (numbers)" if state != "healthy" else None
            alert = {"state": state, "level": i, "since": 0, "features": "h", "diagnosis": why}
            metrics = {**rec.metrics, **quality, "cka/z_h": 0.5}
            records.append(dataclasses.replace(rec, metrics=metrics, alert=alert))
        run = tmp_path / "run"
        run.mkdir()
        (run / "geometry.jsonl").write_text("".join(r.to_json() + "\n" for r in records))
        spans: list[tuple[float, float, str]] = []
        real = plots.plt.Axes.axvspan

        def spy(ax: Any, x0: float, x1: float, **kwargs: Any) -> Any:
            spans.append((x0, x1, kwargs["color"]))
            return real(ax, x0, x1, **kwargs)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(plots.plt.Axes, "axvspan", spy)
            index = write_report([run])
        assert "quality.png" in _check_pngs(index)
        # per shaded panel: dimensional over [100, 150], complete over [150, 200] and the last
        assert set(spans) == {
            (100, 150, "tab:orange"),
            (150, 200, "tab:red"),
            (200, 200.5, "tab:red"),
        }
        page = index.read_text()
        assert "collapse alert dimensional first at step 100" in page
        assert "at the last record (step 200) complete; strict saddle" in page


class TestProbeTableRandomInit:
    """The probe table shows the same network at random initialisation beside Z and H."""

    def _page(self, run: Path) -> str:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # no geometry.jsonl, no features.pt: notes only
            return write_report([run]).read_text()

    def test_random_init_columns_and_the_rows_below_it(self, tmp_path: Path) -> None:
        rows = [
            ProbeRow("z", "linear", "class", 0.875, 0.1, random_init=0.625),
            ProbeRow("h", "linear", "class", 0.5, 0.1, random_init=0.75),
        ]
        RunFolder(tmp_path / "run").write_probes(ProbeTable(rows))
        page = self._page(tmp_path / "run")
        header = ["Z acc", "Z random init", "Z - random init", "H acc", "H random init"]
        assert "".join(f"<th>{h}</th>" for h in header) in page
        # Z 0.875, its random init 0.625, +0.25; H 0.5, its random init 0.75, -0.25; Z - H
        cells = ["0.875", "0.625", "0.25", "0.5", "0.75", "-0.25", "0.375", "0.1"]
        assert "".join(f"<td>{c}</td>" for c in cells) in page
        assert "below its random initialisation: H linear class (0.500 against 0.750)" in page

    def test_a_version_1_table_says_not_measured(self, tmp_path: Path) -> None:
        run = tmp_path / "run"
        run.mkdir()
        row = {"features": "z", "probe": "linear", "target": "class", "accuracy": 0.875}
        old = {"schema": 1, "rows": [{**row, "chance": 0.1, "details": {}}], "orbits": []}
        (run / "probes.json").write_text(json.dumps(old))
        page = self._page(run)
        assert "<td>0.875</td><td>not measured</td><td>not measured</td>" in page
        assert "random init not measured" in page
