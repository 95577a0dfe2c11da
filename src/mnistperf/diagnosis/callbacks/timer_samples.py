"""The samples EpochTimer counts: each step's, each training loader's and the epoch's, beside every other count."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from lightning.pytorch import LightningModule, Trainer

from mnistperf.diagnosis.callbacks.project_reader import audited_samples
from mnistperf.diagnosis.guard import Reporter
from mnistperf.diagnosis.measure.batches import READINGS, TrainingBatches, disagreeing, loader_samples
from mnistperf.diagnosis.record import epoch_text
from mnistperf.upstream import lightning_batch_size, logged_samples


class TimerSamples:
    """A fit's training samples as the timer counts them, each step's kept until it trained; ``problems`` says why not.

    ``own``: the user's ``batch -> int`` (the timer's ``samples_in_batch``, else the module's), which counts each batch
    whole; by default the reader's count of each training loader's part.
    """

    def __init__(self, problems: Reporter, trainer: Trainer, own: Callable[[Any], int] | None):
        self.problems, self.own = problems, own
        loaders = trainer.train_dataloader if own is None else None
        self.batches = TrainingBatches(problems, loaders, guesses=own is None)
        self._uncounted = False  # whether a batch without a count was said, once a fit
        self.epoch_start()

    def epoch_start(self) -> None:
        """A new epoch: nothing of it counted."""
        self.trained: tuple[int | None, int | None] = (None, None)  # the epoch's first and last steps that trained
        self.per_loader = [0.0] * len(self.batches.names)  # the epoch's samples per training loader
        self.counted = 0.0  # this rank's samples of the epoch (NaN: a step's were not counted)
        self.steps, self.most = 0, 0  # the epoch's steps that trained, and the most samples any of them held
        self._first_batch: tuple[int, int | None] | None = None  # the epoch's first batch: counted, Lightning's reading

    def _count(self, part: Any) -> int | None:
        """A training loader's samples in a step's batch: 0 where it gave none, else the user's count or its length."""
        if part is None:
            return 0
        if self.own is None:
            return READINGS.read(part).samples
        given = self.own(part)
        try:
            count = operator.index(given)  # an int, or one of NumPy's or torch's (a 0-dim integer tensor)
        except TypeError:
            count = -1
        if isinstance(given, bool) or getattr(given, "dtype", None) in (torch.bool, np.bool_):  # True is no count
            count = -1
        if count < 0:
            raise ValueError(epoch_text.not_a_count(given))
        return count

    def begin(self, trainer: Trainer, module: LightningModule, batch: Any, index: int) -> None:
        """Step ``index`` begins: read its samples; say once what the fit's first batch showed, or that none counts."""
        counts: list[int | None] = [None]
        self.index = index  # the step begun last
        try:
            counts = self.batches.begin(batch, self._count, (trainer.current_epoch, index))
        except Exception as error:
            self.problems.note("counting a step's samples", error)
        if self.batches.first is not None:  # the fit's first batch, said where the count failed too
            first, name = self.batches.take_first(), type(module).__name__
            for line in epoch_text.first_batch_lines(first, epoch_text.TIMER_AS_ONE, epoch_text.TIMER_GUESS, name):
                self.problems.say_once(trainer, line)
        # Lightning's reading of the first batch that holds a sample, where the count is the reader's own (a count of
        # the user's differs from it by design) and one loader's: one count, read only until then
        if self._first_batch is None and self.own is None and not self.batches.several and counts[0]:
            with self.problems.guard("reading the batch as Lightning does"):
                one_pass = isinstance(batch, Iterator)  # reading it would use it up
                self._first_batch = (counts[0], None if one_pass else lightning_batch_size(batch))
        if None in counts and not self._uncounted and self.own is None:  # (the user's count failing is noted)
            self._uncounted = True
            self.problems.say_once(trainer, epoch_text.uncounted(type(batch).__name__, type(module).__name__))

    def end(self, index: int) -> tuple[bool, int | None]:
        """Step ``index`` trained: whether one began (not for a None batch), and its samples (None: not counted)."""
        counts = self.batches.trained()
        if counts is None:
            return False, None
        self.trained = (index if self.trained[0] is None else self.trained[0], index)
        samples = None if None in counts else sum(counts)
        self.counted += math.nan if samples is None else samples
        self.steps, self.most = self.steps + 1, max(self.most, samples or 0)
        if self.batches.several:  # each loader's samples, where the epoch's row tells them apart
            for loader, part in enumerate(counts):
                self.per_loader[loader] += math.nan if part is None else part
        return True, samples

    def epoch_end(self) -> list[float]:
        """Each loader's samples of the ended epoch to gather over the ranks (none where one loader's).

        A step the module declined as it began, ending the epoch, is let go.
        """
        self.batches.trained()
        return self.per_loader if self.batches.several else []

    def row(self, trainer: Trainer, gathered: list[float]) -> dict[str, Any]:
        """The epoch row's sample counts: ``loader_samples`` (where several) and ``sample_counts``, where any.

        ``gathered``: each loader's samples over the ranks.
        """
        found: dict[str, Any] = {}
        with self.problems.guard("counting the epoch's samples per loader"):
            if gathered:
                named = zip(self.batches.names, gathered, strict=True)
                found["loader_samples"] = {name: None if math.isnan(n) else int(n) for name, n in named}
        with self.problems.guard("checking the epoch's samples against other counts"):
            counts = self.counts_apart(trainer)
            if counts:
                found["sample_counts"] = counts
        return found

    def counts_apart(self, trainer: Trainer) -> dict[str, int] | None:
        """This rank's samples of the epoch beside every other count of them known, where any disagrees.

        The others: the batch sizes ``self.log`` was given, where more than counted (a module that logs some steps only
        gives it fewer) and not the largest step's count on every step (a module that logs its configured batch
        size, the short last batch's too); the audit's beside; the loader's length times its batch size; and
        Lightning's reading of the epoch's first batch, unless every value ``self.log`` averaged was given its
        batch size as counted.
        """
        sizes = logged_samples(trainer) or []  # (none read, or none logged: alike here)
        logged = max(sizes, default=None)
        whole = self.steps * self.most  # every step logged as the largest
        rounded = logged == whole
        others: dict[str, int | None] = {
            "logged": logged if logged is not None and logged > self.counted and not rounded else None,
            "audit": audited_samples(trainer),
            "loader": None,
        }
        first, last = self.trained
        if first == 0 and last is not None and not self.batches.several:
            others["loader"] = loader_samples(trainer.train_dataloader, last + 1)
        counts = disagreeing(self.counted, others) or {}
        batch, lightning = self._first_batch or (0, None)
        # Lightning's reading weighs no mean the module gave its own batch sizes, each as counted
        given = bool(sizes) and all(size in (self.counted, whole) for size in sizes)
        if lightning is not None and lightning != batch and not math.isnan(self.counted) and not given:
            counts = {"counted": int(self.counted), **counts, "batch": batch, "lightning": lightning}
        return counts or None
