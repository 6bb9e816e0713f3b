"""In-process tests of the solo-learn adapter with the real solo-learn 1.0.6.

Models are built exactly as solo-learn's ``main_pretrain.py`` builds them (recipe composed with
Hydra, ``parse_cfg``, ``METHODS[cfg.method](cfg)``) from the digits recipes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from capture_checks import assert_view_reuses_training_step
from solo_helpers import RECIPES, SOLO_REASON
from solo_recipes import ssl_loss

pytest.importorskip("solo", reason=SOLO_REASON)
pytestmark = pytest.mark.solo  # counted in the terminal summary (conftest.py)

from solo.args.pretrain import parse_cfg  # noqa: E402
from solo.methods import METHODS  # noqa: E402

from solo_geometry.hosts.solo import SUPPORTED, UNSUPPORTED, install  # noqa: E402
from solo_geometry.hosts.solo.methods import GeometryMethod, is_wrapped  # noqa: E402
from solo_geometry.recipe import load_recipe  # noqa: E402

ORIGINAL = {name: getattr(cls, "_solo_base", cls) for name, cls in METHODS.items()}
install()

# Extra method_kwargs for the supported methods without a digits recipe (built on simclr's).
OTHERS: dict[str, list[str]] = {
    "supcon": ["method=supcon"],
    "simsiam": ["method=simsiam", "+method_kwargs.pred_hidden_dim=64"],
    "vibcreg": [
        "method=vibcreg",
        "+method_kwargs.sim_loss_weight=25.0",
        "+method_kwargs.var_loss_weight=25.0",
        "+method_kwargs.cov_loss_weight=200.0",
        "+method_kwargs.iternorm=false",
    ],
    "mocov3": [
        "method=mocov3",
        "+method_kwargs.pred_hidden_dim=64",
        "+momentum.base_tau=0.99",
        "+momentum.final_tau=1.0",
    ],
}


def _cfg(digits_dir: Path, method: str, overrides: list[str] = ()) -> Any:  # type: ignore[assignment]
    recipe = method if method not in OTHERS else "simclr"
    extra = OTHERS.get(method, [])
    cfg = load_recipe(
        RECIPES / f"{recipe}.yaml",
        [
            f"data.train_path={digits_dir / 'train'}",
            "data.val_path=null",
            "method_kwargs.proj_hidden_dim=64",
            "method_kwargs.proj_output_dim=32",
            *extra,
            *overrides,
        ],
    )
    return parse_cfg(cfg)


def _batch(n: int = 8, views: int = 2, seed: int = 0) -> list[Any]:
    g = torch.Generator().manual_seed(seed)
    X = [torch.randn(n, 3, 32, 32, generator=g) for _ in range(views)]
    return [torch.arange(n), X, torch.randint(0, 10, (n,), generator=g)]


GEOMETRY_ON = ["+geometry=on", "geometry.probes.enabled=false"]


class TestInstall:
    def test_entries_stay_classes_and_subclasses(self) -> None:
        for name, cls in METHODS.items():
            assert isinstance(cls, type)
            assert issubclass(cls, ORIGINAL[name])

    def test_idempotent(self) -> None:
        before = dict(METHODS)
        assert install() == []
        assert METHODS == before
        assert sum(c is GeometryMethod for c in METHODS["byol"].__mro__) == 1

    def test_supported_list(self) -> None:
        assert set(SUPPORTED) >= {"simclr", "byol", "vicreg", "barlow_twins"}
        wrapped = {n for n, c in METHODS.items() if is_wrapped(c)}
        assert set(SUPPORTED) | set(UNSUPPORTED) == wrapped


class TestGeometryOff:
    @pytest.mark.parametrize("overrides", [[], ["+geometry=off"]])
    @pytest.mark.parametrize("method", ["byol", "simclr"])
    def test_vanilla_model_and_loss(self, digits: Path, method: str, overrides: list) -> None:
        torch.manual_seed(0)
        model = METHODS[method](_cfg(digits, method, overrides))
        torch.manual_seed(0)
        vanilla = ORIGINAL[method](_cfg(digits, method))
        assert type(model) is ORIGINAL[method]
        ref = vanilla.state_dict()
        assert all(torch.equal(v, ref[k]) for k, v in model.state_dict().items())
        batch = _batch()
        torch.manual_seed(1)
        got = model.training_step(batch, 0)
        torch.manual_seed(1)
        assert torch.equal(got, vanilla.training_step(batch, 0))

    def test_cpu_device_list_becomes_int(self, digits: Path) -> None:
        cfg = _cfg(digits, "simclr")
        assert list(cfg.devices) == [0] and cfg.accelerator == "cpu"
        METHODS["simclr"](cfg)
        assert cfg.devices == 1


class TestLossClosure:
    @pytest.mark.parametrize("method", ["simclr", "byol", "vicreg", "barlow_twins", *OTHERS])
    def test_equals_training_ssl_loss(self, digits: Path, method: str) -> None:
        model = METHODS[method](_cfg(digits, method, GEOMETRY_ON))
        assert isinstance(model, ORIGINAL[method]) and isinstance(model, GeometryMethod)
        model.train()
        batch = _batch()
        expected = ssl_loss(model, batch)
        view = model.geometry_view(batch)
        assert view.features.shape == (2, 8, model.features_dim)
        assert view.head is model.projector and view.images is batch[1][0]
        got = view.loss_of_features(view.features)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
        H = torch.stack([model.projector(z) for z in view.features]).double()
        got64 = view.loss_of_outputs(H)
        assert got64.dtype == torch.float64
        torch.testing.assert_close(got64.float(), expected, rtol=1e-4, atol=1e-5)

    @pytest.mark.parametrize("method", ["simclr", "byol", "vicreg", "barlow_twins", "mocov3"])
    def test_captured_view_reuses_the_training_step(self, digits: Path, method: str) -> None:
        model = METHODS[method](_cfg(digits, method, GEOMETRY_ON))
        model.train()
        momentum = [model.momentum_backbone] if hasattr(model, "momentum_backbone") else []
        assert_view_reuses_training_step(model, _batch(), [model.backbone, *momentum])

    def test_closure_leaves_model_untouched(self, digits: Path) -> None:
        model = METHODS["byol"](_cfg(digits, "byol", GEOMETRY_ON))
        view = model.geometry_view(_batch())
        before = {k: v.clone() for k, v in model.predictor.state_dict().items()}
        H = torch.randn(2, 8, 32, dtype=torch.float64, requires_grad=True)
        view.loss_of_outputs(H).backward()
        assert H.grad is not None
        assert all(p.grad is None for p in model.parameters())
        after = model.predictor.state_dict()
        assert all(torch.equal(v, after[k]) for k, v in before.items())


class TestHeadAndInit:
    def test_head_swap(self, digits: Path) -> None:
        from solo_geometry.models.heads import SmoothMLPHead

        swap = ["geometry.head.name=smooth_mlp", "geometry.head.activation=gelu"]
        cfg = _cfg(digits, "byol", [*GEOMETRY_ON, *swap])
        model = METHODS["byol"](cfg)
        assert isinstance(model.projector, SmoothMLPHead)
        assert isinstance(model.momentum_projector, SmoothMLPHead)
        assert any(isinstance(m, torch.nn.GELU) for m in model.projector.modules())
        for p, q in zip(
            model.projector.parameters(), model.momentum_projector.parameters(), strict=True
        ):
            assert torch.equal(p, q) and not q.requires_grad
        names = [g["name"] for g in model.learnable_params]
        assert "projector" in names
        group = next(g for g in model.learnable_params if g["name"] == "projector")
        assert {id(p) for p in group["params"]} == {id(p) for p in model.projector.parameters()}
        assert model.projector(torch.randn(4, model.features_dim)).shape == (4, 32)

    @pytest.mark.parametrize("method", ["byol", "simsiam"])
    def test_identity_predictor(self, digits: Path, method: str) -> None:
        """``geometry.predictor.name=identity``: Chen and He's ablation, p = z."""
        from solo.losses.simsiam import simsiam_loss_func

        identity = [*GEOMETRY_ON, "geometry.predictor.name=identity"]
        model = METHODS[method](_cfg(digits, method, identity))
        assert isinstance(model.predictor, torch.nn.Identity)
        group = next(g for g in model.learnable_params if g["name"] == "predictor")
        assert list(group["params"]) == []
        model.train()
        batch = _batch()
        expected = ssl_loss(model, batch)
        view = model.geometry_view(batch)
        torch.testing.assert_close(
            view.loss_of_features(view.features), expected, rtol=1e-4, atol=1e-5
        )
        if method == "simsiam":  # the loss without a predictor, from solo-learn's own function
            z1, z2 = (model.projector(f) for f in view.features)
            plain = simsiam_loss_func(z1, z2.detach()) / 2 + simsiam_loss_func(z2, z1.detach()) / 2
            torch.testing.assert_close(expected, plain, rtol=1e-4, atol=1e-5)

    def test_pseudo_collapse(self, digits: Path) -> None:
        torch.manual_seed(0)
        plain = METHODS["byol"](_cfg(digits, "byol", GEOMETRY_ON))
        torch.manual_seed(0)
        init = ["geometry.init.pseudo_collapse=true", "geometry.init.alpha=0.1"]
        collapsed = METHODS["byol"](_cfg(digits, "byol", [*GEOMETRY_ON, *init]))
        w0, w1 = plain.projector[0].weight, collapsed.projector[0].weight
        torch.testing.assert_close(w1, 0.1 * w0)
        assert torch.equal(collapsed.momentum_projector[0].weight, w1)

    @pytest.mark.parametrize("method", ["byol", "simclr"])
    def test_untrained_is_the_constructor_at_a_seed(self, digits: Path, method: str) -> None:
        """``geometry_untrained()``: solo-learn's constructor, head swap and init, untrained."""
        from solo_geometry.analysis.evaluation import random_init_modules
        from solo_geometry.runtime.callbacks import untrained_builder

        swap = ["geometry.head.name=smooth_mlp", "geometry.init.pseudo_collapse=true"]
        cfg = _cfg(digits, method, [*GEOMETRY_ON, *swap])
        trained = METHODS[method](cfg)
        with torch.no_grad():  # as if trained: every weight moved
            for p in trained.parameters():
                p.add_(0.01)
        build = untrained_builder(trained)
        assert build is not None
        backbone, head = random_init_modules(build, seed=0)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            fresh = METHODS[method](_cfg(digits, method, [*GEOMETRY_ON, *swap]))
        for got, want, old in (
            (backbone, fresh.backbone, trained.backbone),
            (head, fresh.projector, trained.projector),
        ):
            ours, theirs, before = got.state_dict(), want.state_dict(), old.state_dict()
            assert list(ours) == list(theirs) == list(before)
            assert all(torch.equal(ours[k], theirs[k]) for k in ours)
            assert not any(torch.equal(ours[k], before[k]) for k in ours if k.endswith("weight"))

    def test_unsupported_method_is_a_clear_error(self, digits: Path) -> None:
        cfg = _cfg(digits, "simclr", ["method=wmse", *GEOMETRY_ON])
        with pytest.raises(ValueError, match="not supported for method 'wmse' \\(.*randperm.*byol"):
            METHODS["wmse"](cfg)

    def test_unsupported_method_without_geometry_is_vanilla(self, digits: Path) -> None:
        cfg = _cfg(
            digits,
            "simclr",
            ["method=swav", "+method_kwargs.queue_size=0", "+method_kwargs.num_prototypes=10"],
        )
        assert type(METHODS["swav"](cfg)) is ORIGINAL["swav"]

    def test_configure_callbacks(self, digits: Path, tmp_path: Path) -> None:
        from solo_geometry.runtime.callbacks import ProbeCallback, ReportCallback
        from solo_geometry.runtime.monitor import GeometryMonitor
        from solo_geometry.runtime.preempt import PreemptionCallback

        cfg = _cfg(
            digits,
            "vicreg",
            [
                "+geometry=on",
                f"geometry.out_dir={tmp_path}",
                f"geometry.probes.data={digits / 'val'}",
            ],
        )
        callbacks = METHODS["vicreg"](cfg).configure_callbacks()
        kinds = [GeometryMonitor, ProbeCallback, ReportCallback, PreemptionCallback]
        assert [type(c) for c in callbacks] == kinds
        assert callbacks[0].config.out_dir == str(tmp_path)
        assert callbacks[0].meta == {"host": "solo", "method": "vicreg"}
        assert callbacks[1].data == digits / "val"
