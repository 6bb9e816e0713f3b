"""The import checker of test_imports fails where it should: one synthetic tree per rule.

Each tree under ``tmp_path`` breaks exactly one rule of :mod:`tests.test_imports` (the rules
stated by package, the cycles, the old module paths, the house rules) and must make that rule,
and no other, report it with its file and line; a clean tree in the same layout passes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.import_graph import collect_imports
from tests.import_rules import PACKAGE, RULES, check_package


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    """A synthetic ``solo_geometry`` package; every folder gets an ``__init__.py``."""
    root = tmp_path / PACKAGE
    for name, text in {"__init__.py": "", **files}.items():
        file = root / name
        file.parent.mkdir(parents=True, exist_ok=True)
        for folder in file.relative_to(root).parents:  # the package's folders, "." included
            (root / folder / "__init__.py").touch()
        file.write_text(text)
    return root


TRY_SOLO = "try:\n    from solo.methods import METHODS\nexcept ImportError:\n    pass\n"
CLASS = "\n\nclass {}:\n    pass\n"
# Synthetic trees: files, the one rule that must fire, and what each of its messages must hold.
CASES = {
    "two-module-cycle": (
        {
            "folder/records.py": "from solo_geometry.folder import resume\n",
            "folder/resume.py": "import json\n\nimport solo_geometry.folder.records as r\n",
        },
        "cycles",
        [
            "cycle: solo_geometry.folder.records (",
            "records.py:1) -> solo_geometry.folder.resume (",
            "resume.py:3) -> solo_geometry.folder.records",
        ],
    ),
    "back-up-to-package-init": (
        {
            "hosts/solo/__init__.py": "from solo_geometry.hosts.solo import launcher\nX = {}\n",
            "hosts/solo/launcher.py": "from solo_geometry.hosts.solo import X\n",
        },
        "cycles",
        ["cycle: solo_geometry.hosts.solo (", "-> solo_geometry.hosts.solo.launcher ("],
    ),
    "relative-import-cycle": (
        {
            "geometry/a.py": "from . import b\n\nhelper = 1\n",
            "geometry/b.py": "from .a import helper\n",
        },
        "cycles",
        ["cycle: solo_geometry.geometry.a (", "-> solo_geometry.geometry.b ("],
    ),
    "import-module-cycle": (
        {
            "runtime/monitor.py": "import importlib\n\nM = importlib.import_module("
            "'solo_geometry.runtime.measure')" + CLASS.format("Monitor"),
            "runtime/measure.py": "from solo_geometry.runtime.monitor import Monitor\n",
        },
        "cycles",
        [
            "cycle: solo_geometry.runtime.measure (solo_geometry/runtime/measure.py:1) -> "
            "solo_geometry.runtime.monitor (solo_geometry/runtime/monitor.py:3) -> "
        ],
    ),
    "folder-imports-models": (
        {"models/heads.py": "", "folder/records.py": "from solo_geometry.models import heads\n"},
        "package-imports",
        ["records.py:1: folder may not import models (solo_geometry.models.heads)"],
    ),
    "runtime-imports-hosts": (
        {
            "hosts/solo/launcher.py": "",
            "runtime/monitor.py": "from solo_geometry.hosts.solo import launcher\n",
        },
        "package-imports",
        ["monitor.py:1: runtime may not import hosts (solo_geometry.hosts.solo.launcher)"],
    ),
    "analysis-imports-cli": (
        {"cli.py": "", "analysis/evaluation.py": "import torch\nfrom solo_geometry import cli\n"},
        "package-imports",
        ["evaluation.py:2: analysis may not import cli (solo_geometry.cli)"],
    ),
    "analysis-requires-host": (
        {
            "hosts/lightly/__init__.py": "",
            "analysis/plots.py": "def f():\n    require('solo_geometry.hosts.lightly', 'x')\n",
        },
        "package-imports",
        ["plots.py:2: analysis may not import hosts (solo_geometry.hosts.lightly)"],
    ),
    "linalg-imports-geometry": (
        {
            "geometry/spectrum.py": "",
            "linalg/lanczos.py": "from solo_geometry.geometry import spectrum\n",
        },
        "package-imports",
        ["lanczos.py:1: linalg may not import geometry (solo_geometry.geometry.spectrum)"],
    ),
    "geometry-imports-config": (
        {
            "config/__init__.py": CLASS.format("Config"),
            "geometry/orbits.py": "import torch\nfrom solo_geometry.config import Config\n",
        },
        "package-imports",
        ["orbits.py:2: geometry may not import config (solo_geometry.config)"],
    ),
    "geometry-imports-package": (
        {
            "__init__.py": "__version__ = '0'\n",
            "geometry/orbits.py": "from solo_geometry import __version__\n",
        },
        "package-imports",
        ["orbits.py:1: geometry may not import solo_geometry (solo_geometry)"],
    ),
    "old-module-path": (
        {
            "folder/records.py": CLASS.format("GeometryRecord"),
            "runtime/monitor.py": "from solo_geometry.records import GeometryRecord\n",
        },
        "unresolved-imports",
        ["monitor.py:1: solo_geometry.runtime.monitor imports solo_geometry.records, which is no"],
    ),
    "old-module-from-root": (
        {"cli.py": "from solo_geometry import heads\n", "models/heads.py": ""},
        "unresolved-imports",
        ["cli.py:1: solo_geometry.cli imports heads from solo_geometry, unbound"],
    ),
    "unplaced-root-module": (
        {"helpers.py": ""},
        "unplaced-units",
        ["solo_geometry.helpers: no rule in MAY_IMPORT"],
    ),
    "function-level-json": (
        {"analysis/report.py": "import os\n\n\ndef write():\n    import json\n"},
        "function-level-imports",
        ["report.py:5: solo_geometry.analysis.report imports json inside a function"],
    ),
    "function-level-in-method-and-host": (
        {"hosts/base.py": "class A:\n    def f(self):\n        from torch import nn\n"},
        "function-level-imports",
        ["base.py:3: solo_geometry.hosts.base imports torch inside a function"],
    ),
    "runtime-imports-solo-learn": (
        {"runtime/monitor.py": TRY_SOLO},
        "solo-learn-imports",
        ["monitor.py:2: solo_geometry.runtime.monitor imports solo-learn (solo.methods)"],
    ),
    "private-name-across-modules": (
        {
            "config/choices.py": "_TRUE = ('true',)\n",
            "config/overrides.py": "from solo_geometry.config.choices import _TRUE\n",
        },
        "private-imports",
        ["overrides.py:1: solo_geometry.config.overrides imports the private _TRUE from"],
    ),
    "one-name-two-things": (
        {
            "config/choices.py": "def check_choice(value, choices, key):\n    pass\n",
            "hosts/nodes.py": "def check_choice(name, value, choices):\n    pass\n",
            "commands/a.py": "def run(args):\n    pass\n",
            "commands/b.py": "def run(args):\n    pass\n",
        },
        "repeated-names",
        ["check_choice is defined in solo_geometry.config.choices, solo_geometry.hosts.nodes"],
    ),
    "long-module": (
        {"inputs/datasets.py": "x = 1\n" * 401},
        "long-modules",
        ["solo_geometry/inputs/datasets.py: 401 lines > 400"],
    ),
    "crowded-root": (
        {
            f"{name}.py": ""
            for name in (
                "state",
                "extras",
                "linalg",
                "recipe",
                "cli",
                "config",
                "folder",
                "inputs",
                "models",
            )
        },
        "crowded-root",
        ["9 root modules > 8: solo_geometry.cli, solo_geometry.config,"],
    ),
}


class TestChecker:
    @pytest.mark.parametrize("case", sorted(CASES))
    def test_fails_on_violation(self, tmp_path: Path, case: str) -> None:
        files, rule, messages = CASES[case]
        found = check_package(_tree(tmp_path, files))
        assert len(found[rule]) == 1, found[rule]
        for message in messages:
            assert message in found[rule][0]
        assert {r: v for r, v in found.items() if r != rule and v} == {}

    def test_clean_tree_passes(self, tmp_path: Path) -> None:
        files = {
            "__init__.py": "__version__ = '0'\n",
            "linalg/__init__.py": "from solo_geometry.linalg.lanczos import lanczos\n",
            "linalg/lanczos.py": "import torch\nfrom .operators import hvp\n\nlanczos = hvp\n",
            "linalg/operators.py": "from __future__ import annotations\n\nhvp = None\n",
            "geometry/spectrum.py": "from solo_geometry.linalg import lanczos\n",
            "models/heads.py": "from torch import nn\n\nfrom solo_geometry.folder import records\n",
            "folder/records.py": "import json\n\nfrom solo_geometry.folder.run_folder import *\n",
            "folder/run_folder.py": "",
            "runtime/monitor.py": "LOAD = lambda: require('solo.methods')\n",
            "analysis/plots.py": "def plot():\n    from solo.methods import METHODS\n",
            "analysis/report.py": "def umap_plot():\n    import umap\n    from umap import UMAP\n",
            "hosts/solo/__init__.py": "from solo_geometry.hosts.solo.launcher import main\n",
            "hosts/solo/launcher.py": (
                "import solo\nfrom solo_geometry.models import heads\n\n\ndef main():\n    pass\n"
            ),
            "hosts/lightly/module.py": "def build():\n    import lightly.models\n",
            "commands/pretrain.py": "def run():\n    require('solo_geometry.hosts.lightly', 'x')\n",
            "extras.py": "import importlib\n\n\ndef require(m):\n    importlib.import_module(m)\n",
            "cli.py": (
                "from solo_geometry import __version__\n"
                "from solo_geometry.hosts.solo import launcher\n"
            ),
        }
        assert check_package(_tree(tmp_path, files)) == {rule: [] for rule in RULES}

    @pytest.mark.parametrize(
        ("source", "statement", "target"),
        [
            (
                "pkg/mod.py",
                "from solo_geometry.linalg import lanczos",
                "solo_geometry.linalg.lanczos",
            ),
            ("pkg/mod.py", "from solo_geometry.linalg import hvp", "solo_geometry.linalg"),
            (
                "pkg/mod.py",
                "import solo_geometry.linalg.lanczos as l",
                "solo_geometry.linalg.lanczos",
            ),
            ("pkg/mod.py", "from .. import heads", "solo_geometry.heads"),
            ("pkg/mod.py", "from . import other", "solo_geometry.pkg"),
            ("pkg/mod.py", "from .sub import x", "solo_geometry.pkg.sub"),
            ("pkg/__init__.py", "from . import mod", "solo_geometry.pkg.mod"),
            ("pkg/__init__.py", "from .mod import x", "solo_geometry.pkg.mod"),
        ],
    )
    def test_resolves_targets(
        self, tmp_path: Path, source: str, statement: str, target: str
    ) -> None:
        files = {"heads.py": "", "linalg/lanczos.py": "", "pkg/mod.py": "", "pkg/sub.py": ""}
        root = _tree(tmp_path, {**files, source: f"{statement}\n"})
        _, imports = collect_imports(root)
        assert [i.target for i in imports] == [target]
