"""The options both ``mnistperf tune`` commands take, the lab's and another project's, and the budget they give."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from mnistperf.atomic import place_taken
from mnistperf.close_names import OneLineArgumentParser
from mnistperf.errors import ConfigError
from mnistperf.tune.policy import BATCH_MULTIPLES

MIN_BUDGET_S = 15.0


def tune_parser(description: str, config_help: str, set_example: str, batch_changes: str) -> OneLineArgumentParser:
    """A parser with the options both take: the config, its overrides, the budget, the tuned config, the batch size."""
    parser = OneLineArgumentParser(prog="mnistperf tune", description=description)
    parser.add_argument("--config", type=Path, required=True, metavar="FILE", help=f"{config_help} (required)")
    parser.add_repeated("--set", "KEY=VALUE", f"an override of the config before measuring, e.g. {set_example}")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument(
        "--budget",
        type=float,
        default=5.0,
        metavar="MINUTES",
        help="minutes of measuring at most; then the best found so far is written (default: %(default)g)",
    )
    budget.add_argument("--budget-s", type=float, metavar="SECONDS", help="the same budget in seconds (default: none)")
    parser.add_argument(
        "--out", type=Path, default=Path("tuned.yaml"), metavar="FILE", help="the tuned config (default: %(default)s)"
    )
    parser.add_argument(
        "--tune-batch-size",
        action="store_true",
        help=f"also try {' and '.join(f'{m}x' for m in BATCH_MULTIPLES)} the batch size, which changes the "
        f"{batch_changes} (default: off)",
    )
    return parser


def check_out(out: Path, config: Path) -> None:
    """``--out`` must be a file that can be written once the measuring is done.

    Not a folder, no file on its way, nor the ``config`` tuned from.
    """
    taken = place_taken(out, written=True)
    if taken is not None:
        example = out / "tuned.yaml" if out.is_dir() else out.name
        raise ConfigError(f"--out {out}: {taken}; give a file for the tuned config, e.g. --out {example}")
    if out.exists() and config.exists() and out.samefile(config):
        raise ConfigError(
            f"--out {out}: the config tuned from, which the tuned config would replace; give another file for the "
            f"tuned config, e.g. --out {out.with_name(f'{out.stem}.tuned{out.suffix}')}"
        )


def budget_s(opts: argparse.Namespace, least: str) -> float:
    """The budget in seconds, checked (:func:`checked_budget`)."""
    if opts.budget_s is None:
        return checked_budget(opts.budget * 60, f"--budget {opts.budget:g}", least, f"{MIN_BUDGET_S / 60:g} minutes")
    return checked_budget(opts.budget_s, f"--budget-s {opts.budget_s:g}", least)


def checked_budget(seconds: float, given: str, least: str, at_least: str = f"{MIN_BUDGET_S:g} seconds") -> float:
    """``seconds``; where not finite or under MIN_BUDGET_S, one line saying it as ``given`` and what ``least`` takes."""
    if not math.isfinite(seconds):
        raise ConfigError(f"{given}: give a finite budget, at least {at_least}; tune stops there with the best so far.")
    if seconds < MIN_BUDGET_S:
        raise ConfigError(f"{given}: too small to measure anything; give at least {at_least} ({least} that long).")
    return seconds
