"""Images wider than 8 bits are refused, not clipped (solo_geometry.inputs.sizes.check_depth).

A 16-bit greyscale PNG goes through ``convert("RGB")`` in every loader as values clipped at 255
(a ramp over 0..65535 keeps 5 distinct values of 256): the hosts' check of the training folder
and the probes' size check refuse it, naming the file and its mode.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from solo_geometry.inputs.datasets import check_image_folder, load_image_folder
from solo_geometry.inputs.sizes import check_one_size
from tests.shared import image_folder


def _sixteen_bit(path: Path, size: int = 8) -> None:
    ramp = np.linspace(0, 65535, size * size).astype(np.uint16).reshape(size, size)
    Image.fromarray(ramp).save(path)


class TestWideImages:
    def test_convert_rgb_clips_a_16_bit_ramp(self, tmp_path: Path) -> None:
        """Why they are refused: PIL's conversion keeps 2 of the ramp's 64 values (0 and 255)."""
        _sixteen_bit(tmp_path / "x.png")
        with Image.open(tmp_path / "x.png") as im:
            assert im.mode == "I;16"
            assert len(np.unique(np.asarray(im) >> 8)) == 64  # scaled to 8 bits: all kept
            assert np.unique(np.asarray(im.convert("RGB"))).tolist() == [0, 255]

    @pytest.mark.parametrize("mode", ["I;16", "I", "F"])
    def test_refused_by_every_image_check(self, tmp_path: Path, mode: str) -> None:
        root = image_folder(tmp_path / "data", n_per_class=3, size=8) / "train"
        wide = sorted((root / "1").glob("*.png"))[0]
        if mode == "I;16":
            _sixteen_bit(wide)
        else:
            wide = wide.with_suffix(".tiff")
            Image.new(mode, (8, 8), 3).save(wide)
        expected = f"image {str(wide)!r} has {mode!r} pixels (wider than 8 bits)"
        for check in (
            lambda: check_image_folder(root, "data.train_path"),
            lambda: check_one_size([root], "--data"),
            lambda: load_image_folder(root),
        ):
            with pytest.raises(ValueError) as caught:
                check()
            assert expected in str(caught.value)

    def test_eight_bit_images_pass(self, tmp_path: Path) -> None:
        root = image_folder(tmp_path / "data", n_per_class=3, size=8) / "train"
        shutil.copy(sorted((root / "0").glob("*.png"))[0], root / "0" / "copy.png")
        check_image_folder(root, "data.train_path")
        images, labels, _ = load_image_folder(root)
        assert images.shape[1:] == (3, 8, 8) and len(labels) == 10
