"""The default measurement (float32 products, float64 recurrences) against a float64 reference.

On solo-learn's own cifar recipes (their heads and losses, projector widths made CPU-small, a
batch of 8), the extreme eigenvalues of H_eff, GN and M that the default settings record as
converged lie within ``lanczos_tol`` times the operator's spectral scale (or the floor) of a
float64 Lanczos run to 1e-10, and the record says how it was computed. At ``bf16-mixed`` (the
CPU's mixed precision) solo-learn's own BYOL recipe writes finite records whose settings say the
precision and the features' dtype.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from solo_helpers import SOLO_REASON, env, run, solo_root, tail
from solo_recipes import CPU, batch, cifar_overrides, recipe

pytest.importorskip("solo", reason=SOLO_REASON)

from solo.args.pretrain import parse_cfg  # noqa: E402
from solo.methods import METHODS  # noqa: E402

from solo_geometry.config import GeometryConfig, MeasureConfig, SpectrumConfig  # noqa: E402
from solo_geometry.folder.records import read_records  # noqa: E402
from solo_geometry.geometry.spectrum import effective_hessian_spectrum  # noqa: E402
from solo_geometry.hosts.solo import install  # noqa: E402
from solo_geometry.linalg.blocks import block_indices, restrict_to_block  # noqa: E402
from solo_geometry.linalg.lanczos import lanczos  # noqa: E402
from solo_geometry.linalg.operators import head_operators  # noqa: E402
from solo_geometry.recipe import load_recipe  # noqa: E402
from solo_geometry.runtime.measure import measure, spectrum_options  # noqa: E402

install()

RECIPES = ["simclr", "byol", "vicreg", "barlow", "mocov2plus", "dino"]


def _view(method: str, digits: Path, dims: Sequence[str] = (), n: int = 8) -> Any:
    """The captured view of one training step of ``method``'s cifar recipe, geometry on.

    ``dims`` replace the tiny projector sizes (``method_kwargs.proj_*``); ``n`` samples a view.
    """
    tiny = cifar_overrides(method, digits / "train")
    if dims:
        tiny = [o for o in tiny if not o.startswith("method_kwargs.proj_")]
    overrides = [*tiny, *dims, "+geometry=on", "geometry.probes.enabled=false"]
    torch.manual_seed(0)
    cfg = parse_cfg(load_recipe(recipe(method), overrides))
    model = METHODS[cfg.method](cfg)  # barlow.yaml builds barlow_twins
    model.train()
    b = batch(n=n, size=8)
    model.geometry_capture(True)
    with torch.no_grad():
        model.training_step(b, 0)
    view = model.geometry_view(b)
    model.geometry_capture(False)
    return view


@pytest.mark.parametrize("method", RECIPES)
def test_default_extremes_within_tol_of_a_float64_reference(method: str, digits: Path) -> None:
    view = _view(method, digits)
    cfg = GeometryConfig().spectrum
    assert cfg.dtype == "float32"  # the default: float32 products under float64 recurrences
    Z = view.features.detach()

    def spectrum(**kw: Any) -> Any:
        return effective_hessian_spectrum(
            view.head, view.loss_of_outputs, Z, generator=torch.Generator().manual_seed(0), **kw
        )

    got = spectrum(**spectrum_options(cfg, density=False))  # the monitor's arguments
    ref = spectrum(
        max_steps=400, tol=1e-10, dtype=torch.float64, tau=1e-5, max_samples=cfg.max_samples
    )
    assert ref.floor == pytest.approx(got.floor, rel=1e-3)
    for name, op in got.operators.items():
        truth = ref.operators[name]
        assert truth.lambda_min is not None and truth.lambda_max is not None, name
        assert op.lambda_min is not None and op.lambda_max is not None, (name, op)  # converged
        bound = max(cfg.tol * max(abs(op.ritz_min), abs(op.ritz_max)), got.floor)
        assert abs(op.lambda_min - truth.lambda_min) <= bound, (name, op, truth)
        assert abs(op.lambda_max - truth.lambda_max) <= bound, (name, op, truth)
        # the residual bounds hold for the float32 operator, whose eigenvalues sit within its
        # products' round-off ||E|| <= dim * eps32 * max|lambda| of the float64 one's (Weyl):
        # CI once saw ritz_min - residual_min above the float64 lambda_min by 1.3e-8
        eps32 = torch.finfo(torch.float32).eps
        weyl = ref.dim * eps32 * max(abs(truth.lambda_min), abs(truth.lambda_max))
        assert op.ritz_min - op.residual_min <= truth.lambda_min + weyl, (name, op, truth)
        assert op.ritz_max + op.residual_max >= truth.lambda_max - weyl, (name, op, truth)
    # SimCLR's and MoCo v2+'s projectors are Linear-ReLU-Linear: GN's numbers are H_eff's run,
    # so check them against a float64 run of GN's own products
    assert got.gn_is_heff == (method in ("simclr", "mocov2plus"))
    if got.gn_is_heff:
        ops = head_operators(view.head, view.loss_of_outputs, Z, dtype=torch.float64)
        gn = restrict_to_block(ops.gn, ops.shape, block_indices(Z.shape[1], cfg.max_samples))
        own = lanczos(
            gn, ref.dim, max_steps=400, tol=1e-10, generator=torch.Generator().manual_seed(5)
        )
        assert own.converged
        bound = max(cfg.tol * max(abs(got.gn.ritz_min), abs(got.gn.ritz_max)), got.floor)
        assert abs(got.gn.lambda_min - float(own.ritz_values[0])) <= bound
        assert abs(got.gn.lambda_max - float(own.ritz_values[-1])) <= bound


def test_simsiam_bn_projector_reads_its_centred_rank(digits: Path) -> None:
    """solo-learn's SimSiam projector ends in BatchNorm (affine off): on 2 x 64 rows each view is
    centred, so the pooled, normalised, centred H has rank M - 2 = 126; at float64's eps its
    round-off read 127 and ``h/cond`` about 1e13 (issue 53)."""
    dims = ["method_kwargs.proj_hidden_dim=512", "method_kwargs.proj_output_dim=512"]
    view = _view("simsiam", digits, dims, n=64)
    assert isinstance(view.head[-1], torch.nn.BatchNorm1d) and view.head.training
    cfg = SpectrumConfig()
    result = measure(view, MeasureConfig(), cfg, seed=0, density=False, stats_only=True)
    Z = view.features.detach()
    twin = copy.deepcopy(view.head).double()
    with torch.no_grad():
        H64 = torch.stack([twin(Z[v].double()) for v in range(2)]).reshape(128, -1)
    Hn = H64 / H64.norm(dim=1, keepdim=True)
    s = torch.linalg.svdvals(Hn - Hn.mean(dim=0))  # the float64 reference
    assert s[125] > 1e-3 * s[0] and s[126] < 1e-12 * s[0]
    m = result.metrics
    assert m["h/rank"] == 126 and m["whitening/rank"] <= 126
    assert m["h/cond"] == pytest.approx(float(s[0] ** 2 / s[125] ** 2), rel=0.02)
    assert result.settings.features_dtype == "float32"
    assert result.settings.rank_eps == torch.finfo(torch.float32).eps


def test_record_says_how_it_was_computed(digits: Path) -> None:
    result = measure(
        _view("simclr", digits), MeasureConfig(), SpectrumConfig(), seed=0, density=False
    )
    s = result.settings
    assert (s.dtype, s.recurrence_dtype, s.tau) == ("float32", "float64", 1e-5)
    assert s.lanczos_tol == 1e-3 and s.lanczos_max_steps == 200
    for op in ("heff", "gn", "m"):
        assert result.metrics[f"{op}/steps"] >= 1
        assert isinstance(result.metrics[f"{op}/converged_min"], bool)


@pytest.mark.parametrize("method", RECIPES)
def test_batched_products_on_the_recipes_heads(method: str, digits: Path) -> None:
    """The density probes' batched products: vmap runs on every recipe's graphs (no fallback)
    and gives each vector's single product; the extremes' run is the same with probes beside."""
    view = _view(method, digits)
    Z = view.features.detach()
    ops = head_operators(view.head, view.loss_of_outputs, Z, dtype=torch.float64)
    vs = torch.randn(3, ops.dim, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    for name in ("heff", "gn", "m"):
        single = torch.stack([getattr(ops, name)(v) for v in vs])
        scale = max(float(single.abs().max()), 1e-300)
        assert float((ops.batched(name)(vs) - single).abs().max()) <= 1e-10 * scale, name
    assert not ops._unbatched, ops._unbatched  # the batched path ran, not the fallback

    def spectrum(probes: int) -> Any:
        return effective_hessian_spectrum(
            view.head,
            view.loss_of_outputs,
            Z,
            max_samples=4,
            generator=torch.Generator().manual_seed(0),
            density_probes=probes,
        )

    alone, beside = spectrum(0), spectrum(2)
    # H_eff's extremes' run draws the first start vector either way: the same run to round-off
    assert abs(alone.heff.steps - beside.heff.steps) <= 1, (alone.heff, beside.heff)
    for name, op in alone.operators.items():  # GN's and M's start after H_eff's probes
        other = beside.operators[name]
        bound = max(1e-3 * max(abs(op.ritz_min), abs(op.ritz_max)), alone.floor)
        assert abs(op.ritz_min - other.ritz_min) <= 2 * bound, (name, op, other)
        assert abs(op.ritz_max - other.ritz_max) <= 2 * bound, (name, op, other)
    assert beside.probes == 3 and alone.probes == 1


def test_bf16_mixed_byol_recipe_records_say_so(digits: Path, tmp_path: Path) -> None:
    """solo-learn's main_pretrain.py on its BYOL cifar recipe at bf16-mixed, two steps."""
    mixed = [
        o if not o.startswith("precision=") else "precision=bf16-mixed"
        for o in cifar_overrides("byol", digits / "train")
    ]
    assert "precision=bf16-mixed" in mixed and not set(CPU) <= set(mixed)
    args = [
        str(solo_root() / "main_pretrain.py"),
        "--config-path",
        str(recipe("byol").parent),
        "--config-name",
        "byol",
        f"hydra.run.dir={tmp_path}",
        *mixed,
        "max_epochs=1",
        "++limit_train_batches=2",
        "++enable_progress_bar=False",
        "+geometry=on",
        "geometry.probes.enabled=false",
        "geometry.report=false",
        "geometry.budget=null",
        "geometry.every_n_steps=1",
        "geometry.spectrum.max_samples=4",
        "geometry.spectrum.max_steps=30",
        "geometry.spectrum.density_probes=1",
        "geometry.measure.augment_samples=4",
        "geometry.measure.augment_families=[brightness]",
    ]
    proc = run(args, tmp_path, env=env())
    assert proc.returncode == 0, tail(proc)
    records = read_records(tmp_path)
    assert [r.step for r in records] == [0, 1, 2], [(r.step, r.reason) for r in records]
    for r in records:
        assert r.ok and r.failed_parts == {}, (r.step, r.reason, r.failed_parts)
        assert r.parts[:3] == ["stats", "hessian", "augment"]
        assert r.settings.precision == "bf16-mixed" and r.settings.dtype == "float32"
        assert r.settings.user_matmul is not None
        for key in ("heff/ritz_max", "gn/ritz_max", "z/rankme_l2", "rho/brightness"):
            assert r.metrics[key] is not None and math.isfinite(r.metrics[key]), (key, r.step)
    # the training steps' features are autocast's; the final record's come from a fresh
    # forward outside autocast
    assert [r.settings.features_dtype for r in records] == ["bfloat16", "bfloat16", "float32"]
    assert [r.settings.rank_eps for r in records] == [2.0**-7, 2.0**-7, 2.0**-23]
