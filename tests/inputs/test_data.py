import hashlib
import shutil
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image

from solo_geometry.inputs.datasets import check_image_folder, load_image_folder
from solo_geometry.inputs.digits import DIGITS_MARKER, make_digits


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.png")):
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def digits16(tmp_path_factory):
    return make_digits(tmp_path_factory.mktemp("d") / "digits", size=16)


class TestMakeDigits:
    def test_layout_and_images(self, digits16):
        train = sorted((digits16 / "train").rglob("*.png"))
        val = sorted((digits16 / "val").rglob("*.png"))
        assert len(train) + len(val) == 1797
        assert {p.parent.name for p in train} == {str(c) for c in range(10)}
        img = Image.open(train[0])
        assert img.mode == "RGB" and img.size == (16, 16)

    def test_split_is_stratified_80_20(self, digits16):
        from sklearn.datasets import load_digits

        total = Counter(load_digits().target.tolist())
        val = Counter(int(p.parent.name) for p in (digits16 / "val").rglob("*.png"))
        for c, n in total.items():
            assert abs(val[c] - 0.2 * n) <= 1
        names = {p.name for p in (digits16 / "train").rglob("*.png")}
        assert not names & {p.name for p in (digits16 / "val").rglob("*.png")}

    def test_deterministic_bytes(self, digits16, tmp_path):
        again = make_digits(tmp_path / "again", size=16)
        assert _digest(again) == _digest(digits16)

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
        from tests.hosts.solo_helpers import run  # python -m, forked from a warm interpreter

        root = Path(__file__).resolve().parents[2]
        cli = ["-m", "solo_geometry.cli", "data", "digits", "--out"]
        ok = run([*cli, str(tmp_path / "d"), "--size", "8"], root)
        assert ok.returncode == 0, ok.stderr
        assert len(list((tmp_path / "d").rglob("*.png"))) == 1797
        (tmp_path / "busy").mkdir()
        (tmp_path / "busy" / "x").write_text("")
        bad = run([*cli, str(tmp_path / "busy")], root)
        assert bad.returncode == 2
        assert "not a digits export" in bad.stderr and "Traceback" not in bad.stderr


def _decodes(path: Path) -> bool:
    """The reference: PIL decodes every pixel of the file."""
    try:
        with Image.open(path) as im:
            im.load()
    except (OSError, SyntaxError, ValueError):
        return False
    return True


class TestCheckImageFolder:
    """The one data-folder check both hosts run before the first step."""

    def test_digits_pass_and_every_file_decodes(self, digits16: Path) -> None:
        assert check_image_folder(digits16 / "train", "data.train_path") == digits16 / "train"
        assert all(_decodes(f) for f in (digits16 / "train").rglob("*.png"))

    @pytest.mark.parametrize(
        ("name", "content"),
        [
            ("empty.png", lambda ok: b""),
            ("cut.png", lambda ok: ok[: len(ok) // 2]),
            ("text.jpg", lambda ok: b"not an image"),
            ("flipped.png", lambda ok: ok[:40] + bytes([ok[40] ^ 0xFF]) + ok[41:]),
        ],
        ids=["zero bytes", "truncated", "not an image", "one byte flipped (CRC)"],
    )
    def test_names_the_first_bad_file(self, digits: Path, tmp_path: Path, name, content) -> None:
        ok = next((digits / "train" / "3").glob("*.png")).read_bytes()
        shutil.copytree(digits / "train", tmp_path / "train")
        bad = tmp_path / "train" / "3" / name
        bad.write_bytes(content(ok))
        assert not _decodes(bad)  # the check agrees with decoding the pixels
        with pytest.raises(ValueError, match=f"image '{bad}' does not decode"):
            check_image_folder(tmp_path / "train", "data.train_path")
        with pytest.raises(ValueError, match=f"image '{bad}' does not decode"):
            load_image_folder(tmp_path / "train")  # the probes' reader names it too

    def test_class_without_image(self, tmp_path: Path, digits: Path) -> None:
        shutil.copytree(digits / "train" / "0", tmp_path / "train" / "0")
        (tmp_path / "train" / "9").mkdir()
        (tmp_path / "train" / "9" / "notes.txt").write_text("no image here")
        with pytest.raises(ValueError, match="class folder '9' holds no image"):
            check_image_folder(tmp_path / "train", "data.train_path")

    def test_missing_or_flat_folder(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError, match="data folder not found"):
            check_image_folder(tmp_path / "nope", "data.train_path")
        with pytest.raises(FileNotFoundError, match="no class subfolders"):
            check_image_folder(tmp_path, "data.train_path")
