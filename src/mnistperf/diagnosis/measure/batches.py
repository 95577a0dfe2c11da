"""What a training batch holds, read the way both callbacks read it: its tensors.

A batch is a tensor or any nest of dicts, tuples, lists (named tuples too) and dataclasses around
tensors; :func:`tensors_of` walks it, a dataclass's every field included (fields set in
``__post_init__``, such as a batched graph's node features, too). Samples are counted as the leading
length of the first tensor, as Lightning's ``extract_batch_size`` counts them; where the batch's
tensors lead with different lengths (a graph batch's atoms and its molecules), that count is a guess,
and :func:`leading_lengths` lets a callback say so once.

A fit with several training loaders (a dict, list or tuple of them, or a CombinedLoader) trains on one batch
a step holding each loader's batch at its key: :class:`Loaders` finds each loader's part, so that every
loader's samples are counted, and told apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch


def tensors_of(batch: Any) -> list[torch.Tensor]:
    """Every tensor of a batch, in order (a tensor, or the tensors of any nest of containers and dataclasses)."""
    if isinstance(batch, torch.Tensor):
        return [batch]
    if type(batch) is dict or isinstance(batch, Mapping):  # a plain dict skips the abstract class's slower check
        items: Any = batch.values()
    elif isinstance(batch, (tuple, list)):
        items = batch
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


def _holds_loaders(node: Any) -> bool:
    """Whether Lightning reads ``node`` as a container of training loaders (a dict, list or tuple of iterables).

    As CombinedLoader flattens its iterables: a container of nothing but numbers and strings is one iterable.
    """
    items = list(node.values()) if isinstance(node, Mapping) else node if isinstance(node, (list, tuple)) else None
    return items is not None and not all(isinstance(item, (int, float, str)) for item in items)


def loader_paths(loaders: Any) -> list[tuple[Any, ...]]:
    """Where each training loader's batch sits in a step's batch: the keys (and positions) leading to it.

    Lightning combines several training loaders (a dict, list or tuple of them, nested too, or a CombinedLoader's)
    into one batch a step that has their structure, each loader's batch at its keys; one loader is ``[()]``.
    """
    if not _holds_loaders(loaders):
        return [()]
    items = loaders.items() if isinstance(loaders, Mapping) else enumerate(loaders)
    return [(key, *path) for key, value in items for path in loader_paths(value)]


class Loaders:
    """A fit's training loaders, and how to find each one's part of a step's batch.

    Args:
        loaders: the fit's training loaders as Lightning holds them (``trainer.train_dataloader``).
    """

    def __init__(self, loaders: Any = None):
        self._read(loader_paths(loaders))

    def _read(self, paths: list[tuple[Any, ...]]) -> None:
        self.paths = paths
        self.names = ["/".join(map(str, path)) for path in self.paths]
        self.several = len(self.paths) > 1

    def parts(self, batch: Any) -> list[Any]:
        """Each loader's batch in a step's batch, in :attr:`names`' order (None where a loader gave none that step)."""
        found = []
        for path in self.paths:
            part = batch
            for key in path:
                part = part[key]
            found.append(part)
        return found

    def fits(self, batch: Any) -> bool:
        """Whether ``batch`` holds every loader's batch at its keys (a hook of the module may have reshaped it)."""
        try:
            self.parts(batch)
        except (KeyError, IndexError, TypeError):
            return False
        return True

    def split(self, batch: Any) -> list[Any]:
        """The batch's part of each loader (the batch itself where there is one loader)."""
        return self.parts(batch) if self.several else [batch]

    def misfit(self, batch: Any) -> str | None:
        """Where several loaders' batch does not hold each one's at its keys: their names, and from now on one loader.

        Both callbacks then read the batch as one loader's and say so once, each in its own terms.
        """
        if not self.several or self.fits(batch):
            return None
        names = ", ".join(self.names)
        self._read([()])  # one loader: the batch as it comes
        return names

    def ambiguous(self, batch: Any) -> list[tuple[str | None, Any, list[int]]]:
        """Each loader's part whose tensors lead with different lengths: (its name where several, the part, lengths).

        A sample is then a guess (a graph batch's atoms and its molecules), which a callback says once a fit.
        """
        found = []
        for name, part in zip(self.names, self.split(batch), strict=True):
            lengths = leading_lengths(part) if part is not None else []
            if len(lengths) > 1:
                found.append((name if self.several else None, part, lengths))
        return found
