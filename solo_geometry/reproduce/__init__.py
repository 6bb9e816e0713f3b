"""The paper's experiments as one command each: ``solo-geometry reproduce <action>``.

* :mod:`.collapse`: SimSiam from pseudo-collapse, heads x norms x learning rates x seeds, a Hydra
  multirun sweep (on Hydra's joblib launcher, or submitit's, local or Slurm);
* :mod:`.invariance`: SimCLR with the paper's augmentations, guillotine probes, the orbit table,
  rotation-sweep curvature, head depth and whitening;
* ``verdicts collapse FILE``, ``verdicts invariance PATH...``, ``verdicts hessian FILE...``:
  the claims judged on saved results, ours or the authors' (:mod:`.verdicts`; the authors'
  Hessian-tracker files: :mod:`.hessian`);
* ``all``: both, and one page (``paper.html``) with each table and figure next to the paper's
  published numbers.

Each writes a summary computed from the runs' own records and a verdict per claim computed from
this run's numbers. An action registers itself by a function ``add_parser(actions)`` listed in
:data:`ACTIONS` (``actions`` is the ``reproduce`` parser's subparsers object).
"""

from __future__ import annotations

import argparse
import functools

from solo_geometry.reproduce import collapse
from solo_geometry.reproduce.invariance import add_invariance_parser, invariance_experiment
from solo_geometry.reproduce.paper import add_all_parser
from solo_geometry.reproduce.verdicts import add_verdicts_parser

__all__ = ["ACTIONS", "add_reproduce_parser"]

# One function per action: it adds the action's subparser and sets its ``func``.
ACTIONS = (
    collapse.add_parser,
    add_invariance_parser,
    functools.partial(
        add_all_parser, experiments=[collapse.collapse_experiment, invariance_experiment]
    ),
    add_verdicts_parser,
)


def add_reproduce_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``solo-geometry reproduce <action>`` with every action of :data:`ACTIONS`.

    Args:
        subparsers: the ``solo-geometry`` command's subparsers.

    Returns:
        The ``reproduce`` parser.
    """
    parser = subparsers.add_parser(
        "reproduce",
        help="reproduce the paper's experiments (collapse, invariance, all)",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for add in ACTIONS:
        add(actions)
    return parser
