"""The detectors of benchmarks/collapse_detection.py, replayed on a run's records, and their score.

Each detector reads only what a record holds (the measured batch's statistics of Z and H, and
the fixed held-out batch's, ``heldout/...``) and says at which step it first fires (None:
never). Thresholds and their provenance:

* ``ours``: :class:`~solo_geometry.runtime.alert.CollapseAlert` at its defaults (first state
  other than ``healthy``), on the training batch (``geometry.alert.heldout=0``);
  ``ours (held-out)``: the same reading the held-out batch (``heldout=256``).
* ``ours before``: the alert before issue 52 (H only; rank below 0.05 of min(M, d)), replayed.
* ``RankMe milestone``: stable-pretraining's ``EpochMilestones`` on its ``RankMe`` callback
  (direction ``max``: stop when RankMe <= the milestone at an epoch's end). Its docs give no
  value; a user guarding against dimensional collapse writes a fraction of the width: d / 10
  at every epoch, checked at each epoch's last record (``h/rankme``).
* ``lightly collapse level``: ``1 - sqrt(d) std_of_l2_normalized(H)`` (``h/collapse_level``);
  lightly's SimSiam tutorial reads a level near 1 as collapse: >= 0.9.
* ``MONAI effective_rank_score``: ``EmbeddingCollapseMetric``'s label-free indicator
  ``1 - erank / min(N, D)`` on H, erank the entropy rank of the centred features' singular
  values; replayed from the record's RankMe of the raw features (``h/rankme``: the same
  formula uncentred, equal on centred features: tests/test_collapse_detection.py checks it
  against MONAI 1.6); MONAI gives no threshold and calls higher "more collapsed": >= 0.5, the
  middle of its [0, 1] scale.
* ``LiDAR``: Thilak et al. 2024 read LiDAR as an effective rank of discriminative directions,
  higher better, with no threshold; as the users' rank gate: LiDAR(H) < 2.
* ``alpha-ReQ``: Agrawal et al. 2022 find the best representations near alpha = 1 and larger
  alpha (faster eigenvalue decay) toward collapse: alpha(H) > 3, a spectrum decaying faster
  than k^-3.
* ``rank gate``: what projects write themselves: effective rank of H below 2.

Every peer but LiDAR (it needs two views of each image) is also replayed on the held-out
batch's statistics (``... (held-out)``), so that ours is compared with the peers on the same
inputs as well as on the ones their libraries read.
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from solo_geometry.config import AlertConfig
from solo_geometry.runtime.alert import CollapseAlert, ratios

__all__ = ["DETECTORS", "Detector", "Score", "firings", "markdown", "plot", "score", "score_all"]

Records = Sequence[dict[str, Any]]


@dataclass(frozen=True)
class Detector:
    """A named detector: records -> the first step it fires at (None: never)."""

    name: str
    provenance: str
    fires: Callable[[Records], int | None]


def _num(metrics: dict[str, Any], key: str) -> float | None:
    v = metrics.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def threshold(key: str, below: float | None = None, above: float | None = None) -> Callable:
    """A detector firing at the first record whose ``key`` is below ``below`` / above ``above``."""

    def fires(records: Records) -> int | None:
        for r in records:
            v = _num(r["metrics"], key)
            if v is not None and (
                (below is not None and v < below) or (above is not None and v >= above)
            ):
                return int(r["step"])
        return None

    return fires


def alert(cfg: AlertConfig | None = None, batch: bool = False) -> Callable[[Records], int | None]:
    """The package's alert replayed on the records: the first state other than healthy.

    ``batch``: the held-out statistics removed, so it reads the training batch
    (``geometry.alert.heldout=0``). The held-out reading at the start is the one the run's
    first record holds (``alert.start``).
    """

    def fires(records: Records) -> int | None:
        a = CollapseAlert(cfg or AlertConfig())
        start = (records[0].get("alert") or {}).get("start") if records else None
        a.load_state_dict({"start": start or {}})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for r in records:
                m = r["metrics"]
                m = {k: v for k, v in m.items() if not k.startswith(HELDOUT)} if batch else m
                if a.observe(int(r["step"]), m, None)["state"] != "healthy":
                    return int(r["step"])
        return None

    return fires


def previous(records: Records) -> int | None:
    """The alert before issue 52 (H only, rank over min(M, d)), replayed: its first warning.

    ``complete``: std below 0.05 of its ceiling (left above 0.1); ``dimensional``: effective
    rank below 0.05 of min(M, d) (left above 0.1); patience 2.
    """
    state, candidate, count = "healthy", None, 0
    for r in records:
        reading = ratios(r["metrics"], "h")
        if reading is None:
            continue
        std, rank = reading
        out = state != "healthy"
        target = (
            "complete"
            if std < (0.1 if state == "complete" else 0.05)
            else "dimensional"
            if rank < (0.1 if out else 0.05)
            else "healthy"
        )
        if target == state:
            candidate, count = None, 0
            continue
        count = count + 1 if target == candidate else 1
        candidate = target
        if count >= 2:
            state, candidate, count = target, None, 0
            if state != "healthy":
                return int(r["step"])
    return None


def rankme_milestone(prefix: str = "", fraction: float = 10) -> Callable[[Records], int | None]:
    """``EpochMilestones`` on RankMe(H) at d / ``fraction``, every epoch's last record."""

    def fires(records: Records) -> int | None:
        last: dict[int, dict[str, Any]] = {}
        for r in records:
            last[int(r["epoch"])] = r
        for epoch in sorted(last):
            m = last[epoch]["metrics"]
            rank, d = _num(m, f"{prefix}h/rankme"), _num(m, f"{prefix}h/dim")
            if rank is not None and d is not None and rank <= d / fraction:
                return int(last[epoch]["step"])
        return None

    return fires


def monai_score(prefix: str = "", at: float = 0.5) -> Callable[[Records], int | None]:
    """MONAI's ``effective_rank_score`` = 1 - erank / min(N, D) of H, at >= ``at``."""

    def fires(records: Records) -> int | None:
        for r in records:
            m = r["metrics"]
            rank, n, d = (_num(m, f"{prefix}h/{k}") for k in ("rankme", "n_samples", "dim"))
            if rank is not None and n and d and 1 - rank / min(n, d) >= at:
                return int(r["step"])
        return None

    return fires


def _peers(prefix: str, where: str) -> tuple[Detector, ...]:
    """The peers reading ``prefix + "h/..."``: the training batch (``""``) or the held-out one."""
    return (
        Detector(
            f"RankMe milestone{where}",
            "stable-pretraining EpochMilestones, d/10",
            rankme_milestone(prefix),
        ),
        Detector(
            f"lightly collapse level{where}",
            "lightly tutorial, >= 0.9",
            threshold(f"{prefix}h/collapse_level", above=0.9),
        ),
        Detector(f"MONAI effective_rank_score{where}", "MONAI 1.6, >= 0.5", monai_score(prefix)),
        Detector(
            f"alpha-ReQ{where}",
            "Agrawal et al. 2022, > 3",
            threshold(f"{prefix}h/alpha_req", above=3.0),
        ),
        Detector(
            f"rank gate{where}",
            "users' gate, erank(H) < 2",
            threshold(f"{prefix}h/rankme_l2", below=2.0),
        ),
    )


HELDOUT = "heldout/"
DETECTORS = (
    Detector("ours", "runtime/alert.py defaults (the training batch)", alert(batch=True)),
    Detector("ours (held-out)", "the same, geometry.alert.heldout=256", alert()),
    Detector("ours before", "the alert before issue 52", previous),
    *_peers("", ""),
    Detector("LiDAR", "Thilak et al. 2024, < 2", threshold("h/lidar", below=2.0)),
    *_peers(HELDOUT, " (held-out)"),
)


@dataclass(frozen=True)
class Score:
    """One detector on a set of runs."""

    detections: int  # collapsed runs it fired on
    early: int  # of which at or before the reference step
    misses: int  # collapsed runs it never fired on
    false_alarms: int  # healthy runs it fired on
    ambiguous_fired: int  # ambiguous runs it fired on (reported, not scored)
    median_lead: float | None  # median over detections of reference - first step

    def row(self) -> str:
        """The table's cells after the detector's name."""
        lead = "-" if self.median_lead is None else f"{self.median_lead:.0f}"
        return (
            f"{self.detections} ({self.early} early) | {self.false_alarms} | {self.misses} "
            f"| {lead} | {self.ambiguous_fired}"
        )


def score(results: Sequence[dict[str, Any]], fires: Callable[[Records], int | None]) -> Score:
    """Score one detector on labelled runs (failed runs left out)."""
    det = early = miss = fa = amb = 0
    leads = []
    for res in results:
        step = fires(res["records"])
        if res["label"] == "collapsed":
            ref = res["reference"]["step"]
            if step is None:
                miss += 1
                continue
            det += 1
            if ref is not None:
                leads.append(ref - step)
                early += step <= ref
        elif res["label"] == "healthy":
            fa += step is not None
        elif res["label"] == "ambiguous":
            amb += step is not None
    med = statistics.median(leads) if leads else None
    return Score(det, early, miss, fa, amb, med)


def score_all(results: Sequence[dict[str, Any]], detectors: Sequence[Detector]) -> dict[str, Score]:
    """:func:`score` of each detector, by name."""
    return {d.name: score(results, d.fires) for d in detectors}


def markdown(results: Sequence[dict[str, Any]], scores: dict[str, Score]) -> str:
    """The runs' labels and the detectors' table, in markdown."""
    lines = ["| run | epochs | expect | label | probe Z / init | probe H / init | reference step |"]
    lines.append("|---|---|---|---|---|---|---|")
    for r in results:
        ev = r.get("evidence")
        probes = (
            f"{ev['probe']['z']:.3f} / {ev['probe_init']['z']:.3f} | "
            f"{ev['probe']['h']:.3f} / {ev['probe_init']['h']:.3f}"
            if ev
            else "- | -"
        )
        ref = r.get("reference", {}).get("step")
        lines.append(
            f"| {r['config']['name']} | {r.get('epochs') or '-'} | {r['config']['expect']} "
            f"| {r['label']} | {probes} | "
            f"{'-' if ref is None else ref} |"
        )
    lines += [
        "",
        "| detector | detections (early) | false alarms | misses | median lead "
        "(steps) | ambiguous fired |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {name} | {s.row()} |" for name, s in scores.items()]
    return "\n".join(lines) + "\n\n" + firings(results, DETECTORS)


def firings(results: Sequence[dict[str, Any]], detectors: Sequence[Detector]) -> str:
    """Per run, the step each detector first fires at (``-``: never), beside the reference."""
    head = "| run | label | reference | " + " | ".join(d.name for d in detectors) + " |"
    lines = [head, "|" + "---|" * (3 + len(detectors))]
    for r in results:
        if r["label"] == "failed":
            continue
        steps = [d.fires(r["records"]) for d in detectors]
        ref = r.get("reference", {}).get("step")
        cells = " | ".join("-" if s is None else str(s) for s in steps)
        lines.append(
            f"| {r['config']['name']} | {r['label']} | {'-' if ref is None else ref} | {cells} |"
        )
    return "\n".join(lines) + "\n"


def plot(results: Sequence[dict[str, Any]], path: Path) -> None:
    """H's effective rank over its running maximum along each run, coloured by label."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"collapsed": "tab:red", "healthy": "tab:green", "ambiguous": "tab:grey"}
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        read = [(x["step"], _num(x["metrics"], "h/rankme_l2")) for x in r["records"]]
        pts = [(s, v) for s, v in read if v is not None and v > 0]
        if not pts or r["label"] not in colours:
            continue
        top, ys = 0.0, []
        for _, v in pts:
            top = max(top, v)
            ys.append(v / top)
        ax.plot([s for s, _ in pts], ys, color=colours[r["label"]], alpha=0.7)
    ax.set_xlabel("step")
    ax.set_ylabel("RankMe(H) / its running maximum")
    ax.set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
