"""Old module names of the flat layout, kept importable as aliases of the new ones.

The root modules moved into role subpackages (docs/design.md, "Layout"). A program, a Hydra
``_target_`` on a command line or a pickle that still names ``solo_geometry.heads`` gets the
very module object ``solo_geometry.models.heads`` (same classes, same registries) and one
:class:`DeprecationWarning` naming the new path. Nothing is imported until an old name is asked
for. The package itself never uses an old name (``tests/test_imports.py`` checks that every
import it makes resolves to a file).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

__all__ = ["MOVED", "install"]

PACKAGE = "solo_geometry"
# Old root module -> its module now (relative to the package).
MOVED = {
    "records": "run.records",
    "run_folder": "run.run_folder",
    "resume": "run.resume",
    "datasets": "inputs.datasets",
    "features": "inputs.features",
    "npfiles": "inputs.npfiles",
    "heads": "models.heads",
    "solo_mlp": "models.solo_mlp",
    "init": "models.init",
    "backbones": "models.backbones",
    "checkpoint": "models.checkpoint",
    "evaluation": "analysis.evaluation",
    "probes": "analysis.probes",
    "logreg": "analysis.logreg",
    "paper_probes": "analysis.paper_probes",
    "report": "analysis.report",
    "plots": "analysis.plots",
    "measure": "runtime.measure",
    "distributed": "runtime.distributed",
    "monitor": "runtime.monitor",
    "updates": "runtime.updates",
    "callbacks": "runtime.callbacks",
    "pretrain": "commands.pretrain",
    "demo": "commands.demo",
    "orbits_cli": "commands.orbits",
    "sweeps": "commands.sweeps",
}


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module now at ``target``, leaving that module as it was."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.spec = module.__spec__  # the import system overwrites it; exec_module restores it
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the old names of :data:`MOVED`, and nothing else."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != PACKAGE or name not in MOVED:
            return None
        new = f"{PACKAGE}.{MOVED[name]}"
        warnings.warn(
            f"{fullname} moved to {new}; the old name is a deprecated alias",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (importing the package does)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
