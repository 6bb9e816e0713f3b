"""The package's rooms and who may import whom (docs/design.md, "Layout"), checked on the source.

The rules are stated by package in :data:`MAY_IMPORT`: each unit (a subpackage of
``solo_geometry``, or a module at its root) names the units it may import, and may import what
those may. :mod:`tests.import_graph` reads every import of the tree with :mod:`ast`, never
importing it (module and function level, relative ones, and ``require("...")`` /
``importlib.import_module("...")`` calls naming a module by a string literal). Beside the
package rules: no import cycle, every internal import names a module or a name the package
binds (an old module path fails), no import statement inside a function but of an optional
extra, no solo-learn at module level under the hosts, no module over :data:`MAX_LINES` lines,
at most :data:`MAX_ROOT_MODULES` modules at the root besides ``__init__.py``.

:func:`check_package` applies the rules to any package folder, so the same checker runs on
``solo_geometry/`` and on synthetic trees that show each rule fails.
"""

from __future__ import annotations

import pytest

from tests.import_graph import (
    collect_imports,
)
from tests.import_rules import MAY_IMPORT, PACKAGE, PACKAGE_ROOT, RULES, may_import


class TestPackage:
    def test_package_found(self) -> None:
        modules, imports = collect_imports(PACKAGE_ROOT)
        assert f"{PACKAGE}.folder.records" in modules and f"{PACKAGE}.linalg.lanczos" in modules
        assert any(i.source == f"{PACKAGE}.geometry.spectrum" for i in imports)

    @pytest.mark.parametrize("rule", sorted(RULES))
    def test_rule(self, rule: str) -> None:
        modules, imports = collect_imports(PACKAGE_ROOT)
        violations = RULES[rule](modules, imports, PACKAGE)
        assert not violations, f"{len(violations)} {rule} violation(s):\n" + "\n".join(violations)

    def test_rules_are_a_hierarchy(self) -> None:
        """Every unit a rule names has a rule, and no two units may import each other."""
        named = {u for allowed in MAY_IMPORT.values() for u in allowed}
        assert named <= set(MAY_IMPORT)
        mutual = [(a, b) for a in MAY_IMPORT for b in may_import(a) - {a} if a in may_import(b)]
        assert mutual == []
