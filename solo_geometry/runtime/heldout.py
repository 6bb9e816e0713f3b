"""The fixed held-out batch: the collapse alert's reading on clean images of a fixed size.

A record's statistics (``z/...``, ``h/...``) describe the training batch: augmented views, as
many rows as the batch has. Training for invariance removes the augmentations' spread from
those rows, so their effective rank falls in a healthy run too (simclr with the invariance loss
on CIFAR-10: 53 to 9 in the first steps, while the validation set's falls from 22 to 13;
docs/reproducing.md, "The collapse alert on runs that collapse"). The held-out batch is what the
collapse benchmark's labels read instead: ``geometry.alert.heldout`` images of the recipe's
validation folder (``data.val_path``, else ``geometry.probes.data``), spread evenly over its
sorted file list so every class is in, read once without augmentation and normalised as the
recipe normalises. At every record the module's backbone and head map them to Z and H in eval
mode (BatchNorm reads its running statistics and updates nothing; autocast off; float32, or
float64 under ``64-true``) and
the record gains ``heldout/<z|h>/<name>`` for the names of
:data:`~solo_geometry.geometry.metrics.HELDOUT`.

The same images and rows at every record: the numbers follow the model, not the batch.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from torchvision.datasets import ImageFolder
from torchvision.transforms import functional as TF

from solo_geometry.geometry.metrics import Scalar, record_stats
from solo_geometry.inputs.datasets import MeanStd, check_one_size
from solo_geometry.runtime.measure import Measurement, checked
from solo_geometry.runtime.precision import float32_copy, holds_dtype
from solo_geometry.runtime.view import backbone_and_head
from solo_geometry.state import preserved_state

__all__ = ["HeldOutBatch", "spread", "start_reading", "with_heldout"]

CHUNK = 256  # images per forward pass


def spread(n: int, rows: int) -> list[int]:
    """``min(rows, n)`` indices spread evenly over ``range(n)``, first and last included."""
    k = min(rows, n)
    if k <= 1:
        return [0][:k]
    return [round(i * (n - 1) / (k - 1)) for i in range(k)]


class HeldOutBatch:
    """The held-out batch of one run (module docstring).

    Args:
        rows: how many images (``geometry.alert.heldout``); 0: none.
        folder: the validation image folder; None: none (the alert reads the training batch).
        normalisation: the recipe's ``(mean, std)``.
    """

    def __init__(self, rows: int, folder: str | Path | None, normalisation: MeanStd) -> None:
        self.rows = rows
        self.folder = Path(folder) if folder and rows > 0 else None
        self.normalisation = normalisation
        self._images: Tensor | None = None

    def images(self) -> Tensor | None:
        """The normalised images (N, 3, H, W) float32 on the CPU, read once; None without."""
        if self.folder is None:
            return None
        if self._images is None:
            where = f"geometry.alert.heldout's folder {str(self.folder)!r}"
            folder_path, self.folder = self.folder, None  # a folder that fails is read once
            check_one_size([folder_path], where)
            folder = ImageFolder(str(folder_path))
            picked = [folder.samples[i][0] for i in spread(len(folder.samples), self.rows)]
            x = torch.stack([TF.to_tensor(folder.loader(p).convert("RGB")) for p in picked])
            mean, std = (torch.tensor(v).view(1, -1, 1, 1) for v in self.normalisation)
            self._images, self.folder = (x - mean) / std, folder_path
        return self._images

    @torch.no_grad()
    def measure(self, module: Any) -> dict[str, Scalar]:
        """``heldout/<z|h>/<name>`` of ``module``'s backbone and head; empty without images.

        The caller restores the module's modes (``state.preserved_state``): this sets eval.
        """
        x = self.images()
        if x is None or len(x) < 2:
            return {}
        backbone, head = backbone_and_head(module, "geometry.alert.heldout")
        if holds_dtype(backbone) or holds_dtype(head):  # bf16-true, 16-true: float32 copies
            backbone, head = float32_copy(backbone), float32_copy(head)
        backbone.eval(), head.eval()
        param = next(backbone.parameters())  # float32, or float64 under 64-true
        zs, hs = [], []
        with torch.autocast(param.device.type, enabled=False):
            for chunk in x.split(CHUNK):
                z = backbone(chunk.to(param.device, param.dtype)).flatten(1)
                zs.append(z)
                hs.append(head(z))
        return record_stats(torch.cat(zs), torch.cat(hs), part="heldout")


def start_reading(heldout: HeldOutBatch | None, module: Any) -> dict[str, Scalar] | None:
    """The held-out statistics of ``module`` as it is now (the alert's reference at the start).

    Every rank reads the same images with the same weights, so every rank gets the same
    numbers. The module's modes are restored. None without a held-out batch, or when the
    reading fails (warned; the alert then reads the held-out rank against its running maximum).
    """
    if heldout is None or heldout.folder is None:
        return None
    try:
        with preserved_state(module):
            return heldout.measure(module)
    except Exception as err:  # noqa: BLE001 - the monitor never stops training
        rank_zero_warn(
            f"GeometryMonitor: the held-out reading before training failed ({type(err).__name__}: "
            f"{err}); the alert reads the held-out rank against its running maximum"
        )
        return None


def with_heldout(
    run: Callable[[Any], Measurement], heldout: HeldOutBatch | None, module: Any
) -> Callable[[Any], Measurement]:
    """``run``, then the held-out part into its measurement; ``run`` without a held-out batch.

    A failure of the held-out part goes to ``failed``; the other parts are kept.
    """
    if heldout is None or heldout.folder is None:
        return run

    def both(view: Any) -> Measurement:
        result = run(view)
        try:
            metrics = checked(heldout.measure(module))
            result.metrics.update(metrics)
            result.parts.extend(["heldout"] if metrics else [])
        except Exception as err:  # noqa: BLE001 - one part failing keeps the others
            result.failed["heldout"] = f"{type(err).__name__}: {err}"
        return result

    return both
