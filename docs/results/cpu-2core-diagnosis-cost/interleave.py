"""What EpochTimer and SampleAudit cost, timed as a user's fit runs them: one process an arm, epochs taking turns.

measure.py alternates the arms inside one fit, putting each epoch's callbacks (and the timer's fetch clock) in
place at its start; a user's fit keeps one set of callbacks from its start to its end. Here each arm is a fit of
its own, in a process of its own, with only its callbacks (measure.py's module, data, trainer and arms), and
the arms' epochs still run seconds apart: a callback first in each fit (``Turn``) waits at every epoch's start
until this process hands it the turn, and hands back the epoch it just ran, so exactly one fit runs at a time,
in an order that rotates from round to round and from group to group. The other fits wait on a pipe, using no
CPU. Each fit's first epoch is its warm-up and is left out. ``FITS`` groups of fresh processes run one after
another, each for ``ROUNDS`` rounds.

Prints and writes the same figures as measure.py (its ``summarize``), and the median over groups of each
group's ratio of medians, whose interval counts each process's luck (rounds of one group share it), to
interleaved.json beside this file (``interleaved-audit.json`` with ``--audit``, ``-N`` added with
``--samples=N``):

    python docs/results/cpu-2core-diagnosis-cost/interleave.py [--audit] [FITS] [ROUNDS] [--samples=N]
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import statistics
import sys
import tempfile
import warnings
from multiprocessing.connection import Connection
from pathlib import Path

import lightning
import measure  # this folder's: the module, the data, the arms, the fit and the figures
from lightning.pytorch import Trainer, seed_everything

from mnistperf.diagnosis import EpochTimer, SampleAudit

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from bootstrap import median_interval  # noqa: E402  # docs/results/bootstrap.py

RESULTS = HERE / "".join(
    (
        "interleaved",
        "-audit" if measure.AUDIT else "",
        f"-{measure.GIVEN}" if measure.GIVEN else "",
        ".json",
    )
)


class Turn(measure.EpochMarks):
    """First in a fit's callbacks: at each epoch's start, hands back the last epoch's times and waits for the turn.

    An epoch is timed from the turn given at its start to the next epoch's start, so the callbacks' work at its
    ends is inside.
    """

    def __init__(self, connection: Connection):
        super().__init__()
        self.connection = connection

    def on_train_epoch_start(self, trainer: Trainer, pl_module: lightning.LightningModule) -> None:
        """Hand back the last epoch's seconds and profile (None before the first), then wait for the turn."""
        self.connection.send(self.close())
        self.connection.recv()
        self.start()


def run_arm(arm: str, connection: Connection, root: str) -> None:
    """A child: one fit of ``arm``, taking turns through ``connection``: its warm-up, the rounds, a closing epoch."""
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # four fits' start lines
    warnings.filterwarnings("ignore")
    seed_everything(0, verbose=False)
    callbacks = [Turn(connection), *measure.arm_callbacks(EpochTimer(), SampleAudit())[arm]]
    measure.train(callbacks, 1 + measure.ROUNDS + 1, Path(root))


def group(number: int, seconds: dict[str, list[float]], steps_of: dict[str, list[list[float]]]) -> None:
    """One group of processes, one an arm: its warm-ups one after another, then the rounds, each arm's epoch in turn."""
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as scratch:
        pipes, children = {}, []
        for arm in measure.ARMS:
            mine, theirs = context.Pipe()
            child = context.Process(target=run_arm, args=(arm, theirs, str(Path(scratch) / arm)))
            child.start()
            theirs.close()  # the child's end: a fit that dies then ends this one's recv() instead of hanging it
            pipes[arm] = mine
            children.append(child)
        for arm in measure.ARMS:  # every fit set up and waiting at its first epoch
            assert pipes[arm].recv() is None
        for arm in measure.ARMS:  # the warm-ups, one at a time
            pipes[arm].send("go")
            pipes[arm].recv()
        arms = len(measure.ARMS)
        for round_ in range(measure.ROUNDS):
            turn = (number + round_) % arms
            for arm in measure.ARMS[turn:] + measure.ARMS[:turn]:
                pipes[arm].send("go")
                epoch_s, profile = pipes[arm].recv()
                seconds[arm].append(epoch_s)
                steps_of[arm].append(profile)
        for arm in measure.ARMS:  # the closing epochs, not timed
            pipes[arm].send("go")
        for child in children:
            child.join()
            assert child.exitcode == 0, f"a fit ended with exit code {child.exitcode}"


def main() -> None:
    """Run the groups, print and write the medians and ratios."""
    seconds: dict[str, list[float]] = {arm: [] for arm in measure.ARMS}
    steps_of: dict[str, list[list[float]]] = {arm: [] for arm in measure.ARMS}
    loads: list[float] = []  # after each group: its processes' start-up and closing epochs, four at a time, in it
    for number in range(measure.FITS):
        group(number, seconds, steps_of)
        loads.append(os.getloadavg()[0])
        print(
            f"group {number + 1}/{measure.FITS}: "
            + ", ".join(f"{arm} {statistics.median(seconds[arm]):.3f} s" for arm in measure.ARMS),
            f"(load {loads[-1]:.2f})",
        )
    what = (
        "training epochs of examples/diagnose_your_run.py's module"
        + (" on dict batches" if measure.AUDIT else "")
        + "; one fit an arm, each in its own process, the fits' epochs taking turns"
    )
    result = measure.summarize(what, seconds, steps_of, loads)
    by_group = group_ratios(seconds)
    result["median_group_ratio"] = {arm: statistics.median(ratios) for arm, ratios in by_group.items()}
    result["median_group_ratio_95"] = {arm: median_interval(ratios) for arm, ratios in by_group.items()}
    measure.report(result, RESULTS)
    for arm, ratio in result["median_group_ratio"].items():
        low, high = result["median_group_ratio_95"][arm]
        print(f"{arm} / without: median group ratio {ratio:.4f}x (95 % {low:.4f}-{high:.4f})")


def group_ratios(seconds: dict[str, list[float]]) -> dict[str, list[float]]:
    """Each group's ratio of an arm's median epoch to the plain fit's: the statistic that counts processes.

    A process carries its own luck (where its code and data land in memory) through all its epochs, so rounds
    of one group are not independent draws; groups are.
    """
    rounds = measure.ROUNDS
    groups = range(0, len(seconds["without"]), rounds)
    return {
        arm: [
            statistics.median(seconds[arm][start : start + rounds])
            / statistics.median(seconds["without"][start : start + rounds])
            for start in groups
        ]
        for arm in measure.COMPARED
    }


if __name__ == "__main__":
    main()
