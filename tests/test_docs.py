"""The documentation site builds in strict mode, and the code cites it rather than outside files."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from subprocess import CompletedProcess

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE = ("solo_geometry", "hydra_plugins", "scripts", "benchmarks", "tests")


def _build(root: Path, site: Path, env: dict[str, str] | None = None) -> CompletedProcess:
    """``mkdocs build --strict`` of the site in ``root`` into ``site``."""
    exe = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("mkdocs is not installed: `pip install -e '.[docs]'` (make setup does)")
    return subprocess.run(
        [exe, "build", "--strict", "--site-dir", str(site)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


class TestSite:
    def test_builds_in_strict_mode(self, tmp_path: Path) -> None:
        proc = _build(ROOT, tmp_path / "site")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert (tmp_path / "site" / "design" / "index.html").is_file()
        api = (tmp_path / "site" / "api" / "heads" / "index.html").read_text()
        assert "build_head" in api  # the API reference comes from the docstrings

    def test_strict_mode_fails_on_a_broken_link(self, tmp_path: Path) -> None:
        docs = tmp_path / "docs"
        shutil.copytree(ROOT / "docs", docs)
        shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
        with (docs / "options.md").open("a") as f:
            f.write("\nSee [the missing page](no-such-page.md).\n")
        env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
        proc = _build(tmp_path, tmp_path / "site", env)
        assert proc.returncode != 0
        assert "no-such-page.md" in proc.stdout + proc.stderr


class TestCitations:
    def test_code_cites_the_site_not_outside_files(self) -> None:
        found = []
        for top in CODE:
            for path in (ROOT / top).rglob("*"):
                if path.suffix in {".py", ".tmpl", ".yaml"} and path.is_file():
                    for n, line in enumerate(path.read_text().splitlines(), 1):
                        if "DESIGN.md" in line and path.name != "test_docs.py":
                            found.append(f"{path.relative_to(ROOT)}:{n}")
        assert not found, f"cite docs/design.md instead of DESIGN.md: {found}"

    def test_cited_design_sections_exist(self) -> None:
        design = (ROOT / "docs" / "design.md").read_text()
        sections = set(re.findall(r"^## (\d+)\. ", design, flags=re.M))
        cited = set()
        for top in CODE:
            for path in (ROOT / top).rglob("*.py"):
                cited |= set(re.findall(r"docs/design\.md,? section (\d+)", path.read_text()))
        assert cited, "no code cites docs/design.md"
        assert cited <= sections, f"cited sections missing from docs/design.md: {cited - sections}"


class TestReadme:
    def test_short_and_its_links_resolve(self) -> None:
        text = (ROOT / "README.md").read_text()
        assert len(text.splitlines()) <= 150
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
            if not target.startswith("http"):
                assert (ROOT / target).exists(), f"README links to a missing file {target}"
