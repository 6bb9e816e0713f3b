import hashlib
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image

from solo_geometry.datasets import DIGITS_MARKER, make_digits


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.png")):
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return make_digits(tmp_path_factory.mktemp("d") / "digits", size=16)


class TestMakeDigits:
    def test_layout_and_images(self, digits):
        train = sorted((digits / "train").rglob("*.png"))
        val = sorted((digits / "val").rglob("*.png"))
        assert len(train) + len(val) == 1797
        assert {p.parent.name for p in train} == {str(c) for c in range(10)}
        img = Image.open(train[0])
        assert img.mode == "RGB" and img.size == (16, 16)

    def test_split_is_stratified_80_20(self, digits):
        from sklearn.datasets import load_digits

        total = Counter(load_digits().target.tolist())
        val = Counter(int(p.parent.name) for p in (digits / "val").rglob("*.png"))
        for c, n in total.items():
            assert abs(val[c] - 0.2 * n) <= 1
        names = {p.name for p in (digits / "train").rglob("*.png")}
        assert not names & {p.name for p in (digits / "val").rglob("*.png")}

    def test_deterministic_bytes(self, digits, tmp_path):
        again = make_digits(tmp_path / "again", size=16)
        assert _digest(again) == _digest(digits)

    def test_rerun_is_a_no_op_and_other_size_rewrites(self, tmp_path):
        out = make_digits(tmp_path / "d", size=8)
        stamp = (out / DIGITS_MARKER).stat().st_mtime_ns
        make_digits(out, size=8)
        assert (out / DIGITS_MARKER).stat().st_mtime_ns == stamp
        make_digits(out, size=12)
        assert Image.open(next((out / "val").rglob("*.png"))).size == (12, 12)
        assert len(list(out.rglob("*.png"))) == 1797

    def test_refuses_foreign_folder_and_overwrites_nothing(self, tmp_path):
        (tmp_path / "mine.txt").write_text("keep")
        with pytest.raises(ValueError, match="not a digits export"):
            make_digits(tmp_path)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]

    @pytest.mark.parametrize("size", [4, 1024, 32.0, True])
    def test_bad_size(self, tmp_path, size):
        with pytest.raises(ValueError, match="size must be"):
            make_digits(tmp_path / "x", size=size)
        assert not (tmp_path / "x").exists()

    def test_out_is_a_file(self, tmp_path):
        (tmp_path / "f").write_text("")
        with pytest.raises(ValueError, match="not a directory"):
            make_digits(tmp_path / "f")


class TestDataCommand:
    def test_cli_writes_and_fails_cleanly(self, tmp_path):
        root = Path(__file__).resolve().parents[1]
        ok = subprocess.run(
            [
                sys.executable,
                "-m",
                "solo_geometry.cli",
                "data",
                "digits",
                "--out",
                str(tmp_path / "d"),
                "--size",
                "8",
            ],
            capture_output=True,
            text=True,
            cwd=root,
        )
        assert ok.returncode == 0, ok.stderr
        assert len(list((tmp_path / "d").rglob("*.png"))) == 1797
        (tmp_path / "busy").mkdir()
        (tmp_path / "busy" / "x").write_text("")
        bad = subprocess.run(
            [
                sys.executable,
                "-m",
                "solo_geometry.cli",
                "data",
                "digits",
                "--out",
                str(tmp_path / "busy"),
            ],
            capture_output=True,
            text=True,
            cwd=root,
        )
        assert bad.returncode == 2
        assert "not a digits export" in bad.stderr and "Traceback" not in bad.stderr
