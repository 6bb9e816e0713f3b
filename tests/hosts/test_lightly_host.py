"""The lightly host end to end: training, run folder, geometry view, CLI errors, both hosts."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from capture_checks import assert_view_reuses_training_step  # noqa: E402
from lightly_support import write_recipe  # noqa: E402

from solo_geometry.folder.records import GeometryRecord  # noqa: E402
from solo_geometry.folder.run_folder import RunFolder  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
METHODS = ["simclr", "byol", "vicreg", "barlow_twins"]
# Small measurements: every step, 8 samples, 5 Lanczos steps.
GEOMETRY = [
    "+geometry=on",
    "geometry.every_n_steps=1",
    "geometry.spectrum.max_samples=8",
    "geometry.spectrum.max_steps=60",
    "geometry.measure.augment_samples=4",
    "geometry.spectrum.density_probes=1",
    "geometry.budget=null",  # every step and the final one: these tests read the records
    "geometry.probes.orbits.images=8",  # 8 orbits a family (default 32): seconds, not a minute
]
# Blocks `import solo` in a child process, as on a machine without solo-learn.
BLOCK_SOLO = textwrap.dedent(
    """
    import sys, importlib.abc
    class _Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "solo" or name.startswith("solo."):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
            return None
    sys.meta_path.insert(0, _Block())
    from solo_geometry.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.fixture(scope="module")
def probe_data(digits: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 validation images per class: the probes' folder, kept small for 2 cores."""
    out = tmp_path_factory.mktemp("probe-data")
    for cls in sorted(p for p in (digits / "val").iterdir() if p.is_dir()):
        (out / cls.name).mkdir()
        for png in sorted(cls.glob("*.png"))[:12]:
            shutil.copy(png, out / cls.name / png.name)
    return out


def _geometry(probe_data: Path) -> list[str]:
    return [*GEOMETRY, f"geometry.probes.data={probe_data}"]


def _cli(
    args: list[str], *, block_solo: bool = False, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    code = (
        BLOCK_SOLO
        if block_solo
        else "import sys\nfrom solo_geometry.cli import main\nsys.exit(main(sys.argv[1:]))"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
    )


def _check_run_folder(run: Path) -> list[GeometryRecord]:
    folder = RunFolder(run)
    assert folder.config.is_file()
    assert list(folder.checkpoints.rglob("*.ckpt")), sorted(run.rglob("*"))
    assert not (run / ".incomplete").exists()
    records = folder.records()
    ok = [r for r in records if r.ok]
    assert ok, records
    for key in ("heff/lambda_min", "m/lambda_min", "interaction_ratio", "z/rankme_l2"):
        assert key in ok[0].metrics, sorted(ok[0].metrics)
    probes = folder.read_probes()
    assert probes is not None
    assert {(p.features, p.target) for p in probes.rows} >= {("z", "class"), ("h", "class")}
    # beside each row, the same network at random initialisation (the host's own constructor)
    assert all(p.random_init is not None for p in probes.rows), probes.rows
    assert probes.settings["random_init"] == {"measured": True, "seed": 0}
    assert (folder.report / "index.html").is_file()
    assert "Z random init" in (folder.report / "index.html").read_text()
    return ok


@pytest.mark.slow
class TestTraining:
    @pytest.mark.parametrize("method", ["simclr", "vicreg", "barlow_twins"])
    def test_method_writes_run_folder(
        self, method: str, digits: Path, probe_data: Path, tmp_path: Path
    ) -> None:
        from solo_geometry.hosts.lightly import launch

        recipe = write_recipe(tmp_path / "recipes", method, digits)
        run = launch(recipe, _geometry(probe_data), runs_root=tmp_path / "runs")
        ok = _check_run_folder(run)
        assert [r.step for r in ok][0] == 0
        assert ok[-1].step == 2  # the final measurement after 2 steps

    def test_byol_smooth_head_via_cli_without_solo(
        self, digits: Path, probe_data: Path, tmp_path: Path
    ) -> None:
        """BYOL through ``solo-geometry pretrain`` in a process where solo-learn is blocked."""
        recipe = write_recipe(tmp_path / "recipes", "byol", digits)
        args = ["--config", str(recipe), "--runs-root", str(tmp_path / "r")]
        overrides = [*_geometry(probe_data), "geometry.head.name=smooth_mlp"]
        result = _cli(["pretrain", *args, *overrides], block_solo=True)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "host lightly (auto: solo-learn is not importable)" in result.stdout
        runs = list((tmp_path / "r").iterdir())
        assert len(runs) == 1 and str(runs[0]) in result.stdout
        ok = _check_run_folder(runs[0])
        assert ok[0].head == "smooth_mlp"
        assert ok[-1].step == 2

    def test_geometry_off_writes_no_geometry(self, digits: Path, tmp_path: Path) -> None:
        from solo_geometry.hosts.lightly import launch

        recipe = write_recipe(tmp_path / "recipes", "simclr", digits)
        run = launch(recipe, ["+geometry=off"], runs_root=tmp_path / "runs")
        assert (run / "checkpoints" / "last.ckpt").is_file()
        assert not (run / "geometry.jsonl").exists()


class TestGeometryView:
    @pytest.mark.parametrize("method", METHODS)
    def test_view_matches_training_loss(self, method: str, digits: Path, tmp_path: Path) -> None:
        from solo_geometry.hosts.lightly import prepare
        from solo_geometry.hosts.lightly.module import LightlyMethod
        from solo_geometry.recipe import load_recipe

        cfg = load_recipe(write_recipe(tmp_path, method, digits), ["+geometry=on"])
        recipe, geometry = prepare(cfg)
        model = LightlyMethod(recipe, 10, geometry).train()
        torch.manual_seed(0)
        views = [torch.randn(6, 3, 32, 32), torch.randn(6, 3, 32, 32)]
        batch = (torch.arange(6), views, torch.zeros(6, dtype=torch.long))
        buffers = {k: b.clone() for k, b in model.named_buffers()}
        view = model.geometry_view(batch)
        for k, b in model.named_buffers():
            torch.testing.assert_close(b, buffers[k], msg=k)
        assert view.features.shape == (2, 6, model.features_dim)
        assert not view.features.requires_grad
        with torch.no_grad():
            H = torch.stack([model.projector(model.backbone(x)) for x in views])
            want = model.objective(H, model._targets(views))
            got = view.loss_of_features(view.features)
        torch.testing.assert_close(got, want)
        assert view.loss_of_outputs is not None
        H64 = H.double()
        assert view.loss_of_outputs(H64).dtype == torch.float64  # BYOL: float64 predictor copy
        torch.testing.assert_close(
            view.loss_of_outputs(H).double(), view.loss_of_outputs(H64), rtol=1e-4, atol=1e-4
        )

    @pytest.mark.parametrize("method", ["byol", "vicreg"])
    def test_captured_view_reuses_the_training_step(
        self, method: str, digits: Path, tmp_path: Path
    ) -> None:
        from solo_geometry.hosts.lightly import prepare
        from solo_geometry.hosts.lightly.module import LightlyMethod
        from solo_geometry.recipe import load_recipe

        cfg = load_recipe(write_recipe(tmp_path, method, digits), ["+geometry=on"])
        recipe, geometry = prepare(cfg)
        model = LightlyMethod(recipe, 10, geometry).train()
        torch.manual_seed(0)
        batch = (
            torch.arange(6),
            [torch.randn(6, 3, 32, 32) for _ in range(2)],
            torch.zeros(6, dtype=torch.long),
        )
        backbones = [model.backbone] + ([model.momentum_backbone] if model.momentum else [])
        assert_view_reuses_training_step(model, batch, backbones)


def _refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``solo-geometry`` in this process, for input refused before any run: status, stderr."""
    from solo_geometry.cli import main

    try:
        status = main(args)
    except SystemExit as exit_:  # argparse's refusals
        status = int(exit_.code or 0)
    return status, capsys.readouterr().err


class TestUntrained:
    @pytest.mark.parametrize("head", ["projector", "smooth_mlp"])
    def test_the_same_network_from_its_constructor_at_a_seed(
        self, head: str, digits: Path, tmp_path: Path
    ) -> None:
        """``geometry_untrained()``: the trained module's architecture, a seeded fresh draw."""
        from solo_geometry.analysis.evaluation import random_init_modules
        from solo_geometry.hosts.lightly import prepare
        from solo_geometry.hosts.lightly.module import LightlyMethod
        from solo_geometry.recipe import load_recipe
        from solo_geometry.runtime.callbacks import untrained_builder

        overrides = ["+geometry=on", f"geometry.head.name={head}"]
        recipe, geometry = prepare(load_recipe(write_recipe(tmp_path, "byol", digits), overrides))
        trained = LightlyMethod(recipe, 10, geometry)
        with torch.no_grad():  # as if trained: every weight moved
            for p in trained.parameters():
                p.add_(0.01)
        build = untrained_builder(trained)
        assert build is not None
        backbone, projector = random_init_modules(build, seed=0)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            fresh = LightlyMethod(recipe, 10, geometry)  # independently: the constructor
        for got, want, old in (
            (backbone, fresh.backbone, trained.backbone),
            (projector, fresh.projector, trained.projector),
        ):
            assert type(got) is type(want)
            ours, theirs, before = got.state_dict(), want.state_dict(), old.state_dict()
            assert list(ours) == list(theirs) == list(before)
            assert all(torch.equal(ours[k], theirs[k]) for k in ours)
            weights = [k for k in ours if k.endswith("weight")]
            assert not any(torch.equal(ours[k], before[k]) for k in weights)


class TestErrors:
    def test_unsupported_field(
        self, digits: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        recipe = write_recipe(tmp_path, "byol", digits, mixup={"alpha": 0.2})
        args = ["pretrain", "--config", str(recipe), "--host", "lightly", "--runs-root"]
        status, err = _refused([*args, str(tmp_path / "r")], capsys)
        assert status == 2 and "mixup" in err and "not supported" in err, err
        assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())

    def test_missing_data_folder(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        recipe = write_recipe(tmp_path, "simclr", tmp_path / "no-such-data")
        args = ["pretrain", "--config", str(recipe), "--host", "lightly", "--runs-root"]
        status, err = _refused([*args, str(tmp_path / "r")], capsys)
        assert status == 2 and "data.train_path" in err and "not found" in err, err
        assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())

    def test_unknown_host(self, capsys: pytest.CaptureFixture[str]) -> None:
        status, err = _refused(["pretrain", "--config", "x.yaml", "--host", "moco"], capsys)
        assert status == 2 and "moco" in err and "lightly" in err, err

    def test_missing_recipe(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        args = ["pretrain", "--config", str(tmp_path / "nope.yaml"), "--host", "lightly"]
        status, err = _refused(args, capsys)
        assert status == 2 and "nope.yaml" in err, err

    def test_solo_host_without_solo(self, tmp_path: Path) -> None:
        result = _cli(["pretrain", "--config", "x.yaml", "--host", "solo"], block_solo=True)
        assert result.returncode != 0 and "solo-learn" in result.stderr


@pytest.mark.solo
@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("solo") is None, reason="solo-learn 1.0.6 is not installed here"
)
class TestBothHosts:
    def test_same_recipe_both_hosts_one_report(
        self, digits: Path, probe_data: Path, tmp_path: Path
    ) -> None:
        from solo_geometry.analysis.report import write_report
        from solo_geometry.hosts.pretrain import pretrain

        checkpoint = {"enabled": True, "dir": "trained_models", "frequency": 1}
        recipe = write_recipe(tmp_path / "recipes", "byol", digits, checkpoint=checkpoint)
        runs = {}
        for host in ("solo", "lightly"):
            used, runs[host] = pretrain(
                recipe, _geometry(probe_data), host=host, runs_root=tmp_path / "runs" / host
            )
            assert used == host
            _check_run_folder(runs[host])
        index = write_report([runs["solo"], runs["lightly"]], tmp_path / "overlay")
        text = Path(index).read_text()
        assert runs["solo"].name in text and runs["lightly"].name in text


class TestProbeNormalisation:
    """End-of-fit probes normalise images as the recipe's pipeline does."""

    @pytest.mark.parametrize(  # the values of solo-learn's solo/data/pretrain_dataloader.py
        ("overrides", "mean", "std"),
        [
            (["data.dataset=cifar100"], (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
            (["data.dataset=cifar10"], (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
            ([], (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        ],
    )
    def test_probe_callback_uses_the_recipes_statistics(
        self, overrides: list, mean: tuple, std: tuple, digits: Path, tmp_path: Path
    ) -> None:
        from solo_geometry.hosts.lightly import prepare
        from solo_geometry.hosts.lightly.launcher import build_callbacks
        from solo_geometry.recipe import load_recipe
        from solo_geometry.runtime.callbacks import ProbeCallback

        cfg = load_recipe(write_recipe(tmp_path, "simclr", digits), ["+geometry=on", *overrides])
        recipe, geometry = prepare(cfg)
        callbacks = build_callbacks(RunFolder(tmp_path / "run"), recipe, geometry)
        (probe,) = [c for c in callbacks if isinstance(c, ProbeCallback)]
        assert tuple(map(tuple, probe.mean_std)) == (mean, std)
