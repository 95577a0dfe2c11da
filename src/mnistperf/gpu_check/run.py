"""On the GPU: the parts in order within the budget, each cut at its time limit; parts.json and parts.md."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from mnistperf import gpu_preflight
from mnistperf.atomic import atomic_write_text
from mnistperf.diagnosis.record.run import write_summary
from mnistperf.gpu_check.plan import PARTS, part_commands
from mnistperf.machine import usable_cpus
from mnistperf.tables import markdown_table

LOG_FILE = "gpu-check.log"  # every command and what it printed
BULKY = (".pt.trace.json", ".ckpt")  # kept on the device: the archive carries the figures, not the artefacts
GRACE_S = 20  # after the interrupt at a part's time limit, before it is killed
OVERRUN = 1.5  # a part is cut at this many times its planned minutes


def run_part(command: list[str], deadline: float, log) -> str:
    """Run one command until it ends or the deadline: 'done', 'failed (exit N)' or 'cut at its time limit'."""
    log.write(f"$ {shlex.join(command)}\n")
    log.flush()
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=interruptible
    ) as proc:
        copier = threading.Thread(target=_copy_lines, args=(proc, log), daemon=True)
        copier.start()
        cut = False
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            cut = True
            proc.send_signal(signal.SIGINT)  # a bench writes the rows it finished, then stops
            try:
                proc.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        copier.join(timeout=5)
    if cut:
        return "cut at its time limit"
    return "done" if proc.returncode == 0 else f"failed (exit {proc.returncode})"


def interruptible() -> None:
    """In a part's process before it starts: SIGINT back to its default, so that Python turns it into KeyboardInterrupt.

    A check started in the background (``cmd &``, nohup, a remote runner) ignores SIGINT, and a child inherits that:
    it would run on past its time limit until killed, keeping nothing.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _copy_lines(proc: subprocess.Popen, log) -> None:
    """Copy what the process prints to stdout and the log, line by line."""
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        log.write(line)
        log.flush()


def check(opts: argparse.Namespace) -> int:
    """Run the parts within the budget; write parts.json and parts.md; the exit status."""
    started = time.monotonic()
    deadline = started + opts.minutes * 60
    asked = [p for p in opts.parts.split(",") if p]
    if opts.source_root:  # the tests on the official files read them from there too
        os.environ["MNISTPERF_SHARED_DATASETS"] = os.path.abspath(opts.source_root)
    runnable, dropped, lines = gpu_preflight.plan(asked, opts.source_root)
    for line in lines:
        print(line, file=sys.stderr)
    out = opts.out or default_out()
    out.mkdir(parents=True, exist_ok=True)
    (out / "environment.txt").write_text(environment())
    print((out / "environment.txt").read_text(), end="", flush=True)
    records: list[dict[str, Any]] = []
    # The log is written outside the checkout while a part runs (the test suite fails a run that changes the
    # checkout) and copied into the results after each part.
    log_path = Path(tempfile.mkdtemp(prefix="gpu-check-")) / LOG_FILE
    with open(log_path, "a") as log:
        if set(runnable) & set(gpu_preflight.DATA_PARTS):
            prepare = [sys.executable, "-m", "mnistperf", "prepare", "--dataset", gpu_preflight.DATASET]
            if opts.source_root:
                prepare += ["--source-root", opts.source_root]
            run_part(prepare, deadline, log)
        for part in PARTS:
            if part.name not in asked:
                continue
            left = (deadline - time.monotonic()) / 60
            record: dict[str, Any] = {"part": part.name, "planned_min": part.minutes, "what": part.what}
            if part.name not in runnable:
                record["status"] = "skipped: the preflight line above says what is missing"
            elif part.minutes > left:
                record["status"] = f"not started: {part.minutes:g} min planned, {left:.1f} left"
            else:
                print(f"== {part.name}: {part.what} ({part.minutes:g} min planned, {left:.1f} left) ==", flush=True)
                began = time.monotonic()
                # A part that overruns its plan by half is cut: one slow part does not take the later ones' time.
                until = min(deadline, began + OVERRUN * part.minutes * 60)
                statuses = [run_part(cmd, until, log) for cmd in part_commands(part, sys.executable, out, dropped)]
                record["status"] = next((s for s in statuses if s != "done"), "done")
                record["took_min"] = round((time.monotonic() - began) / 60, 2)
                print(f"   {part.name}: {record['status']} in {record['took_min']} min", flush=True)
            records.append(record)
            write_records(out, records, opts)
            shutil.copyfile(log_path, out / LOG_FILE)
    left_over = [r["part"] for r in records if r["status"] != "done"]
    print(f"gpu-check: {len(records) - len(left_over)} of {len(records)} parts done in "
          f"{(time.monotonic() - started) / 60:.1f} min; results in {out}")  # fmt: skip
    if left_over:
        print(f"gpu-check: the rest, in a later call: scripts/gpu-check --parts {','.join(left_over)} --minutes N")
    if opts.copy_to:
        copy_back(out, Path(opts.copy_to))
    return 1 if left_over or lines else 0


def write_records(out: Path, records: list[dict], opts: argparse.Namespace) -> None:
    """parts.json and parts.md: each part's status, planned and actual minutes."""
    write_summary({"budget_min": opts.minutes, "parts": records}, out / "parts.json")
    rows = [[r["part"], f"{r['planned_min']:g}", r.get("took_min", ""), r["status"]] for r in records]
    table = markdown_table(["part", "planned min", "took min", "status"], rows, right={1, 2})
    atomic_write_text(out / "parts.md", table + "\n")


def default_out() -> Path:
    """docs/results/cuda-<gpu>, the GPU's name in lower case with dashes."""
    import torch

    name = torch.cuda.get_device_name(0).lower().replace("nvidia", "")
    slug = "-".join("".join(c if c.isalnum() else " " for c in name).split())
    return Path("docs/results") / f"cuda-{slug}"


def environment() -> str:
    """The device, driver, versions and host, as environment.txt holds them."""
    import platform

    import lightning
    import pyarrow
    import torch

    query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,power.limit", "--format=csv,noheader"]
    smi = subprocess.run(query, capture_output=True, text=True).stdout.strip() if shutil.which(query[0]) else "absent"
    return (
        f"device: {torch.cuda.get_device_name(0)}\nnvidia-smi: {smi}\n"
        f"CUDA runtime {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}\n"
        f"versions: python {platform.python_version()}, torch {torch.__version__}, lightning {lightning.__version__}, "
        f"pyarrow {pyarrow.__version__}\n"
        f"host: {platform.machine()}, {usable_cpus()} usable CPU cores\n"
        f"date: {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}\n"
    )


def copy_back(out: Path, target: Path) -> None:
    """The small files of the results into one archive under ``target`` (the device call returns few files)."""
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target / "results.tar.gz", "w:gz") as archive:
        archive.add(out, arcname=out.name, filter=lambda info: None if info.name.endswith(BULKY) else info)
    for name in ("parts.md", "environment.txt"):
        if (out / name).is_file():
            shutil.copyfile(out / name, target / name)
