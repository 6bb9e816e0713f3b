"""Tests of solo_geometry.config: the typed ``geometry`` node and its validation."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from omegaconf import OmegaConf

from solo_geometry.config import (
    MOVED_TO_SPECTRUM,
    GeometryConfig,
    HeadConfig,
    MeasureConfig,
    ProbesConfig,
    SpectrumConfig,
    as_bool,
    geometry_config,
)
from solo_geometry.models.heads import build_configured_head


def _cfg(node: object) -> OmegaConf:
    return OmegaConf.create({"method": "byol", "geometry": node})


class TestAsBool:
    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            (True, True),
            (False, False),
            ("on", True),
            ("off", False),
            ("ON", True),
            ("no", False),
            ("yes", True),
            ("1", True),
            ("0", False),
            (0, False),
        ],
    )
    def test_words(self, value: object, expected: bool) -> None:
        assert as_bool(value, "k") is expected

    @pytest.mark.parametrize("value", ["maybe", "", 2, None, 0.5])
    def test_rejects(self, value: object) -> None:
        with pytest.raises(ValueError, match="k: expected a boolean"):
            as_bool(value, "k")


class TestGeometryConfig:
    def test_defaults(self) -> None:
        g = GeometryConfig()
        assert (g.enabled, g.every_n_steps, g.seed) == (True, 50, 0)
        assert g.spectrum == SpectrumConfig(
            max_steps=200, tol=1e-3, dtype="float32", max_samples=16, tau=None, density_probes=2
        )
        assert g.head.name == "projector"  # geometry on never changes the experiment
        assert not g.init.pseudo_collapse and g.init.alpha == 0.1
        assert g.probes.enabled and g.probes.data is None

    def test_absent_is_none(self) -> None:
        assert geometry_config(OmegaConf.create({"method": "byol"})) is None

    def test_on(self) -> None:
        g = geometry_config(_cfg({"enabled": True, "every_n_steps": 10}))
        assert isinstance(g, GeometryConfig) and g.every_n_steps == 10

    @pytest.mark.parametrize("enabled", [False, "off", "false", "no"])
    def test_off_values(self, enabled: object) -> None:
        assert geometry_config(_cfg({"enabled": enabled})) is None

    def test_string_off_for_nested_bool_is_false(self) -> None:
        g = geometry_config(_cfg({"init": {"pseudo_collapse": "off"}}))
        assert g is not None and g.init.pseudo_collapse is False

    @pytest.mark.parametrize("node", [True, "on", "yes"])
    def test_plain_on_value_without_group_is_an_error(self, node: object) -> None:
        with pytest.raises(ValueError, match="config group"):
            geometry_config(_cfg(node))

    def test_yaml_on_without_group(self) -> None:
        cfg = OmegaConf.create("method: byol\ngeometry: on\n")
        with pytest.raises(ValueError, match=r"\+geometry=on"):
            geometry_config(cfg)

    @pytest.mark.parametrize("node", [False, "off"])
    def test_plain_off_value_is_off(self, node: object) -> None:
        assert geometry_config(_cfg(node)) is None

    @pytest.mark.parametrize(
        ("node", "key"),
        [
            ({"head": {"nme": "x"}}, "geometry.head.nme"),
            ({"every_n_step": 3}, "geometry.every_n_step"),
            ({"every_n_steps": "abc"}, "geometry.every_n_steps"),
            ({"every_n_steps": 0}, "geometry.every_n_steps"),
            ({"spectrum": {"dtype": "float16"}}, "geometry.spectrum.dtype"),
            ({"spectrum": {"max_steps": 1}}, "geometry.spectrum.max_steps"),
            ({"spectrum": {"tol": 0.0}}, "geometry.spectrum.tol"),
            ({"spectrum": {"max_samples": 1}}, "geometry.spectrum.max_samples"),
            ({"spectrum": {"tau": -1e-3}}, "geometry.spectrum.tau"),
            ({"spectrum": {"density_probes": 0}}, "geometry.spectrum.density_probes"),
            ({"dtype": "float16"}, "geometry.dtype"),  # an old key: named as written
            ({"head": {"name": "mlp9"}}, "geometry.head.name"),
            ({"head": {"activation": "sine"}}, "geometry.head.activation"),
            ({"head": {"norm": "group"}}, "geometry.head.norm"),
            ({"measure": {"augment_families": ["blur"]}}, "geometry.measure.augment_families"),
            ({"init": {"alpha": -1.0}}, "geometry.init.alpha"),
            ({"enabled": "maybe"}, "geometry.enabled"),
            ({"probes": {"targets": ["colour"]}}, "geometry.probes.targets"),
            ({"probes": {"mlp": {"hidden": 0}}}, "geometry.probes.mlp.hidden"),
            ({"probes": {"linear": {"l2_grid": []}}}, "geometry.probes.linear.l2_grid"),
            ({"probes": {"orbits": {"families": ["blur"]}}}, "geometry.probes.orbits.families"),
            ({"probes": {"orbits": {"k": 1}}}, "geometry.probes.orbits.k"),
            ({"measure": {"tau": -1e-3}}, "geometry.measure.tau"),
        ],
    )
    def test_bad_input_names_the_key(self, node: dict, key: str) -> None:
        with pytest.raises(ValueError, match=key.replace(".", r"\.")):
            geometry_config(_cfg(node))

    @pytest.mark.parametrize(
        ("build", "key"),
        [
            (lambda: GeometryConfig(every_n_steps=0), "geometry.every_n_steps"),
            (lambda: SpectrumConfig(dtype="float16"), "geometry.spectrum.dtype"),
            (lambda: GeometryConfig(dtype="float16"), "geometry.dtype"),
            (lambda: HeadConfig(name="mlp9"), "geometry.head.name"),
            (lambda: HeadConfig(activation="sine"), "geometry.head.activation"),
            (lambda: MeasureConfig(augment_families=["blur"]), "geometry.measure.augment_families"),
            (lambda: ProbesConfig(probes=["svm"]), "geometry.probes.probes"),
        ],
    )
    def test_python_construction_is_validated_too(self, build: object, key: str) -> None:
        # the same checks whether the node comes from Hydra or from plain Python
        with pytest.raises(ValueError, match=key.replace(".", r"\.")):
            build()  # type: ignore[operator]

    def test_nested_probe_options_reach_the_config(self) -> None:
        probes = {
            "mlp": {"hidden": 32},
            "linear": {"tol": 1e-6},
            "orbits": {"families": ["hue"], "k": 4},
        }
        g = geometry_config(_cfg({"probes": probes}))
        assert g is not None
        assert (g.probes.mlp.hidden, g.probes.linear.tol) == (32, 1e-6)
        assert (g.probes.orbits.families, g.probes.orbits.k) == (["hue"], 4)

    def test_unknown_head_lists_choices(self) -> None:
        with pytest.raises(ValueError, match="smooth_mlp"):
            geometry_config(_cfg({"head": {"name": "nope"}}))


# A value of each old key, away from its new key's default.
OLD_VALUES = {
    "max_samples": 4,
    "lanczos_max_steps": 30,
    "lanczos_tol": 1e-4,
    "dtype": "float64",
    "measure.density_probes": 1,
    "measure.tau": 1e-9,
}


def _nested(flat: dict[str, object]) -> dict[str, object]:
    out: dict[str, dict] = {}
    for key, value in flat.items():
        *path, name = key.split(".")
        node = out
        for part in path:
            node = node.setdefault(part, {})
        node[name] = value
    return out


class TestSpectrumNode:
    def test_old_keys_are_all_the_nodes_fields(self) -> None:
        """Every field of the node had an old key; nothing else moved."""
        fields = {f.name for f in dataclasses.fields(SpectrumConfig)}
        assert (
            sorted(MOVED_TO_SPECTRUM.values())
            == sorted(fields)
            == sorted(
                _nested({f"spectrum.{new}": 0 for new in MOVED_TO_SPECTRUM.values()})["spectrum"]
            )
        )
        assert set(OLD_VALUES) == set(MOVED_TO_SPECTRUM)

    @pytest.mark.parametrize("old", list(MOVED_TO_SPECTRUM))
    def test_old_key_moves_with_one_line_warning(self, old: str) -> None:
        new, value = MOVED_TO_SPECTRUM[old], OLD_VALUES[old]
        with pytest.warns(FutureWarning) as caught:
            g = geometry_config(_cfg(_nested({old: value})))
        assert g is not None and getattr(g.spectrum, new) == value
        assert g == GeometryConfig(spectrum=SpectrumConfig(**{new: value}))  # old key: null
        messages = [str(w.message) for w in caught if w.category is FutureWarning]
        assert messages == [
            f"geometry.{old} is deprecated, use geometry.spectrum.{new} (the old key goes in "
            "the next release)"
        ]

    def test_all_old_keys_give_the_new_node(self) -> None:
        with pytest.warns(FutureWarning):
            old = geometry_config(_cfg(_nested(OLD_VALUES)))
        new = {MOVED_TO_SPECTRUM[k]: v for k, v in OLD_VALUES.items()}
        assert old == geometry_config(_cfg({"spectrum": new}))
        assert old == GeometryConfig(spectrum=SpectrumConfig(**new))  # type: ignore[arg-type]

    def test_new_keys_do_not_warn(self, recwarn: pytest.WarningsRecorder) -> None:
        geometry_config(_cfg({"spectrum": {"max_steps": 30, "dtype": "float64"}}))
        assert not [w for w in recwarn if w.category is FutureWarning]

    def test_old_key_beside_another_new_value_is_refused(self) -> None:
        """An old recipe's key and a new override that disagree: one line naming both."""
        with pytest.warns(FutureWarning), pytest.raises(ValueError) as info:
            geometry_config(_cfg({"lanczos_tol": 1e-4, "spectrum": {"tol": 1e-2}}))
        assert str(info.value) == (
            "geometry.lanczos_tol: 0.0001 given beside geometry.spectrum.tol=0.01; give "
            "geometry.spectrum.tol alone (geometry.lanczos_tol is deprecated)"
        )

    def test_old_key_beside_the_same_new_value_is_kept(self) -> None:
        with pytest.warns(FutureWarning):
            g = geometry_config(_cfg({"lanczos_tol": 1e-4, "spectrum": {"tol": 1e-4}}))
        assert g is not None and g.spectrum.tol == 1e-4


class TestBuildConfiguredHead:
    def test_smooth_mlp(self) -> None:
        head = build_configured_head(
            HeadConfig(name="smooth_mlp", activation="gelu", hidden_dim=16), 8, 4
        )
        assert head(torch.randn(5, 8)).shape == (5, 4)
        assert any(isinstance(m, torch.nn.GELU) for m in head.modules())

    def test_norm_none(self) -> None:
        head = build_configured_head(HeadConfig(name="smooth_mlp", norm="none"), 8, 4)
        assert not any(isinstance(m, torch.nn.BatchNorm1d) for m in head.modules())

    def test_metric_linear(self) -> None:
        head = build_configured_head(HeadConfig(name="metric_linear"), 8, 4)
        assert head(torch.randn(5, 8)).shape == (5, 4)

    def test_projector_is_not_built(self) -> None:
        with pytest.raises(ValueError, match="projector"):
            build_configured_head(HeadConfig(), 8, 4)

    def test_roundtrip_plain_types(self) -> None:
        # what the monitor stores in checkpoints and records: plain values that rebuild the node
        g = GeometryConfig(
            every_n_steps=7,
            spectrum=SpectrumConfig(dtype="float64"),
            head=HeadConfig(name="smooth_mlp"),
            probes=ProbesConfig(targets=["class"]),
        )
        plain = dataclasses.asdict(g)
        assert plain["measure"]["augment_families"] == ["brightness"]
        rebuilt = geometry_config(OmegaConf.create({"method": "byol", "geometry": plain}))
        assert rebuilt == g and rebuilt != GeometryConfig()
