"""The diagnosis's commands on finished runs: ``mnistperf compare RUN_A RUN_B`` and ``mnistperf report RUN --html``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from mnistperf.close_names import OneLineArgumentParser
from mnistperf.diagnosis.compare import compare, format_comparison, load
from mnistperf.diagnosis.guard import jsonable

RUN_HELP = "a run's timing.json, or its log folder (the newest timing.json under it)"


def compare_command(argv: Sequence[str]) -> None:
    """``mnistperf compare RUN_A RUN_B``: what B bought over A, side by side, against the ceiling A predicted."""
    parser = OneLineArgumentParser(prog="mnistperf compare", description=compare_command.__doc__)
    parser.add_argument("run_a", type=Path, metavar="RUN_A", help=RUN_HELP)
    parser.add_argument("run_b", type=Path, metavar="RUN_B", help=RUN_HELP)
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON (default: a table)")
    opts = parser.parse_args(argv)
    (a_path, a), (b_path, b) = load(opts.run_a), load(opts.run_b)
    found = compare(a, b)
    if opts.json:
        print(json.dumps(jsonable({"a": str(a_path), "b": str(b_path), **found}), indent=2))
    else:
        print(format_comparison(found, a_path, b_path))
