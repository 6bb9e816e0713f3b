"""Where a killed run resumes from: ``solo-geometry pretrain --resume RUN`` on either host.

A run folder (docs/design.md section 7) holds what a resumed run needs: its checkpoints (the newest
one is resumed, through Lightning's ``ckpt_path``), the recipe it was composed from, and which
host trained it. :func:`resume_point` finds and checks all three before anything is written, so
a wrong folder or a truncated checkpoint is a one-line error and the run is left as it was. The
monitor's state travels in the checkpoint: the resumed run keeps the records up to the
checkpoint's last measured step, drops the ones after it (a torn last line included) and
continues the same ``geometry.jsonl``.

Example:
    >>> point = resume_point("runs/byol-digits-20261130-101500")
    >>> point.host, point.checkpoint.name
    ('lightly', 'epoch=3.ckpt')
"""

from __future__ import annotations

import io
import pickletools
import zipfile
from dataclasses import dataclass
from pathlib import Path

from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.folder.safe_files import MAX_CHECKPOINT_BYTES, open_read

__all__ = [
    "LIGHTNING_KEYS",
    "ResumePoint",
    "check_archive",
    "check_lightning_checkpoint",
    "resume_point",
    "run_host",
]

# Hydra's copy of the composed recipe, written by solo-learn's main_pretrain in the run folder.
HYDRA_CONFIG = Path(".hydra") / "config.yaml"
# The keys Lightning's fit(ckpt_path=...) restores a training run from.
LIGHTNING_KEYS = ("state_dict", "epoch", "global_step", "pytorch-lightning_version", "loops")


@dataclass(frozen=True)
class ResumePoint:
    """A run folder to continue and what continuing it takes.

    Attributes:
        run: the run folder, continued in place.
        checkpoint: the checkpoint resumed (the newest under ``checkpoints/``).
        recipe: the recipe file composed again (the run's own copy unless one was given).
        host: the host that trained the run, ``solo`` or ``lightly``.
    """

    run: RunFolder
    checkpoint: Path
    recipe: Path
    host: str


def run_host(run: RunFolder) -> str:
    """The host that trained a run: ``solo`` when solo-learn's Hydra wrote ``.hydra/``."""
    return "solo" if (run.path / HYDRA_CONFIG).is_file() else "lightly"


def check_archive(path: Path) -> None:
    """Check that a ``torch.save`` checkpoint is a complete, uncorrupted zip archive.

    Every member's CRC is checked, so a file cut short by a kill or damaged on disk is found
    without unpickling anything.

    Raises:
        ValueError: naming the file and what is wrong with it (a symbolic link, a file over
            :data:`~.safe_files.MAX_CHECKPOINT_BYTES` included).
    """
    try:
        with (
            open_read(path, MAX_CHECKPOINT_BYTES, "checkpoint") as fh,
            zipfile.ZipFile(fh) as archive,
        ):
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        raise ValueError(f"checkpoint {str(path)!r} is truncated or corrupt ({err})") from err
    if bad is not None:
        raise ValueError(f"checkpoint {str(path)!r} is corrupt (member {bad!r} fails its CRC)")


def check_lightning_checkpoint(path: Path) -> None:
    """Check that a checkpoint is a Lightning training checkpoint of a model with a backbone.

    Reads only the names in the archive's pickle (``pickletools``; nothing is unpickled), so
    a checkpoint another tool wrote (a bare ``state_dict``, a torchvision or timm file) is found
    before a resumed run starts and rewrites anything.

    Raises:
        ValueError: naming the file and the keys it lacks.
    """
    try:
        with (
            open_read(path, MAX_CHECKPOINT_BYTES, "checkpoint") as fh,
            zipfile.ZipFile(fh) as archive,
        ):
            name = next(n for n in archive.namelist() if n.endswith("/data.pkl"))
            ops = pickletools.genops(io.BytesIO(archive.read(name)))
            strings = {arg for _, arg, _ in ops if isinstance(arg, str)}
    except (StopIteration, ValueError, zipfile.BadZipFile, OSError) as err:
        raise ValueError(f"checkpoint {str(path)!r} is not a torch.save archive ({err})") from err
    missing = [key for key in LIGHTNING_KEYS if key not in strings]
    if not any(s.startswith("backbone.") for s in strings):
        missing.append("state_dict keys backbone.*")
    if missing:
        raise ValueError(
            f"checkpoint {str(path)!r} was not written by this run's trainer: it lacks "
            f"{missing}; expected a Lightning checkpoint of solo-learn or the lightly host"
        )


def resume_point(
    run: str | Path, config: str | Path | None = None, host: str = "auto"
) -> ResumePoint:
    """Check a run folder for resumption and say how to resume it.

    Args:
        run: the run folder to continue.
        config: the recipe to compose (None: the run's own copy, ``config.yaml`` on the lightly
            host, ``.hydra/config.yaml`` on the solo host).
        host: ``auto`` (the run's own host), ``solo`` or ``lightly``; another host than the
            run's is refused, their checkpoints differ.

    Returns:
        The resume point.

    Raises:
        ValueError: the folder is not a run folder, holds a symbolic link among its files
            (:meth:`.RunFolder.refuse_links`), holds no checkpoint, its newest checkpoint
            is truncated, corrupt or not a Lightning checkpoint with a backbone, it has no
            recipe, or ``host`` is not the run's.
    """
    folder = RunFolder(Path(run))
    if not folder.path.is_dir():
        raise ValueError(f"--resume {str(run)!r}: no such run folder")
    folder.refuse_links()  # before anything: a link would be written through or read
    checkpoint = folder.latest_checkpoint()
    if checkpoint is None:
        raise ValueError(
            f"--resume {str(run)!r}: no checkpoint under {str(folder.checkpoints)!r}; "
            f"nothing to resume (the recipe's checkpoint.enabled must be true)"
        )
    check_archive(checkpoint)
    check_lightning_checkpoint(checkpoint)
    used = run_host(folder)
    if host not in ("auto", used):
        raise ValueError(
            f"--resume {str(run)!r}: the run was trained on host {used!r}, not {host!r}; "
            f"resume it with --host {used} or --host auto"
        )
    recipe = (
        Path(config)
        if config is not None
        else (folder.path / HYDRA_CONFIG if used == "solo" else folder.config)
    )
    if not recipe.is_file():
        raise ValueError(f"--resume {str(run)!r}: recipe {str(recipe)!r} not found; pass --config")
    return ResumePoint(run=folder, checkpoint=checkpoint, recipe=recipe, host=used)
