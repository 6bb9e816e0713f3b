"""``python SCRIPT ARGS`` in a fresh process that skips the imports: fork a warm interpreter.

A run of solo-learn's ``main_pretrain.py`` on a CPU spends about 7 s of its 20 s importing
torch, Lightning, timm and solo-learn. :class:`WarmPython` is one interpreter that imports the
libraries the script imports at its top (and nothing of this package), then forks a child per
run. The child is a new process as ``python SCRIPT ARGS`` makes it: it takes the run's working
folder, environment, ``sys.argv`` and ``sys.path[0]`` (the script's folder), runs the unmodified
script as ``__main__`` (``runpy.run_path``; ``-m MODULE``: ``runpy.run_module``, the working
folder first on the path, as ``python -m`` does), runs the exit handlers and exits with the
script's status; its stdout and stderr come back as a :class:`subprocess.CompletedProcess`.
Every test of ``python SCRIPT`` still runs the script's own code and imports this package
itself, the plugin's discovery by Hydra included.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["WarmPython", "shared"]

# The parent imports these, then answers each JSON request (a line) with the child's process id
# and, when it ended, its exit status.
_SERVER = r"""
import atexit, importlib, json, os, runpy, sys, traceback

for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps("ready"), flush=True)

def child(req):
    os.chdir(req["cwd"])
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, req["stdout"], os.O_WRONLY),
                            (2, req["stderr"], os.O_WRONLY)):
        os.dup2(os.open(path, flags | (os.O_CREAT | os.O_TRUNC if fd else 0), 0o644), fd)
    os.environ.clear()
    os.environ.update(req["env"])
    argv = list(req["argv"])
    try:
        if argv[0] == "-m":  # python -m MODULE: the working folder first on the path
            sys.argv, sys.path[0] = argv[1:], os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv, sys.path[0] = argv, os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
        return 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1

for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            status = child(req)
        except BaseException:
            traceback.print_exc()
        finally:
            try:
                atexit._run_exitfuncs()
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(status)
    print(json.dumps(pid), flush=True)
    _, wait = os.waitpid(pid, 0)
    print(json.dumps(os.waitstatus_to_exitcode(wait)), flush=True)
"""


class WarmPython:
    """One warm interpreter; :meth:`run` forks a fresh process of it per script run.

    Args:
        preload: the modules to import once (those the scripts import at their top).
        env: the environment of the interpreter, and of every run (a run under another
            environment would see modules imported under this one); pytest's name of the
            current test may differ.
    """

    def __init__(self, preload: Sequence[str], env: dict[str, str]) -> None:
        self.env = dict(env)
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, *preload],
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._answer(600) == "ready", "the warm interpreter did not start"

    def _answer(self, timeout: float) -> object:
        assert self._proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self._proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                raise subprocess.TimeoutExpired(self._proc.args, timeout)
        line = self._proc.stdout.readline()
        assert line, f"the warm interpreter ended with status {self._proc.wait()}"
        return json.loads(line)

    def takes(self, env: dict[str, str], read_at_run: Sequence[str] = ()) -> bool:
        """Whether a run under ``env`` can be forked: the environment the interpreter started
        under, but for pytest's name of the test and ``read_at_run``, variables that the script
        reads when it runs (never an import)."""
        differ = {k for k in {*env, *self.env} if env.get(k) != self.env.get(k)}
        return differ <= {"PYTEST_CURRENT_TEST", *read_at_run}

    def run(
        self,
        args: Sequence[str],
        cwd: Path,
        env: dict[str, str],
        timeout: float = 600,
        read_at_run: Sequence[str] = (),
    ) -> subprocess.CompletedProcess:
        """``python *args`` (a script and its arguments) in ``cwd``, output captured as text."""
        assert self.takes(env, read_at_run), "not the environment the interpreter imported under"
        with tempfile.TemporaryDirectory() as outputs:  # not in cwd: the run's folder
            out, err = Path(outputs, "stdout"), Path(outputs, "stderr")
            request = {"argv": [str(a) for a in args], "cwd": str(cwd), "env": env}
            request |= {"stdout": str(out), "stderr": str(err)}
            assert self._proc.stdin is not None
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            pid = self._answer(60)
            try:
                status = self._answer(timeout)
            except subprocess.TimeoutExpired:
                os.kill(pid, signal.SIGKILL)  # the run, as subprocess.run kills its child
                self._answer(60)
                raise
            assert isinstance(pid, int) and isinstance(status, int)
            stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
        return subprocess.CompletedProcess([sys.executable, *args], status, stdout, stderr)

    def close(self) -> None:
        """End the interpreter (its stdin closed: it leaves its loop)."""
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


_SHARED: dict[tuple[str, ...], WarmPython] = {}


def shared(preload: Sequence[str], env: dict[str, str]) -> WarmPython:
    """This test process's one warm interpreter of ``preload``: started under ``env`` on first
    use, and again when ``env`` has changed since (the one before ended); ended at exit (a
    pytest-xdist worker starts its own)."""
    key = tuple(preload)
    warm = _SHARED.get(key)
    if warm is None or not warm.takes(env):
        if warm is not None:
            warm.close()
        warm = _SHARED[key] = WarmPython(preload, env)
        atexit.register(warm.close)
    return warm
