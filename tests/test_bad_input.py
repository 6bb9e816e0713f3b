"""Bad input across every command: one line naming the value, exit status 2, nothing written.

One table, :data:`CASES`, drives the test and the table of docs/failures.md
(:func:`bad_input_table`; ``test_readme_table`` checks the block between its markers). Each
case runs the real command line, ``solo_geometry.cli.main``, in a folder (the "world") holding a
recipe, the digits data, run folders, checkpoints and array files, good, damaged and crafted; the
tree of the world (names, sizes, modification times, and the bytes of every file up to 1 MiB)
must be the same after the command as before, and the command's own error must be the last line
on stderr, the only one holding ``error:``, naming the value, with no traceback (argparse's usage
errors, for a value outside a fixed set of choices, print the usage line first). The
``pretrain`` rows marked as hosted run on both hosts, ``--host lightly`` and ``--host solo`` (the
default where solo-learn is importable; skipped, with the reason, where it is not).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import shutil
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

sys.path[:0] = [str(Path(__file__).parent / "hosts"), str(Path(__file__).parent)]
from lightly_support import write_recipe  # noqa: E402

from solo_geometry.cli import main  # noqa: E402
from solo_geometry.hosts.pretrain import solo_available  # noqa: E402
from solo_geometry.inputs.digits import make_digits  # noqa: E402

FAILURES = Path(__file__).resolve().parents[1] / "docs" / "failures.md"
CARDS = Path(__file__).resolve().parents[1] / "zoo" / "cards"
RECORD = '{"schema": 2, "step": 0, "epoch": 0, "status": "ok"}'  # one line of geometry.jsonl
START, END = "<!-- bad-input-table:start -->", "<!-- bad-input-table:end -->"
# Run folders with one file made a link to a file outside (world/outside, world/good.ckpt).
LINKED = (
    ("lock", ".lock"),
    ("geometry", "geometry.jsonl"),
    ("checkpoint", "checkpoints/last.ckpt"),
    ("report", "report"),
    ("probes", "probes.json"),
    ("features", "features.pt"),
)
HOSTS = ("lightly", "solo")
SOLO = solo_available()


@dataclass(frozen=True)
class Case:
    """One bad input: the command, what is wrong, its arguments and the message it gets.

    ``argv`` and ``message`` may name places of the world as ``{w}`` and the host as
    ``{host}``; ``message`` is a substring of the error line, or one per host. ``hosts``: the
    hosts a ``pretrain`` row runs on (empty: the command has no host). ``env``: environment
    variables set for the command.
    """

    command: str
    input: str
    argv: tuple[str, ...]
    message: str | dict[str, str]
    hosts: tuple[str, ...] = field(default=())
    env: tuple[tuple[str, str], ...] = field(default=())

    @property
    def id(self) -> str:
        return f"{self.command}: {self.input}"

    def expected(self, host: str | None) -> str:
        """The message expected on ``host``."""
        return self.message[host or ""] if isinstance(self.message, dict) else self.message


def _pretrain(*extra: str, recipe: str = "{w}/recipes/simclr.yaml") -> tuple[str, ...]:
    return ("pretrain", "--config", recipe, "--host", "{host}", "--runs-root", "{w}/runs", *extra)


def _hosted(input: str, extra: tuple[str, ...], message: str | dict[str, str], **kw: str) -> Case:
    """A ``pretrain`` row run on both hosts."""
    return Case("pretrain", input, _pretrain(*extra, **kw), message, hosts=HOSTS)


CASES: tuple[Case, ...] = (
    _hosted(
        "recipe file missing", (), "recipe file '{w}/nope.yaml' not found", recipe="{w}/nope.yaml"
    ),
    _hosted(
        "malformed recipe (bad YAML)",
        (),
        "cannot compose recipe '{w}/recipes/broken.yaml' with overrides []: while parsing",
        recipe="{w}/recipes/broken.yaml",
    ),
    _hosted(
        "wrong type",
        ("optimizer.batch_size=many",),
        "recipe field optimizer.batch_size='many' must be of type int",
    ),
    _hosted(
        "recipe node of the wrong type",
        ("optimizer=3",),
        "recipe field optimizer must be a mapping, got 3",
    ),
    Case(
        "pretrain",
        "unknown recipe key (solo-learn ignores them)",
        _pretrain("+colour=red"),
        "recipe field(s) colour not supported by the lightly host; supported here:",
        hosts=("lightly",),
    ),
    _hosted(
        "unknown method",
        ("method=moco9",),
        {
            "lightly": "recipe field method='moco9' not supported by the lightly host; choose from",
            "solo": "recipe field method='moco9' is not a solo-learn method; choose from",
        },
    ),
    _hosted(
        "unknown dataset",
        ("data.dataset=nope",),
        {
            "lightly": "recipe field data.dataset='nope' not supported by the lightly host",
            "solo": "recipe field data.dataset='nope' is not known to solo-learn; choose from",
        },
    ),
    _hosted(
        "unknown geometry option",
        ("+geometry=on", "+geometry.every=3"),
        "geometry.every: unknown option; choose from ['alert', 'budget',",
    ),
    _hosted(
        "unknown geometry value",
        ("+geometry=on", "geometry.head.name=nope"),
        "geometry.head.name: unknown value 'nope'; choose from",
    ),
    _hosted(
        "unknown probe protocol",
        ("+geometry=on", "geometry.probes.protocol=authors"),
        "geometry.probes.protocol: unknown value 'authors'; choose from ['both', 'package', "
        "'paper']",
    ),
    _hosted(
        "missing data folder",
        ("data.train_path={w}/nodata",),
        "data.train_path='{w}/nodata': data folder not found",
    ),
    _hosted(
        "empty class folder",
        ("data.train_path={w}/data-emptyclass/train",),
        "data.train_path='{w}/data-emptyclass/train': class folder 'b' holds no image",
    ),
    _hosted(
        "zero-byte PNG in the train split",
        ("data.train_path={w}/data-zeropng/train",),
        "data.train_path='{w}/data-zeropng/train': image "
        "'{w}/data-zeropng/train/1/zz-empty.png' does not decode",
    ),
    _hosted(
        "undecodable probe folder",
        ("+geometry=on", "data.val_path={w}/data-zeropng/val"),
        "data.val_path='{w}/data-zeropng/val': image '{w}/data-zeropng/val/1/zz-empty.png' "
        "does not decode",
    ),
    _hosted(
        "probe folder of images of two sizes",
        ("+geometry=on", "data.val_path={w}/data-mixed/val"),
        "data.train_path='{w}/digits/train' and data.val_path='{w}/data-mixed/val': images "
        "differ in size ('{w}/digits/train/0/",
    ),
    _hosted(
        "not an override",
        ("epochs",),
        "overrides must look like key=value, +group=option or ~key; got ['epochs']",
    ),
    _hosted(
        "--runs-root is a file",
        ("--runs-root", "{w}/recipes/simclr.yaml"),
        "'{w}/recipes/simclr.yaml': File exists; expected a folder",
    ),
    _hosted(
        "--runs-root under a file",
        ("--runs-root", "{w}/recipes/simclr.yaml/runs"),
        "'{w}/recipes/simclr.yaml/runs': Not a directory; expected folders all the way down",
    ),
    Case(
        "pretrain",
        "unknown host",
        ("pretrain", "--config", "{w}/recipes/simclr.yaml", "--host", "moco"),
        "argument --host: invalid choice: 'moco'",
    ),
    Case(
        "pretrain",
        "neither --config nor --resume",
        ("pretrain", "--host", "lightly"),
        "--config is required",
    ),
    Case(
        "pretrain",
        "--resume: no such folder",
        ("pretrain", "--resume", "{w}/norun"),
        "--resume '{w}/norun': no such run folder",
    ),
    Case(
        "pretrain",
        "--resume: run without checkpoint",
        ("pretrain", "--resume", "{w}/run-empty"),
        "--resume '{w}/run-empty': no checkpoint under",
    ),
    Case(
        "pretrain",
        "--resume: truncated checkpoint",
        ("pretrain", "--resume", "{w}/run-truncated"),
        "checkpoint '{w}/run-truncated/checkpoints/",
    ),
    Case(
        "pretrain",
        "--resume: another host's run",
        ("pretrain", "--resume", "{w}/run-truncated-ok", "--host", "solo"),
        "trained on host 'lightly', not 'solo'",
    ),
    Case(
        "pretrain",
        "--resume: another tool's checkpoint (solo-learn run folder)",
        ("pretrain", "--resume", "{w}/run-alien-solo"),
        "checkpoints/alien.ckpt' was not written by this run's trainer: it lacks ['state_dict'",
    ),
    Case(
        "pretrain",
        "--resume: another tool's checkpoint (lightly run folder)",
        ("pretrain", "--resume", "{w}/run-alien-lightly"),
        "checkpoints/alien.ckpt' was not written by this run's trainer: it lacks ['state_dict'",
    ),
    Case(
        "pretrain",
        "--resume: checkpoint holding a pickle payload (lightly run folder)",
        ("pretrain", "--resume", "{w}/run-payload-lightly"),
        "checkpoints/payload.ckpt' cannot be resumed: a weights-only load, as the trainer's, "
        "refuses it (Trying to load unsupported GLOBAL posix.system",
    ),
    Case(
        "pretrain",
        "--resume: checkpoint holding a pickle payload (solo-learn run folder)",
        ("pretrain", "--resume", "{w}/run-payload-solo"),
        "checkpoints/payload.ckpt' cannot be resumed: a weights-only load, as the trainer's, "
        "refuses it (Trying to load unsupported GLOBAL posix.system",
    ),
    Case(
        "probe",
        "missing data folder",
        ("probe", "{w}/good.ckpt", "--data", "{w}/nodata"),
        "--data '{w}/nodata' does not exist",
    ),
    Case(
        "probe",
        "truncated checkpoint",
        ("probe", "{w}/truncated.ckpt", "--data", "{w}/digits"),
        "cannot read checkpoint '{w}/truncated.ckpt'",
    ),
    Case(
        "probe",
        "corrupt checkpoint",
        ("probe", "{w}/garbage.ckpt", "--data", "{w}/digits"),
        "cannot read checkpoint '{w}/garbage.ckpt'",
    ),
    Case(
        "probe",
        "run folder without checkpoint",
        ("probe", "{w}/run-empty", "--data", "{w}/digits"),
        "run folder '{w}/run-empty' has no checkpoints",
    ),
    Case(
        "probe",
        "image that does not decode",
        ("probe", "{w}/run-truncated-ok", "--data", "{w}/data-zeropng", "--no-orbits"),
        "image '{w}/data-zeropng/train/1/zz-empty.png' does not decode",
    ),
    Case(
        "probe",
        "images of two sizes",
        ("probe", "{w}/good.ckpt", "--data", "{w}/data-mixed"),
        "--data '{w}/data-mixed': images differ in size ('{w}/data-mixed/train/0/",
    ),
    Case(
        "probe",
        "images not square (rotation target)",
        ("probe", "{w}/good.ckpt", "--data", "{w}/data-oblong"),
        "--data '{w}/data-oblong': image '{w}/data-oblong/train/0/",
    ),
    Case(
        "probe",
        "device string torch does not know",
        ("probe", "{w}/good.ckpt", "--data", "{w}/digits", "--device", "gpu0"),
        "argument --device: invalid device 'gpu0'; choose from ['cpu'",
    ),
    Case(
        "probe",
        "device this machine lacks",
        ("probe", "{w}/good.ckpt", "--data", "{w}/digits", "--device", "cuda:99"),
        "argument --device: invalid device 'cuda:99'; choose from ['cpu'",
    ),
    Case(
        "probe",
        "held-out class the train folder lacks",
        ("probe", "{w}/run-truncated-ok", "--data", "{w}/data-foreignclass", "--no-orbits"),
        "held-out folder '{w}/data-foreignclass/val' has classes ['7'] the train folder lacks; "
        "expected class folders among ['0', '1']",
    ),
    Case(
        "probe",
        "unknown target",
        ("probe", "{w}/good.ckpt", "--data", "{w}/digits", "--targets", "colour"),
        "argument --targets: invalid choice: 'colour'",
    ),
    Case(
        "report",
        "missing run folder",
        ("report", "{w}/norun"),
        "run folder '{w}/norun' does not exist",
    ),
    Case(
        "report",
        "geometry.jsonl of an unknown schema",
        ("report", "{w}/run-future-records"),
        "geometry.jsonl:1: schema version 99",
    ),
    Case(
        "report",
        "empty folder",
        ("report", "{w}/run-nothing"),
        "run folder '{w}/run-nothing' has nothing to report (no geometry.jsonl, no probes.json",
    ),
    Case(
        "report",
        "empty geometry.jsonl",
        ("report", "{w}/run-no-records"),
        "has nothing to report (geometry.jsonl is empty, no probes.json",
    ),
    Case(
        "reproduce",
        "unknown action",
        ("reproduce", "grokking"),
        "argument ACTION: invalid choice: 'grokking'",
    ),
    Case(
        "reproduce",
        "collapse: CIFAR not on disk",
        (
            "reproduce",
            "collapse",
            "--data",
            "cifar10",
            "--data-root",
            "{w}/nodata",
            "--out",
            "{w}/sweep",
        ),
        "--data-root '{w}/nodata' holds no torchvision cifar10 files",
    ),
    Case(
        "reproduce",
        "collapse: unknown cell option",
        ("reproduce", "collapse", "--quick", "--out", "{w}/sweep", "colour=red"),
        "unknown cell option(s) ['colour=red']; choose from",
    ),
    Case(
        "reproduce",
        "collapse: unknown head",
        ("reproduce", "collapse", "--quick", "--out", "{w}/sweep", "head=nope"),
        "cell option head='nope' unknown; choose from",
    ),
    Case(
        "reproduce",
        "collapse: unknown stem",
        ("reproduce", "collapse", "--quick", "--out", "{w}/sweep", "stem=vgg"),
        "cell option stem='vgg' unknown; choose from ['auto', 'imagenet', 'cifar', 'cifar_paper']",
    ),
    Case(
        "reproduce",
        "collapse: --out under a file",
        ("reproduce", "collapse", "--quick", "--out", "{w}/recipes/simclr.yaml/sweep"),
        "Not a directory; expected folders all the way down",
    ),
    Case(
        "reproduce",
        "verdicts: crafted .npy (payload in a dict)",
        ("reproduce", "verdicts", "collapse", "{w}/payload.npy"),
        "payload.npy: refused: the pickle in it needs posix.system",
    ),
    Case(
        "reproduce",
        "invariance: CIFAR not on disk",
        (
            "reproduce",
            "invariance",
            "--dataset",
            "cifar10",
            "--data-root",
            "{w}/nodata",
            "--out",
            "{w}/inv",
        ),
        "--data-root '{w}/nodata' holds no torchvision cifar10 files",
    ),
    Case(
        "zoo",
        "build: unknown entry",
        ("zoo", "build", "--only", "nope", "--out", "{w}/zb"),
        "unknown zoo entries ['nope']; choose from",
    ),
    Case(
        "zoo",
        "card: existing output folder",
        ("zoo", "card", "{w}/run-truncated-ok", "--out", "{w}/full"),
        "--out '{w}/full' exists and is not an empty folder",
    ),
    Case(
        "zoo",
        "card: run without checkpoint",
        ("zoo", "card", "{w}/run-empty", "--out", "{w}/card"),
        "run folder '{w}/run-empty' has no checkpoints",
    ),
    Case(
        "zoo",
        "card: images of two sizes",
        ("zoo", "card", "{w}/run-truncated-ok", "--out", "{w}/card", "--data", "{w}/data-mixed"),
        "--data '{w}/data-mixed': images differ in size ('{w}/data-mixed/train/0/",
    ),
    Case(
        "zoo",
        "card: geometry.jsonl with a NaN line",
        ("zoo", "card", "{w}/run-nan-records", "--out", "{w}/card"),
        "run-nan-records/geometry.jsonl:2: not a JSON record: non-finite number NaN",
    ),
    Case(
        "zoo",
        "card: geometry.jsonl with a line that is not JSON",
        ("zoo", "card", "{w}/run-garbage-records", "--out", "{w}/card"),
        "run-garbage-records/geometry.jsonl:1: not a JSON record: not JSON (Expecting value)",
    ),
    Case(
        "zoo",
        "verify: missing card folder",
        ("zoo", "verify", "{w}/nocard"),
        "{w}/nocard/geometry.json: cannot read a zoo card",
    ),
    Case(
        "zoo",
        "verify: card field of the wrong type",
        ("zoo", "verify", "{w}/card-epochs"),
        "{w}/card-epochs/geometry.json: field epochs must be an integer, got 'three'",
    ),
    Case(
        "zoo",
        "verify: recipe is a YAML list",
        ("zoo", "verify", "{w}/card-list-recipe"),
        "recipe '{w}/card-list-recipe/recipe.yaml' holds a list, not a mapping of recipe fields",
    ),
    Case(
        "zoo",
        "verify: recipe with a !!python/object/apply tag",
        ("zoo", "verify", "{w}/card-tag-recipe"),
        "recipe '{w}/card-tag-recipe/recipe.yaml' is not plain YAML (could not determine a "
        "constructor for the tag 'tag:yaml.org,2002:python/object/apply:os.system')",
    ),
    Case(
        "zoo",
        "verify: recipe node of the wrong type",
        ("zoo", "verify", "{w}/card-list-node"),
        "recipe field data must be a mapping, got [1, 2]",
    ),
    Case(
        "zoo",
        "list: missing cards folder",
        ("zoo", "list", "{w}/nocards"),
        "zoo cards folder '{w}/nocards' does not exist",
    ),
    Case(
        "zoo",
        "list: card without measurements",
        ("zoo", "list", "{w}/cards"),
        "{w}/cards/bare/geometry.json: field measurements lacks ['probes', 'stats', 'rho']",
    ),
    Case(
        "analyse",
        "images of two sizes",
        ("analyse", "{w}/good.ckpt", "--data", "{w}/data-mixed", "--out", "{w}/an"),
        "--data '{w}/data-mixed': images differ in size ('{w}/data-mixed/train/0/",
    ),
    Case(
        "analyse",
        "missing checkpoint",
        ("analyse", "{w}/nope.pth", "--data", "{w}/digits", "--out", "{w}/an"),
        "checkpoint '{w}/nope.pth' does not exist",
    ),
    Case(
        "analyse",
        "truncated checkpoint",
        ("analyse", "{w}/truncated.ckpt", "--data", "{w}/digits", "--out", "{w}/an"),
        "cannot read checkpoint '{w}/truncated.ckpt'",
    ),
    Case(
        "analyse",
        "unknown key layout",
        ("analyse", "{w}/alien.pth", "--data", "{w}/digits", "--out", "{w}/an"),
        "unknown checkpoint layout (top-level keys ['encoder.weight']); known layouts:",
    ),
    Case(
        "analyse",
        "unknown --layout",
        ("analyse", "{w}/alien.pth", "--data", "{w}/digits", "--layout", "moco"),
        "argument --layout: invalid choice: 'moco'",
    ),
    Case(
        "analyse",
        "missing data folder",
        ("analyse", "{w}/good.ckpt", "--data", "{w}/nodata", "--out", "{w}/an"),
        "--data '{w}/nodata' does not exist",
    ),
    Case("orbits", "missing file", ("orbits", "{w}/nope.npz"), "no such file: {w}/nope.npz"),
    Case(
        "orbits",
        "corrupt file",
        ("orbits", "{w}/garbage.npz"),
        "{w}/garbage.npz: not a readable .npz (File is not a zip file)",
    ),
    Case(
        "orbits",
        "crafted .npy: payload in a dict",
        ("orbits", "{w}/payload.npy"),
        "{w}/payload.npy: refused: the pickle in it needs posix.system",
    ),
    Case(
        "orbits",
        "crafted .npy: raw pickle renamed",
        ("orbits", "{w}/raw-pickle.npy"),
        "{w}/raw-pickle.npy: not a .npy array (no readable NumPy header",
    ),
    Case(
        "orbits",
        "all-zero H",
        ("orbits", "{w}/orbits-zero-h.npz"),
        "undefined: every orbits_h measure: 180 of 180 rows are all zero",
    ),
    Case(
        "orbits",
        "one orbit",
        ("orbits", "{w}/orbits-one.npz"),
        "undefined: D_inter and separation: they need 2 classes, orbit_labels has only [0]",
    ),
    Case(
        "orbits",
        "head maps each orbit to a point",
        ("orbits", "{w}/orbits-point-h.npz"),
        "undefined: compression: mean spread(H) is",
    ),
    Case(
        "data",
        "image size out of range",
        ("data", "digits", "--out", "{w}/d4", "--size", "4"),
        "size must be an int in [8, 512], got 4",
    ),
    Case(
        "data",
        "output is a file",
        ("data", "digits", "--out", "{w}/recipes/simclr.yaml"),
        "out_dir '{w}/recipes/simclr.yaml' exists and is not a directory",
    ),
    Case(
        "data",
        "output under a file",
        ("data", "digits", "--out", "{w}/recipes/simclr.yaml/d"),
        "'{w}/recipes/simclr.yaml': File exists; expected a folder or a free path",
    ),
    Case(
        "demo",
        "--out under a file",
        ("demo", "--host", "lightly", "--out", "{w}/recipes/simclr.yaml/demo"),
        "Not a directory; expected folders all the way down",
    ),
    Case(
        "demo",
        "unknown host",
        ("demo", "--host", "moco", "--out", "{w}/demo"),
        "argument --host: invalid choice: 'moco'",
    ),
    Case(
        "upstream",
        "missing solo-learn checkout",
        ("upstream", "export", "--solo-root", "{w}/nosolo", "--out", "{w}/series"),
        "--solo-root '{w}/nosolo' is not a directory",
    ),
    *(
        Case(
            "pretrain",
            f"--resume: {name} is a link to a file outside the run folder",
            ("pretrain", "--resume", f"{{w}}/run-link-{tag}"),
            f"run file '{{w}}/run-link-{tag}/{name}' is a symbolic link (to '{{w}}/",
        )
        for tag, name in LINKED[:4]
    ),
    *(
        Case(
            "report",
            f"{name} is a link to a file outside the run folder",
            ("report", f"{{w}}/run-link-{tag}"),
            f"run file '{{w}}/run-link-{tag}/{name}' is a symbolic link (to '{{w}}/",
        )
        for tag, name in LINKED[1:]
    ),
    Case(
        "probe",
        "run folder whose checkpoint is a link outside it",
        ("probe", "{w}/run-link-checkpoint", "--data", "{w}/digits"),
        "checkpoint '{w}/run-link-checkpoint/checkpoints/last.ckpt' is a symbolic link (to "
        "'{w}/good.ckpt')",
    ),
    Case(
        "report",
        "geometry.jsonl of random bytes",
        ("report", "{w}/run-random-records"),
        "run-random-records/geometry.jsonl: no usable record (line 1: not UTF-8 text (byte 1)",
    ),
    Case(
        "report",
        "records whose fields have the wrong type",
        ("report", "{w}/run-wrongtype-records"),
        "run-wrongtype-records/geometry.jsonl: no usable record (line 1: field step must be "
        "int, got 'ten' (str))",
    ),
    Case(
        "report",
        "0-byte probes.json",
        ("report", "{w}/run-probes-empty"),
        "run-probes-empty/probes.json: empty; expected a probe table (a JSON object)",
    ),
    Case(
        "report",
        "probes.json holding a list",
        ("report", "{w}/run-probes-list"),
        "run-probes-list/probes.json: expected a JSON object, got list",
    ),
    Case(
        "report",
        "probes.json with a field of the wrong type",
        ("report", "{w}/run-probes-wrongtype"),
        "run-probes-wrongtype/probes.json.rows: field accuracy must be float, got 'high' (str)",
    ),
    Case(
        "orbits",
        ".npz member declaring a shape far larger than its bytes",
        ("orbits", "{w}/orbits-huge.npz"),
        "{w}/orbits-huge.npz[orbits_z]: header declares shape (1000000000000000,) of float64 "
        "(8000000000000000 bytes) but only",
    ),
    Case(
        "reproduce",
        "verdicts invariance: .npz member declaring a shape far larger than its bytes",
        ("reproduce", "verdicts", "invariance", "{w}/depth/geometric_ablation_depth_2.npz"),
        "geometric_ablation_depth_2.npz[orbits_z]: header declares shape (1000000000000000,)",
    ),
    Case(
        "reproduce",
        "verdicts collapse: a pickle",
        ("reproduce", "verdicts", "collapse", "{w}/raw-pickle.pkl"),
        "'{w}/raw-pickle.pkl' is not text (byte 0); expected a collapse summary.json (rows), "
        "the authors' results as JSON",
    ),
    Case(
        "reproduce",
        "verdicts collapse: a plain array",
        ("reproduce", "verdicts", "collapse", "{w}/plain.npy"),
        "'{w}/plain.npy' holds a plain float64 array; expected a collapse summary.json",
    ),
    Case(
        "zoo",
        "list: binary card",
        ("zoo", "list", "{w}/cards-binary"),
        "{w}/cards-binary/x/geometry.json: cannot read a zoo card (not UTF-8 text at byte 0); "
        "expected the JSON file `zoo card` wrote",
    ),
    Case(
        "probe",
        "16-bit PNG",
        ("probe", "{w}/good.ckpt", "--data", "{w}/data-16bit"),
        "image '{w}/data-16bit/train/0/",
    ),
    Case(
        "probe",
        "PNG declaring 20000x20000 pixels (a decompression bomb; found by tests/fuzz)",
        ("probe", "{w}/run-truncated-ok", "--data", "{w}/data-bomb", "--no-orbits"),
        "image '{w}/data-bomb/train/0/zz-bomb.png' does not decode (Image size (400000000 pixels) "
        "exceeds limit",
    ),
    Case(
        "orbits",
        ".npy whose header does not parse (found by tests/fuzz)",
        ("orbits", "{w}/broken-header.npy"),
        "{w}/broken-header.npy: not a .npy array (no readable NumPy header: ('EOF in multi-line "
        "statement'",
    ),
    Case(
        "orbits",
        "crafted .npy: pickle frame declaring 2**64 - 1 bytes (found by tests/fuzz)",
        ("orbits", "{w}/huge-frame.npy"),
        "{w}/huge-frame.npy: corrupt pickled array (OverflowError: FRAME length exceeds",
    ),
    _hosted(
        "16-bit PNG in the train split",
        ("data.train_path={w}/data-16bit/train",),
        "has 'I;16' pixels (wider than 8 bits); expected 8-bit images",
    ),
    _hosted(
        "geometry bool option given 2 (OmegaConf would read true)",
        ("+geometry=on", "geometry.alert.stop=2"),
        "geometry.alert.stop: expected a boolean (true/false, on/off, yes/no, 1/0), got the "
        "integer 2",
    ),
    _hosted(
        "geometry bool option given a word",
        ("+geometry=on", "geometry.alert.stop=maybe"),
        "geometry.alert.stop: expected a boolean (true/false, on/off, yes/no, 1/0), got the "
        "string 'maybe'",
    ),
    _hosted(
        "geometry int option given 1.5",
        ("+geometry=on", "geometry.every_n_steps=1.5"),
        "geometry.every_n_steps: expected an integer, got the number 1.5",
    ),
    _hosted(
        "geometry list option given a word",
        ("+geometry=on", "geometry.measure.augment_families=hue"),
        "geometry.measure.augment_families: expected a list of strings, e.g. [a,b], got the "
        "string 'hue'",
    ),
    _hosted(
        "max_epochs=0", ("++max_epochs=0",), "recipe field max_epochs=0 must be an integer >= 1"
    ),
    _hosted(
        "negative max_epochs",
        ("++max_epochs=-3",),
        "recipe field max_epochs=-3 must be an integer >= 1",
    ),
    _hosted(
        "max_steps=0 (-1 means no limit)",
        ("++max_steps=0",),
        "recipe field max_steps=0 must be an integer >= 1 (or -1)",
    ),
    _hosted(
        "batch size 0",
        ("optimizer.batch_size=0",),
        "recipe field optimizer.batch_size=0 must be an integer >= 1",
    ),
    _hosted(
        "negative learning rate",
        ("optimizer.lr=-0.1",),
        "recipe field optimizer.lr=-0.1 must be a finite number >= 0",
    ),
    _hosted(
        "learning rate nan",
        ("optimizer.lr=nan",),
        "recipe field optimizer.lr=nan must be a finite number >= 0",
    ),
    _hosted(
        "negative data.num_workers",
        ("data.num_workers=-1",),
        "recipe field data.num_workers=-1 must be an integer >= 0",
    ),
    Case(
        "pretrain",
        "unknown option after the overrides (options may follow them)",
        (*_pretrain("+geometry=on", "--bogus"),),
        "unrecognized arguments: --bogus",
        hosts=("lightly",),
    ),
    Case(
        "pretrain",
        "SLURM_RESTART_COUNT='²' (passes str.isdigit, not int)",
        _pretrain(),
        "environment variable SLURM_RESTART_COUNT='²': expected a whole number of ASCII digits",
        hosts=("lightly",),
        env=(("SLURM_JOB_ID", "77"), ("SLURM_RESTART_COUNT", "²")),
    ),
    Case(
        "pretrain",
        "SLURM_RESTART_COUNT='١' (an Arabic-Indic one, which int reads)",
        _pretrain(),
        "environment variable SLURM_RESTART_COUNT='١': expected a whole number of ASCII digits",
        hosts=("lightly",),
        env=(("SLURM_JOB_ID", "77"), ("SLURM_RESTART_COUNT", "١")),
    ),
    Case(
        "pretrain",
        "SLURM_RESTART_COUNT negative",
        _pretrain(),
        "environment variable SLURM_RESTART_COUNT='-1': expected a whole number of ASCII digits",
        hosts=("lightly",),
        env=(("SLURM_JOB_ID", "77"), ("SLURM_RESTART_COUNT", "-1")),
    ),
    Case(
        "pretrain",
        "SLURM_JOB_ID not a number",
        _pretrain(),
        "environment variable SLURM_JOB_ID='job/7': expected a whole number of ASCII digits",
        hosts=("lightly",),
        env=(("SLURM_JOB_ID", "job/7"),),
    ),
    Case(
        "pretrain",
        "SLURM_ARRAY_TASK_ID not a number",
        _pretrain(),
        "environment variable SLURM_ARRAY_TASK_ID='1-3': expected a whole number of ASCII digits",
        hosts=("lightly",),
        env=(("SLURM_ARRAY_JOB_ID", "77"), ("SLURM_ARRAY_TASK_ID", "1-3")),
    ),
)


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
    _bad_data(w, digits)
    _alien_runs(w, recipe)
    _payload_runs(w, recipe)
    _bad_cards(w)
    for name, text in (
        ("run-nan-records", RECORD + '\n{"step": NaN}\n'),
        ("run-garbage-records", "garbage\n"),
    ):
        shutil.copytree(run, w / name)
        (w / name / "geometry.jsonl").write_text(text)
    _array_files(w)
    (w / "run-nothing").mkdir()
    (w / "run-no-records").mkdir()
    (w / "run-no-records" / "geometry.jsonl").write_text("")
    _handed_back(w, run, digits)
    return w


def _handed_back(w: Path, run: Path, digits: Path) -> None:
    """Run folders with links out, unusable records and probes; cards, arrays, 16-bit images."""
    (w / "outside").write_text("the user's own file\n")
    for tag, name in LINKED:
        folder = w / f"run-link-{tag}"
        shutil.copytree(run, folder)
        (folder / "geometry.jsonl").write_text(RECORD + "\n")
        (folder / name).unlink(missing_ok=True)
        os.symlink(w / ("good.ckpt" if tag == "checkpoint" else "outside"), folder / name)
    for name, text in (
        ("run-random-records", b"\x00\xff\xfe binary\n\x13\x37\n"),
        ("run-wrongtype-records", b'{"schema": 3, "step": "ten", "epoch": 0, "status": "ok"}\n'),
    ):
        (w / name).mkdir()
        (w / name / "geometry.jsonl").write_bytes(text)
    row = {"features": "z", "probe": "linear", "target": "class", "chance": 0.5}
    for name, text in (
        ("run-probes-empty", ""),
        ("run-probes-list", "[1, 2]"),
        ("run-probes-wrongtype", json.dumps({"schema": 1, "rows": [{**row, "accuracy": "high"}]})),
    ):
        (w / name).mkdir()
        (w / name / "geometry.jsonl").write_text(RECORD + "\n")
        (w / name / "probes.json").write_text(text)
    (w / "cards-binary" / "x").mkdir(parents=True)
    (w / "cards-binary" / "x" / "geometry.json").write_bytes(b"\x80\x04\x95binary")
    (w / "raw-pickle.pkl").write_bytes(pickle.dumps({"relu": [[1.0]]}))
    np.save(w / "plain.npy", np.zeros(3))
    shutil.copytree(digits, w / "data-16bit")
    first = sorted((w / "data-16bit" / "train" / "0").glob("*.png"))[0]
    ramp = np.linspace(0, 65535, 32 * 32).astype(np.uint16).reshape(32, 32)
    Image.fromarray(ramp).save(first)
    _huge_npz(w)
    shutil.copytree(digits, w / "data-bomb")
    from tests.shared import png_of_size

    (w / "data-bomb" / "train" / "0" / "zz-bomb.png").write_bytes(png_of_size(20000, 20000))
    header = "{'descr': '|O', 'fortran_order': False, 'shape': )), }".ljust(117) + "\n"
    (w / "broken-header.npy").write_bytes(
        b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + b"N."
    )


def _huge_npz(w: Path) -> None:
    """Orbit arrays whose ``orbits_z`` header declares 10**15 rows over 80 bytes; a .npy of
    them whose pickle's first frame declares 2**64 - 1 bytes."""
    from tests.shared import orbit_arrays

    dicts = io.BytesIO()
    np.save(dicts, np.array(orbit_arrays(), dtype=object), allow_pickle=True)
    at = dicts.getvalue().index(b"\x80\x04\x95") + 3  # protocol 4's first frame: its length
    (w / "huge-frame.npy").write_bytes(
        dicts.getvalue()[:at] + b"\xff" * 8 + dicts.getvalue()[at + 8 :]
    )

    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        head, {"descr": "<f8", "fortran_order": False, "shape": (10**15,)}
    )
    (w / "depth").mkdir()
    for path in (w / "orbits-huge.npz", w / "depth" / "geometric_ablation_depth_2.npz"):
        with zipfile.ZipFile(path, "w") as archive:
            for key, value in orbit_arrays().items():
                data = io.BytesIO()
                np.save(data, value)
                member = head.getvalue() + bytes(80) if key == "orbits_z" else data.getvalue()
                archive.writestr(f"{key}.npy", member)


def _bad_data(w: Path, digits: Path) -> None:
    """Image folders with a class without images, a zero-byte PNG, a held-out class train lacks."""
    (w / "data-emptyclass" / "train" / "b").mkdir(parents=True)
    shutil.copytree(digits / "train" / "0", w / "data-emptyclass" / "train" / "a")
    for split in ("train", "val"):
        for label in ("0", "1"):
            shutil.copytree(digits / split / label, w / "data-zeropng" / split / label)
        (w / "data-zeropng" / split / "1" / "zz-empty.png").write_bytes(b"")
    for split, label, source in (
        ("train", "0", "0"),
        ("train", "1", "1"),
        ("val", "0", "0"),
        ("val", "7", "1"),
    ):
        shutil.copytree(digits / split / source, w / "data-foreignclass" / split / label)
    _odd_sizes(w, digits)


def _resized(src: Path, dst: Path, size: tuple[int, int]) -> None:
    with Image.open(src) as im:
        im.resize(size).save(dst)


def _odd_sizes(w: Path, digits: Path) -> None:
    """A folder with one image of another size, and one of oblong (not square) images."""
    shutil.copytree(digits, w / "data-mixed")
    first = sorted((w / "data-mixed" / "val" / "0").glob("*.png"))[0]
    _resized(first, first, (28, 28))
    for split in ("train", "val"):
        for label in ("0", "1"):
            folder = w / "data-oblong" / split / label
            folder.mkdir(parents=True)
            for png in sorted((digits / split / label).glob("*.png"))[:4]:
                _resized(png, folder / png.name, (32, 24))


def _payload_runs(w: Path, recipe: Path) -> None:
    """Run folders whose checkpoint has every Lightning key and a pickle payload."""
    for host in ("solo", "lightly"):
        run = w / f"run-payload-{host}"
        (run / "checkpoints").mkdir(parents=True)
        ckpt = {
            "state_dict": {"backbone.weight": torch.zeros(2)},
            "epoch": 0,
            "global_step": 1,
            "pytorch-lightning_version": "2.6.0",
            "loops": {},
            "hyper_parameters": {"cfg": _Payload(w / "PWNED")},
        }
        torch.save(ckpt, run / "checkpoints" / "payload.ckpt")
        config = run / (".hydra/config.yaml" if host == "solo" else "config.yaml")
        config.parent.mkdir(exist_ok=True)
        config.write_text(recipe.read_text())


def _bad_cards(w: Path) -> None:
    """Zoo cards: without measurements, a field of the wrong type, recipes that are no mapping."""
    card = json.loads((CARDS / "simclr-digits-projector" / "geometry.json").read_text())
    recipes = {
        "card-epochs": None,
        "card-list-recipe": "- simclr\n- resnet18\n",
        "card-tag-recipe": f"!!python/object/apply:os.system ['touch {w / 'PWNED'}']\n",
        "card-list-node": "method: simclr\ndata: [1, 2]\n",
    }
    for name, text in recipes.items():
        (w / name).mkdir()
        fields = {**card, "epochs": "three"} if name == "card-epochs" else card
        (w / name / "geometry.json").write_text(json.dumps(fields))
        (w / name / "recipe.yaml").write_text(text or "method: simclr\n")
    (w / "cards" / "bare").mkdir(parents=True)
    (w / "cards" / "bare" / "geometry.json").write_text(json.dumps({**card, "measurements": {}}))


def _alien_runs(w: Path, recipe: Path) -> None:
    """Run folders of both hosts whose checkpoint another tool wrote (a bare state dict)."""
    for host in ("solo", "lightly"):
        run = w / f"run-alien-{host}"
        (run / "checkpoints").mkdir(parents=True)
        torch.save(
            {"model": {"encoder.weight": torch.zeros(2, 2)}}, run / "checkpoints" / "alien.ckpt"
        )
        config = run / (".hydra/config.yaml" if host == "solo" else "config.yaml")
        config.parent.mkdir(exist_ok=True)
        config.write_text(recipe.read_text())
    (w / "run-alien-solo" / ".hydra" / "overrides.yaml").write_text("- +geometry=on\n")


class _Payload:
    """Unpickling it runs a shell command that creates a file in the world."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def _array_files(w: Path) -> None:
    """Orbit arrays: crafted (a payload), degenerate (undefined measurements)."""
    from tests.shared import orbit_arrays

    payload = {**orbit_arrays(), "class_names": _Payload(w / "PWNED")}
    np.save(w / "payload.npy", np.array(payload, dtype=object), allow_pickle=True)
    (w / "raw-pickle.npy").write_bytes(pickle.dumps(payload))
    zero = orbit_arrays()
    zero["orbits_h"] = np.zeros_like(zero["orbits_h"])
    np.savez(w / "orbits-zero-h.npz", **zero)
    one = orbit_arrays()
    one["orbit_ids"], one["orbit_labels"] = np.zeros(180, dtype=int), np.zeros(180, dtype=int)
    np.savez(w / "orbits-one.npz", **one)
    point = orbit_arrays()
    point["orbits_h"] = point["orbits_h"][point["orbit_ids"] * 12]  # (180, p): one row per orbit
    np.savez(w / "orbits-point-h.npz", **point)


# The hashes of files already read, by path, inode, size, modification and change times: the
# world's thousands of files are hashed once, not twice per case. A file written again has a new
# change time (which no call can set back), unless written within the clock's granularity of the
# stat that was hashed: only hashes of files unchanged for RACY_NS are kept (git's "racily clean").
_DIGESTS: dict[tuple[str, int, int, int, int], str] = {}
RACY_NS = 2_000_000_000


def _digest(path: str, st: os.stat_result) -> str:
    """The SHA-256 of the bytes ``path`` reads; ``st``: its ``stat`` (a link's: its target's)."""
    key = (path, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key in _DIGESTS:
        return _DIGESTS[key]
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > RACY_NS:
        _DIGESTS[key] = digest
    return digest


def _tree(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every path under ``root``: size, modification time, and a hash of files up to 1 MiB.

    As ``root.rglob("*")`` lists them (links to folders not entered), through ``os.scandir``.
    """
    out = {}
    folders = [str(root)]
    while folders:
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                is_file = entry.is_file()  # a link to a file counts, as for Path.is_file
                digest = ""
                if is_file and st.st_size <= 1 << 20:
                    digest = _digest(entry.path, os.stat(entry.path) if entry.is_symlink() else st)
                out[os.path.relpath(entry.path, root)] = (
                    st.st_size if is_file else -1,
                    st.st_mtime_ns,
                    digest,
                )
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
    return out


def _run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's usage errors
        return int(exc.code or 0)


PARAMS = [
    pytest.param(
        case,
        host,
        id=f"{case.id} [{host}]" if host else case.id,
        marks=[
            pytest.mark.skipif(
                host == "solo" and not SOLO, reason="solo-learn is not importable here"
            )
        ],
    )
    for case in CASES
    for host in (case.hosts or (None,))
]


@pytest.mark.parametrize(("case", "host"), PARAMS)
def test_bad_input(
    case: Case,
    host: str | None,
    world: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)  # a default output folder would appear here
    monkeypatch.delenv("SOLO_GEOMETRY_DEBUG", raising=False)
    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in case.env:
        monkeypatch.setenv(name, value)
    before = _tree(world)
    place = {"{w}": str(world), "{host}": host or ""}
    fill = lambda text: text.replace("{w}", place["{w}"]).replace("{host}", place["{host}"])  # noqa: E731
    status = _run([fill(a) for a in case.argv])
    err = capsys.readouterr().err
    assert status == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, "no message"
    assert "Traceback" not in err, err
    error = [line for line in lines if "error:" in line]
    assert len(error) == 1 and lines[-1] == error[0], err  # one error line, the last one
    print(error[0].replace(str(world) + "/", ""))
    assert fill(case.expected(host)) in error[0], err
    assert _tree(world) == before  # nothing created, changed or removed
    assert list(tmp_path.iterdir()) == []
    assert not (world / "PWNED").exists()


def test_trainer_checkpoint_passes_the_resume_load_check(world: Path) -> None:
    """The weights-only check of ``--resume`` accepts what the trainer wrote (no false refusal)."""
    from solo_geometry.models.checkpoint import check_weights_only

    check_weights_only(world / "good.ckpt")
    with pytest.raises(ValueError, match="GLOBAL posix.system"):
        check_weights_only(world / "run-payload-lightly" / "checkpoints" / "payload.ckpt")
    assert not (world / "PWNED").exists()


def test_permission_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """An unwritable folder (untestable as root, where the tests run in CI) reads as one line."""
    from solo_geometry.cli import error_message

    err = PermissionError(13, "Permission denied", "/data/runs")
    assert error_message(err) == (
        "'/data/runs': Permission denied; expected a location this user can read and write"
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_unwritable_runs_root(world: Path, tmp_path: Path, capsys) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    argv = [
        "pretrain",
        "--config",
        str(world / "recipes" / "simclr.yaml"),
        "--host",
        "lightly",
        "--runs-root",
        str(locked / "runs"),
    ]
    assert _run(argv) == 2
    assert "Permission denied; expected a location" in capsys.readouterr().err.splitlines()[-1]
    assert list(locked.iterdir()) == []


def bad_input_table() -> str:
    """docs/failures.md's table of the cases above (markdown)."""
    rows = ["| command | input | hosts | message (contains) | exit |", "|---|---|---|---|---|"]
    for c in CASES:
        hosts = ", ".join(c.hosts) if c.hosts else "-"
        parts = c.message.items() if isinstance(c.message, dict) else [("", c.message)]
        text = "; ".join(
            (f"{host}: " if host else "") + "`" + m.replace("{w}/", "").replace("|", "\\|") + "`"
            for host, m in parts
        )
        rows.append(f"| `{c.command}` | {c.input} | {hosts} | {text} | 2 |")
    return "\n".join(rows)


def test_docs_table() -> None:
    text = FAILURES.read_text()
    assert START in text and END in text, f"docs/failures.md lacks the {START} ... {END} block"
    block = text.split(START, 1)[1].split(END, 1)[0].strip()
    assert block == bad_input_table(), "regenerate: python -c 'import tests.test_bad_input'"
