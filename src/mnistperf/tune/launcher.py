"""Every trial in a fresh process of its own, without paying for the import of torch and Lightning each time.

A helper process (``python -m mnistperf.tune.launcher MODULE ...``) imports what a trial needs once (torch,
Lightning, the timer, and the project's own modules where it can), then forks one child per trial: each child
starts from that interpreter as it was after the imports (nothing trained, nothing cached, no earlier trial's
workers), in a process group of its own, killed whole when the budget ends. Where forking is not safe (no
``fork``, or a Python thread already running in the helper after the imports; torch's own threads are there as in
any process that forks DataLoader workers) each trial is a new interpreter instead (``python -m
mnistperf.tune.trial SPEC``), which pays the imports every time.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from mnistperf.diagnosis.figures import INPUT_WAIT_SHARE, SAMPLES_PER_S
from mnistperf.tune.search import Run
from mnistperf.tune.trial import TrialSpec, result_path, write_spec

READY_TIMEOUT_S = 600.0  # the helper's imports; on a loaded machine Lightning alone takes several seconds
LOG_NAME = "trial.log"


@dataclass
class Ended:
    """How a trial process ended: its exit code (None if it was stopped at its time limit) and its seconds."""

    code: int | None
    seconds: float


def search_path(import_paths: list[str]) -> str:
    """PYTHONPATH for the trials: the folders given, then this process's own folders outside the installation."""
    installed = tuple(str(Path(p).resolve()) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix})
    own = [str(Path(p or os.getcwd()).resolve()) for p in sys.path]
    own = [p for p in own if Path(p).is_dir() and not p.startswith(installed)]
    given = [str(Path(p).resolve()) for p in import_paths]
    previous = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys([*given, *own, *previous]))


def stop_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Stop a trial's process group (the trial and its loader workers); nothing if it is gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class Launcher(contextlib.AbstractContextManager["Launcher"]):
    """Runs trials, each in a fresh process that finds the project's modules here and in ``import_paths``.

    The helper imports the ``preload`` modules once rather than every trial. Used as a context manager, which ends it.
    """

    def __init__(self, import_paths: list[str], preload: list[str] | None = None):
        self.env = {**os.environ, "PYTHONPATH": search_path(import_paths)}
        self.helper: subprocess.Popen | None = None
        self.forks: bool | None = None  # known once the helper says it is ready
        self._buffer = b""
        if hasattr(os, "fork") and hasattr(os, "killpg"):
            self.helper = subprocess.Popen(
                [sys.executable, "-m", "mnistperf.tune.launcher", *(preload or [])],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,  # a terminal's Ctrl-C reaches this process alone, which stops the trial
            )
        else:
            self.forks = False

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the helper: at once while it is still importing, else once it has read that no trial is coming."""
        if self.helper is None:
            return
        helper, self.helper = self.helper, None
        with helper:  # on leaving: its pipes closed, its end waited for
            if self.forks and helper.stdin is not None:
                helper.stdin.close()
                with contextlib.suppress(subprocess.TimeoutExpired, KeyboardInterrupt):  # (Ctrl-C here: the search's
                    helper.wait(timeout=10)  # findings stand, and are written)
            helper.kill()  # nothing where it has ended

    def _line(self, deadline: float | None) -> str | None:
        """The helper's next line, or None at the deadline; EOFError if it has ended."""
        assert self.helper is not None and self.helper.stdout is not None
        fd = self.helper.stdout.fileno()
        while b"\n" not in self._buffer:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], wait)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise EOFError
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def _ready(self) -> bool:
        """Whether trials are forked from the helper (waiting for its imports the first time)."""
        if self.forks is None:
            answer = None  # where the helper ends before it says
            with contextlib.suppress(EOFError):
                answer = self._line(time.monotonic() + READY_TIMEOUT_S)
            self.forks = answer == "ready fork"
            if not self.forks:
                self.close()
        return self.forks

    def run(self, spec_path: Path, timeout_s: float) -> Ended:
        """Run the trial of ``spec_path`` in a fresh process, stopped after ``timeout_s`` seconds."""
        if self._ready():
            try:
                return self._forked(spec_path, timeout_s)
            except (EOFError, BrokenPipeError):  # the helper is gone: this trial and the next start anew
                self.forks = False
                self.close()
        began = time.perf_counter()
        with spec_path.with_name(LOG_NAME).open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "mnistperf.tune.trial", str(spec_path)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        try:
            code: int | None = process.wait(timeout=max(timeout_s, 0.0))
        except subprocess.TimeoutExpired:
            code = None
        finally:  # the trial, at its limit or at Ctrl-C, and the loader workers it leaves behind
            stop_group(process.pid)
        process.wait()
        return Ended(code, time.perf_counter() - began)

    def measure(self, spec: TrialSpec, timeout_s: float) -> Run:
        """Run one trial fit and read its figures, or why it has none."""
        path = write_spec(spec)
        ended = self.run(path, timeout_s)
        if ended.code is None:
            return Run(seconds=ended.seconds, timed_out=True)
        result = result_path(path)
        if not result.is_file():
            last = last_line(path.with_name(LOG_NAME))
            return Run(seconds=ended.seconds, error=f"the trial process ended with code {ended.code}: {last}")
        found = json.loads(result.read_text())
        if "error" in found:
            return Run(seconds=ended.seconds, error=found["error"])
        rate, wait = found.pop(SAMPLES_PER_S), found.pop(INPUT_WAIT_SHARE)  # the rest: its loader, accelerator, device
        if rate is None:
            return Run(
                seconds=ended.seconds,
                error="no samples counted in its batches; define samples_in_batch(batch) -> int on the LightningModule",
            )
        return Run(rates=[rate], wait=wait, seconds=ended.seconds, **found)

    def _forked(self, spec_path: Path, timeout_s: float) -> Ended:
        assert self.helper is not None and self.helper.stdin is not None
        began = time.perf_counter()
        self.helper.stdin.write(f"{spec_path}\n".encode())
        self.helper.stdin.flush()
        started = self._line(None)
        if started is None or not started.startswith("started "):
            raise RuntimeError(f"the trial helper answered {started!r}")
        pid = int(started.split()[1])
        try:
            ended = self._line(time.monotonic() + max(timeout_s, 0.0))
        except KeyboardInterrupt:  # the trial and the helper have sessions of their own: Ctrl-C reaches only this one
            stop_group(pid)
            with contextlib.suppress(EOFError):  # (the helper's word that it ended, where the helper is still there)
                self._line(time.monotonic() + 10)
            raise
        finally:  # the trial, at its limit or where the helper is gone, and the loader workers it leaves behind
            stop_group(pid)
        if ended is None:  # the time limit: the helper's word that the stopped trial ended
            self._line(None)
        return Ended(None if ended is None else int(ended.split()[1]), time.perf_counter() - began)


def last_line(log: Path) -> str:
    """The last line a trial printed (its error, where it died before writing one)."""
    lines = log.read_text(errors="replace").strip().splitlines() if log.is_file() else []
    return lines[-1] if lines else "it printed nothing"


def serve(modules: list[str]) -> None:
    """The helper: import once, then fork one child per spec path read from stdin, saying its pid and exit code.

    ``modules``: the project's own, imported too where they can be (a trial that needs one that cannot says why).
    """
    import importlib

    import lightning.pytorch.cli  # noqa: F401  (a config's trials parse it; the rest a trial needs comes with trial)

    from mnistperf.tune import trial

    for name in modules:
        with contextlib.suppress(Exception):  # whatever their import raises, the trial raises again and names
            importlib.import_module(name)
    if threading.active_count() != 1:
        print("ready spawn", flush=True)
        return
    print("ready fork", flush=True)
    for line in sys.stdin:
        spec = line.strip()
        pid = os.fork()
        if pid == 0:  # the trial
            os.setsid()
            out = os.open(Path(spec).with_name(LOG_NAME), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            quiet = os.open(os.devnull, os.O_RDONLY)
            os.dup2(quiet, 0)
            os.dup2(out, 1)
            os.dup2(out, 2)
            os._exit(trial.main(spec))
        print(f"started {pid}", flush=True)
        _, status = os.waitpid(pid, 0)
        print(f"ended {os.waitstatus_to_exitcode(status)}", flush=True)


if __name__ == "__main__":
    serve(sys.argv[1:])
