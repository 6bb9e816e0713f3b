"""``solo-geometry reproduce ACTION``: the paper's experiments, one command each.

* ``collapse``: SimSiam from pseudo-collapse, heads x norms x learning rates x seeds, a Hydra
  multirun sweep (:func:`solo_geometry.reproduce.collapse.reproduce_collapse`);
* ``invariance``: SimCLR with the paper's augmentations, guillotine probes, the orbit table,
  rotation-sweep curvature, head depth and whitening
  (:func:`solo_geometry.reproduce.invariance.run_invariance_experiment`);
* ``all``: both, and one page (``paper.html``) with each table and figure next to the paper's
  published numbers;
* ``verdicts collapse FILE``, ``verdicts invariance PATH...``, ``verdicts hessian FILE...``:
  the claims judged on saved results, ours or the authors'.

Only the options live here; the experiments and the verdicts are the library's
(:mod:`solo_geometry.reproduce`). Bad input raises ``ValueError``: ``cli.main``'s one line.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from solo_geometry.analysis.pages import write_page
from solo_geometry.hosts.pretrain import HOSTS
from solo_geometry.reproduce.collapse import collapse_experiment, reproduce_collapse
from solo_geometry.reproduce.collapse.alerts import alert_markdown
from solo_geometry.reproduce.collapse.files import load_runs, verdicts_of_file
from solo_geometry.reproduce.collapse.mechanism import escape_prediction, sweep_rows
from solo_geometry.reproduce.collapse.protocol import GRIDS, SCALES
from solo_geometry.reproduce.collapse.verdicts import ESCAPE_FACTOR
from solo_geometry.reproduce.data import DATASETS
from solo_geometry.reproduce.hessian import DEFAULT_LAMBDA_MAX, hessian_report
from solo_geometry.reproduce.invariance import (
    FULL,
    QUICK,
    invariance_experiment,
    run_invariance_experiment,
)
from solo_geometry.reproduce.invariance.verdicts import format_verdicts, invariance_verdicts

__all__ = ["add_parser"]


def _collapse(args: argparse.Namespace) -> int:
    options = ("quick", "scale", "grid", "data", "data_root", "host", "jobs", "threads")
    more = ("factor", "compare", "trust_pickle")
    kwargs = {k: getattr(args, k) for k in (*options, *more)}
    reproduce_collapse(args.out, extra=args.overrides, **kwargs)
    return 0


def _invariance(args: argparse.Namespace) -> int:
    settings = QUICK if args.quick else FULL
    if args.seeds is not None:
        settings = replace(settings, seeds=args.seeds)
    result = run_invariance_experiment(
        args.out, settings, dataset=args.dataset, data_root=args.data_root
    )
    print(format_verdicts(result.claims))
    return 0


def _all(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    sections = [run(args.out, args.quick) for run in (collapse_experiment, invariance_experiment)]
    page = write_page(args.out / "paper.html", "The paper reproduced", sections)
    print(f"solo-geometry reproduce all: wrote {page}")
    return 0


def _verdicts_collapse(args: argparse.Namespace) -> int:
    if args.mechanism:
        test = escape_prediction(sweep_rows(args.file))
        print(json.dumps(test.as_json(), indent=1) if args.json else test.verdict.text())
        return 0
    verdicts = verdicts_of_file(args.file, trust_pickle=args.trust_pickle, factor=args.factor)
    if args.alert:
        print(alert_markdown(load_runs(args.file, trust_pickle=args.trust_pickle), args.factor))
    elif args.json:
        print(json.dumps([v.as_json() for v in verdicts], indent=1))
    else:
        print("\n".join(v.text() for v in verdicts))
    return 0


def _verdicts_invariance(args: argparse.Namespace) -> int:
    rows = invariance_verdicts(args.paths)
    print(json.dumps([r.as_json() for r in rows], indent=1) if args.json else format_verdicts(rows))
    return 0


def _verdicts_hessian(args: argparse.Namespace) -> int:
    plain, text = hessian_report(args.files, args.lambda_max)
    print(json.dumps(plain, indent=1) if args.json else text)
    return 0


def _run_options(parser: argparse.ArgumentParser, out: str, quick: str) -> None:
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--out", type=Path, default=Path(out), help=f"output folder ({out})")


def _add_collapse(actions: argparse._SubParsersAction) -> None:
    parser = actions.add_parser(
        "collapse",
        help="SimSiam from pseudo-collapse: heads x norms x lrs x seeds (Hydra multirun)",
        description="The paper's collapse experiment as a Hydra multirun.",
    )
    _run_options(
        parser, "runs/reproduce/collapse", "the four heads without BN at the base lr, one seed"
    )
    parser.add_argument(
        "--scale",
        choices=sorted(SCALES),
        default="cpu",
        help="cpu (default; docs/reproducing.md) or paper (the authors' setup, for a GPU)",
    )
    parser.add_argument(
        "--grid",
        choices=sorted(GRIDS),
        default="paper",
        help="paper: the authors' 14 configurations (default); full: factorial",
    )
    parser.add_argument(
        "--factor",
        type=float,
        default=2.0,
        help="escape at the first epoch mean >= FACTOR x the epoch-0 mean",
    )
    parser.add_argument(
        "--compare",
        type=Path,
        default=None,
        metavar="FILE",
        help="the authors' collapse_results.npy (or their curves as JSON) to draw beside ours",
    )
    parser.add_argument(
        "--trust-pickle",
        action="store_true",
        help="allow --compare to load a .npy (a pickle: it runs code)",
    )
    parser.add_argument(
        "--data",
        choices=DATASETS,
        default=None,
        help="digits (embedded; the cpu scale's) or CIFAR files already on disk "
        "(cifar10: the paper scale's)",
    )
    parser.add_argument(
        "--data-root", type=Path, default=None, help="torchvision's CIFAR folder (never downloaded)"
    )
    parser.add_argument(
        "--host",
        choices=HOSTS,
        default="auto",
        help="auto: solo-learn when importable, else lightly",
    )
    parser.add_argument(
        "--jobs", type=int, default=None, help="cells at once (default: available cores // threads)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads per cell")
    parser.add_argument(
        "overrides", nargs="*", help="Hydra overrides of the cell config, e.g. epochs=2"
    )
    parser.set_defaults(func=_collapse)


def _add_invariance(actions: argparse._SubParsersAction) -> None:
    parser = actions.add_parser(
        "invariance",
        help="the paper's invariance findings: guillotine probes, orbits, curvature, depth, "
        "whitening",
        description="The paper's invariance findings from one command.",
    )
    _run_options(parser, "runs/reproduce", "the reduced form (CI)")
    parser.add_argument(
        "--dataset",
        choices=DATASETS,
        default="digits",
        help="digits (embedded, default) or CIFAR from --data-root",
    )
    parser.add_argument(
        "--data-root",
        type=Path,
        default=None,
        help="folder holding torchvision's CIFAR files (never downloaded)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="draws of orbit images and sweeps (default: 3, quick 2)",
    )
    parser.set_defaults(func=_invariance)


def _add_verdicts(actions: argparse._SubParsersAction) -> None:
    parser = actions.add_parser(
        "verdicts",
        help="verdicts on saved results (a reproduction's or the authors' arrays)",
        description="A claim's verdicts on saved results.",
    )
    kinds = parser.add_subparsers(dest="kind", metavar="KIND", required=True)
    collapse = kinds.add_parser(
        "collapse",
        help="the collapse claims on our summary.json or the authors' results",
        description="Judge smooth_escape, relu_needs_bn and m_negative_at_start, per backbone "
        "and data set, on our summary.json, the authors' collapse_results.npy "
        "(read by the restricted unpickler) or their curves as JSON (tests/fixtures).",
    )
    collapse.add_argument(
        "file", type=Path, help="summary.json (or its sweep folder), collapse_results.npy or JSON"
    )
    collapse.add_argument(
        "--json",
        action="store_true",
        help="a list of objects: id, claim, verdict, evidence, dataset, backbone",
    )
    collapse.add_argument(
        "--alert",
        action="store_true",
        help="print the collapse alert replayed on each run's curve (geometry.alert's defaults) "
        "against its outcome, instead of the claims",
    )
    collapse.add_argument(
        "--mechanism",
        action="store_true",
        help="instead of the claims: does lambda_min(M) at the collapsed start predict the "
        "escape? Spearman's rho over the cells with a bootstrap interval (FILE: our summary.json "
        "or the sweep folder)",
    )
    collapse.add_argument(
        "--factor",
        type=float,
        default=ESCAPE_FACTOR,
        help="escape at the first epoch mean >= FACTOR x epoch 0 (default 2)",
    )
    collapse.add_argument(
        "--trust-pickle",
        action="store_true",
        help="unpickle a .npy with a full pickle (it can run code: trusted files only); without "
        "it only NumPy arrays and plain containers are rebuilt",
    )
    collapse.set_defaults(func=_verdicts_collapse)
    invariance = kinds.add_parser(
        "invariance",
        help="guillotine probes, orbits, separation, curvature, depth",
        description="Invariance verdicts on an invariance.json (or its folder), or on the "
        "authors' results/<dataset>/<backbone> folder or its .npy/.npz files.",
    )
    invariance.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    invariance.add_argument("--json", action="store_true", help="a JSON list instead of text")
    invariance.set_defaults(func=_verdicts_invariance)
    hessian = kinds.add_parser(
        "hessian",
        help="the authors' Hessian-tracker runs (raw_data_*.npz, Figure 3)",
        description="Per file: Spearman(variance, condition number) as Figure 3 computes it, "
        "epochs with lambda_min below 0, -1e-7, -1e-6 and below the estimator's round-off, the "
        "smallest lambda_min, var(final)/var(initial); then the smooth-vs-ReLU claim.",
    )
    hessian.add_argument("files", nargs="+", type=Path, metavar="FILE", help="raw_data_*.npz")
    hessian.add_argument(
        "--json", action="store_true", help='{"runs": {FILE: {...}}, "verdicts": [...]}'
    )
    hessian.add_argument(
        "--lambda-max",
        type=float,
        default=DEFAULT_LAMBDA_MAX,
        help="the Hessian spectrum's scale for the estimator's round-off (the files hold none; "
        f"default {DEFAULT_LAMBDA_MAX:g})",
    )
    hessian.set_defaults(func=_verdicts_hessian)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``solo-geometry reproduce`` and its actions (each sets ``func``).

    Args:
        subparsers: the ``solo-geometry`` command's subparsers.

    Returns:
        The ``reproduce`` parser.
    """
    parser = subparsers.add_parser(
        "reproduce",
        help="reproduce the paper's experiments (collapse, invariance, all)",
        description="The paper's experiments as one command each.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    _add_collapse(actions)
    _add_invariance(actions)
    every = actions.add_parser("all", help="every experiment of the paper, one page")
    _run_options(every, "runs/reproduce", "the reduced form (CI)")
    every.set_defaults(func=_all)
    _add_verdicts(actions)
    return parser
