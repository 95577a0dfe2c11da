"""SampleAudit: a Lightning callback that checks every training sample is seen once per epoch.

Every training step, each rank fingerprints the samples of its batch on the device (integer
arithmetic, no copy to the host, no synchronization) and keeps the fingerprints there. At the
end of the epoch the ranks' fingerprints are gathered and counted: how many samples were seen,
how many distinct, how many sightings were repeats (duplicates) and, against the dataset size
where it is known, how many samples were never seen (missing). Rank 0 prints one line and logs
the counts to the loggers; ``epochs`` holds them on every rank.

A sample's fingerprint, by default, is a hash of the bits of every tensor of the batch that
shares the batch's leading sample dimension (images, labels, ...): the same content gives the
same fingerprint, wherever and whenever it is seen. Two consequences, both said in the line when
they matter: identical samples in the data itself count as duplicates, and a random augmentation
applied before the batch reaches the step makes one sample look like several. Naming a field that
holds a sample index (``sample_id``) counts by that index instead, exactly.

The hash: each tensor's per-sample bits are read as 16-bit words, and two sums of word times a
fixed pseudo-random weight modulo the prime 2**31 - 1 make a 62-bit fingerprint. Over the choice
of the weights, two different samples share a fingerprint with probability about 2**-62, so the
expected number of false duplicates among n distinct samples is about n**2 / 2**63 (1e-7 for a
million samples). Samples of more than ``max_words`` words are hashed on that many fixed word
positions: samples equal on all of them share a fingerprint.

The epoch's fingerprints travel in checkpoints (``state_dict``), so an epoch interrupted and
resumed is counted whole. Device memory: 8 bytes per sample seen, per rank, plus the gathered
epoch at its end.

The audit never breaks the fit it watches (``strict`` aside, which asks it to): a batch it cannot
fingerprint (a ``sample_id`` the batch lacks, a ``fingerprint`` that raises) is one warning line, and
the epoch's row says it is not audited (``"audited": False`` and why) on every rank.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch.utils.data import DataLoader, IterableDataset

from mnistperf.console import say
from mnistperf.diagnosis.batch_hooks import skip_unused_batch_hooks
from mnistperf.diagnosis.batches import leading_lengths, tensors_of
from mnistperf.diagnosis.guard import Problems
from mnistperf.errors import MnistperfError

PRIME = 2**31 - 1
LANES = 2  # independent hashes of 31 bits each: a 62-bit fingerprint
# Elements of the temporary (samples x words x lanes) product per chunk of words.
CHUNK_ELEMENTS = 1 << 22
# Words per float64 matmul on a CPU: below 2**22 keeps each sum exact (see _float_lane_sums).
FLOAT_CHUNK_WORDS = 1 << 20
PADDING = -1  # fingerprints are non-negative
# Held steps are hashed together once they hold this many samples, or this many bytes.
HASH_SAMPLES = 4096
HASH_BYTES = 32 * 2**20
FAILED = -2  # a rank's same-order flag when it could not fingerprint the epoch (else -1: unknown, 0 or 1)


class SampleAuditError(MnistperfError):
    """An epoch saw a sample twice or missed one, with ``strict`` set."""


def lane_sums(values: torch.Tensor, weights: torch.Tensor, matmul: bool) -> torch.Tensor:
    """``values @ weights`` modulo PRIME, exact: [samples, words] x [words, LANES] -> [samples, LANES] int64.

    Args:
        values: words of at most 16 bits, of any integer type.
        weights: weights below PRIME.
        matmul: use a float64 matmul (CPU, where it is BLAS's and the fastest); otherwise int64 products and sums
            in chunks of at most CHUNK_ELEMENTS elements. Both give the same numbers.
    """
    if matmul:
        return _float_lane_sums(values, weights)
    # Products stay below 2**47, so a chunk of up to 2**15 words sums without overflowing int64.
    step = max(1, min(1 << 15, CHUNK_ELEMENTS // max(1, len(values) * LANES)))
    total = torch.zeros(len(values), LANES, dtype=torch.int64, device=values.device)
    for start in range(0, values.shape[1], step):
        part, factors = values[:, start : start + step].to(torch.int64), weights[start : start + step]
        total = (total + (part[:, :, None] * factors).sum(dim=1)) % PRIME
    return total


def _float_lane_sums(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """:func:`lane_sums` by float64 matmuls on the weights' 16-bit halves, whose sums float64 holds exactly.

    A word (|v| < 2**16) times a half (< 2**16) is below 2**32, so a chunk of FLOAT_CHUNK_WORDS sums below 2**52.
    """
    halves = torch.cat([weights & 0xFFFF, weights >> 16], dim=1).to(torch.float64)  # [words, 2 * LANES]
    total = torch.zeros(len(values), LANES, dtype=torch.int64, device=values.device)
    step = FLOAT_CHUNK_WORDS
    for start in range(0, values.shape[1], step):
        part = values[:, start : start + step].to(torch.float64)
        sums = (halves[start : start + step].T @ part.T).T.to(torch.int64)  # as [4, words] x [words, samples]: faster
        low, high = sums[:, :LANES], sums[:, LANES:]
        total = (total + (high % PRIME) * (1 << 16) + low) % PRIME
    return total


def joined(held: list[tuple[list[torch.Tensor], int]]) -> list[torch.Tensor] | None:
    """Each of the held steps' tensors joined along the samples; None where the steps' tensors do not agree.

    Steps agree when they hold as many tensors and each has the same type and the same shape past its first
    dimension (``torch.cat`` raises on any other shape, but would convert types).
    """
    width = len(held[0][0])
    if any(len(rows) != width for rows, _ in held):
        return None
    columns = []
    for i in range(width):
        column = [rows[i] for rows, _ in held]
        if len({t.dtype for t in column}) > 1:
            return None
        try:
            columns.append(torch.cat(column))
        except RuntimeError:
            return None
    return columns


class Fingerprinter:
    """Hashes the bits of each sample's tensors to one non-negative int64, on the tensors' device.

    Args:
        seed: seed of the fixed weights; every rank and every epoch uses the same ones.
        max_words: 16-bit words of a tensor's sample hashed at most (fixed positions beyond that).
    """

    def __init__(self, seed: int = 0, max_words: int = 4096):
        self.seed, self.max_words = seed, max_words
        self._weights: dict[tuple[int, torch.device], torch.Tensor] = {}
        self._positions: dict[tuple[int, torch.device], torch.Tensor] = {}

    def weights(self, offset: int, words: int, device: torch.device) -> torch.Tensor:
        """Weights [words, LANES] for the words of the tensor at ``offset`` among a sample's tensors."""
        key = (offset, device)
        if key not in self._weights:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + offset)
            self._weights[key] = torch.randint(
                1, PRIME, (self.max_words, LANES), generator=generator, dtype=torch.int64
            ).to(device)
        return self._weights[key][:words]

    def words(self, tensor: torch.Tensor, samples: int) -> torch.Tensor:
        """The tensor's bits as [samples, words], int16 words (uint8 for 1-byte types)."""
        flat = tensor.detach().reshape(samples, -1)
        if flat.dtype == torch.bool:
            flat = flat.to(torch.uint8)
        flat = flat.contiguous()
        words = flat.view(torch.uint8) if flat.element_size() == 1 else flat.view(torch.int16)
        count = words.shape[1]
        if count > self.max_words:
            key = (count, words.device)
            if key not in self._positions:
                generator = torch.Generator().manual_seed(self.seed + count)
                chosen = torch.randperm(count, generator=generator)[: self.max_words].sort().values
                self._positions[key] = chosen.to(words.device)
            words = words[:, self._positions[key]]
        return words  # int16 words are signed: the sums' remainder is non-negative anyway

    def __call__(self, tensors: Sequence[torch.Tensor], samples: int) -> torch.Tensor:
        """Fingerprints [samples] of the samples spread over ``tensors`` (each with ``samples`` leading rows)."""
        device = tensors[0].device
        lanes = torch.zeros(samples, LANES, dtype=torch.int64, device=device)
        for offset, tensor in enumerate(tensors):
            values = self.words(tensor.to(device), samples)
            weights = self.weights(offset, values.shape[1], device)
            lanes = (lanes + lane_sums(values, weights, matmul=device.type == "cpu")) % PRIME
        return lanes[:, 0] * PRIME + lanes[:, 1]


class SampleAudit(Callback):
    """Checks that an epoch trains on every sample once, over all ranks, and says what it found.

    Args:
        dataset_size: samples in the training set, to count the missing. Default: the length of
            the training DataLoader's map-style dataset when it batches single items (the whole
            dataset, whatever the number of ranks); otherwise unknown and missing is not counted.
        sample_id: a field of the batch holding an integer index per sample (a key of a dict
            batch, a position of a tuple batch): the audit counts these indices instead of
            fingerprinting content, so identical samples in the data are not taken for duplicates.
        fingerprint: a function ``batch -> int64 tensor [N]`` giving each sample's identity,
            instead of either of the above.
        sample_dims: leading dimensions of the batch's tensors that index samples (2 for a
            batch holding a group of batches as [k, B, ...]).
        strict: raise :class:`SampleAuditError` at the end of an epoch with a duplicate or a
            missing sample (on every rank, so none is left waiting).
        max_words: 16-bit words of each tensor of a sample that the content hash reads at most.
        seed: seed of the content hash's weights.
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
    ):
        if sample_dims < 1:
            raise ValueError(f"SampleAudit sample_dims {sample_dims}: at least 1 leading dimension indexes samples")
        self.dataset_size, self.sample_id, self.fingerprint = dataset_size, sample_id, fingerprint
        self.sample_dims, self.strict = sample_dims, strict
        self.hash = Fingerprinter(seed, max_words)
        self.epochs: list[dict[str, Any]] = []
        self._seen: list[torch.Tensor] = []
        self._previous: torch.Tensor | None = None  # this rank's fingerprints of the last epoch, in their order
        self._restored: dict[str, Any] | None = None
        self._in_epoch = False  # the same on every rank: whether a checkpoint carries fingerprints
        self._carried = False  # _seen holds a resumed epoch's fingerprints from its checkpoint
        self._trainer: Trainer | None = None
        self.problems = Problems("SampleAudit")  # what went wrong inside the audit: each said once
        self._failed: str | None = None  # why this rank could not fingerprint the epoch (it is then not audited)
        self._held: list[tuple[list[torch.Tensor], int]] = []  # copies of the steps' sample rows not yet hashed
        self._held_samples = self._held_bytes = 0
        self._batch_read = False
        skip_unused_batch_hooks(self)

    # ------------------------------------------------------------------ fingerprints
    def fingerprints(self, batch: Any) -> torch.Tensor:
        """The fingerprints [N] of a batch's samples, on the batch's device."""
        if self.fingerprint is not None:
            return self.fingerprint(batch).reshape(-1).to(torch.int64)
        if self.sample_id is not None:
            try:
                ids = batch[self.sample_id]
            except (KeyError, IndexError, TypeError):
                raise SampleAuditError(
                    f"SampleAudit sample_id {self.sample_id!r}: the batch has no such field "
                    f"(it is a {type(batch).__name__}); name a key of a dict batch or a "
                    "position of a tuple batch"
                ) from None
            if not isinstance(ids, torch.Tensor) or ids.is_floating_point() or ids.is_complex():
                raise SampleAuditError(
                    f"SampleAudit sample_id {self.sample_id!r}: holds "
                    f"{getattr(ids, 'dtype', type(ids).__name__)}, not an integer tensor of "
                    "sample indices; pass fingerprint= to identify samples another way"
                )
            return ids.reshape(-1).to(torch.int64)
        return self.hash(*self._sample_rows(batch))

    def _sample_rows(self, batch: Any) -> tuple[list[torch.Tensor], int]:
        """The batch's tensors that share its sample dimensions, each as [samples, rest], and the samples."""
        tensors = [t for t in tensors_of(batch) if t.ndim >= self.sample_dims]
        if not tensors:
            raise SampleAuditError(
                f"SampleAudit: the batch ({type(batch).__name__}) holds no tensor with "
                f"{self.sample_dims} sample dimension(s); pass sample_id= or fingerprint="
            )
        if self.sample_dims == 1:  # every step: an int compared, not a shape sliced
            first = tensors[0].shape[0]
            return [t for t in tensors if t.shape[0] == first], first
        lead = tensors[0].shape[: self.sample_dims]
        samples = math.prod(lead)
        return [t.reshape(samples, -1) for t in tensors if t.shape[: self.sample_dims] == lead], samples

    def _hold(self, batch: Any) -> None:
        """Keep a copy of the batch's sample rows for the next :meth:`_flush`, which hashes many steps at once.

        Hashing costs mostly the launch of a dozen small operations, whatever the samples: a step's batch is
        copied (the loader may reuse its buffers) and hashed with those of the steps around it, every
        ``HASH_SAMPLES`` samples or ``HASH_BYTES`` bytes held.
        """
        rows, samples = self._sample_rows(batch)
        held = [t.detach().clone() if t.requires_grad else t.clone() for t in rows]
        self._held.append((held, samples))
        self._held_samples += samples
        self._held_bytes += sum(t.nbytes for t in held)
        if self._held_samples >= HASH_SAMPLES or self._held_bytes >= HASH_BYTES:
            self._flush()

    def _flush(self) -> None:
        """Hash the held steps' samples in order: all at once, or each run of steps whose tensors agree.

        Steps agree (see :func:`joined`) but for a smaller last batch of a different shape, or a batch structure
        that changes from step to step.
        """
        held, self._held, self._held_samples, self._held_bytes = self._held, [], 0, 0
        if not held:
            return
        columns = joined(held)
        if columns is not None:
            self._seen.append(self.hash(columns, sum(samples for _, samples in held)))
            return
        start = 0
        shapes = [[(t.dtype, t.shape[1:]) for t in rows] for rows, _ in held]
        while start < len(held):
            end = start + 1
            while end < len(held) and shapes[end] == shapes[start]:
                end += 1
            run = held[start:end]
            columns = [torch.cat([rows[i] for rows, _ in run]) for i in range(len(shapes[start]))]
            self._seen.append(self.hash(columns, sum(samples for _, samples in run)))
            start = end

    def _dataset_size(self, trainer: Trainer) -> int | None:
        if self.dataset_size is not None:
            return self.dataset_size
        loader = trainer.train_dataloader
        if (
            self.sample_dims == 1
            and isinstance(loader, DataLoader)
            and loader.batch_size is not None
            and not isinstance(loader.dataset, IterableDataset)
            and hasattr(loader.dataset, "__len__")
        ):
            return len(loader.dataset)  # the whole dataset: a distributed sampler splits it, not the dataset
        return None

    # ------------------------------------------------------------------ hooks
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Keep the trainer, which state_dict needs to gather the epoch's fingerprints."""
        self._trainer = trainer
        if stage == "fit":
            self.problems = Problems("SampleAudit")
            self._batch_read = False  # the fit's first batch is read for lengths that disagree

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """On a run resumed inside an epoch, take back this rank's fingerprints of that epoch from the checkpoint."""
        restored, self._restored = self._restored, None
        with self.problems.guard("restoring the epoch's fingerprints from the checkpoint"):
            self._restore(trainer, restored)

    def _restore(self, trainer: Trainer, restored: dict[str, Any] | None) -> None:
        if restored is not None and restored["epoch"] == trainer.current_epoch:  # resumed inside that epoch
            shares = restored["fingerprints"]
            mine = (
                shares[trainer.global_rank]
                if len(shares) == trainer.world_size
                else (torch.cat(shares) if trainer.global_rank == 0 else torch.empty(0, dtype=torch.int64))
            )
            self._seen, self._in_epoch, self._carried = [mine.to(trainer.strategy.root_device)], True, True
            self._previous = None  # the order before the interruption is not known

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Start the epoch's fingerprints afresh (unless carried over from the checkpoint)."""
        if not self._carried:  # Lightning calls this hook on a resumed epoch's start only when none of it ran
            self._seen = []
        self._held, self._held_samples, self._held_bytes = [], 0, 0
        self._in_epoch, self._carried, self._failed = True, False, None

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        """Record the batch's fingerprints, on the device; a batch that cannot be fingerprinted ends the audit."""
        if self._failed is not None:
            return
        try:
            if self.fingerprint is None and self.sample_id is None:
                if not self._batch_read:
                    self._batch_read = True
                    self._say_if_ambiguous(trainer, batch)
                self._hold(batch)
            else:
                self._seen.append(self.fingerprints(batch))
        except Exception as error:
            self._failed = self.problems.note("fingerprinting a training batch", error)

    def _say_if_ambiguous(self, trainer: Trainer, batch: Any) -> None:
        """Once a fit: where a batch's tensors lead with different lengths, say which rows are taken for samples."""
        lengths = leading_lengths(batch)
        if len(lengths) > 1 and self.sample_dims == 1 and trainer.is_global_zero:
            self._say(
                trainer,
                f"SampleAudit: the tensors of a training batch ({type(batch).__name__}) lead with different lengths "
                f"({', '.join(map(str, lengths))}): a sample is taken as a row of those leading with {lengths[0]}; "
                "pass sample_id= or fingerprint= to name what a sample is",
            )

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Gather every rank's fingerprints of the epoch and audit them (every rank gathers, also one that failed)."""
        try:
            local = self._local(trainer)
        except Exception as error:
            self._failed = self.problems.note("collecting the epoch's fingerprints", error)
        if self._failed is not None:
            local = torch.empty(0, dtype=torch.int64, device=trainer.strategy.root_device)
            same = FAILED
        else:
            same = -1 if self._previous is None else int(torch.equal(self._previous, local))
        self._previous = None if self._failed is not None else local
        self._seen, self._in_epoch, self._carried = [], False, False
        shares = self._gather(trainer, local, same)
        flags = [flag for _, flag in shares]
        if FAILED in flags:
            row: dict[str, Any] = {"epoch": trainer.current_epoch + 1, "audited": False, "why": self._why_not(flags)}
            self.epochs.append(row)
            if trainer.is_global_zero:
                self._say(trainer, f"sample audit, epoch {row['epoch']}: not audited ({row['why']})")
            self._failed = None
            return
        everything = torch.cat([share for share, _ in shares])
        distinct = int(torch.unique(everything).numel())
        size = None
        with self.problems.guard("reading the training set's size"):
            size = self._dataset_size(trainer)
        seen = int(everything.numel())
        row = {
            "epoch": trainer.current_epoch + 1,
            "audited": True,
            "seen": seen,
            "distinct": distinct,
            "duplicates": seen - distinct,
            "dataset_size": size,
            "missing": None if size is None else max(0, size - distinct),
            "per_rank": [int(share.numel()) for share, _ in shares],
            "same_order_ranks": None if -1 in flags else sum(flags),
        }  # ranks that repeated their last epoch's order
        self.epochs.append(row)
        line = self.describe(row)
        if trainer.is_global_zero:
            scalars = {
                f"audit/{k}": float(row[k]) for k in ("seen", "distinct", "duplicates", "missing") if row[k] is not None
            }
            for logger in trainer.loggers:
                with self.problems.guard(f"logging the epoch's counts to {type(logger).__name__}"):
                    logger.log_metrics(scalars, step=trainer.global_step)
            self._say(trainer, line)
        if self.strict and (row["duplicates"] or row["missing"]):
            raise SampleAuditError(f"{line} (SampleAudit strict=True)")

    def _say(self, trainer: Trainer, line: str) -> None:
        with self.problems.guard("printing the epoch's line"):
            say(trainer, line)

    def _why_not(self, flags: list[int]) -> str:
        """Why an epoch is not audited: this rank's problem, or the ranks that had one."""
        if self._failed is not None:
            return self._failed.removeprefix("SampleAudit: ")
        ranks = ", ".join(str(rank) for rank, flag in enumerate(flags) if flag == FAILED)
        return f"rank {ranks} could not fingerprint a batch; its own warning says why"

    # ------------------------------------------------------------------ counting
    def _local(self, trainer: Trainer) -> torch.Tensor:
        self._flush()
        device = trainer.strategy.root_device
        if not self._seen:
            return torch.empty(0, dtype=torch.int64, device=device)
        return torch.cat([f.to(device) for f in self._seen])

    @staticmethod
    def _gather(trainer: Trainer, local: torch.Tensor, flag: int) -> list[tuple[torch.Tensor, int]]:
        """Every rank's (fingerprints, same-order flag), in rank order (this rank's alone on one process)."""
        world = trainer.world_size
        meta = torch.tensor([local.numel(), flag], dtype=torch.int64, device=local.device)
        metas = trainer.strategy.all_gather(meta).reshape(world, 2).tolist()
        longest = max(count for count, _ in metas)
        padded = torch.full((longest,), PADDING, dtype=torch.int64, device=local.device)
        padded[: local.numel()] = local
        everyone = trainer.strategy.all_gather(padded).reshape(world, longest) if longest else padded.reshape(world, 0)
        return [(everyone[rank, :count], same) for rank, (count, same) in enumerate(metas)]

    def describe(self, row: dict[str, Any]) -> str:
        """The one-line report of an epoch's counts."""
        ranks = row["per_rank"]
        where = f" ({' + '.join(map(str, ranks))} on {len(ranks)} ranks)" if len(ranks) > 1 else ""
        line = f"sample audit, epoch {row['epoch']}: {row['seen']:,} samples seen{where}, {row['distinct']:,} distinct"
        if row["dataset_size"] is None:
            line += f": {row['duplicates']:,} duplicates (dataset size unknown: pass dataset_size to count missing)"
        else:
            line += f" of {row['dataset_size']:,}: {row['duplicates']:,} duplicates, {row['missing']:,} missing"
            extra = row["distinct"] - row["dataset_size"]
            if extra > 0:
                line += (
                    f"; {extra:,} more distinct than the dataset holds (a random augmentation before the step, "
                    "or a dataset_size that does not count samples?)"
                )
        padding = -row["dataset_size"] % len(ranks) if row["dataset_size"] else 0
        if padding and row["duplicates"] == padding:
            line += (
                f"; a distributed sampler pads {row['dataset_size']:,} samples to a multiple of {len(ranks)} "
                f"ranks by repeating {padding} (drop_last avoids it)"
            )
        elif row["duplicates"] and self.sample_id is None and self.fingerprint is None:
            line += (
                "; samples identified by content: identical samples in the data count as duplicates "
                "(sample_id= names an index field instead)"
            )
        if row["same_order_ranks"]:
            line += (
                f"; same order as epoch {row['epoch'] - 1} on {row['same_order_ranks']} of {len(ranks)} "
                f"rank{'s' if len(ranks) > 1 else ''}: is the sampler reshuffled every epoch?"
            )
        return line

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The current epoch's fingerprints of every rank.

        A collective under DDP: every rank must save the checkpoint, as Lightning's ModelCheckpoint does. A
        checkpoint saved by one rank alone (a rank-zero-only ``save_checkpoint``) would wait for the others.
        """
        trainer = self._trainer
        if trainer is None or not self._in_epoch:
            return {}
        shares = self._gather(trainer, self._local(trainer), 0)
        return {"epoch": trainer.current_epoch, "fingerprints": [share.cpu() for share, _ in shares]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Keep a checkpoint's fingerprints for on_train_start (nothing when it was saved between epochs)."""
        self._restored = state_dict if state_dict else None
