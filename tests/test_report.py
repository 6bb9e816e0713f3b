"""The run report (solo_geometry.report, solo_geometry.plots) from hand-written run folders."""

from __future__ import annotations

import argparse
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from solo_geometry.report import add_report_parser, read_geometry, write_report

FAMILIES = ("brightness", "contrast", "saturation", "hue")


def _record(step: int, head_scale: float, rng: np.random.Generator, density: bool) -> dict:
    lmax = 2.0 * head_scale * (1 + 0.1 * step / 50)
    rec = {"step": step, "epoch": step // 100, "status": "ok", "n_skipped": 0, "head": "smooth_mlp"}
    for op, lo in (("heff", -0.3), ("gn", 1e-12), ("m", -0.4)):
        rec |= {f"{op}/lambda_min": lo * head_scale,
                f"{op}/lambda_max": lmax * (0.5 + (op == "heff")),
                f"{op}/neg_count": int(lo < 0), f"{op}/neg_mass": abs(min(lo, 0.0)),
                f"{op}/cond": float(10 ** rng.uniform(2, 5))}  # fmt: skip
    rec["interaction_ratio"] = 0.2 + 0.01 * step / 50
    for x, dim in (("z", 512), ("h", 128)):
        rec |= {
            f"{x}/normalized_std": 1 / np.sqrt(dim) * (1 - np.exp(-step / 100 - 0.1)),
            f"{x}/cond": 1e3,
            f"{x}/rank": dim // 2,
            f"{x}/effective_rank": dim / 3 + step / 10,
        }
    rec |= {f"rho/{f}": float(10 ** rng.uniform(-3, 0)) for f in FAMILIES}
    if density:
        nodes = np.sort(rng.normal(0.5, 0.6, 40)) * head_scale
        rec["density"] = {"nodes": nodes.tolist(), "weights": (np.ones(40) / 40).tolist()}
    return rec


def _probes_json() -> dict:
    rows = [
        {"features": f, "probe": p, "target": t, "accuracy": acc, "chance": 0.1}
        for f, base in (("z", 0.9), ("h", 0.7))
        for p in ("linear", "mlp")
        for t, acc in (("class", base), ("rotation", base - 0.3), ("jitter", base - 0.4))
    ]
    metrics = {k: 0.5 for k in ("spread_mean", "spread_std", "d_intra_mean", "d_intra_std",
                                "d_inter_mean", "d_inter_std", "separation_mean",
                                "separation_std")}  # fmt: skip
    orbits = {
        f: {
            "z": metrics,
            "h": metrics,
            "compression_mean": 2.0 + i,
            "compression_std": 0.3,
            "t_max": 0.4,
        }
        for i, f in enumerate(FAMILIES)
    }
    return {"probes": rows, "gaps": {"z_minus_h": {"linear/class": 0.2},
            "mlp_minus_linear": {"z/class": 0.0}}, "orbits": orbits}  # fmt: skip


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
) -> Path:
    run = root / name
    run.mkdir(parents=True)
    rng = np.random.default_rng(int(scale * 10))
    steps = list(range(0, 301, 50))
    lines = [json.dumps(_record(s, scale, rng, s in (0, 300))) for s in steps]
    lines.insert(3, json.dumps({"step": 125, "epoch": 1, "status": "skipped", "n_skipped": 1,
                                "error": "non-finite Lanczos"}))  # fmt: skip
    if corrupt:
        lines.insert(2, '{"step": 75, "heff/lambda_')  # truncated write
        lines.insert(5, "[1, 2, 3]")
    (run / "geometry.jsonl").write_text("\n".join(lines) + "\n")
    (run / "config.yaml").write_text(f"method: simclr\ngeometry:\n  head:\n    name: {name}\n")
    if probes:
        (run / "probes.json").write_text(json.dumps(_probes_json()))
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
        assert set(sources) == {"spectra.png", "interaction.png", "cond.png", "stats.png",
                                "density.png", "rho.png", "orbits.png", "umap_class.png",
                                "umap_orbit.png"}  # fmt: skip
        page = index.read_text()
        assert "Z - H" in page and "compression" in page and "method: simclr" in page
        assert "line 4 (step 125): non-finite Lanczos" in page

    def test_corrupt_lines_named_and_rest_drawn(self, tmp_path: Path) -> None:
        run = make_run(tmp_path, "relu", corrupt=True, n_features=None)
        with pytest.warns(UserWarning, match="unusable lines 3, 6"):
            index = write_report([run], tmp_path / "out")
        page = index.read_text()
        assert "line 3: not JSON" in page and "line 6: not a record" in page
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
        runs = [make_run(tmp_path, n, scale=s, n_features=12)
                for n, s in (("swish", 1.0), ("relu", 2.0), ("linear", 0.5))]  # fmt: skip
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


class TestReadGeometry:
    def test_line_numbers_of_bad_lines(self, tmp_path: Path) -> None:
        path = tmp_path / "g.jsonl"
        path.write_text('{"step": 0, "status": "ok"}\n\nnot json\n{"epoch": 1}\n')
        records, problems, skipped = read_geometry(path)
        assert len(records) == 1 and skipped == []
        assert [n for n, _ in problems] == [3, 4]


class TestReportCommand:
    def _run(self, *argv: str) -> int:
        parser = argparse.ArgumentParser()
        add_report_parser(parser.add_subparsers())
        args = parser.parse_args(["report", *argv])
        return int(args.func(args))

    def test_cli_writes_report(self, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
        run = make_run(tmp_path, "gelu", probes=False, n_features=None)
        assert self._run(str(run), "--out", str(tmp_path / "r")) == 0
        assert (tmp_path / "r" / "index.html").is_file()
        assert "index.html" in capsys.readouterr().out

    def test_missing_run_exits_nonzero(self, tmp_path: Path) -> None:
        with pytest.raises(SystemExit, match="does not exist"):
            self._run(str(tmp_path / "nope"))
        assert not (tmp_path / "nope").exists()


@pytest.mark.slow
class TestRealRun:
    """A real short run (lightly host, 2 steps) through probe command and report."""

    def test_report_and_probe_of_a_real_run(self, tmp_path: Path) -> None:
        pytest.importorskip("lightly", reason="the lightly host needs lightly")
        support = pytest.importorskip("tests.hosts.test_lightly_support",
                                      reason="tests/hosts helpers not importable")  # fmt: skip
        from solo_geometry.cli import main as cli_main
        from solo_geometry.datasets import make_digits
        from solo_geometry.hosts.lightly import launch

        data = make_digits(tmp_path / "digits", size=32)
        recipe = support.write_recipe(tmp_path / "recipes", "byol", data)
        run = launch(
            recipe,
            [
                "+geometry=on",
                "geometry.every_n_steps=1",
                "geometry.max_samples=8",
                "geometry.lanczos_steps=5",
                "geometry.measure.augment_samples=4",
                "geometry.measure.density_probes=1",
                "geometry.probes.enabled=false",
            ],
            runs_root=tmp_path / "runs",
        )
        assert cli_main(["probe", str(run), "--data", str(data), "--quiet",
                         "--targets", "class", "rotation"]) == 0  # fmt: skip
        assert (run / "features.pt").is_file() and (run / "probes.json").is_file()
        index = write_report([run])
        sources = _check_pngs(index)
        assert {"spectra.png", "density.png", "orbits.png", "umap_class.png"} <= set(sources)
