"""What a training batch holds, read the same way by both callbacks: each loader's part, its tensors, its samples."""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from lightning.pytorch.utilities.data import extract_batch_size
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from torch.utils.data import DataLoader, default_collate

from mnistperf.diagnosis.guard import Reporter

if TYPE_CHECKING:
    from lightning.pytorch import Trainer


def tensors_of(batch: Any) -> list[torch.Tensor]:
    """Every tensor of a batch, in order, in any nest of mappings, sequences and dataclasses (each field of theirs).

    Fields set in ``__post_init__`` count too (a batched graph's node features).
    """
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, (tuple, list)):  # first: a sequence, or a plain dict, skips the abstract class's slower check
        items: Any = batch
    elif type(batch) is dict or isinstance(batch, Mapping):
        items = batch.values()
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        items = [getattr(batch, field.name, None) for field in dataclasses.fields(batch)]
    else:
        return []
    found = list(items)
    if all(isinstance(item, torch.Tensor) for item in found):
        return found  # the common batch, read without recursion: this runs every step
    return [tensor for item in found for tensor in tensors_of(item)]


def leading_lengths(batch: Any) -> list[int]:
    """The distinct leading lengths of a batch's tensors (0-dim ones left out), in the order first met."""
    return list(dict.fromkeys(t.shape[0] for t in tensors_of(batch) if t.ndim))


def leading_length(batch: Any) -> int | None:
    """The leading length of a batch's first tensor, as Lightning's ``extract_batch_size`` finds it; None if none."""
    first = batch  # a tensor, or a tuple, list or dict of them first, read directly: this runs every step
    if isinstance(first, (tuple, list)) and first:
        first = first[0]
    elif isinstance(first, dict) and first:
        first = next(iter(first.values()))
    if isinstance(first, torch.Tensor):
        return first.shape[0] if first.ndim else 1
    try:
        return extract_batch_size(batch)
    except (MisconfigurationException, RecursionError):
        return None


def nested(loaders: Any) -> list[Any] | tuple[Any, ...] | None:
    """The items of a nest of loaders (a mapping's values, a list's or a tuple's items); None where it is none."""
    items = list(loaders.values()) if isinstance(loaders, Mapping) else loaders
    return items if isinstance(items, (list, tuple)) else None


def loader_paths(loaders: Any) -> list[tuple[Any, ...]]:
    """Where each training loader's batch sits in a step's batch: the keys (and positions) leading to it.

    Lightning combines several training loaders (a dict, list or tuple of them, nested too, or a CombinedLoader's)
    into one batch a step of their structure; one loader is ``[()]``. As CombinedLoader flattens its iterables, a
    container of nothing but numbers and strings is one loader.
    """
    items = nested(loaders)
    if items is None or all(isinstance(item, (int, float, str)) for item in items):
        return [()]
    pairs = loaders.items() if isinstance(loaders, Mapping) else enumerate(loaders)
    return [(key, *path) for key, value in pairs for path in loader_paths(value)]


def collated_anew(loaders: Any) -> bool:
    """Whether every training loader (a DataLoader, or a nest of them) makes each batch's tensors anew.

    Torch's ``default_collate`` stacks each field into a new tensor; another collate, or none, may hand out the same
    buffer again, or the dataset's own tensors.
    """
    if isinstance(loaders, DataLoader):
        return loaders.collate_fn is default_collate
    items = nested(loaders)
    return items is not None and bool(items) and all(collated_anew(item) for item in items)


def may_run_workers(loaders: Any) -> bool:
    """Whether a fit's loaders (a DataLoader, a nest of them, or None) may run worker processes: True unless known not.

    A DataLoader with ``num_workers=0`` runs none; any other iterable may.
    """
    if loaders is None or isinstance(loaders, DataLoader):
        return loaders is not None and loaders.num_workers > 0
    items = nested(loaders)
    return items is None or any(may_run_workers(item) for item in items)


def fit_may_run_workers(trainer: Trainer) -> bool:
    """Whether the fit's training or validation loaders may run workers; validation's not yet loaded may.

    A validation loader's workers run inside the epoch: its persistent ones through training too.
    """
    validation = trainer.val_dataloaders
    if validation is None and trainer.enable_validation:  # loaded as it first runs, where no sanity check did
        return True
    return may_run_workers(trainer.train_dataloader) or may_run_workers(validation)


class TrainingBatches:
    """A fit's training batches as one callback reads them: each loader's part, a step's reading kept until it trained.

    ``as_one``: what the callback does with a batch read as one loader's; ``loaders``: ``trainer.train_dataloader``
    (None, or unreadable: one loader's batches); ``guess``: what it takes a sample for where a part's tensors disagree
    (``{first}``: the first tensor's length, ``{module}``: the LightningModule's class), None where it does not guess.
    """

    def __init__(self, problems: Reporter, as_one: str, loaders: Any = None, guess: str | None = None):
        self.problems, self.as_one, self.guess = problems, as_one, guess
        self._use([()])
        with problems.guard("reading the training loaders"):
            self._use(loader_paths(loaders))
        self.pending: list[Any] | None = None  # what the step begun read of each loader's part (None: no step)
        self._checked = False

    def _use(self, paths: list[tuple[Any, ...]]) -> None:
        self.paths, self.names, self.several = paths, ["/".join(map(str, path)) for path in paths], len(paths) > 1
        self._whole = paths == [()]  # one loader's batch: the step's batch itself

    def parts(self, batch: Any) -> list[Any]:
        """Each loader's part of a step's batch (or of the loaders), in :attr:`names`' order (None: it gave none)."""
        return [functools.reduce(operator.getitem, path, batch) for path in self.paths]

    def begin(self, trainer: Trainer, batch: Any, read: Callable[[Any], Any]) -> list[Any]:
        """A step begins: ``read`` of each loader's part, kept as :attr:`pending` until :meth:`trained`.

        ``read`` gets None for a loader that gave no batch this step; where reading fails, ``[None]`` is kept.
        """
        self.pending = [None]
        if not self._checked:
            self._checked = True
            self._check(trainer, batch)
        self.pending = [read(batch)] if self._whole else [read(part) for part in self.parts(batch)]
        return self.pending

    def trained(self) -> list[Any] | None:
        """What the step begun read, now that it trained; None where none began since (a skipped or None batch)."""
        pending, self.pending = self.pending, None
        return pending

    def _check(self, trainer: Trainer, batch: Any) -> None:
        """Say once what the fit's first batch shows: loaders not at their keys, tensors that make a sample a guess."""
        if self.several:
            try:
                self.parts(batch)
            except (KeyError, IndexError, TypeError):
                self.problems.say_once(
                    trainer,
                    f"a training batch ({type(batch).__name__}) does not hold the batches of the training loaders "
                    f"({', '.join(self.names)}) at their keys (a hook of the module reshaped it?): {self.as_one}",
                )
                self._use([()])
        if self.guess is None:
            return
        with self.problems.guard("reading the first batch's tensors"):
            for name, part in zip(self.names, self.parts(batch), strict=True):
                lengths = leading_lengths(part)  # none for a loader that gave no batch
                if len(lengths) > 1:
                    where = f" of loader {name}" if self.several else ""
                    guessed = self.guess.format(first=lengths[0], module=type(trainer.lightning_module).__name__)
                    self.problems.say_once(
                        trainer,
                        f"the tensors of a training batch{where} ({type(part).__name__}) lead with different lengths "
                        f"({', '.join(map(str, lengths))}): {guessed}",
                    )
