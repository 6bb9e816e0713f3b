"""``solo-geometry upstream export``: the patch series and its PR description, from a checkout.

The series is computed from the user's clean solo-learn checkout, committed in a temporary clone
with a fixed author and date (so the same checkout gives byte-identical patches), formatted with
``git format-patch`` and, with ``--verify``, checked there: default projectors built by the
patched and unpatched checkouts are compared, and solo-learn's own tests are run. Nothing is
written to ``--out`` unless every step before the copy succeeded.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from string import Template

from solo_geometry.upstream.edits import MethodEdit, SeriesError
from solo_geometry.upstream.series import (
    RECIPE,
    build_commits,
    check_checkout,
    copy_out,
    git,
    template,
    value_lists,
    write_series,
)
from solo_geometry.upstream.verify import (
    NEW_TESTS,
    CompatRow,
    PytestRun,
    compare_projectors,
    run_pytest,
    save_projectors,
)

__all__ = ["PR_FILE", "ExportResult", "export_series"]

PR_FILE = "PULL_REQUEST.md"


@dataclass(frozen=True)
class ExportResult:
    """What ``export_series`` wrote and checked.

    Attributes:
        patches: the patch files in ``out``, in order.
        description: the PR description in ``out``.
        methods: the methods whose projector the series rewrites.
        compat: per method, patched vs unpatched default projectors (empty without verify).
        tests: pytest runs, ``"patched"`` and, with a baseline, ``"unpatched"``.
    """

    patches: list[Path]
    description: Path
    methods: list[str]
    compat: list[CompatRow]
    tests: dict[str, PytestRun]

    @property
    def ok(self) -> bool:
        """Every compared projector identical and the patched test run green."""
        run = self.tests.get("patched")
        return all(r.same for r in self.compat) and (run is None or run.returncode == 0)


def _check_out_dir(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SeriesError(f"--out {str(out)!r} exists and is not an empty directory")


def _compat_text(rows: list[CompatRow]) -> str:
    if not rows:
        return "The export ran without `--verify`: no projector comparison was run."
    lines = [
        "Built by `solo-geometry upstream export --verify` from each method's CIFAR recipe "
        "(projector widths shrunk to 64/32), seed 0, once with the unpatched and once with "
        "the patched checkout:",
        "",
        "| method | projectors | tensors compared | identical (structure, keys, values) |",
        "|---|---|---|---|",
    ]
    for r in rows:
        verdict = "yes" if r.same else f"**no**: {r.note}"
        lines.append(f"| {r.method} | {', '.join(r.attrs)} | {r.n_tensors} | {verdict} |")
    return "\n".join(lines)


def _tests_text(tests: dict[str, PytestRun]) -> str:
    if not tests:
        return "The export ran without `--verify`: no tests were run."
    lines = ["`pytest` in the checkout (`--continue-on-collection-errors`, CPU):", ""]
    for label, run in tests.items():
        paths = " ".join(run.paths)
        lines.append(f"* {label}: `pytest {paths}`: {run.summary()} (exit {run.returncode})")
    return "\n".join(lines)


def _description(
    base: str,
    subject: str,
    n: int,
    edits: list[MethodEdit],
    compat: list[CompatRow],
    tests: dict[str, PytestRun],
) -> str:
    table = "\n".join(
        f"| {e.method} | {e.depth} | {e.norm} | {', '.join(e.attrs)} |" for e in edits
    )
    return Template(template("pull_request.md.tmpl")).substitute(
        value_lists(),
        base=base[:12],
        base_subject=subject,
        n_patches=str(n),
        methods_table=table,
        recipe=RECIPE,
        compat=_compat_text(compat),
        tests=_tests_text(tests),
    )


def _verify(
    root: Path,
    work: Path,
    methods: list[str],
    pytest_paths: tuple[str, ...],
    baseline: bool,
    python: str,
) -> tuple[list[CompatRow], dict[str, PytestRun]]:
    script = work / "compat_check.py"
    script.write_text(template("compat_check.py.tmpl"), encoding="utf-8")
    unpatched = work / "unpatched"
    git("clone", "--quiet", str(root), str(unpatched), cwd=work)
    print("upstream: comparing default projectors (unpatched vs patched)", file=sys.stderr)
    save_projectors(unpatched, methods, script, work / "old.pt", python)
    save_projectors(work / "clone", methods, script, work / "new.pt", python)
    compat = compare_projectors(work / "new.pt", work / "old.pt")
    tests = {}
    print(f"upstream: pytest {' '.join(pytest_paths)} (patched)", file=sys.stderr)
    tests["patched"] = run_pytest(work / "clone", pytest_paths, python)
    if baseline:
        print(f"upstream: pytest {' '.join(pytest_paths)} (unpatched)", file=sys.stderr)
        # the paths the series adds do not exist there
        present = tuple(p for p in pytest_paths if (unpatched / p.split("::")[0]).exists())
        tests["unpatched"] = run_pytest(unpatched, present, python)
    return compat, tests


def export_series(
    root: Path,
    out: Path,
    *,
    verify: bool = False,
    pytest_paths: tuple[str, ...] = NEW_TESTS,
    baseline: bool = False,
    python: str = sys.executable,
) -> ExportResult:
    """Write the patch series for the checkout ``root`` and its PR description into ``out``.

    Args:
        root: a clean solo-learn checkout (its HEAD is the series' base).
        out: destination folder; must not exist or be empty.
        verify: compare default projectors and run ``pytest_paths`` in the patched clone.
        pytest_paths: solo-learn test paths to run with ``verify`` (default: the new tests).
        baseline: with ``verify``, also run ``pytest_paths`` on the unpatched checkout.
        python: interpreter for the checks (needs solo-learn's dependencies and pytest).

    Returns:
        The files written and the checks' results.

    Raises:
        SeriesError: ``root`` is not a clean solo-learn checkout, the series does not apply to
            it, or ``out`` is not empty; nothing is written then.
    """
    root, out = Path(root), Path(out)
    _check_out_dir(out)
    base = check_checkout(root)
    commits, edits = build_commits(root)
    subject = git("log", "-1", "--format=%s", base, cwd=root).strip()
    with tempfile.TemporaryDirectory(prefix="solo-geometry-upstream-") as tmp:
        work = Path(tmp)
        patches = write_series(root, base, commits, work)
        compat: list[CompatRow] = []
        tests: dict[str, PytestRun] = {}
        if verify:
            methods = [e.method for e in edits]
            compat, tests = _verify(root, work, methods, pytest_paths, baseline, python)
        pr = work / "patches" / PR_FILE
        text = _description(base, subject, len(patches), edits, compat, tests)
        pr.write_text(text, encoding="utf-8")
        written = copy_out([*patches, pr], out)
    return ExportResult(written[:-1], written[-1], [e.method for e in edits], compat, tests)
