"""What the timer leaves at a fit's end on rank 0: its summary printed, timing.json, the report, the window's trace."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from lightning.pytorch import Trainer

from mnistperf.diagnosis.callbacks.project_reader import TrainerAttributes, audit_kept, log_folder
from mnistperf.diagnosis.figures import EVAL_S
from mnistperf.diagnosis.guard import Reporter
from mnistperf.diagnosis.record.clock import EpochClock
from mnistperf.diagnosis.record.epoch_text import interrupted_line, unlogged_monitor, written_line
from mnistperf.diagnosis.record.run import RunSummary, run_summary, write_summary
from mnistperf.diagnosis.record.text import format_headline
from mnistperf.diagnosis.show.compare import run_labels
from mnistperf.diagnosis.show.report import REPORT_FILE, html_report, write_report

# Why a fit's files are not written under Trainer(fast_dev_run=...), where Lightning writes none of its own
FAST_DEV_RUN = "fast_dev_run writes no logs; fit without it for timing.json and timing.html"


def versioned(folder: Path) -> bool:
    """Whether a logger's log ``folder`` is one of its numbered versions, which a new Trainer's logger numbers anew."""
    return re.fullmatch(r"version_\d+", folder.name) is not None


class RunFiles:
    """Writes a timed run's files into its log folder as ``summary_file`` and beside it; ``problems`` notes failures.

    ``monitor``: the metric whose last value the summary reports, said where it was never logged.
    """

    def __init__(self, summary_file: str, monitor: str | None, problems: Reporter):
        self.summary_file, self.monitor, self.problems = summary_file, monitor, problems

    def write(
        self, trainer: Trainer, clock: EpochClock, figures: Callable[[], dict[str, Any]], stopped_by: str | None
    ) -> Path | None:
        """On rank 0: the window's trace, then the summary printed and written; where timing.json went.

        The summary: the run's ``figures()`` (:func:`.run_summary`), whether it was interrupted (``stopped_by``: the
        exception's type, None for a fit that ended), and the audit beside the timer (:func:`.audit_kept`), each read
        on rank 0 alone.

        Every rank finds the log folder (a collective under DDP, unless interrupted: the others may be gone). Each
        file is written apart, so that one that fails leaves the others.
        """
        if getattr(trainer, "fast_dev_run", False):  # a smoke test: Lightning writes no logs, nor does the timer
            if trainer.is_global_zero:
                with self.problems.guard("printing the summary"):
                    brief = RunSummary.of(self._summary(trainer, clock, figures, stopped_by))
                    print(format_headline(brief, unwritten=FAST_DEV_RUN), flush=True)
            return None
        folder = Path(trainer.default_root_dir)
        with self.problems.guard("finding the run's log folder"):
            folder = log_folder(trainer, every_rank=stopped_by is None)
        if not trainer.is_global_zero:
            return None
        trace = None
        with self.problems.guard(f"saving the busy window's trace under {folder}"):
            trace = clock.export_trace(folder)  # before the summary, which names it
        summary = self._summary(trainer, clock, figures, stopped_by)
        if self.monitor is not None and summary.get("final_metric") is None:
            with self.problems.guard("reading the metrics logged"):
                summary["final_metric_reason"] = unlogged_monitor(self.monitor, trainer.callback_metrics)
                validated = any(epoch.get(EVAL_S) for epoch in clock.epochs)
                if stopped_by is None or validated:  # (a fit stopped before any validation has it unlogged by its stop)
                    self.problems.say_once(trainer, f"{summary['final_metric_reason']}.")
        run: RunSummary | dict[str, Any] = summary
        with self.problems.guard("reading the summary"):
            run = RunSummary.of(summary)  # read once, for the text and the report
        path, written = folder / self.summary_file, None
        replaced = path.exists()  # an earlier fit's, in the same log folder
        with self.problems.guard(f"writing {path}"):  # before the headline, which points at it where it was written
            write_summary({**summary, "problems": list(self.problems.lines)}, path)
            written = path
        with self.problems.guard("printing the summary"):
            unwritten = None if written is not None else f"{path} could not be written, as said above"
            print(format_headline(run, str(folder), unwritten), flush=True)
        if stopped_by is not None:
            print(interrupted_line(clock.epochs, stopped_by), flush=True)
        if written is not None:  # a folder refusing timing.json was said once
            kind = "no logger" if trainer.logger is None else "versioned" if versioned(folder) else "fixed"
            print(written_line("summary", path, replaced, kind), flush=True)
            with self.problems.guard(f"writing the report beside {path}"):
                report = path.with_name(REPORT_FILE)
                [name] = run_labels([path], [summary.get("config")])  # the run named as `mnistperf report` names it
                write_report(html_report([(name, run)]), report)
                print(written_line("report", report), flush=True)
        if trace is not None:
            print(written_line("trace", trace), flush=True)
        return written

    def _summary(
        self, trainer: Trainer, clock: EpochClock, figures: Callable[[], dict[str, Any]], stopped_by: str | None
    ) -> dict[str, Any]:
        """The run's summary as timing.json keeps it, read on rank 0."""
        datamodule, module = cast(TrainerAttributes, trainer).datamodule, trainer.lightning_module
        measured = run_summary(
            "lightning", trainer, clock.device, figures, datamodule=datamodule, module=module, guard=self.problems.guard
        )
        stopped = {"interrupted": stopped_by is not None, **({"stopped_by": stopped_by} if stopped_by else {})}
        return {**measured, **stopped, **audit_kept(trainer)}
