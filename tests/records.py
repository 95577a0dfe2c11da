"""What a test reads back from a fit it ran in other processes (the sample audit's lines, each rank's weights), and a
fit that fails."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from lightning.pytorch import Callback

AUDIT = "--trainer.callbacks+=mnistperf.diagnosis.SampleAudit"
AUDIT_LINE = re.compile(
    r"sample audit, epoch (\d+): ([\d,]+) samples? seen(?: \(([\d +]+) on \d+ ranks\))?, "
    r"([\d,]+) distinct(?: of [\d,]+)?: ([\d,]+) duplicates?(?:, ([\d,]+) missing)?"
    r"(?:.*same order as epoch \d+ on (\d+) of)?"
)


def audit_epochs(output: str) -> list[dict]:
    """The counts of every ``sample audit`` line a fit printed, in order (per_rank: one entry on one process)."""

    def number(text: str | None) -> int | None:
        return None if text is None else int(text.replace(",", ""))

    epochs = []
    for match in AUDIT_LINE.finditer(output):
        epoch, seen, ranks, distinct, duplicates, missing, same = match.groups()
        epochs.append(
            {
                "epoch": int(epoch),
                "seen": number(seen),
                "distinct": number(distinct),
                "duplicates": number(duplicates),
                "missing": number(missing),
                "per_rank": [int(r) for r in ranks.split(" + ")] if ranks else [number(seen)],
                "same_order_ranks": number(same) or 0,
            }
        )
    return epochs


def audit_counts(epochs: list[dict]) -> list[tuple]:
    """(seen, distinct, duplicates, missing) of every epoch."""
    return [(e["seen"], e["distinct"], e["duplicates"], e["missing"]) for e in epochs]


class WeightsRecorder(Callback):
    """Writes the sum of every parameter at the end of fit, per rank: ranks that synced their gradients agree."""

    def on_fit_end(self, trainer, pl_module):
        sums = [float(p.detach().double().sum()) for p in pl_module.parameters()]
        (Path(os.environ["MNISTPERF_RECORD_DIR"]) / f"weights{trainer.global_rank}.json").write_text(json.dumps(sums))


class FailingCallback(Callback):
    """Fails the fit at its first training step."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        raise RuntimeError("a failing callback")
