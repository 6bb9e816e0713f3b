"""``solo-geometry reproduce collapse``: a real sweep end to end, resume, and bad input.

The sweep runs the real Hydra multirun (Hydra's joblib launcher, the lightly host, real Lightning
Trainers on the digits), two cells of one epoch of two steps. Every number in ``summary.json`` is
recomputed here from the run folders' own files, read as plain JSON (not through the package's
readers), with the criterion and definitions re-implemented from docs/reproducing.md.
"""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

import pytest

from solo_geometry.analysis.pages import write_page
from solo_geometry.cli import main as cli_main
from solo_geometry.config.choices import ACTIVATION_CHOICES, NORM_LAYERS
from solo_geometry.reproduce.collapse import reproduce_collapse
from solo_geometry.reproduce.collapse.page import FIGURES, page_body
from solo_geometry.reproduce.collapse.protocol import CELL_ACTIVATIONS, CELL_NORMS, Block, Protocol
from solo_geometry.reproduce.collapse.result import read_summary
from solo_geometry.reproduce.collapse.summary import cell_record
from tests.shared import COLLAPSE_AUTHORS, write_fake_cifar

AUTHORS = COLLAPSE_AUTHORS

TINY = Protocol(
    epochs=2,
    steps_per_epoch=2,
    batch_size=16,
    every_n_steps=2,
    seeds=(0,),
    grid=(Block(("linear", "swish"), ("none",), (1.0,)),),
    backbone="resnet20",  # the CPU scale's backbone
)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _expected_row(run: Path) -> dict:
    """The row's numbers recomputed from the run folder's files (docs/reproducing.md)."""
    records = [r for r in _lines(run / "geometry.jsonl") if r["status"] == "ok"]
    start, final = records[0], records[-1]
    assert start["step"] == 0
    s0, s1 = start["metrics"]["h/normalized_std"], final["metrics"]["h/normalized_std"]
    lam, floor = start["metrics"]["m/lambda_min"], start["settings"]["floor"]
    frac, dim = start["metrics"]["m/neg_fraction"], start["settings"]["dim"]
    if lam is None:
        count = None
    elif lam >= -floor:
        count = 0
    else:
        count = max(1, round(frac * dim))
    updates = _lines(run / "updates.jsonl")
    # the paper's curve: per-epoch means of the per-step std of the normalised projector output
    curve = [u["metrics"]["head/output_std"] for u in updates]
    rows, dim = updates[0]["metrics"]["head/output_rows"], updates[0]["metrics"]["head/output_dim"]
    ceiling = math.sqrt(rows / ((rows - 1) * dim))
    first = next((e for e, v in enumerate(curve) if e > 0 and v >= 2 * curve[0]), None)
    outcome = (
        "escaped"
        if first is not None
        else "undecidable"
        if 2 * curve[0] > ceiling
        else "not escaped"
    )
    return {
        "std_curve": curve,
        "baseline_std": curve[0],
        "ceiling": ceiling,
        "outcome": outcome,
        "escape_epoch": first,
        "escape_step": None if first is None else (first + 1) * 2,
        "output_rows": 32,
        "output_dim": 512,
        "start_std": s0,
        "final_std": s1,
        "m_neg_count_start": count,
        "m_lambda_min_start": lam,
        "steps": final["step"],
        "timescale_ratio": sum(u["metrics"]["timescale_ratio"] for u in updates) / len(updates),
        "lr_recorded": sum(u["metrics"]["head/lr"] for u in updates) / len(updates),
    }


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    out = tmp_path_factory.mktemp("collapse")
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        # one job at a time, in this process (joblib's sequential backend): no worker processes
        # to start and import torch; TestPaperScale runs the cells in two worker processes
        summary = reproduce_collapse(out, quick=True, host="lightly", jobs=1, protocol=TINY)
    return out, summary, buf.getvalue()


def test_the_cells_choices_are_the_configs() -> None:
    # the paper's heads are package activations and its norms BatchNorm and none, by the names
    # config.choices gives them (the cells build their heads through the package's head)
    assert set(CELL_ACTIVATIONS.values()) <= set(ACTIVATION_CHOICES)
    assert {NORM_LAYERS[n] for n in CELL_NORMS} == {"BatchNorm1d", None}


class TestSweep:
    def test_rows_match_run_folders(self, sweep: tuple[Path, dict, str]) -> None:
        out, summary, _ = sweep
        on_disk = json.loads((out / "summary.json").read_text())
        assert on_disk["rows"] == summary.to_json()["rows"]
        assert read_summary(out).to_json() == summary.to_json()  # the one reader, the same
        assert {(r["head"], r["norm"]) for r in on_disk["rows"]} == {
            ("linear", "none"),
            ("swish", "none"),
        }
        for row in on_disk["rows"]:
            want = _expected_row(out / row["run"])
            for key, value in want.items():
                if isinstance(value, list):
                    assert row[key] == pytest.approx(value, rel=1e-12), key
                elif isinstance(value, float):
                    assert row[key] == pytest.approx(value, rel=1e-12), key
                else:
                    assert row[key] == value, key
            assert want["steps"] == TINY.epochs * TINY.steps_per_epoch
            assert row["lr"] == pytest.approx(want["lr_recorded"])  # the rate actually used
            assert row["seed"] == 0 and row["host"] == "lightly"
            assert row["backbone"] == "resnet20"  # the protocol's, through the lightly host
            assert "name: resnet20" in (out / row["run"] / "config.yaml").read_text()

    def test_cell_record_recomputed_in_process(self, sweep: tuple[Path, dict, str]) -> None:
        out, summary, _ = sweep
        for row in summary.rows:
            cell = {
                "head": row.head,
                "norm": row.norm,
                "lr": row.lr,
                "seed": 0,
                "epochs": TINY.epochs,
                "steps_per_epoch": TINY.steps_per_epoch,
            }
            got = cell_record(out / str(row.run), cell, host="lightly", seconds=0.0, root=out)
            for key, value in _expected_row(out / str(row.run)).items():
                if key != "lr_recorded" and value is not None and not isinstance(value, str):
                    assert getattr(got.row, key) == pytest.approx(value, rel=1e-12), key
            # the series: step 0, then one record per epoch (every_n_steps = steps per epoch)
            stds = [
                r["metrics"]["h/normalized_std"]
                for r in _lines(out / str(row.run) / "geometry.jsonl")
                if r["status"] == "ok"
            ]
            assert got.series["h/normalized_std"] == pytest.approx(stds, rel=1e-12)

    def test_linear_head_has_no_negative_curvature_at_start(
        self, sweep: tuple[Path, dict, str]
    ) -> None:
        rows = {r.head: r for r in sweep[1].rows}
        assert rows["linear"].m_neg_count_start == 0  # M = 0 for a linear head (DESIGN 3)

    def test_page_and_table(self, sweep: tuple[Path, dict, str]) -> None:
        out, summary, _ = sweep
        page = (out / "index.html").read_text()
        for name in (
            "fig1_collapse_instability",
            "fig1_swish_robustness",
            "fig1_relu_gap",
            "fig1_gradient_norms",
            "fig1_condition_numbers",
            "fig1_timescale_separation",
        ):
            assert (out / f"{name}.png").stat().st_size > 1000
            assert f"{name}.png" in page
        assert "| linear | none | 0.05 | 1 |" in (out / "table.md").read_text()
        assert set(summary.spearman) == {"linear", "swish"}
        alert = (out / "alert.md").read_text()  # the alert replayed on each cell's curve
        assert "| digits, " in alert and "decidable runs" in alert
        assert "The collapse alert, replayed per epoch" in page

    def test_section_of_the_paper_page(self, sweep: tuple[Path, dict, str]) -> None:
        # ``reproduce all`` puts the collapse page's body, figures under collapse/, in paper.html
        out, summary, _ = sweep
        figures = [f for f in FIGURES if (out / f).is_file()]
        section = ("Collapse", page_body(summary, figures, f"{out.name}/"))
        page = write_page(out.parent / "paper.html", "The paper reproduced", [section])
        text = page.read_text()
        sources = re.findall(r"src='([^']+)'", text)
        assert len(sources) == len(FIGURES) and all((out.parent / s).is_file() for s in sources)
        assert all(html.escape(c.verdict) in text for c in summary.claims)

    def test_claims_printed_from_the_rows(self, sweep: tuple[Path, dict, str]) -> None:
        _, summary, printed = sweep
        rows = {r.head: r for r in summary.rows}
        first = summary.claims[0]
        # no ReLU cell in this grid: the claim cannot be judged, and says which cells are missing
        assert (first["id"], first["verdict"]) == ("smooth_escape", "undecidable")
        assert "relu" in first["evidence"]
        assert "[undecidable] smooth_escape (digits, resnet20)" in printed
        third = summary.claims[2]
        counts = (rows["swish"].m_neg_count_start, rows["linear"].m_neg_count_start)
        if None not in counts:
            want3 = "held" if counts[0] > 0 and counts[1] == 0 else "not held"
            assert third["verdict"] == want3

    def test_rerun_skips_finished_cells_and_resumes_the_rest(
        self, sweep: tuple[Path, dict, str], capfd: pytest.CaptureFixture
    ) -> None:
        out, summary, _ = sweep
        (out / "cells" / "linear-none-lr0.05-s0.json").unlink()  # as if interrupted
        kept = out / next(str(r.run) for r in summary.rows if r.head == "swish")
        again = reproduce_collapse(
            out, quick=True, host="lightly", jobs=1, protocol=TINY, compare=AUTHORS
        )
        printed = capfd.readouterr().out
        # --compare: our curves beside the authors' released ones, on the page
        assert (out / "fig1_compare.png").stat().st_size > 1000
        from PIL import Image  # one panel of ours, one per data set and backbone of theirs (3)

        width, height = Image.open(out / "fig1_compare.png").size
        assert width > 3.2 * height  # 4 panels side by side; pooled in one they would be 2
        assert "fig1_compare.png" in (out / "index.html").read_text()
        assert "swish-none-lr0.05-s0: finished earlier, skipped" in printed
        assert "linear-none-lr0.05-s0: std(H) epoch 0" in printed  # trained again
        assert re.search(r"\[sweep\] [12]/2 done \(\d+ s\): linear-none-lr0.05-s0", printed)
        assert kept.is_dir()
        swish = [r for r in again.rows if r.head == "swish"]
        assert swish == [r for r in summary.rows if r.head == "swish"]
        linear = next(r for r in again.rows if r.head == "linear")
        assert linear.final_std is not None and math.isfinite(linear.final_std)


def _paper_quick(out: Path, root: Path, *extra: str) -> int:
    """``solo-geometry reproduce collapse --scale paper --quick`` on cifar files under ``root``."""
    argv = ["reproduce", "collapse", "--scale", "paper", "--quick", "--out", str(out)]
    return cli_main([*argv, "--data-root", str(root), *extra])


class TestBadInput:
    def test_cifar_files_absent_is_exit_2_without_download(
        self, tmp_path: Path, capsys: pytest.CaptureFixture
    ) -> None:
        out, empty = tmp_path / "out", tmp_path / "empty"
        empty.mkdir()
        code = cli_main(
            [
                "reproduce",
                "collapse",
                "--quick",
                "--out",
                str(out),
                "--data",
                "cifar10",
                "--data-root",
                str(empty),
            ]
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2
        assert len(err) == 1 and "nothing is downloaded" in err[0] and "cifar10" in err[0]
        assert not out.exists() and list(empty.iterdir()) == []

    def test_cifar_without_root(self, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
        code = cli_main(
            ["reproduce", "collapse", "--out", str(tmp_path / "o"), "--data", "cifar100"]
        )
        assert code == 2 and "--data-root" in capsys.readouterr().err
        assert not (tmp_path / "o").exists()

    @pytest.mark.parametrize("argv", [["--host", "nope"], ["--data", "mnist"]])
    def test_bad_choice_exits_2(self, argv: list[str], tmp_path: Path) -> None:
        with pytest.raises(SystemExit) as info:
            cli_main(["reproduce", "collapse", "--out", str(tmp_path / "o"), *argv])
        assert info.value.code == 2

    def test_solo_host_lacks_the_cpu_scales_backbone(
        self, tmp_path: Path, capsys: pytest.CaptureFixture
    ) -> None:
        code = cli_main(
            ["reproduce", "collapse", "--quick", "--host", "solo", "--out", str(tmp_path / "o")]
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and ("resnet20" in err[0] or "solo-learn" in err[0])
        assert not (tmp_path / "o").exists()

    def test_bad_jobs(self, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
        code = cli_main(["reproduce", "collapse", "--out", str(tmp_path / "o"), "--jobs", "0"])
        assert code == 2 and "--jobs" in capsys.readouterr().err
        assert not (tmp_path / "o").exists()


@pytest.mark.solo
class TestSoloHost:
    def test_one_cell_on_solo_learn(self, tmp_path: Path) -> None:
        from solo_geometry.hosts.pretrain import solo_available

        if not solo_available():
            pytest.skip("solo-learn 1.0.6 is not importable: the solo host cannot run")
        one = Protocol(
            epochs=1,
            steps_per_epoch=2,
            batch_size=16,
            every_n_steps=2,
            seeds=(0,),
            grid=(Block(("swish",), ("none",), (1.0,)),),
        )
        summary = reproduce_collapse(tmp_path, quick=True, host="solo", jobs=1, protocol=one)
        (row,) = [r.to_json() for r in summary.rows]
        assert row["host"] == "solo"
        want = _expected_row(tmp_path / row["run"])
        assert row["final_std"] == pytest.approx(want["final_std"], rel=1e-12)
        assert row["m_neg_count_start"] == want["m_neg_count_start"]
        config = (tmp_path / row["run"] / "config.yaml").read_text()
        assert "simsiam" in config and "smooth_mlp" in config


class TestPaperScale:
    def test_the_authors_setup(self) -> None:
        from solo_geometry.models.backbones import CIFAR_DATASETS
        from solo_geometry.reproduce.collapse import CellConfig, cell_overrides
        from solo_geometry.reproduce.collapse.protocol import protocol_of

        paper = protocol_of(False, "paper", "paper")
        assert (paper.batch_size, paper.epochs, paper.steps_per_epoch) == (512, 50, 97)
        assert paper.widths == (2048, 2048, 512) and paper.data in CIFAR_DATASETS  # CIFAR stem
        assert len(paper.cells()) == 42
        assert paper.stem == "cifar_paper"  # the authors' stem (padding 1), not solo-learn's
        cell = CellConfig(
            dataset="cifar10",
            batch_size=512,
            proj_hidden_dim=2048,
            proj_output_dim=2048,
            pred_hidden_dim=512,
            stem=paper.stem,
        )
        overrides = cell_overrides(cell)
        for want in (
            "data.dataset=cifar10",
            "backbone.name=resnet18",
            "optimizer.batch_size=512",
            "method_kwargs.proj_output_dim=2048",
            "method_kwargs.pred_hidden_dim=512",
            "optimizer.lr=0.025",
            "++backbone.stem=cifar_paper",
        ):
            assert want in overrides  # lr: 0.05 x 256 / 512, solo-learn scales it back
        # the cpu scale keeps the recipe's stem (resnet20 has its own): no stem override
        assert not [o for o in cell_overrides(CellConfig()) if "stem" in o]

    def test_the_papers_stem_is_the_lightly_hosts(self) -> None:
        from solo_geometry.reproduce.collapse import cell_host

        assert cell_host("auto", "resnet18", "cifar_paper") == "lightly"
        assert cell_host("auto", "resnet18", "auto") == "auto"  # solo-learn's stem: any host
        with pytest.raises(ValueError, match="stem 'cifar_paper'.*stem=auto"):
            cell_host("solo", "resnet18", "cifar_paper")

    def test_a_record_from_before_the_stem_option_is_still_finished(self, tmp_path: Path) -> None:
        # cells recorded before `stem` existed were built with the recipe's stem ("auto")
        from omegaconf import OmegaConf

        from solo_geometry.reproduce.collapse.cell import PROTOCOL_KEYS, CellConfig, finished

        cfg = OmegaConf.structured(CellConfig())
        stored = {"cell": {k: cfg[k] for k in PROTOCOL_KEYS if k != "stem"}}
        (tmp_path / "c.json").write_text(json.dumps(stored))
        assert finished(tmp_path / "c.json", cfg)
        cfg.stem = "cifar_paper"
        assert not finished(tmp_path / "c.json", cfg)  # another stem: trained again

    def test_grids(self) -> None:
        from solo_geometry.reproduce.collapse.protocol import protocol_of

        paper = {(h, n, lr) for h, n, lr, _ in protocol_of(False, "cpu", "paper").cells()}
        assert len(paper) == 14 and ("linear", "bn", 0.05) not in paper
        assert len(protocol_of(False, "cpu", "full").cells()) == 72
        cpu, quick_p = protocol_of(False, "cpu", "paper"), protocol_of(True, "cpu", "paper")
        assert cpu.epochs * cpu.steps_per_epoch >= 3000  # long enough to see an escape
        assert (cpu.backbone, cpu.crop_size, cpu.batch_size) == ("resnet20", 8, 16)
        assert quick_p.epochs * quick_p.steps_per_epoch == 2314  # --quick: shorter, to fit 5 min
        quick = quick_p.cells()
        assert {(h, n, s) for h, n, _, s in quick} == {
            (h, "none", 0) for h in ("linear", "relu", "gelu", "swish")
        }

    @pytest.mark.slow
    def test_end_to_end_on_a_tiny_fake_cifar10(self, tmp_path: Path) -> None:
        # --scale paper as a user runs it (ResNet-18 with the CIFAR stem on CIFAR-10 files in
        # torchvision's format, read by solo_geometry.inputs.cifar), at a tiny size: the rows and
        # the verdicts come out of the real sweep
        import io
        from contextlib import redirect_stdout

        root = write_fake_cifar(tmp_path / "cifar", n=8)
        out = tmp_path / "o"
        buf = io.StringIO()
        with redirect_stdout(buf):
            code = _paper_quick(
                out,
                root,
                "--jobs",
                "2",
                "epochs=2",
                "steps_per_epoch=2",
                "batch_size=8",
                "every_n_steps=4",
                "proj_hidden_dim=32",
                "proj_output_dim=32",
                "pred_hidden_dim=8",
            )
        assert code == 0
        summary = json.loads((out / "summary.json").read_text())
        rows = summary["rows"]
        assert sorted(r["head"] for r in rows) == ["gelu", "linear", "relu", "swish"]
        for r in rows:
            assert (r["dataset"], r["backbone"], r["steps"]) == ("cifar10", "resnet18", 4)
            assert (r["output_rows"], r["output_dim"]) == (16, 32)  # 2 views x 8, the override
            assert len(r["std_curve"]) == 2 and r["outcome"] in (
                "escaped",
                "not escaped",
                "undecidable",
            )
            config = (out / r["run"] / "config.yaml").read_text()
            assert "cifar10" in config and str(root) in config
            assert "stem: cifar_paper" in config  # the authors' stem, on the lightly host
        assert summary["protocol"]["widths"] == [2048, 2048, 512]  # the scale, overridden per cell
        ids = {c["id"] for c in summary["claims"]}
        assert {"smooth_escape", "relu_needs_bn", "m_negative_at_start"} <= ids
        assert "smooth_escape" in buf.getvalue()
        # the default host: the authors' stem is the lightly host's, and it says so
        assert "host: lightly (solo-learn has no stem 'cifar_paper')" in buf.getvalue()
        assert {r["host"] for r in rows} == {"lightly"}

    def test_corrupt_cifar_file_is_exit_2_before_the_sweep(
        self, tmp_path: Path, capsys: pytest.CaptureFixture
    ) -> None:
        root = write_fake_cifar(tmp_path / "cifar")
        (root / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"not a pickle")
        code = _paper_quick(tmp_path / "o", root)
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and "data_batch_3" in err[0]
        assert not (tmp_path / "o").exists()
