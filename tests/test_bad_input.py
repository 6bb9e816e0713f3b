"""Bad input across every command: one line naming the value, exit status 2, nothing written.

One table, :data:`CASES`, drives the test and README's table "Failures and bad input"
(:func:`bad_input_table`; ``test_readme_table`` checks the block between its markers). Each
case runs the real command line, ``solo_geometry.cli.main``, in a folder (the "world") holding a
recipe, the digits data, run folders and checkpoints, good and damaged; the tree of the world
(names, sizes, modification times) must be the same after the command as before, and the
command's own error must be one line on stderr naming the value (argparse's usage errors, for a
value outside a fixed set of choices, print the usage line first, then theirs).
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "hosts"))
from test_lightly_support import write_recipe  # noqa: E402

from solo_geometry.cli import main  # noqa: E402
from solo_geometry.datasets import make_digits  # noqa: E402

README = Path(__file__).resolve().parents[1] / "README.md"
START, END = "<!-- bad-input-table:start -->", "<!-- bad-input-table:end -->"
LIGHTLY = ["--host", "lightly"]


@dataclass(frozen=True)
class Case:
    """One bad input: the command, what is wrong, its arguments and the message it gets.

    ``argv`` and ``message`` may name places of the world as ``{w}``; ``message`` is a
    substring of the error line.
    """

    command: str
    input: str
    argv: tuple[str, ...]
    message: str

    @property
    def id(self) -> str:
        return f"{self.command}: {self.input}"


def _pretrain(*extra: str, recipe: str = "{w}/recipes/simclr.yaml") -> tuple[str, ...]:
    return ("pretrain", "--config", recipe, *LIGHTLY, "--runs-root", "{w}/runs", *extra)


CASES: tuple[Case, ...] = (
    Case("pretrain", "recipe file missing", _pretrain(recipe="{w}/nope.yaml"),
         "recipe file '{w}/nope.yaml' not found"),
    Case("pretrain", "malformed recipe (bad YAML)", _pretrain(recipe="{w}/recipes/broken.yaml"),
         "cannot compose recipe '{w}/recipes/broken.yaml' with overrides []: while parsing"),
    Case("pretrain", "wrong type", _pretrain("optimizer.batch_size=many"),
         "recipe field optimizer.batch_size='many' must be of type int"),
    Case("pretrain", "unknown recipe key", _pretrain("+colour=red"),
         "recipe field(s) colour not supported by the lightly host; supported here:"),
    Case("pretrain", "unknown method", _pretrain("method=moco9"),
         "recipe field method='moco9' not supported by the lightly host; choose from"),
    Case("pretrain", "unknown geometry option", _pretrain("+geometry=on", "+geometry.every=3"),
         "geometry.every: Key 'every' not in 'GeometryConfig'"),
    Case("pretrain", "unknown geometry value",
         _pretrain("+geometry=on", "geometry.head.name=nope"),
         "geometry.head.name: unknown value 'nope'; choose from"),
    Case("pretrain", "missing data folder", _pretrain("data.train_path={w}/nodata"),
         "data.train_path='{w}/nodata': data folder not found"),
    Case("pretrain", "not an override", _pretrain("epochs"),
         "overrides must look like key=value, +group=option or ~key; got ['epochs']"),
    Case("pretrain", "unknown host", ("pretrain", "--config", "{w}/recipes/simclr.yaml",
                                      "--host", "moco"), "argument --host: invalid choice: 'moco'"),
    Case("pretrain", "neither --config nor --resume", ("pretrain", *LIGHTLY),
         "--config is required"),
    Case("pretrain", "--resume: no such folder", ("pretrain", "--resume", "{w}/norun"),
         "--resume '{w}/norun': no such run folder"),
    Case("pretrain", "--resume: run without checkpoint",
         ("pretrain", "--resume", "{w}/run-empty"),
         "--resume '{w}/run-empty': no checkpoint under"),
    Case("pretrain", "--resume: truncated checkpoint",
         ("pretrain", "--resume", "{w}/run-truncated"),
         "checkpoint '{w}/run-truncated/checkpoints/"),
    Case("pretrain", "--resume: another host's run",
         ("pretrain", "--resume", "{w}/run-truncated-ok", "--host", "solo"),
         "trained on host 'lightly', not 'solo'"),
    Case("probe", "missing data folder", ("probe", "{w}/good.ckpt", "--data", "{w}/nodata"),
         "--data '{w}/nodata' does not exist"),
    Case("probe", "truncated checkpoint",
         ("probe", "{w}/truncated.ckpt", "--data", "{w}/digits"),
         "cannot read checkpoint '{w}/truncated.ckpt'"),
    Case("probe", "corrupt checkpoint", ("probe", "{w}/garbage.ckpt", "--data", "{w}/digits"),
         "cannot read checkpoint '{w}/garbage.ckpt'"),
    Case("probe", "run folder without checkpoint",
         ("probe", "{w}/run-empty", "--data", "{w}/digits"),
         "run folder '{w}/run-empty' has no checkpoints"),
    Case("probe", "unknown target",
         ("probe", "{w}/good.ckpt", "--data", "{w}/digits", "--targets", "colour"),
         "argument --targets: invalid choice: 'colour'"),
    Case("report", "missing run folder", ("report", "{w}/norun"),
         "run folder '{w}/norun' does not exist"),
    Case("report", "geometry.jsonl of an unknown schema",
         ("report", "{w}/run-future-records"), "geometry.jsonl:1: schema version 99"),
    Case("reproduce", "unknown action", ("reproduce", "grokking"),
         "argument ACTION: invalid choice: 'grokking'"),
    Case("reproduce", "collapse: CIFAR not on disk",
         ("reproduce", "collapse", "--data", "cifar10", "--data-root", "{w}/nodata",
          "--out", "{w}/sweep"), "--data cifar10: torchvision's files are not in '{w}/nodata'"),
    Case("reproduce", "collapse: unknown cell option",
         ("reproduce", "collapse", "--quick", "--out", "{w}/sweep", "colour=red"),
         "unknown cell option(s) ['colour=red']; choose from"),
    Case("reproduce", "verdicts: the authors' pickle, untrusted",
         ("reproduce", "verdicts", "collapse", "{w}/collapse_results.npy"),
         "is a pickle (the authors' layout); loading it runs code from the file: pass "
         "--trust-pickle"),
    Case("reproduce", "invariance: CIFAR not on disk",
         ("reproduce", "invariance", "--dataset", "cifar10", "--data-root", "{w}/nodata",
          "--out", "{w}/inv"), "--data-root '{w}/nodata' holds no torchvision cifar10 files"),
    Case("zoo", "build: unknown entry", ("zoo", "build", "--only", "nope", "--out", "{w}/zb"),
         "unknown zoo entries ['nope']; choose from"),
    Case("zoo", "card: existing output folder",
         ("zoo", "card", "{w}/run-truncated-ok", "--out", "{w}/full"),
         "--out '{w}/full' exists and is not an empty folder"),
    Case("zoo", "card: run without checkpoint",
         ("zoo", "card", "{w}/run-empty", "--out", "{w}/card"),
         "run folder '{w}/run-empty' has no checkpoints"),
    Case("zoo", "verify: missing card folder", ("zoo", "verify", "{w}/nocard"),
         "{w}/nocard/geometry.json: cannot read a zoo card"),
    Case("zoo", "list: missing cards folder", ("zoo", "list", "{w}/nocards"),
         "zoo cards folder '{w}/nocards' does not exist"),
    Case("analyse", "missing checkpoint",
         ("analyse", "{w}/nope.pth", "--data", "{w}/digits", "--out", "{w}/an"),
         "checkpoint '{w}/nope.pth' does not exist"),
    Case("analyse", "truncated checkpoint",
         ("analyse", "{w}/truncated.ckpt", "--data", "{w}/digits", "--out", "{w}/an"),
         "cannot read checkpoint '{w}/truncated.ckpt'"),
    Case("analyse", "unknown key layout",
         ("analyse", "{w}/alien.pth", "--data", "{w}/digits", "--out", "{w}/an"),
         "unknown checkpoint layout (top-level keys ['encoder.weight']); known layouts:"),
    Case("analyse", "unknown --layout", ("analyse", "{w}/alien.pth", "--data", "{w}/digits",
                                         "--layout", "moco"),
         "argument --layout: invalid choice: 'moco'"),
    Case("analyse", "missing data folder",
         ("analyse", "{w}/good.ckpt", "--data", "{w}/nodata", "--out", "{w}/an"),
         "--data '{w}/nodata' does not exist"),
    Case("orbits", "missing file", ("orbits", "{w}/nope.npz"), "no such file: {w}/nope.npz"),
    Case("orbits", "corrupt file", ("orbits", "{w}/garbage.npz"),
         "{w}/garbage.npz: not a readable .npz of orbit arrays"),
    Case("data", "image size out of range", ("data", "digits", "--out", "{w}/d4", "--size", "4"),
         "size must be an int in [8, 512], got 4"),
    Case("data", "output is a file", ("data", "digits", "--out", "{w}/recipes/simclr.yaml"),
         "out_dir '{w}/recipes/simclr.yaml' exists and is not a directory"),
    Case("demo", "unknown host", ("demo", "--host", "moco", "--out", "{w}/demo"),
         "argument --host: invalid choice: 'moco'"),
    Case("upstream", "missing solo-learn checkout",
         ("upstream", "export", "--solo-root", "{w}/nosolo", "--out", "{w}/series"),
         "--solo-root '{w}/nosolo' is not a directory"),
)  # fmt: skip


def _truncate(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    data = src.read_bytes()
    dst.write_bytes(data[: len(data) // 2])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Recipes, data, run folders and checkpoints, good and damaged."""
    from solo_geometry.hosts.lightly import launch

    w = tmp_path_factory.mktemp("world")
    digits = make_digits(w / "digits", size=32)
    checkpoint = {"enabled": True, "dir": "trained_models", "frequency": 1}
    recipe = write_recipe(w / "recipes", "simclr", digits, checkpoint=checkpoint)
    (w / "recipes" / "broken.yaml").write_text("method: [simclr\nbackbone: {name: resnet18\n")
    run = launch(recipe, ["optimizer.batch_size=8", "++limit_train_batches=1"], runs_root=w / "r")
    good = w / "good.ckpt"
    shutil.copy(run / "checkpoints" / "last.ckpt", good)
    _truncate(good, w / "truncated.ckpt")
    (w / "garbage.ckpt").write_bytes(os.urandom(4096))
    (w / "garbage.npz").write_bytes(os.urandom(512))
    (w / "collapse_results.npy").write_bytes(os.urandom(64))  # never unpickled without trust
    torch.save({"encoder.weight": torch.zeros(2, 2)}, w / "alien.pth")
    (w / "run-empty").mkdir()
    (w / "run-empty" / "config.yaml").write_text(recipe.read_text())
    shutil.copytree(run, w / "run-truncated-ok")
    shutil.copytree(run, w / "run-truncated")
    for ckpt in (w / "run-truncated" / "checkpoints").glob("*.ckpt"):
        _truncate(ckpt, ckpt)
    (w / "run-future-records").mkdir()
    (w / "run-future-records" / "geometry.jsonl").write_text('{"schema": 99, "step": 0}\n')
    (w / "full").mkdir()
    (w / "full" / "README.md").write_text("someone's card\n")
    return w


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and modification time."""
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        out[str(path.relative_to(root))] = (st.st_size if path.is_file() else -1, st.st_mtime_ns)
    return out


def _run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's usage errors
        return int(exc.code or 0)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(
    case: Case, world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)  # a default output folder would appear here
    monkeypatch.delenv("SOLO_GEOMETRY_DEBUG", raising=False)
    before = _tree(world)
    status = _run([a.replace("{w}", str(world)) for a in case.argv])
    err = capsys.readouterr().err
    assert status == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, "no message"
    usage = lines[0].startswith("usage:")
    error = [line for line in lines if "error:" in line]
    assert len(error) == 1 and (usage or len(lines) == 1), err  # one line (after the usage)
    print(error[0].replace(str(world) + "/", ""))
    assert case.message.replace("{w}", str(world)) in error[0], err
    assert _tree(world) == before  # nothing created, changed or removed
    assert list(tmp_path.iterdir()) == []


def bad_input_table() -> str:
    """README's table of the cases above (markdown)."""
    rows = ["| command | input | message (contains) | exit |", "|---|---|---|---|"]
    for c in CASES:
        message = c.message.replace("{w}/", "").replace("|", "\\|")
        rows.append(f"| `{c.command}` | {c.input} | `{message}` | 2 |")
    return "\n".join(rows)


def test_readme_table() -> None:
    text = README.read_text()
    assert START in text and END in text, f"README.md lacks the {START} ... {END} block"
    block = text.split(START, 1)[1].split(END, 1)[0].strip()
    assert block == bad_input_table(), "regenerate: python -c 'import tests.test_bad_input'"
