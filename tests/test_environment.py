"""What ``pretrain`` meets in its environment: Slurm's variables, a runs root of other jobs' run
folders, HOME unset, a locale that is not UTF-8.

Each case is one line and exit status 2, or exit 0 with a named warning where
docs/failures.md says so; nothing is written outside the runs root. The malformed Slurm
variables are also rows of docs/failures.md's table (``tests/test_bad_input.py``).
"""

from __future__ import annotations

import json
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from solo_geometry.cli import main
from solo_geometry.folder.run_folder import RunFolder, slurm_job_id, slurm_number

REPO = Path(__file__).resolve().parents[1]
SLURM = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT")


@pytest.fixture(autouse=True)
def no_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SLURM:
        monkeypatch.delenv(name, raising=False)


class TestSlurmNumber:
    @pytest.mark.parametrize("value", ["²", "١", "١٢", "-1", "+1", "1.0", "0x1", "1_000", "9" * 31])
    def test_refused(self, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
        """``'²'.isdigit()`` holds and ``int('١')`` is 1: neither is Slurm's number."""
        monkeypatch.setenv("SLURM_RESTART_COUNT", value)
        with pytest.raises(ValueError, match="^environment variable SLURM_RESTART_COUNT="):
            slurm_number("SLURM_RESTART_COUNT")

    @pytest.mark.parametrize(
        ("value", "number"),
        [("0", 0), ("12", 12), (" 3\n", 3), ("9" * 30, int("9" * 30)), ("", None)],
    )
    def test_read(self, monkeypatch: pytest.MonkeyPatch, value: str, number: int | None) -> None:
        monkeypatch.setenv("SLURM_RESTART_COUNT", value)
        assert slurm_number("SLURM_RESTART_COUNT") == number

    def test_job_id(self, monkeypatch: pytest.MonkeyPatch) -> None:
        assert slurm_job_id() is None
        monkeypatch.setenv("SLURM_JOB_ID", "77")
        assert slurm_job_id() == "77"
        monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "70")
        monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
        assert slurm_job_id() == "70_3"

    def test_malformed_id_creates_nothing(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        monkeypatch.setenv("SLURM_JOB_ID", "7\n8")
        with pytest.raises(ValueError, match="SLURM_JOB_ID='7\\\\n8'"):
            RunFolder.create(tmp_path / "runs", "r")
        assert not (tmp_path / "runs").exists()


def _run_with_checkpoint(root: Path, name: str, marker: bytes | None) -> Path:
    run = root / name
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    if marker is not None:
        (run / RunFolder.SLURM_JOB).write_bytes(marker)
    return run


class TestRequeuedJobFolder:
    """``RunFolder.of_requeued_job``: only a real folder whose ``.slurm_job`` names the job."""

    @pytest.fixture
    def requeued(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("SLURM_JOB_ID", "77")
        monkeypatch.setenv("SLURM_RESTART_COUNT", "1")

    def test_own_folder_found(self, requeued: None, tmp_path: Path) -> None:
        run = _run_with_checkpoint(tmp_path, "mine", b"77\n")
        found = RunFolder.of_requeued_job(tmp_path)
        assert found is not None and found.path == run

    @pytest.mark.parametrize("marker", [b"\xff\xfe\x00\x01" * 8, b"\x00" * 4096, b"77\xff"])
    def test_binary_marker_is_not_the_job(
        self, requeued: None, tmp_path: Path, marker: bytes
    ) -> None:
        _run_with_checkpoint(tmp_path, "binary", marker)
        assert RunFolder.of_requeued_job(tmp_path) is None

    def test_linked_folder_is_not_the_job(self, requeued: None, tmp_path: Path) -> None:
        """A run folder that is a link to a folder elsewhere (with this job's marker)."""
        foreign = _run_with_checkpoint(tmp_path / "elsewhere", "foreign", b"77\n")
        (tmp_path / "runs").mkdir()
        (tmp_path / "runs" / "link").symlink_to(foreign)
        assert RunFolder.of_requeued_job(tmp_path / "runs") is None

    def test_linked_marker_is_not_the_job(self, requeued: None, tmp_path: Path) -> None:
        """A ``.slurm_job`` that is a link to another folder's marker."""
        foreign = _run_with_checkpoint(tmp_path / "elsewhere", "foreign", b"77\n")
        run = _run_with_checkpoint(tmp_path / "runs", "run", None)
        (run / RunFolder.SLURM_JOB).symlink_to(foreign / RunFolder.SLURM_JOB)
        assert RunFolder.of_requeued_job(tmp_path / "runs") is None

    def test_missing_root(self, requeued: None, tmp_path: Path) -> None:
        assert RunFolder.of_requeued_job(tmp_path / "nothing") is None


def _status(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


class TestHomeUnset:
    def test_tilde_without_home_is_one_line(
        self,
        digits: Path,
        monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """HOME unset and no password entry (a container's arbitrary uid): one line, exit 2."""
        sys.path.insert(0, str(REPO / "tests" / "hosts"))
        from lightly_support import write_recipe

        recipe = write_recipe(tmp_path / "recipes", "simclr", digits)

        def no_entry(uid: int) -> pwd.struct_passwd:
            raise KeyError(f"getpwuid(): uid not found: {uid}")

        monkeypatch.delenv("HOME", raising=False)
        monkeypatch.setattr(pwd, "getpwuid", no_entry)
        monkeypatch.chdir(tmp_path)
        argv = ["pretrain", "--config", str(recipe), "--host", "lightly", "data.train_path='~/d'"]
        status = _status(argv)
        err = capsys.readouterr().err
        assert status == 2 and "Traceback" not in err
        assert err.splitlines()[-1].endswith(
            "has no home directory in the password database; expected HOME set or paths without '~'"
        )
        assert sorted(p.name for p in tmp_path.iterdir()) == ["recipes"]


# One interpreter, several commands: ``solo_geometry.cli.main`` on each argv of the JSON list
# in argv[1], in turn; each command's stderr ends with a line SEP, and stdout is their statuses.
_COMMANDS = (
    "import json, sys\nfrom solo_geometry.cli import main\ncodes = []\n"
    "for argv in json.loads(sys.argv[1]):\n"
    "    codes.append(main(argv))\n    print(%r, file=sys.stderr, flush=True)\n"
    "print(json.dumps(codes))\n"
)
SEP = "@@ end of command @@"


def _python(
    commands: list[list[str]], env: dict[str, str], cwd: Path
) -> tuple[list[int], list[str]]:
    """Run ``commands`` in one fresh interpreter under ``env``: each one's status and stderr.

    One process per environment (the locale is read when the interpreter starts), not one per
    command: the package's imports are paid once.
    """
    base = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        # the paths as they are (not escaped): the interpreter decodes them under the locale
        [sys.executable, "-c", _COMMANDS % SEP, json.dumps(commands, ensure_ascii=False)],
        env={**base, **env},
        cwd=cwd,
        capture_output=True,
        timeout=600,
        check=False,
    )
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, err[-3000:]
    return json.loads(proc.stdout.decode().splitlines()[-1]), err.split(SEP + "\n")[:-1]


@pytest.mark.slow
class TestLocale:
    """Non-ASCII paths under ``LANG=C`` / ``LC_ALL=POSIX``, and under an ASCII encoding."""

    @pytest.fixture
    def world(self, digits: Path, tmp_path: Path) -> Path:
        sys.path.insert(0, str(REPO / "tests" / "hosts"))
        from lightly_support import write_recipe

        return write_recipe(tmp_path / "réglages", "simclr", digits)

    @pytest.mark.parametrize("env", [{"LANG": "C"}, {"LC_ALL": "POSIX"}])
    def test_c_locale_reads_utf8(self, world: Path, tmp_path: Path, env: dict) -> None:
        """Python reads the C and POSIX locales as UTF-8: the path is named as it is."""
        args = ["pretrain", "--config", str(world), "--host", "lightly", "++max_epochs=0"]
        missing = ["pretrain", "--config", str(tmp_path / "é.yaml")]
        codes, (err, err_missing) = _python([args, missing], env, tmp_path)
        assert codes == [2, 2] and "Traceback" not in err and "warning" not in err
        assert err.splitlines()[-1].endswith("recipe field max_epochs=0 must be an integer >= 1")
        assert f"recipe file '{tmp_path / 'é.yaml'}' not found" in err_missing

    def test_ascii_encoding_is_named(self, digits: Path, tmp_path: Path) -> None:
        """An ASCII file-system encoding: a named warning, and the data path it cannot open."""
        from lightly_support import write_recipe

        (tmp_path / "données").symlink_to(digits)
        recipe = write_recipe(tmp_path / "recipes", "simclr", tmp_path / "données")
        env = {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
        runs = tmp_path / "runs"
        args = ["pretrain", "--config", str(recipe), "--host", "lightly", "--runs-root", str(runs)]
        (code,), (err,) = _python([args], env, tmp_path)
        lines = err.splitlines()
        assert code == 2 and "Traceback" not in err, err
        assert any(
            "warning: the file-system encoding of this locale is 'ascii'" in x for x in lines
        )
        assert "cannot be written in this locale's file-system encoding 'ascii'" in lines[-1]
        assert not runs.exists()
