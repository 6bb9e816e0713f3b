"""The patch series: its commits computed from a solo-learn checkout, then ``git format-patch``.

Nothing of solo-learn is stored here. New files come from this package's templates (with the
license header read from the checkout; the projectors' tables of activations, norms and
parametrizations rendered from :mod:`solo_geometry.config.choices`, the package's one list);
edits of existing files are computed from the checkout (``edits.py``), so the series is
generated against the commit the user has.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import textwrap
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template

from solo_geometry.config.choices import (
    ACTIVATION_CHOICES,
    ACTIVATION_LAYERS,
    FLAT_ACTIVATIONS,
    NORM_CHOICES,
    NORM_LAYERS,
    PARAMETRIZATION_CHOICES,
)
from solo_geometry.upstream.edits import MethodEdit, SeriesError, find_methods

__all__ = [
    "Commit",
    "RECIPE",
    "build_commits",
    "check_checkout",
    "git",
    "projector_fields",
    "rendered",
    "write_series",
]

RECIPE = "simclr_smooth.yaml"
BASE_RECIPE = "scripts/pretrain/cifar/simclr.yaml"
DOCS_INDEX = "docs/source/index.rst"
AUTHOR = ("solo-geometry developers", "solo-geometry@users.noreply.github.com")
DATE = "2024-01-01T00:00:00+00:00"
# The names solo-learn's projectors spell differently: torch's own name for swish. Both are taken.
UPSTREAM_NAMES = {"swish": "silu"}
UPSTREAM_ALIASES = {up: ACTIVATION_LAYERS[name] for name, up in UPSTREAM_NAMES.items()}
# New files: (template, destination, prepend solo-learn's license header)
NEW_FILES = {
    "projectors.py.tmpl": ("solo/utils/projectors.py", True),
    "test_utils_projectors.py.tmpl": ("tests/utils/test_projectors.py", True),
    "test_methods_projectors.py.tmpl": ("tests/methods/test_projectors.py", True),
    "projectors.rst.tmpl": ("docs/source/solo/projectors.rst", False),
}


@dataclass(frozen=True)
class Commit:
    """One commit of the series.

    Attributes:
        subject: the first line of the message.
        body: the rest of the message.
        files: new text of each file it adds or changes, by path relative to the checkout.
    """

    subject: str
    body: str
    files: dict[str, str]


def git(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run git with the user's and the system's config ignored; returns stdout.

    Raises:
        SeriesError: when git fails (its stderr in the message).
    """
    full = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "LC_ALL": "C",
        **(env or {}),
    }
    proc = subprocess.run(["git", *args], cwd=cwd, env=full, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SeriesError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.strip()}")
    return proc.stdout


def check_checkout(root: Path) -> str:
    """Check that ``root`` is a clean solo-learn checkout; returns its HEAD commit.

    Raises:
        SeriesError: if it is not a directory, not the top of a git work tree, not solo-learn,
            or has uncommitted changes or untracked files.
    """
    if not root.is_dir():
        raise SeriesError(f"--solo-root {str(root)!r} is not a directory")
    setup = root / "setup.py"
    if not (root / "solo" / "methods" / "__init__.py").is_file() or not (
        setup.is_file() and 'name="solo-learn"' in setup.read_text(encoding="utf-8")
    ):
        raise SeriesError(
            f"--solo-root {str(root)!r} is not a solo-learn checkout "
            "(no setup.py naming solo-learn with a solo/methods package)"
        )
    try:
        top = git("rev-parse", "--show-toplevel", cwd=root).strip()
    except SeriesError as err:
        raise SeriesError(f"--solo-root {str(root)!r} is not a git checkout") from err
    if Path(top).resolve() != root.resolve():
        raise SeriesError(f"--solo-root {str(root)!r} is inside the git checkout {top!r}")
    dirty = git("status", "--porcelain", cwd=root).splitlines()
    if dirty:
        raise SeriesError(
            f"--solo-root {str(root)!r} has uncommitted changes ({len(dirty)} path(s), first: "
            f"{dirty[0].strip()!r}); commit or stash them first"
        )
    return git("rev-parse", "HEAD", cwd=root).strip()


def template(name: str) -> str:
    """The text of one of this package's templates."""
    return resources.files("solo_geometry.upstream").joinpath("templates", name).read_text("utf-8")


def projector_fields() -> dict[str, str]:
    """The fields of ``projectors.py.tmpl``: its activation, norm and parametrization tables."""
    activations = {**ACTIVATION_LAYERS, **UPSTREAM_ALIASES}
    return {
        "activations": "\n".join(f'    "{k}": nn.{v},' for k, v in activations.items()),
        "norms": "\n".join(
            f'    "{k}": {f"nn.{v}" if v else None},' for k, v in NORM_LAYERS.items()
        ),
        "parametrizations": "(" + ", ".join(f'"{p}"' for p in PARAMETRIZATION_CHOICES) + ")",
    }


def value_lists(quote: str = "`") -> dict[str, str]:
    """The templates' prose lists of choices, each value in ``quote`` (markdown, rst or none).

    ``activations``: ``relu`` (the default) first, an upstream spelling beside the package's
    (``silu`` (= ``swish``)); ``smooth`` and ``flat``: the activations with and without a
    second derivative; ``norms`` and ``parametrizations``. Unquoted (``quote=""``, a commit
    message's), an activation is named as solo-learn spells it alone.
    """

    def spelled(name: str) -> str:
        up = UPSTREAM_NAMES.get(name)
        if up and not quote:
            return up
        return f"{quote}{up}{quote} (= {quote}{name}{quote})" if up else f"{quote}{name}{quote}"

    def listed(names: list[str] | tuple[str, ...], sep: str = ", ") -> str:
        return sep.join(spelled(n) for n in names)

    order = ["relu", *(a for a in ACTIVATION_CHOICES if a != "relu")]
    return {
        "activation_values": listed(order),
        "smooth_values": listed([a for a in order if a not in FLAT_ACTIVATIONS]),
        "flat_values": listed(FLAT_ACTIVATIONS, " and "),
        "norm_values": listed(NORM_CHOICES),
        "parametrization_values": listed(PARAMETRIZATION_CHOICES),
    }


def _plain(field: str) -> str:
    """A prose list of :func:`value_lists` unquoted, slash-separated, for a commit message."""
    return value_lists("")[field].replace(", ", "/")


def rendered(name: str, **subs: str) -> str:
    """One of the templates with its fields filled (tables and choice lists included)."""
    fields = projector_fields() if name == "projectors.py.tmpl" else {}
    quote = "``" if name.endswith((".rst.tmpl", ".py.tmpl")) else "`"
    return Template(template(name)).substitute({**value_lists(quote), **fields, **subs})


def _license_header(root: Path) -> str:
    """The leading comment block of solo-learn's ``solo/utils/misc.py`` (its MIT notice)."""
    lines = []
    for line in (root / "solo" / "utils" / "misc.py").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            break
        lines.append(line)
    header = "\n".join(lines).strip()
    if "Permission is hereby granted" not in header:
        raise SeriesError("solo/utils/misc.py does not start with solo-learn's license header")
    return header + "\n\n"


def _new_file(root: Path, name: str, **subs: str) -> tuple[str, str]:
    dest, header = NEW_FILES[name]
    if (root / dest).exists():
        raise SeriesError(f"{dest} already exists in the checkout: the series is applied")
    text = rendered(name, **subs)
    return dest, (_license_header(root) + text) if header else text


def _docs_index(root: Path) -> str:
    text = (root / DOCS_INDEX).read_text(encoding="utf-8")
    anchor = "   solo/utils\n"
    if text.count(anchor) != 1:
        raise SeriesError(f"{DOCS_INDEX} has no single '   solo/utils' toctree entry")
    return text.replace(anchor, anchor + "   solo/projectors\n")


def _recipe(root: Path) -> str:
    text = (root / BASE_RECIPE).read_text(encoding="utf-8")
    name = re.compile(r'^name: "simclr-cifar10"', re.M)
    out_dim = re.compile(r"^(  proj_output_dim: .*\n)", re.M)
    if len(name.findall(text)) != 1 or len(out_dim.findall(text)) != 1:
        raise SeriesError(f"{BASE_RECIPE} has no single name and method_kwargs.proj_output_dim")
    text = name.sub('name: "simclr-smooth-cifar10"', text)
    extra = (
        '  proj_activation: "silu" # smooth head, see docs/source/solo/projectors.rst\n'
        '  proj_norm: "bn"\n'
    )
    return out_dim.sub(lambda m: m.group(1) + extra, text)


def build_commits(root: Path) -> tuple[list[Commit], list[MethodEdit]]:
    """The series' commits for the checkout ``root`` (nothing is written).

    Raises:
        SeriesError: when the series does not apply to ``root``.
    """
    edits = find_methods(root)
    names = ", ".join(e.method for e in edits)
    recipe_path = f"scripts/pretrain/cifar/{RECIPE}"
    if (root / recipe_path).exists():
        raise SeriesError(f"{recipe_path} already exists in the checkout: the series is applied")
    module = dict(
        [_new_file(root, "projectors.py.tmpl"), _new_file(root, "test_utils_projectors.py.tmpl")]
    )
    methods = {e.path: e.text for e in edits}
    methods.update([_new_file(root, "test_methods_projectors.py.tmpl")])
    docs = dict([_new_file(root, "projectors.rst.tmpl", methods=names, recipe=RECIPE)])
    docs[DOCS_INDEX] = _docs_index(root)
    commits = [
        Commit(
            "Add solo.utils.projectors: projector builder with smooth MLP and metric-linear heads",
            "build_projector builds the Linear-[norm]-activation MLP every plain projector is\n"
            f"(any depth, norm {_plain('norm_values')}, activation {_plain('activation_values')})\n"
            "or a linear head whose metric W^T W is parametrised (MetricLinearProjector).\n"
            "projector_kwargs reads the new optional method_kwargs keys proj_type, proj_depth,\n"
            "proj_norm, proj_activation and proj_parametrization with a method's defaults.",
            module,
        ),
        Commit(
            "Build the plain MLP projectors with build_projector",
            textwrap.fill(f"Methods: {names}.", 76) + "\n\n"
            "With no new key set each builds exactly its former projector: same modules, same\n"
            "state-dict keys, same initial values for the same seed (tests/methods/\n"
            "test_projectors.py checks it against the inline layout).",
            methods,
        ),
        Commit(
            "Docs: projector options (smooth MLP and metric-linear heads)",
            "A page under Utils listing the new method_kwargs keys and their defaults.",
            docs,
        ),
        Commit(
            "Add a CIFAR SimCLR recipe with a smooth projector head",
            f"{recipe_path}: SimCLR's recipe with proj_activation silu and proj_norm bn.",
            {recipe_path: _recipe(root)},
        ),
    ]
    return commits, edits


def write_series(root: Path, base: str, commits: list[Commit], work: Path) -> list[Path]:
    """Clone ``root`` into ``work/clone``, commit the series on ``base``, format the patches.

    Returns:
        The patch files, in order, under ``work/patches``.
    """
    clone = work / "clone"
    git("clone", "--quiet", "--no-hardlinks", str(root), str(clone), cwd=work)
    git("checkout", "--quiet", "--detach", base, cwd=clone)
    stamp = {
        "GIT_AUTHOR_NAME": AUTHOR[0],
        "GIT_AUTHOR_EMAIL": AUTHOR[1],
        "GIT_AUTHOR_DATE": DATE,
        "GIT_COMMITTER_NAME": AUTHOR[0],
        "GIT_COMMITTER_EMAIL": AUTHOR[1],
        "GIT_COMMITTER_DATE": DATE,
    }
    for commit in commits:
        for rel, text in commit.files.items():
            path = clone / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        git("add", "--", *commit.files, cwd=clone)
        message = f"{commit.subject}\n\n{commit.body}\n"
        git("commit", "--quiet", "--no-verify", "-m", message, cwd=clone, env=stamp)
    out = work / "patches"
    git(
        "format-patch",
        "--quiet",
        "--no-signature",
        "--full-index",
        f"--base={base}",
        "-o",
        str(out),
        f"{base}..HEAD",
        cwd=clone,
    )
    return sorted(out.glob("*.patch"))


def copy_out(files: list[Path], out: Path) -> list[Path]:
    """Copy the finished files into ``out`` (created), returning their new paths."""
    out.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copy2(f, out / f.name)) for f in files]
