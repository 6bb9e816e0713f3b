"""The second host: solo-learn recipes trained on lightly, torchvision and Lightning.

For machines where solo-learn cannot be installed (docs/design.md section 6). ``launch`` reads the
same recipe files as solo-learn (its schema, Hydra overrides, ``+geometry=on``), trains SimCLR,
BYOL, VICReg or Barlow Twins with lightly's losses, LARS, momentum updates and schedules, and
writes the same run folder as the solo-learn host::

    <runs_root>/<name>-<YYYYmmdd-HHMMSS>/
        config.yaml  geometry.jsonl  probes.json  checkpoints/last.ckpt  report/index.html

It never imports solo-learn.

Example:
    >>> from solo_geometry.hosts.lightly import launch
    >>> run = launch("zoo/recipes/digits/byol.yaml", ["+geometry=on"], runs_root="runs")
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig

from solo_geometry.config import GeometryConfig, geometry_config
from solo_geometry.folder.lock import writer_lock
from solo_geometry.folder.preempted import clear_marker, preempted_error
from solo_geometry.folder.resume import ResumePoint
from solo_geometry.folder.run_folder import RunFolder
from solo_geometry.hosts.lightly.data import build_train_loader, num_classes
from solo_geometry.hosts.lightly.module import LightlyMethod
from solo_geometry.hosts.lightly.recipe import ParsedRecipe, parse_recipe
from solo_geometry.inputs.datasets import check_image_folder
from solo_geometry.recipe import check_recipe_numbers, load_recipe
from solo_geometry.runtime.callbacks import check_probe_images, geometry_callbacks
from solo_geometry.runtime.preempt import PreemptionCallback
from solo_geometry.runtime.sink import Unwritten, unwritten_in

__all__ = ["HOST", "RUN_ENV", "build_callbacks", "launch", "prepare", "run_recipe"]

# The run folder rank zero created, for the ranks Lightning's DDP re-launches (they re-run the
# command, which would otherwise create a folder of their own).
RUN_ENV = "SOLO_GEOMETRY_DDP_RUN_DIR"

HOST = "lightly"


def prepare(cfg: DictConfig) -> tuple[ParsedRecipe, GeometryConfig | None]:
    """Check a composed recipe completely before anything is written or trained.

    Args:
        cfg: the composed recipe.

    Returns:
        ``(ParsedRecipe, GeometryConfig | None)``.

    Raises:
        ValueError: naming an unsupported, unknown, missing or invalid field.
        FileNotFoundError: if ``data.train_path`` (or the probes' folder) does not exist.
    """
    recipe = parse_recipe(cfg)
    check_recipe_numbers(cfg)
    geometry = geometry_config(cfg)
    if not recipe.data.cifar:
        check_image_folder(recipe.data.train_path, "data.train_path")
    probes_dir = _probes_dir(recipe, geometry)
    if geometry is not None and probes_dir is not None:
        field = "geometry.probes.data" if geometry.probes.data else "data.val_path"
        check_image_folder(probes_dir, field)
    if geometry is not None:
        check_probe_images(geometry.probes, recipe.data.train_path, recipe.data.val_path)
    return recipe, geometry


def _probes_dir(recipe: ParsedRecipe, geometry: GeometryConfig | None) -> str | None:
    """The labelled folder the probes run on, or None when they do not run."""
    if geometry is None or not geometry.probes.enabled:
        return None
    return geometry.probes.data or recipe.data.val_path


def build_callbacks(
    run: RunFolder, recipe: ParsedRecipe, geometry: GeometryConfig | None
) -> list[Callback]:
    """Checkpointing (recipe's ``checkpoint`` node), the geometry callbacks when on, preemption.

    Args:
        run: the run folder.
        recipe: the parsed recipe.
        geometry: the geometry config or None.

    Returns:
        The Lightning callbacks, in the order they should run.
    """
    callbacks: list[Callback] = []
    ckpt = recipe.checkpoint
    if ckpt.enabled:
        callbacks.append(
            ModelCheckpoint(
                dirpath=run.checkpoints,
                filename="{epoch}",
                save_top_k=-1 if ckpt.keep_prev else 1,
                monitor=None,
                every_n_epochs=ckpt.frequency,
                save_on_train_epoch_end=True,
            )
        )
    if geometry is not None:
        callbacks += geometry_callbacks(
            geometry,
            run_dir=run.path,
            meta={"host": HOST, "method": recipe.method},
            train_dir=recipe.data.train_path,
            val_dir=recipe.data.val_path,
            normalisation=recipe.normalisation(),
        )
    return [*callbacks, PreemptionCallback(run.path)]


def _trainer(run: RunFolder, recipe: ParsedRecipe, callbacks: list[Callback]) -> Trainer:
    """The Lightning Trainer: the recipe's Trainer keys, as solo-learn passes them."""
    kwargs = dict(recipe.trainer)
    if str(kwargs.get("accelerator")) in ("gpu", "cuda") and not _cuda_available():
        print("lightly host: no GPU here, running on the CPU (accelerator=cpu)", flush=True)
        kwargs.update(accelerator="cpu", devices=1)
    if kwargs.get("strategy") == "ddp":
        kwargs["strategy"] = DDPStrategy(find_unused_parameters=False)  # as solo-learn
    kwargs.setdefault("default_root_dir", str(run.path))
    if kwargs.get("strategy") is None:
        kwargs.pop("strategy", None)
    return Trainer(
        max_epochs=recipe.max_epochs,
        logger=CSVLogger(str(run.path), name="logs"),
        callbacks=callbacks,
        enable_checkpointing=recipe.checkpoint.enabled,
        **kwargs,
    )


def _cuda_available() -> bool:
    return bool(torch.cuda.is_available())


def run_recipe(
    cfg: DictConfig, *, runs_root: str | Path, resume: ResumePoint | None = None
) -> Path:
    """Train a composed recipe and return its run folder.

    Args:
        cfg: the composed recipe (``solo_geometry.recipe.load_recipe``).
        runs_root: folder under which the run folder is created.
        resume: continue this run folder from its checkpoint (Lightning's ``ckpt_path``)
            instead of creating a new one; its ``config.yaml`` is kept as written.

    Returns:
        The run folder.

    Raises:
        ValueError: on an unsupported recipe field (before anything is written).
        FileNotFoundError: if a data folder is missing (before anything is written).
    """
    recipe, geometry = prepare(cfg)
    for note in recipe.notes:
        print(f"lightly host: note: {note}")
    seed_everything(recipe.seed)
    loader = build_train_loader(recipe.data, recipe.augmentations, recipe.optimizer.batch_size)
    model = LightlyMethod(recipe, num_classes(recipe.data), geometry)
    ckpt = None if resume is None else str(resume.checkpoint)
    joined = os.environ.get(RUN_ENV) if int(os.environ.get("LOCAL_RANK", "0")) > 0 else None
    if joined:  # a rank Lightning's DDP re-launched: rank zero's folder, written by rank zero
        run = RunFolder(Path(joined))
        trainer = _trainer(run, recipe, build_callbacks(run, recipe, geometry))
        trainer.fit(model, loader, ckpt_path=ckpt)
        trainer.save_checkpoint(run.checkpoints / "last.ckpt")  # a collective; rank zero writes
        return run.path
    run = RunFolder.create(Path(runs_root), recipe.name) if resume is None else resume.run
    with writer_lock(run):  # one writer: a second one is refused before anything changes
        if resume is not None:
            run.mark_incomplete("resuming")
        clear_marker(run)
        os.environ[RUN_ENV] = str(run.path)  # inherited by the ranks DDP re-launches
        try:
            if resume is None:
                run.write_config(cfg)
            trainer = _trainer(run, recipe, build_callbacks(run, recipe, geometry))
            trainer.fit(model, loader, ckpt_path=ckpt)
            run.checkpoints.mkdir(exist_ok=True)
            trainer.save_checkpoint(run.checkpoints / "last.ckpt")
        except SIGTERMException:  # SIGTERM or SIGUSR1: checkpointed at the step boundary
            run.finish(ok=False)
            raise preempted_error(run) from None
        except BaseException:
            run.finish(ok=False)
            raise
        finally:
            os.environ.pop(RUN_ENV, None)
        run.finish(ok=True)
    failed = unwritten_in(trainer)
    if failed:  # trained and checkpointed, but a file is missing: one line, exit 3 (cli.py)
        raise Unwritten(failed)
    return run.path


def launch(
    config: str | Path,
    overrides: Sequence[str] = (),
    *,
    runs_root: str | Path,
    resume: ResumePoint | None = None,
) -> Path:
    """Run a recipe file on the lightly host.

    Args:
        config: the recipe YAML (solo-learn's schema).
        overrides: Hydra overrides, ``+geometry=on`` included.
        runs_root: folder under which the run folder is created.
        resume: continue this run folder from its newest checkpoint instead.

    Returns:
        The run folder.

    Raises:
        FileNotFoundError: if the recipe or a data folder is missing.
        ValueError: if the recipe cannot be composed or has an unsupported field.
    """
    return run_recipe(load_recipe(config, list(overrides)), runs_root=runs_root, resume=resume)
