"""``scripts/gpu-check``: the GPU figures in order of value, each part started only if it fits the budget.

A GPU comes rarely and for minutes, so the check is one call planned on a CPU first: ``--pack`` puts what the
device lacks (wheels, FashionMNIST's official files) into ``.gpu-carry/``, ``--dry-run`` prints the device call,
what it carries and each part's planned minutes, and on the GPU ``--minutes N`` runs the parts in order, starts a
part only where its planned minutes fit what is left, interrupts a part that runs into the budget's end (a bench
keeps the rows it finished) and writes ``parts.json`` and ``parts.md`` with what finished, what was cut and the
command that runs the rest.

    scripts/gpu-check --pack [--source-root DIR]      # on the CPU, once: the carry folder
    scripts/gpu-check --dry-run --minutes 7            # on the CPU: the call, the carry, the plan
    scripts/gpu-check --minutes 7 [--parts a,b] [RESULTS_DIR]   # on the GPU
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnistperf import gpu_preflight
from mnistperf.atomic import atomic_write
from mnistperf.diagnosis.figures import DEVICE_BUSY_SHARE
from mnistperf.diagnosis.record.run import SUMMARY_FILE, write_summary
from mnistperf.machine import usable_cpus

CARRY = Path(".gpu-carry")  # git ignores it; the device call names it in carry
WHEELS = CARRY / "wheels"
SOURCES = CARRY / "datasets"
SITE = Path("/tmp/mnistperf-site")  # where the carried wheels are installed on the device
# What the device's image lacks (docs/gpu.md): LightningCLI's signatures, litdata and what litdata imports.
CARRIED_WHEELS = (
    "jsonargparse",
    "docstring-parser",
    "typeshed-client",
    "litdata",
    "obstore",
    "boto3",
    "botocore",
    "s3transfer",
    "jmespath",
)
DEVICE_PYTHON = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any")
LOG_FILE = "gpu-check.log"  # every command and what it printed
BULKY = (".pt.trace.json", ".ckpt")  # kept on the device: the archive carries the figures, not the artefacts
EXAMPLE_BATCH = 64
GRACE_S = 20  # after the interrupt at a part's time limit, before it is killed
OVERRUN = 1.5  # a part is cut at this many times its planned minutes
BENCH = ("{py}", "-m", "mnistperf", "bench", "--epochs", "4")


@dataclass(frozen=True)
class Part:
    """One part of the check: its planned minutes on one H100 or H200, what it measures and its commands.

    ``{py}`` and ``{out}`` in a command stand for the interpreter and the results folder.
    """

    name: str
    minutes: float
    what: str
    commands: tuple[tuple[str, ...], ...]


# Planned minutes: what each part took on an H200 (docs/results/cuda-h200/session*-parts.md), rounded up; the probe
# at some 20 s a variant, the fast part at 6 min for 2 repeats.
PARTS = (
    Part(
        "probe",
        3.0,
        "the graphed step's GPU time per replay in variants beside a hand-written graphed step, its kernels",
        (("{py}", "-m", "mnistperf.bench.graph_probe", "{out}/probe"),),
    ),
    Part(
        "fast",
        6.0,
        "v2_pinned, v3_resident and v4_graphed beside their bare-Lightning and plain-PyTorch rows, 4 epochs, 2 repeats",
        (
            (
                *BENCH,
                "--repeats",
                "2",
                "--stages",
                "v2_pinned,v3_resident,v4_graphed",
                "--reference-rows",
                "v2_pinned,v3_resident,v4_graphed",
                "--out",
                "{out}/fast",
            ),
        ),
    ),
    Part(
        "resident",
        3.5,
        "v3_resident beside its bare-Lightning and plain-PyTorch rows, 4 epochs, 4 repeats: the lab's cost settled",
        (
            (
                *BENCH,
                "--repeats",
                "4",
                "--stages",
                "v3_resident",
                "--reference-rows",
                "v3_resident",
                "--out",
                "{out}/resident",
            ),
        ),
    ),
    Part(
        "compiled",
        1.2,
        "v3_compiled beside v3_resident",
        ((*BENCH, "--stages", "v3_resident,v3_compiled", "--reference-rows", "none", "--out", "{out}/compiled"),),
    ),
    Part(
        "v1",
        2.5,
        "the v1 stages, bounded: v1_persistent, v1_pinned, v1_workers4 and v1_bs512 to 5 batches of 512, then "
        "v1_naive to 2,560 training samples, 3 epochs",
        (
            (
                "{py}",
                "-m",
                "mnistperf",
                "bench",
                "--stages",
                "v1_persistent,v1_pinned,v1_workers4,v1_bs512",
                "--epochs",
                "3",
                "--limit-train-batches",
                "5",
                "--set",
                "trainer.limit_val_batches=2",
                "--reference-rows",
                "none",
                "--out",
                "{out}/v1-bs512-bounded",
            ),
            (
                "{py}",
                "-m",
                "mnistperf",
                "bench",
                "--stages",
                "v1_naive",
                "--epochs",
                "3",
                "--limit-train-batches",
                "160",
                "--set",
                "trainer.limit_val_batches=40",
                "--reference-rows",
                "none",
                "--out",
                "{out}/v1-naive-bounded",
            ),
        ),
    ),
    Part(
        "streams",
        0.8,
        "streaming and streaming_litdata beside v2_pinned",
        (
            (
                *BENCH,
                "--stages",
                "v2_pinned,streaming,streaming_litdata",
                "--reference-rows",
                "none",
                "--out",
                "{out}/streams",
            ),
        ),
    ),
    Part(
        "tests",
        2.0,
        "the CUDA-only tests (pytest -m cuda)",
        (("{py}", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda"),),
    ),
    Part(
        "diagnosis",
        0.3,
        "examples/diagnose_your_run.py under torch.cuda.set_sync_debug_mode: the diagnosis's syncs, trace, verdict",
        (("{py}", "-m", "mnistperf.gpu_check", "--sync-probe", "{out}/diagnosis"),),
    ),
    Part(
        "timer",
        1.5,
        "v2_pinned's default fit and the newcomer's short fit, whole processes with and without the diagnosis",
        (("{py}", "-m", "mnistperf.gpu_check", "--timer-cost", "{out}/timer-cost.json"),),
    ),
    Part(
        "graph",
        0.8,
        "v4_graphed at 1, 4 and 16 optimizer steps per Lightning step (8, its own, is in fast)",
        (
            (
                *BENCH,
                "--stages",
                "v4_graphed",
                "--sweep",
                "data.batches_per_step=1,4,16",
                "--reference-rows",
                "none",
                "--out",
                "{out}/graph-groups",
            ),
        ),
    ),
    Part(
        "modes",
        1.0,
        "v3_compiled in reduce-overhead mode, keeping or dropping the last partial batch",
        (
            (
                *BENCH,
                "--stages",
                "v3_compiled",
                "--set",
                "model.compile_mode=reduce-overhead",
                "--sweep",
                "data.drop_last=false,true",
                "--reference-rows",
                "none",
                "--out",
                "{out}/compiled-modes",
            ),
        ),
    ),
)
PART_NAMES = gpu_preflight.PARTS  # the same names, in the same order (a test holds them together)
SETUP_MINUTES = 0.5  # the preflight, the environment and preparing FashionMNIST from its files


def part_commands(part: Part, py: str, out: Path, dropped: Sequence[str]) -> list[list[str]]:
    """The part's commands with the interpreter and folder filled in and the stages the preflight dropped left out."""
    commands = []
    for template in part.commands:
        command = [word.replace("{py}", py).replace("{out}", str(out)) for word in template]
        if "--stages" in command:
            at = command.index("--stages") + 1
            kept = [stage for stage in command[at].split(",") if stage not in dropped]
            if not kept:
                continue
            command[at] = ",".join(kept)
        commands.append(command)
    return commands


# ---------------------------------------------------------------- on the CPU: the carry folder and the dry run
def pack(source_root: Path) -> list[str]:
    """Fill .gpu-carry/ with the wheels the device lacks and FashionMNIST's official files; the lines to print."""
    from mnistperf.data.ingest import sources

    spec = sources.DATASETS[gpu_preflight.DATASET]
    names = [raw.name for pair in spec.splits.values() for raw in pair]
    origin = source_root / spec.source_folder
    missing = [name for name in names if not (origin / name).is_file()]
    if missing:
        raise SystemExit(
            f"gpu-check --pack: {origin / missing[0]} is not there; pass --source-root DIR, the folder holding "
            f"{spec.source_folder}/ with the official .gz files (e.g. --source-root ../shared/datasets)."
        )
    target = SOURCES / spec.source_folder
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copyfile(origin / name, target / name)
    WHEELS.mkdir(parents=True, exist_ok=True)
    platform_args = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
         DEVICE_PYTHON, "--implementation", "cp", *platform_args, "-d", str(WHEELS), *CARRIED_WHEELS],
        check=True,
    )  # fmt: skip
    return [f"packed: {path} ({size_mb(path):.1f} MB)" for path in (WHEELS, target)]


def size_mb(path: Path) -> float:
    """Megabytes in a file or under a folder."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 1e6


def device_command(minutes: float, parts: Sequence[str]) -> str:
    """The one command a device call runs: install the carried wheels, then the check with its budget."""
    chosen = "" if list(parts) == list(PART_NAMES) else f" --parts {','.join(parts)}"
    return (
        f"python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target {SITE} "
        f"{WHEELS}/*.whl && export PYTHONPATH={SITE} && scripts/gpu-check --minutes {minutes:g}{chosen} "
        f"--source-root {SOURCES} --copy-to $OUT"
    )


def schedule(parts: Sequence[str], minutes: float) -> list[tuple[Part, bool]]:
    """(part, planned to start) in order: a part starts where its planned minutes fit what the ones before left."""
    left = minutes - SETUP_MINUTES
    planned = []
    for part in PARTS:
        if part.name not in parts:
            continue
        fits = part.minutes <= left
        left -= part.minutes if fits else 0
        planned.append((part, fits))
    return planned


def dry_run(minutes: float, parts: Sequence[str]) -> list[str]:
    """The device call, what it carries and the planned minutes of each part, as lines to print."""
    carried = (
        f"{CARRY} ({size_mb(CARRY):.1f} MB)" if CARRY.is_dir() else f"{CARRY}: MISSING, run scripts/gpu-check --pack"
    )
    lines = [
        f"the device call (timeout_s {int(minutes * 60) + 90}: the budget, then the last part's grace and the copy):",
        f"  carry: [{str(CARRY)!r}]  = {carried}",
        f"  command: {device_command(minutes, parts)}",
        f"the plan, {minutes:g} minutes: {SETUP_MINUTES:g} min preflight, environment and data, then",
    ]
    if CARRY.is_dir():
        wheels = sorted(p.name for p in WHEELS.glob("*.whl"))
        lines.insert(2, f"    wheels: {', '.join(wheels) or 'none'}")
        lines.insert(3, f"    data: {', '.join(sorted(p.name for p in SOURCES.rglob('*.gz'))) or 'none'}")
    for part, fits in schedule(parts, minutes):
        mark = "runs" if fits else "left for the next call"
        lines.append(f"  {part.name:<10} {part.minutes:>4.1f} min  {mark}: {part.what}")
        lines += [f"      $ {shlex.join(cmd)}" for cmd in part_commands(part, "python3", Path("OUT"), ())]
    return lines


# ---------------------------------------------------------------- on the GPU: the parts within the budget
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
    table = ["| part | planned min | took min | status |", "|---|---:|---:|---|"]
    table += [f"| {r['part']} | {r['planned_min']:g} | {r.get('took_min', '')} | {r['status']} |" for r in records]
    atomic_write(out / "parts.md", lambda tmp: tmp.write_text("\n".join(table) + "\n"))


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


# ---------------------------------------------------------------- the probes the parts run in processes of their own
def timer_cost(target: Path, rounds: int = 2, epochs: int = 3) -> None:
    """The default fit of v2_pinned as a user runs it, whole processes with and without EpochTimer, taking turns.

    Then the newcomer's short fit (examples/diagnose_your_run.py) with and without both callbacks alike.
    """
    timer_cost_of(target, rounds, [sys.executable, "-m", "mnistperf", "fit", "--config", "configs/v2_pinned.yaml",
                  "--trainer.max_epochs", str(epochs), "--trainer.logger.init_args.save_dir", "{out}"],
                  {"with EpochTimer": [], "without": ["--trainer.callbacks=[]"]},
                  f"configs/v2_pinned.yaml, {epochs} epochs, whole processes")  # fmt: skip
    timer_cost_of(target.with_name(f"{target.stem}-short{target.suffix}"), rounds + 1,
                  [sys.executable, "examples/diagnose_your_run.py", "--epochs", str(epochs), "--out", "{out}"],
                  {"with both callbacks": [], "without": ["--bare"]},
                  f"examples/diagnose_your_run.py, {epochs} epochs, whole processes")  # fmt: skip


def timer_cost_of(target: Path, rounds: int, fit: list[str], arms: dict[str, list[str]], what: str) -> None:
    """``fit`` (its ``{out}`` a scratch folder) in whole processes, each of ``arms`` added in turn; the ratios."""
    seconds: dict[str, list[float]] = {arm: [] for arm in arms}
    with_it, without = arms
    with tempfile.TemporaryDirectory(prefix="timer-cost-") as scratch:
        for turn in range(rounds):
            order = list(arms) if turn % 2 == 0 else list(arms)[::-1]
            for arm in order:
                command = [word.replace("{out}", scratch) for word in fit] + arms[arm]
                began = time.perf_counter()
                done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                if done.returncode != 0:
                    raise SystemExit(f"timer cost: {shlex.join(command)} failed:\n{done.stderr[-2000:]}")
                seconds[arm].append(time.perf_counter() - began)
                print(f"timer cost: {arm}, turn {turn + 1}: {seconds[arm][-1]:.2f} s", flush=True)
        # what each diagnosed fit read, in the order the fits wrote them
        found = sorted(Path(scratch).rglob(SUMMARY_FILE), key=lambda path: path.stat().st_mtime_ns)
        answers = [{"file": str(path.relative_to(scratch)), **answer(path)} for path in found]
    ratios = [a / b for a, b in zip(seconds[with_it], seconds[without], strict=True)]
    result = {"fit": what, "seconds": seconds, "ratios": ratios, "median_ratio": statistics.median(ratios)}
    result["answers"] = answers
    write_summary(result, target)
    print(f"timer cost: {what}: {with_it} {result['median_ratio']:.3f}x the same fit without")


def answer(path: Path) -> dict[str, Any]:
    """A diagnosed fit's verdict, its window's share and, where the window read none, why (from its timing.json)."""
    summary = json.loads(path.read_text())
    window = summary.get("busy_window") or {}
    return {"verdict": summary.get("verdict"), "share": window.get("share"), "reason": window.get("reason")}


def sync_probe(folder: Path) -> None:
    """Run the diagnosis example with torch's sync debug mode on; count the syncs made inside the diagnosis.

    Mode ``warn`` rather than ``error``: Lightning itself syncs when it logs the example's loss, which would end
    the run; each warning's Python stack says whether a frame of the diagnosis made it.
    """
    import runpy
    import traceback
    import warnings

    import torch

    from mnistperf.diagnosis.record.verdict import classify

    folder.mkdir(parents=True, exist_ok=True)
    syncs: list[list[str]] = []
    show = warnings.showwarning

    def record(message, category, filename, lineno, file=None, line=None):
        if "synchroniz" in str(message):
            syncs.append([f"{f.filename}:{f.lineno}" for f in traceback.extract_stack()[:-1]])
        else:
            show(message, category, filename, lineno, file, line)

    warnings.showwarning = record
    warnings.simplefilter("always")
    on_cuda = torch.cuda.is_available()  # on a CPU the probe runs as a rehearsal: nothing can sync there
    if on_cuda:
        torch.cuda.set_sync_debug_mode("warn")
    sys.argv = [
        "diagnose_your_run.py",
        "--out",
        str(folder / "run"),
        "--epochs",
        "3",
        "--samples",
        "8192",
        "--batch-size",
        str(EXAMPLE_BATCH),
    ]
    runpy.run_path("examples/diagnose_your_run.py", run_name="__main__")
    if on_cuda:
        torch.cuda.set_sync_debug_mode("default")
    ours = [stack for stack in syncs if any("mnistperf/diagnosis" in frame for frame in stack)]
    [summary_path] = sorted((folder / "run").rglob(SUMMARY_FILE))
    summary = json.loads(summary_path.read_text())
    trace = summary.get("busy_window", {}).get("trace")
    trace_opens = False
    if trace:
        with open(summary_path.parent / trace) as handle:
            trace_opens = bool(json.load(handle).get("traceEvents"))
    verdict, _ = classify(summary, summary["input_bound_share"])
    steps = sum((e["samples"] or 0) // EXAMPLE_BATCH for e in summary["epochs"])
    result = {
        "syncs_in_all": len(syncs),
        "syncs_by_the_diagnosis": len(ours),
        "epochs": len(summary["epochs"]),
        "train_steps": steps,
        "where_the_diagnosis_synced": sorted({next(f for f in s[::-1] if "mnistperf/diagnosis" in f) for s in ours}),
        DEVICE_BUSY_SHARE: summary.get(DEVICE_BUSY_SHARE),
        "verdict": summary["verdict"],
        "verdict_from_the_busy_share": verdict,
        "trace": trace,
        "trace_opens": trace_opens,
    }
    write_summary(result, folder / "sync-probe.json")
    print(json.dumps(result, indent=2))


# ---------------------------------------------------------------- the command line
def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The check's options."""
    parser = argparse.ArgumentParser(prog="scripts/gpu-check", description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=None, help="results folder (docs/results/cuda-<gpu>)")
    parser.add_argument("--minutes", type=float, default=7.0, help="the budget: no part starts that would pass it")
    parser.add_argument("--parts", default=",".join(PART_NAMES), help=f"some of {','.join(PART_NAMES)}")
    parser.add_argument("--source-root", default=None, help="the folder holding fashion-mnist/ with the .gz files")
    parser.add_argument("--dry-run", action="store_true", help="on any machine: the device call and the plan")
    parser.add_argument("--pack", action="store_true", help="on the CPU: fill .gpu-carry/ for the device call")
    parser.add_argument("--copy-to", default=None, help="also put an archive of the results here (the call's $OUT)")
    parser.add_argument("--timer-cost", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--sync-probe", type=Path, default=None, help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    unknown = [p for p in opts.parts.split(",") if p and p not in PART_NAMES]
    if unknown:
        parser.error(f"--parts {unknown[0]}: no such part; choose from {','.join(PART_NAMES)}")
    if opts.minutes <= 0:
        parser.error(f"--minutes {opts.minutes:g}: the budget must be above 0, e.g. --minutes 7")
    return opts


def main(argv: Sequence[str] | None = None) -> int:
    """Pack, plan, probe or check, as the options say."""
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    if opts.timer_cost:
        timer_cost(opts.timer_cost)
        return 0
    if opts.sync_probe:
        sync_probe(opts.sync_probe)
        return 0
    if opts.pack:
        for line in pack(Path(opts.source_root or "../shared/datasets")):
            print(line)
        return 0
    if opts.dry_run:
        print("\n".join(dry_run(opts.minutes, [p for p in opts.parts.split(",") if p])))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("gpu-check: no CUDA device here; run it on a machine with an NVIDIA GPU.", file=sys.stderr)
        return 2
    return check(opts)


if __name__ == "__main__":
    raise SystemExit(main())
