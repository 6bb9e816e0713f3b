"""``solo-geometry probe RUN_OR_CHECKPOINT --data DIR``: backbone-vs-head probes of a run.

The options, checked before any work; the probes and the orbit table are
:func:`solo_geometry.analysis.evaluation.evaluate_model` on
:func:`solo_geometry.models.checkpoint.load_model`'s network. Needs no solo-learn.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from solo_geometry.analysis.evaluation import evaluate_model
from solo_geometry.config import TARGET_CHOICES, OrbitsConfig, ProbesConfig
from solo_geometry.folder.probe_table import versus_random_init
from solo_geometry.inputs.sizes import check_one_size, probe_folders
from solo_geometry.models.checkpoint import load_model

__all__ = ["add_parser", "run", "torch_device"]


def run(args: argparse.Namespace) -> int:
    """Validate everything, then probe; bad input raises ``ValueError`` (exit 2)."""
    data = Path(args.data)
    if not data.is_dir():
        raise ValueError(f"--data {str(data)!r} does not exist or is not a directory")
    check_one_size(
        probe_folders(data), f"--data {str(data)!r}", square="rotation" in args.targets
    )  # before any work
    orbits = OrbitsConfig(families=[]) if args.no_orbits else OrbitsConfig()
    cfg = ProbesConfig(
        batch_size=args.batch_size, seed=args.seed, targets=list(args.targets), orbits=orbits
    )
    model = load_model(args.run)
    for note in model.notes:
        print(f"solo-geometry probe: {note}", file=sys.stderr)
    out = Path(args.out) if args.out else None
    table, folder = evaluate_model(
        model, data, cfg, out=out, device=args.device, progress=not args.quiet
    )
    for row in table.rows:  # beside each, the same network at random initialisation
        print(
            f"{row.features} {row.probe:>6} {row.target:>8}: {row.accuracy:.4f}   "
            f"{versus_random_init(row)}"
        )
    print(f"wrote {folder.probes}")
    return 0


def torch_device(value: str) -> str:
    """``--device``: a torch device of this machine (argparse ``type``; bad: exit 2, one line).

    Args:
        value: ``cpu``, ``cuda``, ``cuda:N`` or ``mps``, as torch names devices.

    Returns:
        ``value``.

    Raises:
        argparse.ArgumentTypeError: naming the value and the devices this machine has.
    """
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    here = [
        "cpu",
        *(["cuda", *(f"cuda:{i}" for i in range(count))] if count else []),
        *(["mps"] if torch.backends.mps.is_available() else []),
    ]
    try:
        name = str(torch.device(value))
    except RuntimeError:  # "Invalid device string"
        name = None
    if name not in (*here, "cpu:0"):
        raise argparse.ArgumentTypeError(
            f"invalid device {value!r}; choose from {here} (the devices of this machine, "
            f"named as torch names them: type[:index])"
        )
    return value


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``solo-geometry probe RUN_OR_CHECKPOINT --data DIR`` (sets ``func``).

    Args:
        subparsers: the object returned by ``ArgumentParser.add_subparsers()``.

    Returns:
        The sub-parser; ``args.func(args)`` returns 0 or raises ``ValueError``.
    """
    parser = subparsers.add_parser(
        "probe",
        help="backbone-vs-head probes and orbit table of a run or checkpoint",
        description="Fit linear and MLP probes on backbone (Z) and head (H) features, and the "
        "same probes on the same network at random initialisation (built under --seed), write "
        "probes.json and features.pt into the run folder. Needs no solo-learn.",
    )
    parser.add_argument("run", metavar="RUN_OR_CHECKPOINT", help="run folder or .ckpt file")
    parser.add_argument("--data", required=True, help="labelled image folder (train/ + val/)")
    parser.add_argument("--out", default=None, help="output folder (default: the run folder)")
    parser.add_argument(
        "--device",
        default="cpu",
        type=torch_device,
        help="torch device: cpu, cuda, cuda:N, mps (default: cpu)",
    )
    parser.add_argument("--batch-size", type=int, default=256, help="images per forward pass")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of draws, splits, probes and the random-init network",
    )
    parser.add_argument(
        "--targets",
        nargs="+",
        default=list(TARGET_CHOICES),
        choices=TARGET_CHOICES,
        help="probe targets (default: all)",
    )
    parser.add_argument("--no-orbits", action="store_true", help="skip the orbit table")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.set_defaults(func=run)
    return parser
