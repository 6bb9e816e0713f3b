"""Tests of the spectrum's settings in solo_geometry.runtime.measure: config node to record.

``geometry.spectrum`` (:class:`SpectrumConfig`) is one to one the keyword arguments of
:func:`effective_hessian_spectrum`; :func:`measure` takes it, the ``measure`` node and the seed,
and the record's settings say its values under the names records have always used.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch
from torch import Tensor, nn

from solo_geometry.config import GeometryConfig, MeasureConfig, SpectrumConfig
from solo_geometry.geometry.spectrum import effective_hessian_spectrum
from solo_geometry.runtime.measure import measure, spectrum_options
from solo_geometry.runtime.view import GeometryView

# Every field away from its default.
SPECTRUM = SpectrumConfig(
    max_steps=60, tol=1e-4, dtype="float64", max_samples=6, tau=1e-9, density_probes=1
)
WHAT = MeasureConfig(augment=False, stats=False)  # the spectra alone
SEED = 3


def _view() -> GeometryView:
    """A smooth head (N, 8) -> (N, 5) on two views of 12 samples, with a split loss."""
    torch.manual_seed(0)
    head = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 5)).double()
    Z = torch.randn(2, 12, 8, dtype=torch.float64)

    def loss_of_outputs(H: Tensor) -> Tensor:  # invariance plus a variance hinge
        return (H[0] - H[1]).pow(2).mean() + torch.relu(1 - H.flatten(0, 1).std(dim=0)).mean()

    def loss_of_features(Z_: Tensor) -> Tensor:
        return loss_of_outputs(torch.stack([head(z) for z in Z_]))

    return GeometryView(Z, head, loss_of_features, loss_of_outputs=loss_of_outputs)


class TestSpectrumOptions:
    def test_fields_are_the_functions_keywords(self) -> None:
        keywords = inspect.signature(effective_hessian_spectrum).parameters
        for f in dataclasses.fields(SpectrumConfig):
            assert keywords[f.name].kind is inspect.Parameter.KEYWORD_ONLY, f.name

    @pytest.mark.parametrize("density", [True, False])
    def test_one_to_one(self, density: bool) -> None:
        options = spectrum_options(SPECTRUM, density=density)
        assert options == {
            "max_steps": 60,
            "tol": 1e-4,
            "dtype": torch.float64,
            "max_samples": 6,
            "tau": 1e-9,
            "density_probes": 1 if density else 0,
        }


class TestRecordSettings:
    def test_measure_runs_the_spectrum_with_the_nodes_arguments(self) -> None:
        """Metrics equal a direct call with every argument written out: nothing is dropped."""
        view = _view()
        got = measure(view, WHAT, SPECTRUM, seed=SEED, density=True)
        ref = effective_hessian_spectrum(
            view.head,
            view.loss_of_outputs,
            view.features,
            max_steps=60,
            tol=1e-4,
            dtype=torch.float64,
            max_samples=6,
            tau=1e-9,
            density_probes=1,
            generator=torch.Generator().manual_seed(SEED),
        )
        assert {k: got.metrics[k] for k in ref.as_record() if "seconds" not in k} == {
            k: v for k, v in ref.as_record().items() if "seconds" not in k
        }
        assert got.density == {
            "nodes": ref.heff.density.nodes.tolist(),
            "weights": ref.heff.density.weights.tolist(),
        }

    def test_settings_say_the_nodes_values(self) -> None:
        s = measure(_view(), WHAT, SPECTRUM, seed=SEED, density=True).settings
        assert (s.lanczos_max_steps, s.lanczos_tol, s.dtype, s.tau) == (60, 1e-4, "float64", 1e-9)
        assert (s.n_block, s.n_batch, s.n_views, s.dim) == (6, 12, 2, 2 * 6 * 8)
        assert (s.slq_probes, s.recurrence_dtype, s.seed) == (2, "float64", SEED)

    def test_stats_only_says_dtype_and_tau_without_lanczos(self) -> None:
        s = measure(_view(), WHAT, SPECTRUM, seed=SEED, density=False, stats_only=True).settings
        assert (s.dtype, s.tau, s.lanczos_max_steps, s.lanczos_tol) == ("float64", 1e-9, None, None)
        default = SpectrumConfig(dtype="float32")  # tau None: the dtype's default floor
        s = measure(_view(), WHAT, default, seed=SEED, density=False, stats_only=True).settings
        assert (s.dtype, s.tau) == ("float32", 1e-5)

    def test_old_keys_record_the_same_settings(self) -> None:
        """A config of the old keys (one release) records what the new node records."""
        with pytest.warns(FutureWarning):
            old = GeometryConfig(
                max_samples=6,
                lanczos_max_steps=60,
                lanczos_tol=1e-4,
                dtype="float64",
                measure=MeasureConfig(augment=False, stats=False, density_probes=1, tau=1e-9),
                seed=SEED,
            )
        a = measure(_view(), old.measure, old.spectrum, seed=old.seed, density=True).settings
        b = measure(_view(), WHAT, SPECTRUM, seed=SEED, density=True).settings
        assert a == b
