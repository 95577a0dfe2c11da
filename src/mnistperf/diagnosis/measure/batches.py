"""A fit's training loaders and batches as both callbacks read them: a loader's part of a step's batch, read once."""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from torch.utils.data import DataLoader, IterableDataset, default_collate

from mnistperf.diagnosis.guard import Reporter
from mnistperf.diagnosis.measure.batch_fields import names_of
from mnistperf.diagnosis.measure.samples import Reading, Rule, plain, read

if TYPE_CHECKING:
    from lightning.pytorch import Trainer


class Recent:
    """The readings of the step's batches (at most ``size``), so that both callbacks read each batch once.

    Kept by the batch object itself (held, so that its id is not another's) until the step ends or another begins.
    """

    def __init__(self, size: int = 8):
        self.size = size
        self._kept: list[tuple[Any, int, Reading]] = []
        self._step: Any = None  # the step's whole batch
        self._key: Any = None  # which step it is

    def step(self, batch: Any, key: Any = None) -> None:
        """Step ``key`` begins with ``batch``: other steps' readings are let go (also where it is the same object)."""
        if batch is not self._step or key != self._key:
            self._step, self._key, self._kept = batch, key, []

    def read(self, batch: Any, sample_dims: int = 1) -> Reading:
        """:func:`read` of ``batch``, once while it is kept."""
        for kept, dims, reading in self._kept:
            if kept is batch and dims == sample_dims:
                return reading
        reading = read(batch, sample_dims)
        self._kept = [*self._kept[-(self.size - 1) :], (batch, sample_dims, reading)]
        return reading

    def forget(self) -> None:
        """Let go of every batch kept (a step ended)."""
        self._step, self._key, self._kept = None, None, []


READINGS = Recent()  # the one reading of each batch both callbacks share


def loader_samples(loader: Any, steps: int | None = None) -> int | None:
    """The samples a DataLoader of single items gives a whole epoch (where given, of ``steps`` batches); else None."""
    if not isinstance(loader, DataLoader) or loader.batch_size is None or isinstance(loader.dataset, IterableDataset):
        return None
    try:
        batches, samples = len(loader), len(loader.sampler)  # type: ignore[arg-type]
    except TypeError:
        return None
    if steps is not None and steps != batches:
        return None
    return batches * loader.batch_size if loader.drop_last else samples


def disagreeing(counted: float, others: dict[str, int | None]) -> dict[str, int] | None:
    """``counted`` beside every other count that is known, where any of them differs; None where all agree."""
    known = {name: int(value) for name, value in others.items() if value is not None}
    if math.isnan(counted) or all(value == counted for value in known.values()):
        return None
    return {"counted": int(counted), **known}


def nested(loaders: Any) -> list[Any] | tuple[Any, ...] | None:
    """The items of a nest of loaders (a mapping's values, a list's or a tuple's items); None where it is none."""
    items = list(loaders.values()) if isinstance(loaders, Mapping) else loaders
    return items if isinstance(items, (list, tuple)) else None


def loader_paths(loaders: Any) -> list[tuple[Any, ...]]:
    """Where each training loader's batch sits in a step's batch: the keys (and positions) leading to it.

    Lightning combines a nest of loaders into one batch of their structure; one loader is ``[()]``. As CombinedLoader
    flattens its iterables, a container of nothing but numbers and strings is one loader.
    """
    items = nested(loaders)
    if items is None or all(isinstance(item, (int, float, str)) for item in items):
        return [()]
    pairs = loaders.items() if isinstance(loaders, Mapping) else enumerate(loaders)
    return [(key, *path) for key, value in pairs for path in loader_paths(value)]


def collated_anew(loaders: Any) -> bool:
    """Whether every training loader (a DataLoader, or a nest of them) collates by ``default_collate``: tensors anew.

    Another collate, or none, may hand out the same buffer again, or the dataset's own tensors.
    """
    if isinstance(loaders, DataLoader):
        return loaders.collate_fn is default_collate
    items = nested(loaders)
    return items is not None and bool(items) and all(collated_anew(item) for item in items)


def may_run_workers(loaders: Any) -> bool:
    """Whether a fit's loaders (a DataLoader, a nest of them, or None) may run workers: any but DataLoaders of none."""
    if loaders is None or isinstance(loaders, DataLoader):
        return loaders is not None and loaders.num_workers > 0
    items = nested(loaders)
    return items is None or any(may_run_workers(item) for item in items)


def fit_may_run_workers(trainer: Trainer) -> bool:
    """Whether the fit's training or validation loaders (inside the epoch too) may run workers; unloaded ones may."""
    validation = trainer.val_dataloaders
    if validation is None and trainer.enable_validation:  # loaded as it first runs, where no sanity check did
        return True
    return may_run_workers(trainer.train_dataloader) or may_run_workers(validation)


SQUARE_CHECKS = 8  # later batches read for tensors that lead with different lengths, where the first may hide them


class FirstBatch(NamedTuple):
    """What a fit's first training batch showed, to be said once."""

    regrouped: str | None  # the batch's type, where it does not hold the loaders' batches at their keys (then one's)
    loaders: list[str]  # the training loaders it was read for
    # each part whose tensors lead with different lengths: loader, type, reading, and a mapping's first tensor's key
    uneven: list[tuple[str, str, Reading, str | None]]
    fields: tuple[str, ...] = ()  # the named fields whose rows are a sample (of one loader's part, where read)


def hashed(reading: Reading, value: Any) -> bool:
    """Whether a batch's field ``value`` is part of its samples' content as ``reading`` has it: rows, texts, nodes."""
    nodes = [t for node_set in reading.graphs.sets for t in node_set.nodes] if reading.graphs is not None else []
    if any(value is rows for rows in (*reading.rows, *nodes)):
        return True
    texts = reading.texts is not None and isinstance(value, (list, tuple)) and len(value) == reading.samples
    return texts and all(map(plain, value))


class TrainingBatches:
    """A fit's training batches as one callback reads them: each loader's part, a step's reading kept until it trained.

    ``loaders``: ``trainer.train_dataloader`` (None, or unreadable: one loader's); ``guesses``: whether :attr:`first`
    tells where a part's tensors lead with different lengths; ``rows``: also where the batch states its size.
    """

    def __init__(self, problems: Reporter, loaders: Any = None, guesses: bool = False, rows: bool = False):
        self.problems, self.guesses, self.rows = problems, guesses, rows
        self._use([()])
        with problems.guard("reading the training loaders"):
            self._use(loader_paths(loaders))
        self.pending: list[Any] | None = None  # what the step begun read of each loader's part (None: no step)
        self.first: FirstBatch | None = None  # what the first batch showed, until taken (:meth:`take_first`)
        self._checks = 1  # batches still to check for what :attr:`first` tells (more where the first may hide it)
        self._first_checked = False

    def _use(self, paths: list[tuple[Any, ...]]) -> None:
        self.paths, self.names, self.several = paths, ["/".join(map(str, path)) for path in paths], len(paths) > 1
        self._whole = paths == [()]  # one loader's batch: the step's batch itself, read without a path (every step)

    def parts(self, batch: Any) -> list[Any]:
        """Each loader's part of a step's batch (or of the loaders), in :attr:`names`' order (None: it gave none)."""
        return [functools.reduce(operator.getitem, path, batch) for path in self.paths]

    def begin(self, batch: Any, read: Callable[[Any], Any], step: Any = None) -> list[Any]:
        """Step ``step`` (a key) begins: ``read`` of each loader's part, kept until :meth:`trained` (failed: [None])."""
        self.pending = [None]
        READINGS.step(batch, step)
        if self._checks and not self._holds_none(batch):  # (an empty batch shows nothing: the next one is read)
            self._checks -= 1
            found = self._check(batch)
            if not self._first_checked:
                self._first_checked, self.first = True, found
                if not found.uneven and self._square(batch):  # a time-major [T, B, ...] with T == B leads alike
                    self._checks = SQUARE_CHECKS
            elif found.uneven:  # a later batch, read for tensors that lead with different lengths alone
                self.first, self._checks = found, 0
        self.pending = [read(batch)] if self._whole else [read(part) for part in self.parts(batch)]
        return self.pending

    def trained(self, let_go: bool = True) -> list[Any] | None:
        """What the step begun read, now that it trained (None: none began); ``let_go``: its batch's readings too."""
        pending, self.pending = self.pending, None
        if let_go:
            READINGS.forget()
        return pending

    def _holds_none(self, batch: Any) -> bool:
        """Whether one loader's batch holds no sample (a filtering collate's), where the first batch's lines read it."""
        try:
            return self.guesses and self._whole and READINGS.read(batch).samples == 0
        except Exception:  # (read again, and said, as the step reads it)
            return False

    def _square(self, batch: Any) -> bool:
        """Whether a part's tensor of sample rows has as many rows as columns: leading alike may be chance there."""
        try:
            readings = [READINGS.read(part) for part in self.parts(batch)] if self.guesses else []
            return any(t.ndim > 1 and t.shape[1] == r.samples for r in readings for t in r.rows)
        except Exception:  # (read again, and said, as the step reads it)
            return False

    def _check(self, batch: Any) -> FirstBatch:
        """What the fit's first batch shows: loaders not at their keys, tensors that make a sample a guess."""
        regrouped, loaders = None, self.names
        if self.several:
            try:
                self.parts(batch)
            except (KeyError, IndexError, TypeError):
                regrouped = type(batch).__name__
                self._use([()])
        uneven: list[tuple[str, str, Reading, str | None]] = []
        fields: tuple[str, ...] = ()
        if self.guesses:
            with self.problems.guard("reading the first batch's tensors"):
                for name, part in zip(self.names, self.parts(batch), strict=True):
                    reading = READINGS.read(part)
                    if self.rows and not self.several:
                        fields = tuple(names_of(part, functools.partial(hashed, reading)))
                    if reading.graphs is not None and reading.samples == 1:  # one graph: a node may be the sample
                        nodes = sum(len(kind.of_node) for kind in reading.graphs.sets)
                        reading = reading._replace(lengths=(1, nodes) if nodes > 1 else ())
                    # none for no batch, nor for a batch of several graphs (one graph: its node count beside it)
                    if len(reading.lengths) > 1 and (self.rows or reading.counted_by.rule is not Rule.STATED):
                        first_key = None  # a mapping's tensors in the order of its keys, which its user may not know
                        if isinstance(part, Mapping):
                            first_key = next((str(k) for k, v in part.items() if getattr(v, "ndim", 0)), None)
                        uneven.append((name if self.several else "", type(part).__name__, reading, first_key))
        return FirstBatch(regrouped, loaders, uneven, fields)

    def take_first(self) -> FirstBatch | None:
        """What the first batch showed, once: None before it and after it was taken."""
        first, self.first = self.first, None
        return first
