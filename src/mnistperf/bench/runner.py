"""``mnistperf bench``: run stages (and sweeps) each in a fresh process, then report.

Every run is ``python -m mnistperf fit --config configs/<stage>.yaml`` in its own process; the bench reads
the ``timing.json`` its EpochTimer wrote. Repeats are interleaved (``run_order``), and results are rewritten
after every run. See docs/timing.md#the-bench.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import shlex
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from mnistperf.atomic import place_taken
from mnistperf.bench import published
from mnistperf.bench.chart import redraw_chart
from mnistperf.bench.columns import ONE_EPOCH_SAID, REFERENCE_RUNNERS, SPEED_UP_SAID, bench_table
from mnistperf.bench.memory import TreeMemorySampler
from mnistperf.bench.plans import Plan, check_fit_arguments, plan_runs
from mnistperf.bench.report import per_step_table, write_all
from mnistperf.close_names import OneLineArgumentParser
from mnistperf.console import device_line
from mnistperf.diagnosis.figures import PEAK_RSS_MB
from mnistperf.errors import ConfigError
from mnistperf.lightning_cli.settings import parse_setting
from mnistperf.machine import run_device

SHOWN_PREFIXES = ("epoch ", "mnistperf:", "Average ", "Total ", "Verdict")


def _tail(lines: collections.deque) -> str:
    """The most telling line of a failed run's output: its error message."""
    for line in reversed(lines):
        if "Error" in line or "error:" in line or "Killed" in line:
            return line.strip()
    return lines[-1].strip() if lines else "no output"


def run_process(command: list[str], label: str) -> tuple[int, str, dict]:
    """Run one command, echoing its progress lines; return (exit status, last error line, peak memory)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    tail: collections.deque = collections.deque(maxlen=40)
    with (
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as proc,
        TreeMemorySampler(proc.pid) as memory,
    ):
        assert proc.stdout is not None  # stdout=PIPE
        try:
            for line in proc.stdout:
                tail.append(line.rstrip())
                if line.startswith(SHOWN_PREFIXES):
                    print(f"    {label}: {line.rstrip()}", flush=True)
            proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait(timeout=30)
            raise
    return proc.returncode, _tail(tail), {"tree_rss": memory.peak_rss_mb, "tree_pss": memory.peak_pss_mb}


DESCRIPTION = (
    "Run stages of the ladder, or sweeps of their settings, each as its own python -m mnistperf fit process, and "
    "print their table: train and test seconds per epoch, speed-up over the first row, throughput, the share of "
    "time spent waiting for data, accuracy and peak memory, beside the published figures. Writes results.md, "
    "results.csv, results.json and chart.png (where matplotlib is installed) into --out, again after every run, "
    "and each run's logs under --out's runs/."
)


REDRAW_TAKES = ("--redraw", "--log-scale")  # the options a redraw of a chart reads


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The bench's options."""
    parser = OneLineArgumentParser(prog="mnistperf bench", description=DESCRIPTION)
    parser.add_argument(
        "--stages",
        default="all",
        help="the stages to run: names in --config-dir or paths of configs, comma-separated; 'all' is "
        f"{', '.join(published.LADDER + published.BEYOND)} (default: %(default)s)",
    )
    parser.add_argument(
        "--config-dir",
        type=Path,
        default=Path("configs"),
        metavar="DIR",
        help="the folder --stages names are looked up in (default: %(default)s)",
    )
    parser.add_argument("--dataset", help="data.dataset for every run, over each config's own (default: the configs')")
    parser.add_argument("--epochs", type=int, default=5, metavar="N", help="epochs per run (default: %(default)s)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        metavar="N",
        help="runs of each row, interleaved; the table shows their median and range (default: %(default)s)",
    )
    parser.add_argument(
        "--limit-train-batches",
        type=int,
        metavar="K",
        help="train only K batches per epoch (quick looks); a stage that takes several batches per "
        "Lightning step (data.batches_per_step) gets as many whole groups as cover K (default: whole epochs)",
    )
    parser.add_repeated("--sweep", "KEY=V1,V2", "one row per value of a setting, e.g. data.batch_size=16,64,512")
    parser.add_repeated("--set", "KEY=VALUE", "a fixed override for every run, e.g. data.num_workers=2")
    parser.add_argument(
        "--reference-rows",
        dest="reference_rows",
        default="auto",
        metavar="STAGES",
        help="stages (comma-separated) to also run as reference rows, a plain PyTorch loop and "
        "Lightning's bare loop; 'auto': v2_pinned and the highest resident rung (v4_graphed, else "
        "v3_resident) among the stages run, where neither runs the last stage run; 'none' to skip "
        "(default: %(default)s)",
    )
    # The option's former name, still accepted; "baseline" is tune's word, for the input config's own settings.
    parser.add_argument("--baseline", dest="reference_rows", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    parser.add_argument(
        "--loader-only",
        action="store_true",
        help="time only the input pipeline of each stage: a plain loop, no model, no Lightning (default: off)",
    )
    parser.add_argument("--out", type=Path, metavar="DIR", help="the results folder (default: bench_results/<time>)")
    parser.add_argument(
        "--log-scale",
        action="store_true",
        help="a log-scale y axis in chart.png (default: only where the bars span more than 20x)",
    )
    parser.add_argument(
        "--redraw",
        type=Path,
        metavar="DIR",
        help="run nothing: draw DIR/chart.png again from the DIR/results.json a bench wrote (default: off)",
    )
    opts = parser.parse_args(argv)
    ignored = [arg.split("=")[0] for arg in argv if arg.startswith("--") and arg.split("=")[0] not in REDRAW_TAKES]
    if opts.redraw is not None and ignored:  # one that says what to run: not run
        them = "it" if len(ignored) == 1 else "them"
        raise ConfigError(
            f"--redraw runs nothing, so {', '.join(ignored)} would be ignored: drop {them}, or run the bench without "
            "--redraw"
        )
    for option, value in (("--epochs", opts.epochs), ("--repeats", opts.repeats)):
        if value < 1:
            raise ConfigError(f"{option} must be at least 1 (got {value}): give {option} 1 or more.")
    if opts.limit_train_batches is not None and opts.limit_train_batches < 1:  # 0 would read as whole epochs
        raise ConfigError(
            f"--limit-train-batches {opts.limit_train_batches}: give at least 1, or leave it out for whole epochs."
        )
    if opts.loader_only and opts.sweep:
        raise ConfigError("--loader-only takes no --sweep; use --set data.KEY=VALUE instead.")
    # The bench's own options are the one place epochs and batch limits are set, so its header and
    # report say what ran: the same settings given through --set are taken as those options.
    kept = []
    for text in opts.set:
        key, value = parse_setting(text)
        if key == "trainer.max_epochs":
            opts.epochs = _positive_int(value, "--set trainer.max_epochs")
        elif key == "trainer.limit_train_batches":
            opts.limit_train_batches = _positive_int(value, "--set trainer.limit_train_batches")
        else:
            kept.append(text)
    opts.set = kept
    return opts


def _positive_int(value: str, option: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ConfigError(
            f"{option}={value}: the bench needs a whole number of at least 1 here "
            "(a fraction of an epoch does not compare across stages)."
        )
    return number


def counted(number: int, thing: str) -> str:
    """``1 epoch``, ``2 epochs``."""
    return f"{number} {thing}{'' if number == 1 else 's'}"


def header(opts: argparse.Namespace, plans: list[Plan], out: Path) -> str:
    """The device line, then what will run: configurations, repeats, epochs, batches and overrides."""
    accelerator = dict(parse_setting(s) for s in opts.set).get("trainer.accelerator", "auto")
    batches = f", {opts.limit_train_batches} train batches per epoch" if opts.limit_train_batches else ", full epochs"
    overrides = f"; overrides: {' '.join(opts.set)}" if opts.set else ""
    dataset = f"; dataset {opts.dataset}" if opts.dataset else ""
    return (
        device_line("bench", run_device(accelerator)) + "\n"
        f"{counted(len(plans), 'configuration')} x {counted(opts.repeats, 'repeat')}, {counted(opts.epochs, 'epoch')}"
        f"{batches}{dataset}{overrides}; "
        f"results in {out}"
    )


def run_order(plans: Sequence[Plan], repeat: int) -> list[tuple[int, Plan]]:
    """One repeat's runs in the order they go, each with its row's number in the table.

    Repeats go round the configurations (A B C A B C ...), so a drift of the machine over the bench (heat, other
    load) spreads over every row instead of landing on one. A stage's bare-Lightning and plain-PyTorch rows run
    right after it, so a ratio between them compares fits that met the same machine; every second
    repeat runs each such group backwards, so a drift within it falls on each of its rows alike.
    """
    numbered = list(enumerate(plans, 1))
    references: dict[str, list[tuple[int, Plan]]] = collections.defaultdict(list)
    for index, plan in numbered:
        if plan.row.runner in REFERENCE_RUNNERS:
            references[plan.row.stage].append((index, plan))
    groups = []
    for index, plan in numbered:
        if plan.row.runner not in REFERENCE_RUNNERS:
            groups.append([(index, plan), *(references.pop(plan.row.stage, []) if not plan.row.overrides else [])])
    groups += references.values()  # the reference rows of a stage with no plain row of its own, together
    return [run for group in groups for run in (group if repeat % 2 else group[::-1])]


def bench_command(argv: Sequence[str]) -> None:
    """``mnistperf bench``: run the stages (and sweeps) as separate processes and write the report."""
    opts = parse_args(argv)
    if opts.redraw is not None:
        chart = redraw_chart(opts.redraw, opts.log_scale)
        if chart is None:
            raise ConfigError("--redraw needs matplotlib: pip install 'mnistperf[bench]'.")
        print(f"written: {chart}")
        return
    plans = plan_runs(opts)
    check_fit_arguments(plans)
    out = opts.out or Path("bench_results") / time.strftime("%Y%m%d-%H%M%S")
    taken = place_taken(out, folder=True, written=True)
    if taken is not None:
        raise ConfigError(f"--out {out}: {taken}; give a folder for the results, e.g. --out {out.name}-results")
    if (out / "results.json").exists():  # its runs would stay beside the new ones, which its results no longer name
        raise ConfigError(
            f"--out {out}: it holds an earlier bench's results; give a new folder, e.g. --out {shlex.quote(str(out))}-2"
        )
    out.mkdir(parents=True, exist_ok=True)  # a folder the system refuses is said now, not after the first run
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(opts).items()}
    rows = [plan.row for plan in plans]
    print(header(opts, plans, out), flush=True)
    runs, planned = itertools.count(1), sum(plan.row.error is None for plan in plans) * opts.repeats
    interrupted = False
    try:
        for repeat in range(1, opts.repeats + 1):
            for index, plan in run_order(plans, repeat):
                if plan.row.error is not None:
                    continue  # failed before: its error stays in its row
                said = f"{plan.row.label} (row {index}, repeat {repeat}/{opts.repeats})"
                print(f"[{next(runs)}/{planned}] {said}", flush=True)  # in the order they run
                command, timing_path = plan.command(out / "runs", f"{index:02d}_{plan.row.stage}_r{repeat}")
                status, last_line, memory = run_process(command, plan.row.label)
                if status != 0 or not timing_path().is_file():
                    plan.row.error = f"failed (exit {status}): {last_line}"
                    planned -= opts.repeats - repeat  # its later repeats do not run
                    print(f"    {plan.row.label}: {plan.row.error}", flush=True)
                else:
                    timing = json.loads(timing_path().read_text())
                    timing[PEAK_RSS_MB].update(memory)
                    plan.row.summaries.append(timing)
                write_all(rows, out, settings, opts.log_scale)
    except KeyboardInterrupt:
        print("\ninterrupted: keeping the rows already finished", flush=True)
        interrupted = True
        for row in rows:
            if not row.summaries and row.error is None:
                row.error = "not run (interrupted)"
    written = write_all(rows, out, settings, opts.log_scale)
    print()
    print(bench_table(rows, settings))
    print(SPEED_UP_SAID)
    if settings.get("epochs") == 1:
        print(ONE_EPOCH_SAID)
    if per_step_table(rows):
        print("\nPer training step:\n" + per_step_table(rows))
    print("\nwritten: " + ", ".join(str(p) for p in written))
    if interrupted:  # the status a script reads: cut short, as any command Ctrl-C stopped
        raise SystemExit(130)
    if not any(row.summaries for row in rows):
        raise ConfigError(f"every run failed, so nothing was measured; the first error: {rows[0].error}")
