"""Batches drawn from a split that lives entirely on the training device.

The split is kept as uint8 (about 47 MB for 60,000 images), shuffled every epoch in the order
the DataLoader pipelines draw (:func:`~.base.epoch_order`: drawn on the CPU, a copy of 8 bytes
per row to the device), sliced into batches and normalized there: no worker
processes, no per-item Python, no host-to-device copy per step. Under DDP each rank takes
its own disjoint share of the permutation, exactly as ``DistributedSampler`` would.

With ``batches_per_step`` k above 1 the training loader hands out *groups*: k consecutive
batches of the same permutation stacked on a leading dimension (``image`` [k, B, 1, 28, 28],
``label`` [k, B]), so that a graphed step (``model.cuda_graph``) runs k optimizer steps per
Lightning step and pays Lightning's per-step cost once per k. The batches are exactly those of
k = 1, in the same order: groups of full batches first, the full batches left over as a
shorter group, the partial last batch as a group of its own (so every step of every group has
one of two shapes). :func:`~mnistperf.model.step.step_batches` takes a group apart.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import torch
from torch.utils.data import SequentialSampler

from mnistperf.data import schema
from mnistperf.data.pipelines.base import EpochShuffle, Pipeline, Placement, normalize, seeded_split

Tensors = tuple[torch.Tensor, torch.Tensor]


class ResidentBatches:
    """An iterable of ``{"image", "label"}`` batches over device-resident tensors."""

    def __init__(
        self,
        pixels: torch.Tensor,
        labels: torch.Tensor,
        batch_size: int,
        shuffle: bool,
        seed: int,
        drop_last: bool = False,
        rank: int = 0,
        world_size: int = 1,
        batches_per_step: int = 1,
    ):
        self.pixels, self.labels = pixels, labels
        self.batch_size, self.shuffle, self.seed, self.drop_last = batch_size, shuffle, seed, drop_last
        self.rank, self.world_size = rank, world_size
        self.batches_per_step = batches_per_step
        n = len(labels)
        # As a DataLoader's: Lightning hands the epoch to sampler.set_epoch before each training epoch.
        self.sampler = EpochShuffle(range(n), seed) if shuffle else SequentialSampler(range(n))
        self.batch_sampler = None
        # DistributedSampler's arithmetic: pad up to a multiple of world_size, then stride by rank.
        self.samples_per_rank = math.ceil(n / world_size)

    def _spans(self) -> list[tuple[int, int, int]]:
        """(first sample, batches, batch size) of every item an epoch yields, in order."""
        full, rest = divmod(self.samples_per_rank, self.batch_size)
        k = self.batches_per_step
        spans = [(first * self.batch_size, min(k, full - first), self.batch_size) for first in range(0, full, k)]
        if rest and not self.drop_last:
            spans.append((full * self.batch_size, 1, rest))
        return spans

    def __len__(self) -> int:
        return len(self._spans())

    def indices(self) -> torch.Tensor:
        """This rank's sample indices for this pass, on the device.

        A shuffled loader's next pass draws the next epoch's order, unless Lightning sets the epoch first.
        """
        n, device = len(self.labels), self.labels.device
        if isinstance(self.sampler, EpochShuffle):
            order = self.sampler.order().to(device)  # the DataLoader pipelines' order too
        else:
            order = torch.arange(n, device=device)
        padding = self.samples_per_rank * self.world_size - n
        if padding:
            order = torch.cat([order, order[:padding]])
        return order[self.rank :: self.world_size]

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        order = self.indices()
        for first, batches, size in self._spans():
            index = order[first : first + batches * size]
            if self.batches_per_step > 1:  # a group: one gather for its k batches
                index = index.view(batches, size)
            yield {"image": normalize(self.pixels[index]), "label": self.labels[index]}


class ResidentPipeline(Pipeline):
    """The whole split on the training device as uint8; batches sliced there, no DataLoader."""

    uses_workers = False
    groups_batches = True
    holds_split_on_device = True
    tune_rank = 10

    def load(self, path: Path, require_labels: bool, place: Placement) -> Tensors:
        """The split's (pixels, labels), checked, on the training device."""
        # Straight to the device: no host copy outlives setup.
        pixels, labels = schema.to_tensors(schema.read_checked(path, require_labels))
        return pixels.to(place.device), labels.to(place.device)

    def split_off(self, data: Tensors, fraction: float) -> tuple[Tensors, Tensors]:
        """A seeded (train, validation) split of the rows, where they are."""
        train, val = seeded_split(len(data[1]), fraction, self.options.seed)
        return _rows(data, train), _rows(data, val)

    def loader(self, data: Tensors, train: bool, place: Placement) -> ResidentBatches:
        """Batches sliced from the resident split on its device; no DataLoader, no workers."""
        o = self.options
        shuffle, drop_last = self.order(train)
        return ResidentBatches(
            *data,
            o.batch_size,
            shuffle,
            o.seed,
            drop_last,
            place.rank,
            place.world_size,
            o.batches_per_step if train else 1,
        )


def _rows(data: Tensors, index: torch.Tensor) -> Tensors:
    pixels, labels = data
    return pixels[index.to(pixels.device)], labels[index.to(labels.device)]
