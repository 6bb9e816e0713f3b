"""The paper's collapse experiment as a Hydra multirun (``solo-geometry reproduce collapse``).

Hydra's multirun of :func:`~.cell.run_cell` over each factorial block of the grid
(:mod:`.protocol`), on the joblib launcher or the one an extra ``hydra/launcher=...`` override
names (:mod:`solo_geometry.hosts.sweeps`); :func:`reproduce_collapse` then writes the summary,
the page and each claim's verdict (docs/reproducing.md, "Collapse").
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import hydra
from hydra.core.singleton import Singleton

from solo_geometry.folder.field_types import to_plain
from solo_geometry.hosts.pretrain import resolve_host
from solo_geometry.hosts.sweeps import launch_overrides
from solo_geometry.inputs.digits import make_digits
from solo_geometry.models.backbones import LIGHTLY_ONLY
from solo_geometry.reproduce.collapse.cell import (
    PROTOCOL_KEYS,
    cell_file,
    check_cell_overrides,
    run_cell,
)
from solo_geometry.reproduce.collapse.files import load_runs, summary_runs
from solo_geometry.reproduce.collapse.page import (
    FIGURES,
    page_body,
    write_collapse_page,
    write_compare,
)
from solo_geometry.reproduce.collapse.protocol import (
    BASE_LR,
    Protocol,
    cell_id,
    protocol_of,
)
from solo_geometry.reproduce.collapse.result import CollapseSummary, read_cell
from solo_geometry.reproduce.collapse.summary import print_claims, summarise, write_summary
from solo_geometry.reproduce.collapse.verdicts import ESCAPE_FACTOR
from solo_geometry.reproduce.data import check_data_root

__all__ = [
    "cell_host",
    "collapse_experiment",
    "grid_overrides",
    "reproduce_collapse",
]

# The Hydra application: run_cell stays importable by name (launchers pickle it by reference).
_app = hydra.main(version_base=None, config_path=None, config_name="reproduce_collapse")(run_cell)


def grid_overrides(protocol: Protocol, base_lr: float = BASE_LR) -> list[list[str]]:
    """Each factorial block as Hydra multirun overrides (``head=a,b norm=... lr=... seed=...``)."""
    seeds = ",".join(str(s) for s in protocol.seeds)
    return [
        [
            f"head={','.join(b.heads)}",
            f"norm={','.join(b.norms)}",
            f"lr={','.join(f'{base_lr * f:g}' for f in b.lr_factors)}",
            f"seed={seeds}",
        ]
        for b in protocol.grid
    ]


def _multirun(overrides: Sequence[str]) -> None:
    """Run the Hydra app as ``--multirun`` with ``overrides`` (in this process).

    Raises:
        RuntimeError: if Hydra reports a failed job or a bad override.
    """
    argv = sys.argv
    sys.argv = ["solo-geometry-reproduce-collapse", "--multirun", *overrides]
    state = Singleton.get_state()  # joblib runs a single job in this process: leave no trace
    try:
        _app()
    except SystemExit as err:
        if err.code not in (0, None):
            raise RuntimeError(f"the collapse sweep failed (Hydra exit {err.code})") from None
    finally:
        sys.argv = argv
        Singleton.set_state(state)


def _data(data: str, data_root: Path | None, out: Path) -> tuple[str, str]:
    """``(data.dataset, data.train_path)`` of the cells; digits are written under ``out``."""
    if data == "digits":
        root = make_digits(out / "data" / "digits")
        return "custom", str(root / "train")
    return data, str(data_root)


def cell_host(host: str, backbone: str, stem: str = "auto") -> str:
    """The cells' host: ``auto`` is the lightly host for a backbone or stem solo-learn lacks.

    solo-learn builds its own stem (``auto``: the CIFAR one for CIFAR data, padding 2); any
    other ``stem`` (the paper's ``cifar_paper``, padding 1) is the lightly host's.

    Raises:
        ValueError: ``solo`` asked for with such a backbone or stem.
    """
    if backbone in LIGHTLY_ONLY:
        lacks, other = f"backbone {backbone!r} (the cpu scale's)", "--scale paper"
    elif stem != "auto":
        lacks, other = f"stem {stem!r}", "stem=auto (solo-learn's own stem)"
    else:
        return host
    if host == "solo":
        raise ValueError(
            f"--host solo: solo-learn has no {lacks}; use --host lightly or auto, or {other}"
        )
    if host == "auto":
        print(f"host: lightly (solo-learn has no {lacks})", flush=True)
    return "lightly"


def reproduce_collapse(
    out: str | Path,
    *,
    quick: bool = False,
    scale: str = "cpu",
    grid: str = "paper",
    data: str | None = None,
    data_root: str | Path | None = None,
    host: str = "auto",
    jobs: int | None = None,
    threads: int = 1,
    factor: float = ESCAPE_FACTOR,
    compare: str | Path | None = None,
    trust_pickle: bool = False,
    protocol: Protocol | None = None,
    extra: Sequence[str] = (),
) -> CollapseSummary:
    """Run (or resume) the sweep, then summarise it, draw the page and print the verdicts.

    The arguments are the options of ``solo-geometry reproduce collapse`` (their help:
    :mod:`solo_geometry.commands.reproduce`; ``extra`` its Hydra overrides of the cell config),
    and ``protocol``: sizes, steps and grid in place of ``quick``, ``scale`` and ``grid``'s.

    Returns:
        The summary (also written to ``<out>/summary.json``).

    Raises:
        ValueError: bad data, scale, grid, factor, host, jobs or threads, before anything is
            written.
        FileNotFoundError: CIFAR files missing.
    """
    resolve_host(host)  # an unknown host or solo without solo-learn fails here
    launch = launch_overrides(jobs, threads, extra)  # bad jobs or threads fail here
    protocol = protocol or protocol_of(quick, scale, grid)
    data = data or protocol.data
    root = check_data_root(data, data_root, "--data")  # every CIFAR file read, nothing written
    if not factor > 1:
        raise ValueError(f"--factor must be > 1, got {factor}")
    options = check_cell_overrides(extra)
    backbone, stem = options.get("backbone", protocol.backbone), options.get("stem", protocol.stem)
    host = cell_host(host, backbone, stem)
    theirs = None if compare is None else load_runs(compare, trust_pickle=trust_pickle)
    out = Path(out).resolve()
    dataset, train_path = _data(data, root, out)
    hidden, output, pred = protocol.widths
    common = [
        f"out={out}",
        f"train_path={train_path}",
        f"dataset={dataset}",
        f"data={data}",
        f"host={host}",
        *(f"{k}={getattr(protocol, k)}" for k in PROTOCOL_KEYS if hasattr(protocol, k)),
        f"proj_hidden_dim={hidden}",
        f"proj_output_dim={output}",
        f"pred_hidden_dim={pred}",
        f"factor={factor}",
        f"threads={threads}",
        *launch,
        f"hydra.sweep.dir={out / 'hydra'}",
        "hydra.sweep.subdir=${hydra.job.num}",
        "hydra/job_logging=disabled",
        "hydra/hydra_logging=disabled",
        *extra,
    ]
    for block in grid_overrides(protocol):
        _multirun([*block, *common])
    cells = sorted(cell_id(*c) for c in protocol.cells())
    records = [read_cell(cell_file(out, c)) for c in cells]
    plain = to_plain(protocol)  # summary.json's protocol: the dataclass as JSON values
    assert isinstance(plain, dict)
    summary = summarise(records, quick=quick, protocol=plain, factor=factor)
    write_summary(out, summary)
    extra_figures = (
        [] if theirs is None else [write_compare(out, summary_runs(summary), theirs, str(compare))]
    )
    write_collapse_page(out, summary, records, extra_figures)
    print_claims(summary)
    print(f"summary: {out / 'summary.json'}\npage:    {out / 'index.html'}", flush=True)
    return summary


def collapse_experiment(out: Path, quick: bool) -> tuple[str, str]:
    """Run the sweep into ``out/collapse``; its page section for ``reproduce all``."""
    summary = reproduce_collapse(out / "collapse", quick=quick)
    figures = [f for f in FIGURES if (out / "collapse" / f).is_file()]
    return "Collapse (pseudo-collapse, alpha 0.1)", page_body(summary, figures, "collapse/")
