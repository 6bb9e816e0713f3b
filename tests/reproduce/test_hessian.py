"""``reproduce verdicts hessian`` on the authors' released Hessian-tracker files (Figure 3)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from solo_geometry.cli import main
from solo_geometry.reproduce.hessian import (
    DEFAULT_LAMBDA_MAX,
    TRACKER_KEYS,
    hessian_verdict,
    read_tracker,
    resolution,
    summarise_tracker,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hessian_tracker"
NAMES = ("collapsed_relu", "collapsed_swish", "normal_swish")
FILES = [FIXTURES / f"raw_data_{n}.npz" for n in NAMES]
JSON_KEYS = {
    "init",
    "activation",
    "epochs",
    "spearman_var_cond",
    "spearman_epochs",
    "negative_epochs",
    "negative_epochs_below_1e-7",
    "negative_epochs_below_1e-6",
    "zero_epochs",
    "resolved_negative_epochs",
    "resolution",
    "min_eigenvalue",
    "min_eigenvalue_epoch",
    "first_min_eigenvalue",
    "var_ratio",
}


def _plain(path: Path) -> dict[str, np.ndarray]:
    """The file read by NumPy itself (numeric arrays only: no pickle), the independent reader."""
    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["reproduce", "verdicts", "hessian", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


class TestAuthorsFiles:
    def test_fixtures_are_the_released_files(self) -> None:
        assert (FIXTURES / "PROVENANCE.md").read_text().count("117231d60fee34d4906d1f16c5007e") == 1
        root = os.environ.get("SOLO_GEOMETRY_PAPER_RESULTS")
        if not root:
            pytest.skip("SOLO_GEOMETRY_PAPER_RESULTS unset: the released results are not here")
        for f in FILES:
            released = Path(root) / "cifar10" / "resnet18" / "hessian_tracker" / f.name
            assert released.read_bytes() == f.read_bytes()

    @pytest.mark.parametrize("path", FILES, ids=NAMES)
    def test_numbers_equal_an_independent_computation(self, path: Path) -> None:
        d = _plain(path)
        s = summarise_tracker(read_tracker(path), name=path.name)
        lam, var, cond = d["min_eigenvalues"], d["variances"], d["condition_numbers"]
        assert s.spearman_var_cond == pytest.approx(spearmanr(var[1:], cond[1:])[0], abs=1e-12)
        assert s.spearman_epochs == len(var) - 1 == 99
        assert s.negative_epochs == np.count_nonzero(lam < 0)
        assert s.negative_epochs_below_1e_7 == np.count_nonzero(lam < -1e-7)
        assert s.negative_epochs_below_1e_6 == np.count_nonzero(lam < -1e-6)
        assert s.min_eigenvalue == lam.min() and s.min_eigenvalue_epoch == d["epochs"][lam.argmin()]
        assert s.var_ratio == var[-1] / var[0]
        res = 4 * np.finfo(np.float32).eps * DEFAULT_LAMBDA_MAX
        assert s.resolution == pytest.approx(res) and resolution(1.0) == pytest.approx(res / 1e-3)
        assert s.resolved_negative_epochs == np.count_nonzero(lam < -res)

    def test_the_three_runs(self) -> None:
        """The released runs, as the command reads them (2026-12-06)."""
        s = {
            n: summarise_tracker(read_tracker(f), name=f.name)
            for n, f in zip(NAMES, FILES, strict=True)
        }
        relu, coll, norm = s["collapsed_relu"], s["collapsed_swish"], s["normal_swish"]
        assert [round(r.spearman_var_cond or 0, 3) for r in (relu, coll, norm)] == [
            0.669,
            0.609,
            0.339,
        ]
        assert [(r.negative_epochs, r.negative_epochs_below_1e_7, r.negative_epochs_below_1e_6)
                for r in (relu, coll, norm)] == [(1, 1, 1), (72, 1, 0), (69, 32, 5)]  # fmt: skip
        # ReLU: exactly 0.0 from epoch 1 on (a spectrum under the estimator's 1e-8 guard), the
        # backbone's features unmoved; its one non-zero reading, epoch 0's, is below every
        # collapsed-Swish reading.
        assert relu.zero_epochs == 99 and relu.first_min_eigenvalue < coll.min_eigenvalue < 0
        assert abs(relu.var_ratio - 1) < 1e-3 and norm.var_ratio == pytest.approx(2.0898, abs=1e-4)
        assert (relu.activation, coll.init, norm.init) == ("relu", "collapsed", "normal")
        assert [r.resolved_negative_epochs for r in (relu, coll, norm)] == [1, 23, 68]
        v = hessian_verdict({str(f): r for f, r in zip(FILES, s.values(), strict=True)})
        assert v.verdict == "not held" and "under the estimator's 1e-8 guard" in v.evidence


def _summary(name: str, lam: list[float]) -> object:
    arrays = {
        "epochs": np.arange(len(lam), dtype=float),
        "min_eigenvalues": np.array(lam),
        "variances": np.linspace(1.0, 2.0, len(lam)),
        "condition_numbers": np.linspace(3.0, 1.0, len(lam)),
    }
    return summarise_tracker(arrays, name=name)


class TestVerdictRule:
    def test_can_fail_and_never_holds(self) -> None:
        smooth_neg = _summary("raw_data_collapsed_swish.npz", [1e-3, -1e-5, -2e-5])
        smooth_none = _summary("raw_data_collapsed_gelu.npz", [1e-3, -1e-12, 0.0])
        relu_pos = _summary("raw_data_collapsed_relu.npz", [1e-6, 2e-6, 0.0])
        relu_neg = _summary("raw_data_normal_relu.npz", [1e-6, -1e-5, 0.0])
        assert hessian_verdict({"a": smooth_neg, "b": relu_pos}).verdict == "undecidable"  # type: ignore[dict-item]
        assert hessian_verdict({"a": smooth_neg, "b": relu_neg}).verdict == "not held"  # type: ignore[dict-item]
        assert hessian_verdict({"a": smooth_none, "b": relu_pos}).verdict == "not held"  # type: ignore[dict-item]
        lone = hessian_verdict({"a": smooth_neg})  # type: ignore[dict-item]
        assert lone.verdict == "undecidable" and "needs a smooth" in lone.evidence

    def test_spearman_is_the_authors_protocol(self) -> None:
        """Epoch 0 is dropped: a first epoch that breaks the ranking does not count."""
        arrays = {
            "epochs": np.arange(5.0),
            "min_eigenvalues": np.zeros(5),
            "variances": np.array([10.0, 1.0, 2.0, 3.0, 4.0]),
            "condition_numbers": np.array([0.0, 1.0, 2.0, 3.0, 4.0]),
        }
        assert summarise_tracker(arrays).spearman_var_cond == pytest.approx(1.0)
        assert spearmanr(arrays["variances"], arrays["condition_numbers"])[0] == 0.0


class TestCommand:
    def test_json_is_runs_by_file_and_the_verdict(self, capsys: pytest.CaptureFixture[str]) -> None:
        code, out, err = _run([*map(str, FILES), "--json"], capsys)
        assert code == 0 and err == ""
        data = json.loads(out)
        assert set(data) == {"runs", "verdicts"} and list(data["runs"]) == [str(f) for f in FILES]
        for run in data["runs"].values():
            assert set(run) == JSON_KEYS
        assert data["runs"][str(FILES[2])]["negative_epochs_below_1e-6"] == 5
        assert [v["verdict"] for v in data["verdicts"]] == ["not held"]

    def test_text_and_lambda_max(self, capsys: pytest.CaptureFixture[str]) -> None:
        code, out, _ = _run([str(FILES[1]), "--lambda-max", "1e-1"], capsys)
        assert code == 0 and "Spearman(var, cond) +0.609 over epochs 1-99" in out
        assert "4/100 epochs below -4.8e-08" in out and "[undecidable]" in out


def _write_npz(path: Path, **arrays: object) -> Path:
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return path


class _Payload:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("echo pwned",))


@pytest.fixture
def bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Damaged and crafted files, each with the words its one-line error must hold."""
    good = _plain(FILES[0])
    missing = {k: v for k, v in good.items() if k != "variances"}
    object_array = np.empty(1, dtype=object)
    object_array[0] = _Payload()
    crafted = tmp_path / "crafted.npz"
    _write_npz(crafted, **{**good, "variances": object_array})
    text = tmp_path / "text.npz"
    text.write_text("epochs,min_eigenvalues\n")
    pickled = tmp_path / "pickled.npz"
    pickled.write_bytes(pickle.dumps(good))
    wrong_ext = tmp_path / "raw.npy"
    shutil.copy(FILES[0], wrong_ext)
    return {
        "missing key": (_write_npz(tmp_path / "missing.npz", **missing), "lacks 'variances'"),
        "2-D": (
            _write_npz(tmp_path / "two_d.npz", **{**good, "variances": np.ones((10, 10))}),
            "shape (10, 10)",
        ),
        "strings": (
            _write_npz(tmp_path / "str.npz", **{**good, "epochs": np.array(["a"] * 100)}),
            "expected one real number per epoch",
        ),
        "short": (
            _write_npz(tmp_path / "short.npz", **{**good, "epochs": np.arange(5)}),
            "expected one length",
        ),
        "nan": (
            _write_npz(tmp_path / "nan.npz", **{**good, "variances": np.full(100, np.nan)}),
            "not finite",
        ),
        "crafted pickle": (crafted, "refused"),
        "not an npz": (text, "not a readable .npz"),
        "pickle named .npz": (pickled, "not a readable .npz"),
        "suffix": (wrong_ext, "expected hessian_tracker.py's raw_data_*.npz"),
        "absent": (tmp_path / "absent.npz", "no such file"),
    }


class TestBadFiles:
    CASES = (
        "missing key",
        "2-D",
        "strings",
        "short",
        "nan",
        "crafted pickle",
        "not an npz",
        "pickle named .npz",
        "suffix",
        "absent",
    )

    @pytest.mark.parametrize("case", CASES)
    def test_one_line_exit_2(
        self,
        case: str,
        bad_files: dict[str, tuple[Path, str]],
        capsys: pytest.CaptureFixture[str],
        tmp_path: Path,
    ) -> None:
        path, words = bad_files[case]
        before = sorted((p.name, p.stat().st_size) for p in tmp_path.iterdir())
        code, out, err = _run([str(FILES[1]), str(path), "--json"], capsys)
        assert code == 2 and out == "", err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err and "pwned" not in err + out
        assert words in lines[0] and path.name in lines[0]
        assert sorted((p.name, p.stat().st_size) for p in tmp_path.iterdir()) == before

    def test_bad_lambda_max(self, capsys: pytest.CaptureFixture[str]) -> None:
        code, _, err = _run([str(FILES[1]), "--lambda-max", "0"], capsys)
        assert code == 2 and "--lambda-max must be > 0; got 0.0" in err

    def test_keys_named_in_the_message_are_the_trackers(self) -> None:
        assert TRACKER_KEYS == ("epochs", "min_eigenvalues", "variances", "condition_numbers")
