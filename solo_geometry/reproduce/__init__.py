"""The paper's experiments as one command each: ``solo-geometry reproduce <action>``.

Each action is a Hydra multirun sweep over the paper's grid (the project's own launcher runs
the cells in a process pool), a summary computed from the runs' own records, the paper's figures
on one page, and a verdict per claim computed from this run's numbers.

* :mod:`.collapse`: SimSiam from pseudo-collapse, heads x norms x learning rates x seeds.

An action registers itself by a function ``add_parser(actions)`` listed in :data:`ACTIONS`
(``actions`` is the ``reproduce`` parser's subparsers object); adding one is a line here.
"""

from __future__ import annotations

import argparse

from solo_geometry.reproduce import collapse

__all__ = ["ACTIONS", "add_reproduce_parser"]

# One function per action: it adds the action's subparser and sets its ``func``.
ACTIONS = (collapse.add_parser,)


def add_reproduce_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``solo-geometry reproduce <action>`` with every action of :data:`ACTIONS`.

    Args:
        subparsers: the ``solo-geometry`` command's subparsers.

    Returns:
        The ``reproduce`` parser.
    """
    parser = subparsers.add_parser(
        "reproduce",
        help="reproduce one of the paper's experiments (a Hydra multirun sweep)",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for add in ACTIONS:
        add(actions)
    return parser
