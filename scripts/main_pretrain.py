r"""Pretrain a solo-learn recipe with solo-geometry's instrumentation.

Usage::

    python scripts/main_pretrain.py --config zoo/recipes/digits/byol.yaml +geometry=on \\
        geometry.every_n_steps=10 [--solo-root /path/to/solo-learn] [--runs-root runs]

Everything after the options is a Hydra override, exactly as for solo-learn's
``main_pretrain.py``. The run folder is created under ``--runs-root`` and printed; solo-learn's
own ``main_pretrain.py`` is run by module from the checkout (``--solo-root``, else
``$SOLO_LEARN_ROOT``, else next to the installed ``solo`` package).

Exit status: 0 on success, 2 for bad input (nothing created), 1 when the run itself failed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # run from a checkout without installing the package
    sys.path.insert(0, str(_ROOT))


def build_parser() -> argparse.ArgumentParser:
    """The launcher's command line (Hydra overrides are the leftovers)."""
    parser = argparse.ArgumentParser(
        description="Run solo-learn's main_pretrain.py on a recipe with solo-geometry active."
    )
    parser.add_argument("--config", required=True, type=Path, help="recipe YAML file")
    parser.add_argument("--solo-root", type=Path, default=None, help="solo-learn checkout")
    parser.add_argument("--runs-root", type=Path, default=Path("runs"), help="parent of runs")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, launch the run and return the exit status."""
    from solo_geometry.cli import error_message
    from solo_geometry.hosts.solo import LaunchError, launch
    from solo_geometry.recipe import split_overrides

    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    overrides, others = split_overrides(rest)
    if others:
        parser.error(f"not a Hydra override (key=value, +key=value, ~key): {others}")
    try:
        run = launch(args.config, overrides, solo_root=args.solo_root, runs_root=args.runs_root)
    except (ValueError, TypeError, OSError, ModuleNotFoundError) as err:
        print(f"error: {error_message(err)}", file=sys.stderr)
        return 2
    except LaunchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"run folder: {run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
