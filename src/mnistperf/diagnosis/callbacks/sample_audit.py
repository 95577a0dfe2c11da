"""SampleAudit: a Lightning callback that checks every training sample is seen once per epoch, over every rank.

What it counts and how to read its line: docs/diagnose.md. Each rank keeps its trained samples' fingerprints on the
device; at the epoch's end every rank's are gathered and counted, and rank 0 prints one line and logs the counts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from typing_extensions import override

from mnistperf.diagnosis.callbacks.arguments import check
from mnistperf.diagnosis.callbacks.audit_rows import audit_epoch_row
from mnistperf.diagnosis.callbacks.batch_hooks import skip_unused_batch_hooks
from mnistperf.diagnosis.callbacks.project_reader import closes_stopped_epoch
from mnistperf.diagnosis.callbacks.sample_identity import KeptRows, SampleAuditError, SampleIdentity
from mnistperf.diagnosis.guard import Reporter
from mnistperf.diagnosis.measure.batches import TrainingBatches
from mnistperf.diagnosis.measure.fingerprint import Fingerprinter
from mnistperf.diagnosis.measure.held_steps import HeldSteps
from mnistperf.diagnosis.measure.sample_counts import (
    ORDER_SAMPLES,
    Order,
    draws_again,
    gathered_shares,
    left_out_by_design,
    padded_by_design,
    replayed,
    restored_parts,
    restored_replays,
)
from mnistperf.diagnosis.record import audit_text, epoch_text
from mnistperf.upstream import fetched_by_step, step_unfinished, steps_started

COUNTS = ("seen", "distinct", "duplicates", "missing")  # logged, where known: the last two unless log_all


class SampleAudit(Callback):
    """Checks that an epoch trains on every sample once, over all ranks and each training loader apart.

    ``epochs`` holds each epoch's row; one not audited (a batch the audit could not fingerprint) has
    ``"audited": False`` and why.

    Args:
        dataset_size: samples in the training set (every loader's together), to count the missing; by default each
            training DataLoader's map-style dataset's length where it batches single items.
        sample_id: a field of each loader's batch (a dict's key, a tuple's position, a namedtuple's or an object's
            attribute) holding an integer index per sample, counted instead of the content's fingerprint.
        fingerprint: ``batch -> int64 tensor [N]``, each sample's identity, instead of either of the above.
        sample_dims: leading dimensions of the batch's tensors that index samples (2 for a [k, B, ...] batch).
        strict: raise :class:`SampleAuditError` on every rank at the end of an epoch with a duplicate or a missing
            (not where what a sample is was a guess, said at the fit's start).
        max_words: 16-bit words of each tensor of a sample that the content hash reads at most.
        seed: seed of the content hash's weights.
        log_all: hand the loggers every count of an epoch (seen, distinct, duplicates, missing), not just the last two.
    """

    def __init__(
        self,
        dataset_size: int | None = None,
        sample_id: str | int | None = None,
        fingerprint: Callable[[Any], torch.Tensor] | None = None,
        sample_dims: int = 1,
        strict: bool = False,
        max_words: int = 4096,
        seed: int = 0,
        log_all: bool = False,
    ):
        check("SampleAudit", locals())
        self.dataset_size, self.sample_id, self.fingerprint = dataset_size, sample_id, fingerprint
        self.sample_dims, self.strict, self.log_all = sample_dims, strict, log_all
        self.hash = Fingerprinter(seed, max_words)
        self.identity = SampleIdentity(sample_id, fingerprint, sample_dims, self.hash)
        self.epochs: list[dict[str, Any]] = []
        self.problems = Reporter("SampleAudit")  # what went wrong inside the audit: each said once
        self.batches = TrainingBatches(self.problems)  # the fit's training batches
        self.kept = KeptRows()  # whether steps' rows are held uncopied
        self._start_epoch()
        self._previous: torch.Tensor | None = None  # this rank's fingerprints of the last epoch, in their order
        self._restored: dict[str, Any] | None = None
        self._in_epoch = False  # the same on every rank: whether a checkpoint carries fingerprints
        self._trainer: Trainer | None = None
        self._failed: str | None = None  # why this rank could not fingerprint the epoch (it is then not audited)
        self._counted: tuple[int, int] | None = None  # the epoch's index and this rank's samples of it so far
        self._started_before = -1  # the epoch's steps started as the step pending began (-1: not known)
        self._handed: Any = None  # the batch the latest batch-start hook was handed
        self._declined = False  # whether the module declined the epoch's last step begun, ending the epoch
        skip_unused_batch_hooks(self)

    @property
    def samples_counted(self) -> tuple[int, int] | None:
        """The epoch's index and this rank's samples of it audited so far; None where the epoch is not audited.

        The step begun last is counted first, where it ran (asked at the epoch's end: its last fetched batch too).
        """
        self._settle()
        self._take_fetched()
        return None if self._failed is not None else self._counted

    def _take_fetched(self) -> None:
        """At an epoch's end, once: the batch its last step fetched, where steps fetch their own (``dataloader_iter``).

        Lightning hands each step's hooks the batch fetched before it: no hook is handed the last.
        """
        trainer = self._trainer
        with self.problems.guard("reading the batch the epoch's last step fetched"):
            fetches_itself, last = fetched_by_step(trainer) if trainer is not None else (False, None)
            if trainer is not None and fetches_itself and last is not None and last is not self._handed:
                self._handed = last
                self.batches.begin(last, self._read, (trainer.current_epoch, -1))
                self._commit()

    def fingerprints(self, batch: Any) -> torch.Tensor:
        """The fingerprints [N] of a batch's samples (one loader's batch), on the batch's device."""
        return self.identity.fingerprints(batch)

    def _read(self, part: Any) -> Any:
        """A loader's part of a step's batch as kept until it trained: its fingerprints, or its sample rows.

        The rows are hashed later, with other steps' rows (:class:`.KeptRows` copies them or keeps them as they are).
        """
        if part is None or not self.identity.by_content:
            return None if part is None else self.fingerprints(part)
        found = self.identity.rows(part)
        return found if isinstance(found, torch.Tensor) else self.kept.keep(found)  # (a batch of items: hashed at once)

    def _watch(self, trainer: Trainer) -> None:
        with self.problems.guard("reading how the training loaders make their batches"):
            self.kept.watch(trainer)

    def _check_watched(self) -> None:
        """A kept step whose rows changed since its start leaves the epoch not audited (:meth:`.KeptRows.check`)."""
        if not self.kept.check():
            self._failed = audit_text.CHANGED_IN_PLACE

    def _flush(self) -> None:
        self._check_watched()  # before the rows are hashed
        for loader, found in enumerate(self._held.flush()):
            self._seen[loader].extend(found)

    def _local(self, trainer: Trainer) -> list[torch.Tensor]:
        """This rank's fingerprints of the epoch so far, per loader, on the training device."""
        self._flush()
        none = torch.empty(0, dtype=torch.int64, device=trainer.strategy.root_device)
        return [torch.cat([none, *(f.to(none.device) for f in seen)]) for seen in self._seen]

    def _collected(self, trainer: Trainer) -> list[torch.Tensor]:
        """:meth:`_local`, or where collecting fails, none: the epoch is not audited; the fit goes on.

        Every rank still takes part in the gather that follows.
        """
        try:
            return self._local(trainer)
        except Exception as error:
            self._failed = self.problems.note("collecting the epoch's fingerprints", error)
            self._start_epoch()
            return self._local(trainer)

    @override
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Keep the trainer, which state_dict needs to gather the epoch's fingerprints; start a fit afresh.

        An audit listed in a second fit keeps none of the first's rows, nor its last order to compare with.
        """
        self._trainer = trainer
        if stage == "fit":
            self.epochs, self._previous = [], None
            self.problems = Reporter("SampleAudit")
            self.identity = SampleIdentity(self.sample_id, self.fingerprint, self.sample_dims, self.hash)

    @override
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Read the training loaders; on a run resumed inside an epoch, take back this rank's fingerprints of it."""
        guesses = self.identity.by_content and self.sample_dims == 1  # where a sample's rows may be a guess
        self.batches = TrainingBatches(self.problems, trainer.train_dataloader, guesses, rows=guesses)
        self.hash.widths.clear()  # this fit's widths
        self._fields: tuple[str, ...] = ()  # the named fields a sample's rows are, once the first batch is read
        self._guessed = False  # whether the first batch left what a sample is a guess (its tensors' lengths differ)
        self.kept = KeptRows()
        self._watch(trainer)
        self._start_epoch()
        restored, self._restored = self._restored, None
        with self.problems.guard("restoring the epoch's fingerprints from the checkpoint"):
            if restored is not None and restored["epoch"] == trainer.current_epoch:  # resumed inside that epoch
                self._restore(trainer, restored)

    def _start_epoch(self) -> None:
        """Nothing of the epoch seen or held yet, for each training loader."""
        count = len(self.batches.names)
        self._seen: list[list[torch.Tensor]] = [[] for _ in range(count)]  # per loader: the epoch's fingerprints
        self._carried_counts = [0] * count  # per loader: how many fingerprints a checkpoint carried (at the front)
        self._carried_replays = [0] * count  # per loader: the sightings among them replayed after earlier resumes
        self._held = HeldSteps(self.hash, count)  # per loader: the steps' sample rows not yet hashed
        self.kept.forget()
        self._steps: int | None = None  # the epoch's steps begun so far (None: none yet)
        self._first_index: int | None = None  # the epoch's first step begun (past 0: resumed inside the epoch)

    def _restore(self, trainer: Trainer, restored: dict[str, Any]) -> None:
        """Take back this rank's fingerprints of the epoch, per loader (every rank's on rank 0, where ranks changed)."""
        mine = restored_parts(restored, len(self.batches.names), trainer.world_size, trainer.global_rank)
        self._seen = [[part.to(trainer.strategy.root_device)] for part in mine]
        self._carried_counts = [len(part) for part in mine]
        self._carried_replays = restored_replays(restored, len(mine))
        self._in_epoch = True
        self._failed = restored.get("failed")  # an epoch not audited before the interruption is not audited after it
        self._previous = None  # the order before the interruption is not known

    @override
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Start the epoch's fingerprints afresh (unless carried over from the checkpoint)."""
        if not any(self._carried_counts):  # Lightning calls this hook on a resumed epoch's start only if none of it ran
            self._start_epoch()
        self._in_epoch, self._failed = True, None
        self._counted = (trainer.current_epoch, 0)
        self._watch(trainer)  # the loaders may have been reloaded

    @override
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        """Count the step begun before, which ran; read each loader's samples of this one, on the device.

        The audit has no per-step hook at a step's end: a step declined as it began (the module's batch start returning
        -1) ends the epoch, so a step begun before another ran (:meth:`_settle`). Failing, the epoch is not audited.
        """
        self._commit(let_go=False)  # the batch read for this step, by another callback already, is kept
        self._handed = batch
        if self._steps is None:
            self._first_index = batch_idx
        self._steps = batch_idx + 1  # the epoch's steps begun so far
        if self._failed is not None:
            return
        try:
            if self.kept.deciding:
                self._check_watched()
            self.batches.begin(batch, self._read, (None if trainer is None else trainer.current_epoch, batch_idx))
            if len(self._seen) > len(self.batches.names):  # read as one loader's from now on: pool what was carried
                seen, carried = [f for fingerprints in self._seen for f in fingerprints], sum(self._carried_counts)
                replays = sum(self._carried_replays)
                self._start_epoch()
                self._seen, self._carried_counts, self._carried_replays = [seen], [carried], [replays]
        except Exception as error:
            self._failed = self.problems.note("fingerprinting a training batch", error)
        if self.batches.first is not None:  # the fit's first batch, said where the read failed too
            first, module = self.batches.take_first(), type(pl_module).__name__
            self._fields = first.fields if first is not None else ()
            self._guessed = first is not None and bool(first.uneven)
            for line in epoch_text.first_batch_lines(first, epoch_text.AUDIT_AS_ONE, epoch_text.AUDIT_GUESS, module):
                self.problems.say_once(trainer, line)
        try:  # not a guard's context: this runs every step
            self._started_before = -1 if trainer is None else steps_started(trainer)
        except Exception as error:
            self._started_before = -1  # not known: the step is counted as one that ran
            self.problems.note("reading the steps Lightning started", error)

    def _settle(self) -> None:
        """Count the step begun last where it trained; let it go where it did not (declined as it began, or raised).

        Either way the batches read are let go (also where the step's read failed, leaving nothing pending). A step
        that fetches its own batches was handed the batch the step before it fetched last, which trained: that is
        counted, and the batch the step fetched is let go where it did not train (:meth:`_take_fetched`).
        """
        trainer, ran, fetches_itself, last = self._trainer, True, False, None
        if self.batches.pending is not None and self._started_before >= 0 and trainer is not None:
            with self.problems.guard("reading the steps Lightning started"):
                self._declined = steps_started(trainer) == self._started_before  # -1 from the module: never started
                ran = not self._declined and not step_unfinished(trainer)
                fetches_itself, last = fetched_by_step(trainer)
        if ran or fetches_itself:
            self._commit()
        else:
            self.batches.trained()
        if not ran and last is not None:  # its own batch, which it did not train (its loader ran out inside it)
            self._handed = last

    def _commit(self, let_go: bool = True) -> None:
        """Count the samples of the step begun (it trained); ``let_go``: its batch is no longer read."""
        pending = self.batches.trained(let_go)
        if pending is None or self._failed is not None:
            return
        try:
            for loader, item in enumerate(pending):
                if isinstance(item, torch.Tensor):
                    self._seen[loader].append(item)
                    samples = item.numel()
                elif item is not None:
                    rows, watched = item
                    samples = rows.samples
                    self.kept.trained(watched)
                    if self._held.hold(loader, rows):  # the held steps are due to be hashed
                        self._flush()
                if item is not None and self._counted is not None:
                    self._counted = (self._counted[0], self._counted[1] + samples)
        except Exception as error:
            self._failed = self.problems.note("fingerprinting a training batch", error)

    @override
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Count the step before the validation, which ran, so that no training batch is held through it."""
        self._settle()

    @override
    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Gather every rank's fingerprints of the epoch and audit them (every rank gathers, also one that failed).

        A step that fetches its own batches is handed the batch fetched before it: the last one is read here.
        """
        self._settle()
        self._take_fetched()
        carried, replays, steps, first = self._carried_counts, self._carried_replays, self._steps, self._first_index
        parts = self._collected(trainer)
        self._start_epoch()
        self._in_epoch = False
        if self._failed is not None:  # the rank sends the empty fingerprints of the epoch just restarted
            self._counted = None
            parts, carried = self._local(trainer), self._carried_counts
            order, self._previous = Order.FAILED, None
        else:
            local = torch.cat(parts)
            previous = self._previous if len(local) >= ORDER_SAMPLES else None
            order = Order.UNKNOWN if previous is None else Order(int(torch.equal(previous, local)))
            self._previous = local
        shares = gathered_shares(trainer, parts, order, carried)
        loaders: list[Any] = []  # (none read: none has a size, a cause or a sampler known)
        with self.problems.guard("reading the training loaders"):
            loaders = self.batches.parts(trainer.train_dataloader)
        draws = None
        with self.problems.guard("reading whether the training sampler draws again"):
            draws = draws_again(loaders)
        row = audit_epoch_row(
            trainer,
            shares,
            loaders,
            self.batches.names,
            self.problems,
            failed_here=self._failed,
            progress=(steps, first, carried, replays),
            dataset_size=self.dataset_size,
            sample_dims=self.sample_dims,
            declined=self._declined,
            copies_drawn_once=self.identity.by_content and not self._guessed and draws is False,
        )
        self._declined = False
        self._failed = None
        if row["audited"] and self._guessed:
            row["guessed"] = True
        note = audit_text.content_note(row, self.identity.by_content, self._fields, draws)
        if row["audited"]:
            logged = {f"audit/{k}": float(row[k]) for k in COUNTS[0 if self.log_all else 2 :] if row[k] is not None}
            self.problems.log(trainer, logged, "the epoch's counts")
        line = audit_text.format_audit(row, self.identity.by_content, self._fields, draws)
        explained = draws is True  # (a sampler that draws again explains its duplicates)
        widest = self.hash.widest_sampled() if self.identity.by_content and row.get("duplicates") else None
        if widest is not None and not explained:  # duplicates the words left unread may explain
            line += f"; {audit_text.sampled_words(widest, self.hash.max_words)}"
        self.epochs.append(row)
        self.problems.say(trainer, line)
        if note is not None:  # what the duplicates mean, once a fit
            self.problems.say_once(trainer, note)
        widths = self.hash.widths_vary()
        if widths is not None:
            self.problems.say_once(trainer, audit_text.widths_vary(widths, self.hash.max_words))
        if trainer.interrupted:  # the fit's own error stands: strict adds none
            return
        again = row.get("replayed") or 0  # a resume's: each seen again in the place of one left out
        repeated = (row.get("duplicates") or 0) > padded_by_design(row) + again
        if self.strict and (repeated or (row.get("missing") or 0) > left_out_by_design(row) + again):
            if row.get("guessed"):  # counts of a guess of the audit's stop no fit: the line says what to pass
                self.problems.say_once(trainer, audit_text.STRICT_ON_A_GUESS)
                return
            raise SampleAuditError(f"{line}{f'; {note}' if note else ''} (SampleAudit strict=True)")

    @override
    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self.audit_stopped_epoch(trainer, pl_module)

    def audit_stopped_epoch(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Audit the epoch the fit stopped inside as far as it trained, where :func:`.closes_stopped_epoch`; once.

        Strict does not raise there: the fit's own error stands. The timer beside asks first, before its summary. An
        epoch of which no step trained, nor was carried by a checkpoint, has nothing to audit: it gets no line.
        """
        if self._in_epoch and self._steps and closes_stopped_epoch(trainer):
            with self.problems.guard("auditing the epoch the fit stopped inside"):  # never in the error's place
                self._settle()
                trained = self._counted is not None and self._counted[1] > 0
                if trained or any(self._carried_counts) or self._failed is not None:
                    self.on_train_epoch_end(trainer, pl_module)

    @override
    def state_dict(self) -> dict[str, Any]:
        """The current epoch's fingerprints of every rank, with each rank's count per training loader.

        A collective under DDP: every rank must save the checkpoint, as Lightning's ModelCheckpoint does. A step
        that has begun counts as trained (a checkpoint saved at its end, before this callback's own hook).
        """
        trainer = self._trainer
        if trainer is None or not self._in_epoch:
            return {}
        self._settle()
        parts = self._collected(trainer)
        order = Order.UNKNOWN if self._failed is None else Order.FAILED
        shares = gathered_shares(trainer, parts, order, self._carried_counts)
        failed = [rank for rank, share in enumerate(shares) if share.order == Order.FAILED]
        why = (self._failed or audit_text.unfingerprinted(failed, warned=False)) if failed else None
        return {
            "epoch": trainer.current_epoch,
            "fingerprints": [torch.cat(share.parts).cpu() for share in shares],
            "loaders": [[len(part) for part in share.parts] for share in shares],
            "replayed": [replayed(shares, at, earlier) or 0 for at, earlier in enumerate(self._carried_replays)],
            "failed": why,  # resumed too
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Keep a checkpoint's fingerprints for on_train_start (nothing when it was saved between epochs)."""
        self._restored = state_dict if state_dict else None
