"""The commands' parsers: one module per command in ``solo_geometry/commands/``, listed by cli.py.

Parsers are found in the source with :mod:`ast` (a call of ``ArgumentParser``, ``add_parser``,
``add_subparsers`` or ``add_argument``), so a module that starts building options elsewhere
fails here, as does a command module that ``cli`` does not register.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

from solo_geometry import cli, commands
from solo_geometry.commands import demo
from tests.import_rules import PACKAGE_ROOT

PARSER_CALLS = frozenset({"ArgumentParser", "add_parser", "add_subparsers", "add_argument"})


def _builds_parsers(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in PARSER_CALLS:
                return True
    return False


COMMAND_MODULES = sorted(m.name for m in pkgutil.iter_modules(commands.__path__))


class TestWhereParsersLive:
    def test_only_commands_and_cli_build_parsers(self) -> None:
        outside = {
            str(p.relative_to(PACKAGE_ROOT))
            for p in sorted(PACKAGE_ROOT.rglob("*.py"))
            if p.parent != PACKAGE_ROOT / "commands" and _builds_parsers(p)
        }
        assert outside == {"cli.py"}

    def test_every_command_module_is_registered_by_cli(self) -> None:
        registered = {
            f.__module__.rsplit(".", 1)[1]
            for f in cli._COMMANDS
            if f.__module__.startswith(f"{commands.__name__}.")
        }
        assert registered == set(COMMAND_MODULES)

    @pytest.mark.parametrize("name", COMMAND_MODULES)
    def test_a_module_registers_the_command_it_is_named_after(self, name: str) -> None:
        module = importlib.import_module(f"{commands.__name__}.{name}")
        subparsers = argparse.ArgumentParser().add_subparsers(dest="command")
        parser = module.add_parser(subparsers)
        assert list(subparsers.choices) == [name]
        assert subparsers.choices[name] is parser


class TestDemoOptions:
    def test_parser(self) -> None:
        parser = argparse.ArgumentParser()
        demo.add_parser(parser.add_subparsers(dest="command"))
        args = parser.parse_args(["demo", "--quick", "--host", "lightly", "--out", "x"])
        assert (args.quick, args.host, args.out) == (True, "lightly", Path("x"))
        assert args.func is demo.run
