"""Writes land whole or not at all, checked on a real failing write.

The failure is the operating system's own: a child process whose file-size limit
(``RLIMIT_FSIZE``, with ``SIGXFSZ`` ignored) stops a write part way with ``EFBIG``, as a full
disk stops it with ``ENOSPC``. No write function is mocked.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from solo_geometry.folder.atomic import WriteError, append_line, save_figure, write_text

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")

_CHILD = textwrap.dedent(
    """
    import json, resource, signal, sys
    from pathlib import Path
    from solo_geometry.folder.atomic import WriteError, append_line, save_figure, write_text
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    op, path, limit = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    try:
        if op == "append":
            append_line(path, "x" * 5000)
        elif op == "text":
            write_text(path, "y" * 5000)
        else:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots()
            ax.plot(range(1000))
            save_figure(fig, path, dpi=90)
    except WriteError as err:
        print(json.dumps({"error": str(err)}))
    else:
        print(json.dumps({"error": None}))
    """
)


def _child(op: str, path: Path, limit: int) -> str | None:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, op, str(path), str(limit)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])["error"]


class TestFailingWrites:
    def test_a_line_cut_part_way_is_taken_back(self, tmp_path: Path) -> None:
        log = tmp_path / "geometry.jsonl"
        log.write_text('{"step": 0}\n')
        before = log.read_bytes()
        err = _child("append", log, 2048)  # room for part of the 5,001 bytes
        assert err is not None and "geometry.jsonl" in err and "nothing was changed" in err
        assert log.read_bytes() == before  # no half line left

    def test_a_replaced_file_is_whole_or_as_before(self, tmp_path: Path) -> None:
        target = tmp_path / "probes.json"
        target.write_text("old")
        err = _child("text", target, 2048)
        assert err is not None and "probes.json" in err
        assert target.read_text() == "old"
        assert [p.name for p in tmp_path.iterdir()] == ["probes.json"]  # no temporary left

    def test_no_zero_byte_figure(self, tmp_path: Path) -> None:
        figure = tmp_path / "spectra.png"
        err = _child("figure", figure, 1024)
        assert err is not None and not figure.exists()
        assert list(tmp_path.iterdir()) == []

    def test_with_room_everything_lands(self, tmp_path: Path) -> None:
        assert _child("append", tmp_path / "a.jsonl", 1 << 20) is None
        assert (tmp_path / "a.jsonl").read_text() == "x" * 5000 + "\n"
        assert _child("figure", tmp_path / "f.png", 1 << 24) is None
        assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"


class TestInProcess:
    def test_append_and_replace(self, tmp_path: Path) -> None:
        path = tmp_path / "sub" / "r.jsonl"
        write_text(path, "")
        append_line(path, "a")
        append_line(path, "b\n")
        assert path.read_text() == "a\nb\n"

    def test_unwritable_folder_is_a_write_error(self, tmp_path: Path) -> None:
        blocker = tmp_path / "file"
        blocker.write_text("")
        with pytest.raises(WriteError, match="cannot write"):
            append_line(blocker / "x.jsonl", "a")
        with pytest.raises(OSError):
            write_text(blocker / "x.json", "a")

    def test_write_error_is_an_oserror(self) -> None:
        assert issubclass(WriteError, OSError)

    def test_save_figure_format_from_suffix(self, tmp_path: Path) -> None:
        matplotlib = pytest.importorskip("matplotlib")
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, _ = plt.subplots()
        save_figure(fig, tmp_path / "f.svg")
        plt.close(fig)
        assert (tmp_path / "f.svg").read_text().lstrip().startswith("<?xml")
