"""End-to-end runs: solo-learn's unmodified main_pretrain.py and our launcher, as subprocesses.

Real solo-learn 1.0.6, real Lightning Trainer, the digits data on disk, a couple of steps each.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch
from solo_helpers import (
    GEOMETRY_TINY,
    METHODS4,
    RECIPES,
    REPO,
    SOLO_REASON,
    TINY,
    env,
    main_pretrain,
    run,
    solo_root,
    tail,
)

from solo_geometry.folder.records import GeometryRecord, read_records
from tests.shared import build_once

pytest.importorskip("solo", reason=SOLO_REASON)
pytestmark = pytest.mark.solo  # counted in the terminal summary (conftest.py)

DOCUMENTED = [
    *(
        f"{op}/{q}"
        for op in ("heff", "gn", "m")
        for q in ("lambda_min", "lambda_max", "neg_fraction", "neg_fraction_std", "cond")
    ),
    "interaction_ratio",
    *(f"{p}/{q}" for p in ("z", "h") for q in ("normalized_std", "cond", "rank", "rankme_l2")),
    "rho/brightness",
]


def _records(run_dir: Path) -> list[GeometryRecord]:
    return read_records(run_dir)


def _check_records(records: list[GeometryRecord], steps: list[int]) -> None:
    assert [r.step for r in records] == steps
    for r in records:
        assert r.ok, r.reason
        for key in DOCUMENTED:
            assert key in r.metrics, key
            if r.metrics[key] is None:  # cond is null unless the operator is definite
                assert key.endswith("/cond"), key
                continue
            assert math.isfinite(r.metrics[key]), (key, r.metrics[key])
        assert r.settings.n_batch is not None and r.settings.floor is not None
    for r in (records[0], records[-1]):
        assert r.density and len(r.density["nodes"]) == len(r.density["weights"]) > 0


def _launcher(args: list[str], cwd: Path) -> tuple:
    proc = run([str(REPO / "scripts" / "main_pretrain.py"), *args], cwd, env=env())
    return proc, cwd / "runs"


def _refused(args: list[str], cwd: Path, capsys: pytest.CaptureFixture[str]) -> tuple:
    """``scripts/main_pretrain.py``'s ``main`` in this process, for input refused before any run.

    Its exit status (``sys.exit(main())``, or argparse's ``SystemExit``) and stderr, and the
    runs folder; in-process because a refusal starts no trainer (the subprocess would pay only
    the imports).
    """
    spec = importlib.util.spec_from_file_location(
        "launcher_script", REPO / "scripts" / "main_pretrain.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        try:
            status = script.main(args)
        except SystemExit as exit_:
            status = exit_.code
    return status, capsys.readouterr().err, cwd / "runs"


def _data(digits_dir: Path) -> list[str]:
    return [f"data.train_path={digits_dir / 'train'}"]


# One step of BYOL with its head swapped, checkpointed: the plain run of the head-swap test and
# the checkpoint that vanilla solo-learn loads in TestCheckpoint (one run, not two alike).
SWAP = ["geometry.head.name=smooth_mlp", "geometry.head.activation=gelu"]


def _swapped(digits: Path, folder: Path, extra: list[str]) -> list[str]:
    """The one-step BYOL run's overrides (head swapped, checkpoint in ``folder / "ckpt"``)."""
    return [
        *TINY,
        *_data(digits),
        *GEOMETRY_TINY,
        "++limit_train_batches=1",
        "geometry.measure.augment=false",
        "checkpoint.enabled=True",
        f"checkpoint.dir={folder / 'ckpt'}",
        *SWAP,
        *extra,
    ]


def _build_swapped(folder: Path, digits: Path) -> None:
    proc = main_pretrain("byol", _swapped(digits, folder, []), folder / "run")
    assert proc.returncode == 0, tail(proc)


@pytest.fixture(scope="module")
def swapped(tmp_path_factory: pytest.TempPathFactory, digits: Path) -> Path:
    """The head-swapped BYOL run (``run/``, its checkpoints in ``ckpt/``), built once a session."""
    return build_once(tmp_path_factory, "solo_byol_swapped", lambda f: _build_swapped(f, digits))


class TestMainPretrain:
    """solo-learn's own main_pretrain.py with +geometry=on (plugin importable on PYTHONPATH)."""

    @pytest.mark.parametrize(
        "method",
        [
            pytest.param(m, marks=() if m in ("simclr", "byol") else pytest.mark.slow)
            for m in METHODS4
        ],
    )
    def test_geometry_on(self, digits: Path, tmp_path: Path, method: str) -> None:
        proc = main_pretrain(method, [*TINY, *_data(digits), *GEOMETRY_TINY], tmp_path)
        assert proc.returncode == 0, tail(proc)
        _check_records(_records(tmp_path), [0, 1, 2])
        assert (tmp_path / "config.yaml").is_file()

    @pytest.mark.shared("solo_byol_swapped")
    def test_head_swap_and_pseudo_collapse_in_first_record(
        self, digits: Path, tmp_path: Path, swapped: Path
    ) -> None:
        extra = ["geometry.init.pseudo_collapse=true"]
        collapsed = main_pretrain("byol", _swapped(digits, tmp_path, extra), tmp_path / "b")
        assert collapsed.returncode == 0, tail(collapsed)
        first_plain, first = _records(swapped / "run")[0], _records(tmp_path / "b")[0]
        assert first.head == first_plain.head == "smooth_mlp"
        assert first.meta and first.meta["geometry"]["head"]["activation"] == "gelu"
        assert first.meta["geometry"]["init"] == {
            "pseudo_collapse": True,
            "alpha": 0.1,
            "backbone": False,
        }
        ratio = first.metrics["head/weight_norm"] / first_plain.metrics["head/weight_norm"]
        assert ratio == pytest.approx(0.1, rel=1e-4)  # same seed, every head weight times alpha

    def test_resume_continues_the_file(self, digits: Path, tmp_path: Path) -> None:
        opts = [
            *TINY,
            *_data(digits),
            *GEOMETRY_TINY,
            "max_epochs=2",
            "checkpoint.enabled=True",
            f"checkpoint.dir={tmp_path / 'ckpt'}",
            "++checkpoint.keep_prev=True",
            "geometry.measure.augment=false",
        ]
        first = main_pretrain("simclr", opts, tmp_path)
        assert first.returncode == 0, tail(first)
        written = {r.step: r.seconds for r in _records(tmp_path)}
        assert sorted(written) == [0, 1, 2, 3, 4]
        mid = next((tmp_path / "ckpt").rglob("*ep=0.ckpt"))
        ckpt_step = torch.load(mid, map_location="cpu", weights_only=False)["global_step"]
        # what a kill after the checkpoint leaves: the records up to it, then a torn line
        lines = (tmp_path / "geometry.jsonl").read_text().splitlines()
        (tmp_path / "geometry.jsonl").write_text(
            "\n".join(lines[: ckpt_step + 1]) + "\n" + lines[ckpt_step + 1][:30]
        )
        again = main_pretrain("simclr", [*opts, f"+resume_from_checkpoint='{mid}'"], tmp_path)
        assert again.returncode == 0, tail(again)
        records = _records(tmp_path)
        assert [r.step for r in records] == [0, 1, 2, 3, 4]  # no gap, no duplicate
        assert records[-1].final and all(r.ok for r in records)
        # the records after the checkpoint were written by the resumed run, not left over
        assert all(r.seconds == written[r.step] for r in records if r.step <= ckpt_step - 1)
        assert all(r.seconds != written[r.step] for r in records if r.step > ckpt_step)

    def test_unknown_head_fails_clearly(self, digits: Path, tmp_path: Path) -> None:
        proc = main_pretrain(
            "byol", [*TINY, *_data(digits), "+geometry=on", "geometry.head.name=nope"], tmp_path
        )
        assert proc.returncode != 0
        assert "geometry.head.name: unknown value 'nope'" in proc.stdout + proc.stderr
        assert not (tmp_path / "geometry.jsonl").exists()


class TestCheckpoint:
    @pytest.mark.shared("solo_byol_swapped")
    def test_vanilla_solo_loads_backbone_without_plugin(
        self, swapped: Path, tmp_path: Path
    ) -> None:
        ckpt = next((swapped / "ckpt").rglob("*.ckpt"))
        code = f"""
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.startswith(("solo_geometry", "hydra_plugins.solo_geometry")):
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
import torch, torchvision, torch.nn as nn
ckpt = torch.load({str(ckpt)!r}, map_location="cpu")  # main_linear.py's call
geometry = ckpt["geometry"]
assert isinstance(geometry, dict) and geometry["summary"]["n_records"] >= 1
state = ckpt["state_dict"]
for k in list(state.keys()):  # main_linear.py's loop
    if "backbone" in k:
        state[k.replace("backbone.", "")] = state[k]
    del state[k]
backbone = torchvision.models.resnet18()
backbone.fc = nn.Identity()
result = backbone.load_state_dict(state, strict=False)
assert result.missing_keys == [], result.missing_keys
torch.load({str(ckpt)!r}, map_location="cpu", weights_only=True)
assert not any(m.startswith("solo_geometry") for m in sys.modules)
print("loaded", len(state))
"""
        loaded = run(["-c", code], tmp_path, env=env(block_plugin=True))
        assert loaded.returncode == 0, tail(loaded)
        assert loaded.stdout.strip().startswith("loaded")


class TestLauncher:
    # One method: the launcher does the same for each; the four digits recipes each run through
    # main_pretrain.py in TestMainPretrain, and the 17 methods' own recipes in
    # test_solo_methods_e2e.py.
    @pytest.mark.parametrize("method", ["byol"])
    def test_geometry_on(self, digits: Path, tmp_path: Path, method: str) -> None:
        args = [
            "--config",
            str(RECIPES / f"{method}.yaml"),
            "--runs-root",
            "runs",
            *TINY,
            *_data(digits),
            *GEOMETRY_TINY,
        ]
        proc, runs = _launcher(args, tmp_path)
        assert proc.returncode == 0, tail(proc)
        (run_dir,) = runs.iterdir()
        assert run_dir.name.startswith(f"{method}-") and f"run folder: {run_dir}" in proc.stdout
        _check_records(_records(run_dir), [0, 1, 2])
        assert (run_dir / "config.yaml").is_file() and not (run_dir / ".incomplete").exists()
        assert not (tmp_path / "lightning_logs").exists()

    def test_geometry_off_writes_no_file(self, digits: Path, tmp_path: Path) -> None:
        args = ["--config", str(RECIPES / "vicreg.yaml"), *TINY, *_data(digits), "+geometry=off"]
        proc, runs = _launcher(args, tmp_path)
        assert proc.returncode == 0, tail(proc)
        (run_dir,) = runs.iterdir()
        assert not (run_dir / "geometry.jsonl").exists() and (run_dir / "config.yaml").exists()

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["+geometry=on", "geometry.head.name=nope"], "geometry.head.name"),
            (
                ["+geometry=on", "geometry.head.name=smooth_mlp", "geometry.head.activation=sine"],
                "geometry.head.activation",
            ),
            (["+geometry=on", "method=wmse"], "not supported for method 'wmse'"),
            (["+geometry=on", "geometry.head.nme=x"], "geometry.head.nme"),
            (["+geometry=on", "stray"], "not a Hydra override"),
        ],
    )
    def test_bad_input(
        self,
        digits: Path,
        tmp_path: Path,
        args: list,
        message: str,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        recipe = ["--config", str(RECIPES / "byol.yaml")]
        status, err, runs = _refused([*recipe, *TINY, *_data(digits), *args], tmp_path, capsys)
        assert status == 2 and message in err, err
        assert not runs.exists() or not any(runs.iterdir())

    def test_plain_geometry_on_without_group(
        self, digits: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        recipe = tmp_path / "byol-on.yaml"
        recipe.write_text((RECIPES / "byol.yaml").read_text() + "geometry: on\n")
        status, err, runs = _refused(
            ["--config", str(recipe), *TINY, *_data(digits)], tmp_path, capsys
        )
        assert status == 2 and "config group" in err, err
        assert not runs.exists() or not any(runs.iterdir())

    @pytest.mark.parametrize("config", ["missing.yaml", ".", "notes.txt"])
    def test_malformed_recipe_path(
        self, tmp_path: Path, config: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        (tmp_path / "notes.txt").write_text("method: byol\n")
        status, err, runs = _refused(["--config", config], tmp_path, capsys)
        assert status == 2 and "recipe" in err, err
        assert not runs.exists()

    def test_failing_run_leaves_no_folder(self, digits: Path, tmp_path: Path) -> None:
        # a missing key solo-learn reads only when it builds the method: found inside the run
        args = [
            "--config",
            str(RECIPES / "byol.yaml"),
            *TINY,
            *_data(digits),
            "~method_kwargs.proj_output_dim",
        ]
        proc, runs = _launcher(args, tmp_path)
        assert proc.returncode == 1 and "exited with status" in proc.stderr, tail(proc)
        assert "folder removed" in proc.stdout and not any(runs.iterdir())

    def test_solo_root_errors(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        args = ["--config", str(RECIPES / "byol.yaml"), "--solo-root", str(tmp_path)]
        status, err, runs = _refused(args, tmp_path, capsys)
        assert status == 2 and "--solo-root" in err and "SOLO_LEARN_ROOT" in err, err
        assert not runs.exists()

    def test_solo_root_from_environment(self, tmp_path: Path) -> None:
        from solo_geometry.hosts.solo import find_solo_root

        root = solo_root()
        assert find_solo_root() == root  # $SOLO_LEARN_ROOT, else next to the installed package
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("SOLO_LEARN_ROOT", str(root))
            assert find_solo_root() == root
            mp.setenv("SOLO_LEARN_ROOT", str(tmp_path))
            with pytest.raises(FileNotFoundError, match="SOLO_LEARN_ROOT"):
                find_solo_root()
