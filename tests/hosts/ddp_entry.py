"""Entry point of the DDP tests: a real 2-process CPU DDP run on either host.

Lightning's DDP re-launches this script with the same arguments and environment for rank 1,
so the fault injection below is installed on every rank. Usage::

    DDP_HOST=solo|lightly [DDP_FAULT=1] python ddp_entry.py <host arguments>

* ``solo``: solo-learn's own ``main_pretrain.py`` with its Hydra arguments;
* ``lightly``: ``solo-geometry pretrain --host lightly`` with its arguments.

``DDP_FAULT=1`` swaps the method class for a real subclass whose rank 1 fails: at step 1 an
exception while building its view, at the final record (step 2) non-finite backbone features.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from solo_geometry.runtime.distributed import ViewParts

FAULT = "injected fault on rank 1"


def faulty(base: type) -> type:
    """``base`` whose rank 1 fails to build its view at step 1 and has NaN features at step 2."""

    class Faulty(base):  # type: ignore[misc, valid-type]
        def geometry_parts(self, batch: Any) -> ViewParts:
            parts = super().geometry_parts(batch)
            step = self.trainer.global_step
            if self.global_rank == 1 and step == 1:
                raise RuntimeError(FAULT)
            if self.global_rank == 1 and step == 2:
                return ViewParts(parts.features * float("nan"), parts.context, parts.images)
            return parts

    return Faulty


def main(args: list[str]) -> None:
    """Run the host with (or without) the fault injected."""
    host, fault = os.environ["DDP_HOST"], os.environ.get("DDP_FAULT") == "1"
    if host == "solo":
        from solo.methods import METHODS

        from solo_geometry.hosts.solo.methods import install

        install()
        if fault:
            for name in ("simclr", "vicreg"):
                METHODS[name] = faulty(METHODS[name])
        import solo

        entry = Path(solo.__file__).resolve().parents[1] / "main_pretrain.py"
        sys.path.insert(0, str(entry.parent))
        # exec, not runpy: sys.argv[0] must stay this script, the one DDP re-launches
        exec(compile(entry.read_text(), str(entry), "exec"), {"__name__": "__main__"})
    else:
        from solo_geometry import cli
        from solo_geometry.hosts.lightly import launcher

        if fault:
            launcher.LightlyMethod = faulty(launcher.LightlyMethod)  # type: ignore[misc]
        raise SystemExit(cli.main(["pretrain", "--host", "lightly", *args]))


if __name__ == "__main__":
    main(sys.argv[1:])
