"""A fit's training loaders and batches as both callbacks read them: each loader's part of a step's batch."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from torch.utils.data import DataLoader, default_collate

from mnistperf.diagnosis.guard import Reporter
from mnistperf.diagnosis.measure.samples import READINGS

if TYPE_CHECKING:
    from lightning.pytorch import Trainer


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
    (``{samples}``: the samples counted, ``{how}``: what counted them, ``{module}``: the LightningModule's class), None
    where it does not guess.
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
        READINGS.forget()  # the step's batch is let go
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
                reading = READINGS.read(part)
                if len(reading.lengths) > 1:  # none for a loader that gave no batch, nor for graphs
                    where = f" of loader {name}" if self.several else ""
                    module = type(trainer.lightning_module).__name__
                    guessed = self.guess.format(samples=reading.samples, how=reading.counted_by, module=module)
                    self.problems.say_once(
                        trainer,
                        f"the tensors of a training batch{where} ({type(part).__name__}) lead with different lengths "
                        f"({', '.join(map(str, reading.lengths))}): {guessed}",
                    )
