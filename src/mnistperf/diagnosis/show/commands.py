"""The diagnosis's commands on finished runs: ``mnistperf compare RUN_A RUN_B`` and ``mnistperf report RUN --html``."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from mnistperf.atomic import place_taken, removing_new_folders
from mnistperf.close_names import OneLineArgumentParser
from mnistperf.diagnosis.guard import jsonable
from mnistperf.diagnosis.record.run import SUMMARY_FILE, load
from mnistperf.diagnosis.record.text import format_headline, format_summary
from mnistperf.diagnosis.show.compare import band_said, compare, format_comparison, load_two, percent, run_labels
from mnistperf.diagnosis.show.report import REPORT_FILE, html_report, write_report
from mnistperf.errors import ConfigError

RUN_HELP = "a run's timing.json, or its log folder (the newest timing.json under it)"
PLACE_FIX = "give --out FILE in a folder you can write to"


def compare_command(argv: Sequence[str]) -> None:
    """``mnistperf compare RUN_A RUN_B``: what B bought over A, side by side, against the ceiling A predicted."""
    parser = OneLineArgumentParser(prog="mnistperf compare", description=compare_command.__doc__)
    parser.add_argument("run_a", type=Path, metavar="RUN_A", help=RUN_HELP)
    parser.add_argument("run_b", type=Path, metavar="RUN_B", help=RUN_HELP)
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON (default: a table)")
    parser.add_argument(
        "--fail-if-slower",
        type=float,
        metavar="PCT",
        help="exit 1 where B's steady train time per epoch is over A's by more than PCT percent plus the runs' noise "
        "(a speed check for CI; docs/diagnose.md)",
    )
    opts = parser.parse_args(argv)
    if opts.fail_if_slower is not None and not 0 <= opts.fail_if_slower < 1000:
        parser.error(f"--fail-if-slower {opts.fail_if_slower:g}: give a percentage from 0, e.g. --fail-if-slower 10")
    (a_path, a), (b_path, b) = load_two(opts.run_a, opts.run_b)
    found = compare(a, b)
    if opts.json:
        print(json.dumps(jsonable({"a": str(a_path), "b": str(b_path), **found}), indent=2))
    else:
        print(format_comparison(found, a_path, b_path))
    if opts.fail_if_slower is not None:
        failed, line = speed_check(found["bought"], opts.fail_if_slower)
        print(line, file=sys.stderr if failed or opts.json else sys.stdout)  # --json: stdout holds only the JSON
        if failed:
            raise SystemExit(1)


def speed_check(gain: dict, allowed_pct: float) -> tuple[bool, str]:
    """(whether B is slower than A past ``allowed_pct`` and the runs' noise, the line that says so either way)."""
    slower, band = gain["slower"], gain["noise"]
    option = f"--fail-if-slower {allowed_pct:g}"
    noise_said = "no noise (each run had one steady epoch)"
    if band is not None:
        noise_said = f"the runs' noise ({band_said(band)})"
    if slower is None:
        return True, f"compare: {option}: B's train time per epoch could not be set against A's"
    how = f"takes {percent(slower)} more time than A" if slower >= 0 else f"takes {percent(-slower)} less time than A"
    failed = slower > allowed_pct / 100 + (band or 0.0)
    outcome, side = ("failed", "past") if failed else ("passed", "within")
    line = f"compare: {option} {outcome}: B {how} per epoch, {side} the {allowed_pct:g}% allowed and {noise_said}"
    return failed, line


def report_command(argv: Sequence[str]) -> None:
    """``mnistperf report RUN [RUN_B] --html``: a run's summary, or its report as one HTML file (two: compared)."""
    parser = OneLineArgumentParser(prog="mnistperf report", description=report_command.__doc__)
    parser.add_argument("run", type=Path, metavar="RUN", help=RUN_HELP)
    parser.add_argument("run_b", type=Path, nargs="?", metavar="RUN_B", help="a second run, compared with the first")
    parser.add_argument(
        "--html", action="store_true", help=f"write the report as HTML ({REPORT_FILE} beside RUN's timing.json)"
    )
    parser.add_argument("--out", type=Path, metavar="FILE", help="with --html: where to write it")
    opts = parser.parse_args(argv)
    if opts.out is not None and not opts.html:
        parser.error("--out goes with --html")
    loaded = [load(opts.run)] if opts.run_b is None else list(load_two(opts.run, opts.run_b))
    paths, summaries = [path for path, _ in loaded], [run for _, run in loaded]
    runs = list(zip(run_labels(paths, [run.config for run in summaries]), summaries, strict=True))
    comparison = compare(*summaries) if len(loaded) == 2 else None
    if not opts.html:
        if comparison is None and paths[0] != opts.run / SUMMARY_FILE and opts.run.is_dir():  # which of its runs
            print(f"run: {paths[0]} (the newest {SUMMARY_FILE} under {opts.run})")
        if comparison is not None:
            print(format_comparison(comparison, *paths))
            return
        print(f"{format_headline(summaries[0], rest=False)}\n\n{format_summary(summaries[0])}")  # at a glance, then all
        return
    file = REPORT_FILE if comparison is None else f"compared-{runs[1][0].replace('/', '-')}.html"
    out = opts.out or paths[0].with_name(file)
    said = f"--out {out}" if opts.out else f"the report's place {out}"
    taken = place_taken(out, written=True)
    if taken is not None:
        example = out / REPORT_FILE if out.is_dir() else out.name
        raise ConfigError(f"{said}: {taken}; {PLACE_FIX}, e.g. --out {example}")
    try:
        with removing_new_folders(out.parent):
            write_report(html_report(runs, comparison), out)
    except OSError as error:
        raise ConfigError(f"{said}: cannot be written ({error.strerror or error}); {PLACE_FIX}") from None
    print(f"report written to {out}")
