"""``solo-geometry reproduce invariance`` end to end, checked against independent recomputations.

One reduced run (the quick form, smaller still) trains the five SimCLR runs on the lightly host
and the embedded digits; then every checked number of ``invariance.json`` is recomputed from the
files the run saved: the orbit statistics with the paper's own formula on NumPy/SciPy
(``_calculate_geometric_metrics``), the curvature of the saved sweeps with NumPy, and the
rotation probe with scikit-learn's logistic regression on the saved features.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from solo_geometry.cli import main as cli_main
from solo_geometry.commands import orbits as orbits_command
from solo_geometry.commands import reproduce
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.reproduce.invariance import QUICK, run_invariance_experiment
from solo_geometry.reproduce.invariance.result import read_invariance
from solo_geometry.reproduce.invariance.verdicts import CLAIMS, run_evidence, verdicts
from solo_geometry.reproduce.results import write_result
from tests.shared import build_once, paper_metrics, write_fake_cifar

# 16-pixel digits: a quarter of the convolutions of the 32-pixel form, the same protocol
TINY = replace(QUICK, seeds=2, curvature_images=4, mlp_epochs=3, limit_batches=2, digits_size=16)


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="solo-geometry")
    reproduce.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["reproduce", "invariance", *argv])
    return int(args.func(args))


def _quick_cifar10(out: Path, root: Path) -> int:
    """``solo-geometry reproduce invariance --quick`` on cifar10 files under ``root``."""
    argv = ["reproduce", "invariance", "--quick", "--out", str(out), "--dataset", "cifar10"]
    return cli_main([*argv, "--data-root", str(root)])


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The tiny invariance run, built once per session however many workers read it."""
    out = build_once(
        tmp_path_factory, "invariance_run", lambda folder: run_invariance_experiment(folder, TINY)
    )
    return out, json.loads((out / "invariance.json").read_text())


def _orbit_sets(result: dict[str, Any]) -> list[dict[str, Any]]:
    parts = [result["guillotine"]["orbits"], *(d["orbits"] for d in result["depth"])]
    return [part[reading] for part in parts for reading in ("unit_z", "raw_z")]


def _curvature_sets(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [result["guillotine"]["curvature"], *(d["curvature"] for d in result["depth"])]


@pytest.mark.slow
@pytest.mark.shared("invariance_run")  # its first test goes first, and builds the run
class TestInvarianceRun:
    def test_orbit_statistics_are_the_papers_formula_on_the_saved_arrays(
        self, reproduced: tuple[Path, dict[str, Any]]
    ) -> None:
        out, result = reproduced
        for orbits in _orbit_sets(result):
            assert len(orbits["per_seed"]) == TINY.seeds
            means: dict[str, list[float]] = {}
            for row in orbits["per_seed"]:
                data = np.load(out / row["file"])
                assert data["orbits_z"].shape[0] == 5 * 3 * 12  # the paper's protocol
                for space in ("z", "h"):
                    X = data[f"orbits_{space}"].astype(np.float64)
                    ref = paper_metrics(X, data["orbit_ids"], data["orbit_labels"])
                    for key, pair in ref.items():
                        np.testing.assert_allclose(row[space][key], pair, rtol=1e-5, atol=1e-9)
                        means.setdefault(f"{space}/{key}", []).append(pair[0])
                spread_z = paper_metrics(
                    data["orbits_z"].astype(np.float64), data["orbit_ids"], data["orbit_labels"]
                )["spread"][0]
                spread_h = paper_metrics(
                    data["orbits_h"].astype(np.float64), data["orbit_ids"], data["orbit_labels"]
                )["spread"][0]
                np.testing.assert_allclose(
                    row["compression"], spread_z / (spread_h + 1e-10), rtol=1e-5
                )
            for name, values in means.items():
                space, key = name.split("/")
                mean, std = orbits["table"][space][key]
                np.testing.assert_allclose(mean, np.mean(values), rtol=1e-5)
                # the spread of nearly equal values: its error scales with the values, not itself
                np.testing.assert_allclose(
                    std, np.std(values), rtol=1e-5, atol=1e-5 * abs(np.mean(values))
                )

    def test_curvature_is_the_papers_finite_difference_on_the_saved_sweeps(
        self, reproduced: tuple[Path, dict[str, Any]]
    ) -> None:
        out, result = reproduced
        for curv in _curvature_sets(result):
            ratios = []
            for row in curv["per_seed"]:
                data = np.load(out / row["file"])
                kappa = {}
                for space in ("z", "h"):
                    sweeps = data[f"sweeps_{space}"].astype(np.float64)  # (S, 10, d)
                    assert sweeps.shape[:2] == (TINY.curvature_images, 10)
                    per = [
                        np.mean(
                            [
                                np.linalg.norm(s[i + 1] - 2 * s[i] + s[i - 1])
                                for i in range(1, len(s) - 1)
                            ]
                        )
                        for s in sweeps
                    ]
                    kappa[space] = np.mean(per)
                np.testing.assert_allclose(row["kappa_z"], kappa["z"], rtol=1e-5)
                np.testing.assert_allclose(row["kappa_h"], kappa["h"], rtol=1e-5)
                ratios.append(kappa["h"] / (kappa["z"] + 1e-8))
            np.testing.assert_allclose(curv["ratio"][0], np.mean(ratios), rtol=1e-5)
            np.testing.assert_allclose(
                curv["ratio"][1], np.std(ratios), rtol=1e-5, atol=1e-5 * abs(np.mean(ratios))
            )

    def test_rotation_probe_agrees_with_scikit_learn_on_the_saved_features(
        self, reproduced: tuple[Path, dict[str, Any]]
    ) -> None:
        _, result = reproduced
        run = RunFolder(Path(result["guillotine"]["run"]))
        cache = torch.load(run.features, weights_only=True)["sets"]
        table = run.read_probes()
        assert table is not None
        row = next(
            r
            for r in result["guillotine"]["probes"]
            if (r["target"], r["probe"]) == ("rotation", "linear")
        )
        for space in ("z", "h"):
            tr, te = cache["train/rotation"], cache["test/rotation"]
            x_tr, x_te = tr[space].double().numpy(), te[space].double().numpy()
            mean, std = x_tr.mean(0), x_tr.std(0)
            std[std <= 1e-8 * (1 + np.abs(mean))] = np.inf
            x_tr, x_te = (x_tr - mean) / std, (x_te - mean) / std
            lam = next(
                r.details["l2"]
                for r in table.rows
                if (r.features, r.probe, r.target) == (space, "linear", "rotation")
            )
            clf = LogisticRegression(C=1.0 / (lam * len(x_tr)), max_iter=5000, tol=1e-8)
            acc = clf.fit(x_tr, tr["labels"].numpy()).score(x_te, te["labels"].numpy())
            assert abs(row[space] - acc) <= 0.03, (space, row[space], acc)
        assert row["gap"] == pytest.approx(row["z"] - row["h"])

    def test_verdicts_follow_the_numbers(self, reproduced: tuple[Path, dict[str, Any]]) -> None:
        out, result = reproduced
        assert result["claims"] == verdicts(run_evidence(result))
        assert [c["id"] for c in result["claims"]] == list(CLAIMS)
        assert result["guillotine"]["n_test"] > 0
        page = (out / "invariance.html").read_text().replace("&#x27;", "'")
        for claim in result["claims"]:
            assert claim["evidence"] in page
        for name in ("orbits", "depth", "whitening"):
            assert (out / "figures" / f"{name}.png").stat().st_size > 0

    def test_both_head_inputs_are_recorded(self, reproduced: tuple[Path, dict[str, Any]]) -> None:
        _, result = reproduced
        orbits = result["guillotine"]["orbits"]
        assert orbits["unit_z"]["feature_norm"] == orbits["raw_z"]["feature_norm"] > 0
        for reading in ("unit_z", "raw_z"):
            cos = [r["summary"]["h_cosine_to_mean"] for r in orbits[reading]["per_seed"]]
            assert orbits[reading]["h_cosine_to_mean"] == pytest.approx(np.mean(cos))
        # the same images: Z is the same, only H differs
        unit, raw = orbits["unit_z"]["per_seed"][0], orbits["raw_z"]["per_seed"][0]
        assert unit["z"] == raw["z"]
        assert unit["h"] != raw["h"]

    def test_paper_probes_are_the_runs_probes_json(
        self, reproduced: tuple[Path, dict[str, Any]]
    ) -> None:
        """``geometry.probes.protocol=both``: the paper's probes come from each run's evaluate()."""
        out, result = reproduced
        g = result["guillotine"]
        pairs = [
            (g["run"], g["probes_paper"]),
            *((d["run"], d["rotation_paper"]) for d in result["depth"]),
        ]
        for run, paper in pairs:
            table = RunFolder(Path(run)).read_probes()
            assert table is not None and table.settings["probes"]["protocol"] == "both"
            assert paper == table.paper and paper["n"] == g["n_test"]
        page = (out / "invariance.html").read_text()
        assert f"{g['probes_paper']['linear'][0]:.4f}" in page

    def test_whitening_spectra_per_epoch(self, reproduced: tuple[Path, dict[str, Any]]) -> None:
        _, result = reproduced
        wh = result["whitening"]
        assert [e["epoch"] for e in wh["epochs"]] == list(range(TINY.whitening_epochs))
        assert wh["series"]["step"], "geometry.jsonl holds the metric spectrum over training"
        for e in wh["epochs"]:
            eig = np.array(e["metric_eigenvalues"])
            assert np.all(np.diff(eig) <= 0)
            np.testing.assert_allclose(e["metric"]["max"], eig[0], rtol=1e-12)
            cov_z = np.array(e["cov_z"])
            assert cov_z.shape == (512,) and np.all(np.diff(cov_z) <= 1e-15)

    def test_orbits_command_reanalyses_the_saved_arrays(
        self, reproduced: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]
    ) -> None:
        out, result = reproduced
        row = result["guillotine"]["orbits"]["unit_z"]["per_seed"][0]
        parser = argparse.ArgumentParser()
        orbits_command.add_parser(parser.add_subparsers(dest="command"))
        args = parser.parse_args(["orbits", str(out / row["file"]), "--json"])
        assert args.func(args) == 0
        printed = json.loads(capsys.readouterr().out)
        assert printed["compression"] == pytest.approx(row["compression"])

    def test_the_typed_result_writes_the_same_bytes(
        self, reproduced: tuple[Path, dict[str, Any]], tmp_path: Path
    ) -> None:
        out, _ = reproduced
        again = write_result(tmp_path, "invariance", read_invariance(out))
        assert again.read_bytes() == (out / "invariance.json").read_bytes()


class TestInvarianceInput:
    def test_cifar_without_files_is_one_line_and_writes_nothing(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        out = tmp_path / "out"
        empty = tmp_path / "empty"
        empty.mkdir()
        code = _quick_cifar10(out, empty)
        err = capsys.readouterr().err.strip()
        assert code == 2
        assert len(err.splitlines()) == 1 and "cifar10" in err and "nothing is downloaded" in err
        assert not out.exists()

    def test_code_in_a_cifar_batch_never_runs(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        # the batches are read by the restricted unpickler, not torchvision's pickle.load
        import pickle

        from solo_geometry.inputs.cifar import cifar_paths

        root = write_fake_cifar(tmp_path / "cifar")

        class Payload:
            def __reduce__(self) -> tuple[Any, tuple[str]]:
                return (print, ("unpickled",))  # what pickle.load would call

        bad = cifar_paths(root, "cifar10", train=False)[0]
        bad.write_bytes(pickle.dumps({"data": Payload(), "labels": []}, protocol=2))
        out = tmp_path / "out"
        code = _quick_cifar10(out, root)
        captured = capsys.readouterr()
        assert code == 2 and "unpickled" not in captured.out  # refused, never called
        err = captured.err.strip()
        assert len(err.splitlines()) == 1 and str(bad) in err and "refused" in err
        assert not out.exists()

    def test_cifar_is_exported_from_the_files_as_read(self, tmp_path: Path) -> None:
        from PIL import Image

        from solo_geometry.inputs.cifar import read_cifar
        from solo_geometry.reproduce.data import check_data_root, export_cifar

        root = write_fake_cifar(tmp_path / "cifar", n=20)
        assert check_data_root("cifar10", root) == root
        train, test = export_cifar("cifar10", root, tmp_path / "png", (60, 10), seed=0)
        for folder, split, n in ((train, True, 60), (test, False, 10)):
            data, labels = read_cifar(root, "cifar10", train=split)
            files = sorted(folder.glob("*/*.png"))
            assert abs(len(files) - n) <= 10  # stratified: n up to rounding in each class
            for f in files:  # <label>/<index>.png holds that image, pixel for pixel
                i = int(f.stem)
                assert int(f.parent.name) == labels[i]
                assert np.array_equal(np.asarray(Image.open(f)), data[i])

    def test_cifar_without_data_root(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
        argv = [
            "reproduce",
            "invariance",
            "--quick",
            "--out",
            str(tmp_path / "o"),
            "--dataset",
            "cifar100",
        ]
        assert cli_main(argv) == 2
        assert "--data-root" in capsys.readouterr().err
        assert not (tmp_path / "o").exists()

    def test_unknown_dataset_names_the_choices(self, capsys: pytest.CaptureFixture[str]) -> None:
        with pytest.raises(SystemExit) as exc:
            cli("--dataset", "mnist")
        assert exc.value.code == 2
        assert "digits" in capsys.readouterr().err
