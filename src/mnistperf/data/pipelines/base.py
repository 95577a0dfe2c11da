"""What every input pipeline provides: how it loads a split, splits off validation, and builds its loader.

Each pipeline (``v1``, ``v2``, ``resident``, ``stream``, ``litdata``) is one small subclass in
its own module; the DataModule looks the class up by name in :mod:`.registry` and never branches
on the name, and neither does anything else: what differs between pipelines is a class attribute here.
What they all share lives here too: the batch format (:func:`normalize`), the seeded validation split, the
training order of every epoch (:func:`epoch_order`), and the rule for pinning. A pipeline gets the
DataModule's options once (:class:`~mnistperf.data.options.LoaderOptions`), and at setup/loader time the
:class:`Placement` (training device, rank, world size) that only the trainer knows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import RandomSampler

from mnistperf.data.options import LoaderOptions, is_uri
from mnistperf.errors import ConfigError


@dataclass(frozen=True)
class Placement:
    """Where batches go: the training device and this process's rank among world_size."""

    device: torch.device
    rank: int = 0
    world_size: int = 1


class Pipeline:
    """One way of turning a prepared Parquet split into training batches.

    Args:
        options: the DataModule's options, checked (``batch_size``, ``num_workers``, ``seed``, ...).
    """

    #: whether batches come through DataLoader worker processes (num_workers, pin_memory apply)
    uses_workers = True

    def __init__(self, options: LoaderOptions):
        self.options = options

    #: whether it can split a validation fraction off the training data (it holds the whole split)
    can_split_off = True
    #: whether data_dir may be a URI such as s3://bucket/data
    reads_uris = False

    #: whether its training loader can hand out groups of batches (data.batches_per_step above 1)
    groups_batches = False
    #: whether it holds the whole split in the training device's memory (tune leaves it out where that would not fit)
    holds_split_on_device = False
    #: its place among the pipelines ``mnistperf tune`` tries, lowest first (cheapest to feed first); None: never tried
    tune_rank: int | None = None

    def check(self) -> None:
        """Reject option combinations this pipeline cannot honour (called when the DataModule is built)."""
        o = self.options
        if o.batches_per_step > 1 and not self.groups_batches:
            raise ConfigError(
                f"data.batches_per_step {o.batches_per_step}: the {o.pipeline} pipeline hands out one "
                "batch per step; groups of batches need data.pipeline resident (and model.cuda_graph "
                "true), or set batches_per_step 1."
            )
        if o.val_source != "test" and not self.can_split_off:
            raise ConfigError(
                f"data.val_source: the {o.pipeline} pipeline never holds the training set, "
                "so it cannot split a fraction off it; use val_source: test or another pipeline."
            )
        if is_uri(o.data_dir) and not self.reads_uris:
            raise ConfigError(
                f"data.data_dir {o.data_dir!r} is remote, and the {o.pipeline} pipeline reads local "
                "files only; use data.pipeline litdata, or a local folder."
            )

    def prepare(self, path: Path) -> None:
        """Build whatever this pipeline reads besides the Parquet split itself (run once, on one process)."""

    def load(self, path: Path, require_labels: bool, place: Placement) -> Any:
        """Read and check one split; what it returns is what ``loader`` and ``split_off`` take."""
        raise NotImplementedError

    def split_off(self, data: Any, fraction: float) -> tuple[Any, Any]:
        """A seeded (train, validation) split of loaded training data."""
        raise NotImplementedError

    def loader(self, data: Any, train: bool, place: Placement) -> Iterable[dict[str, torch.Tensor]]:
        """The iterable of ``{"image", "label"}`` batches Lightning trains or evaluates on."""
        raise NotImplementedError

    def on_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Finish a batch once it is on the training device (the DataModule's ``on_after_batch_transfer``).

        A pipeline whose loader yields finished batches leaves it as it is.
        """
        return batch

    def worker_options(self, place: Placement) -> dict[str, Any]:
        """The DataLoader settings this pipeline's loaders use; pinning applies only to CUDA."""
        o = self.options
        return {
            "num_workers": o.num_workers,
            "persistent_workers": o.persistent_workers,
            "pin_memory": pins_memory(o.pin_memory, place.device),
            "prefetch_factor": o.prefetch_factor,
        }

    def order(self, train: bool) -> tuple[bool, bool]:
        """(shuffle, drop_last) for a training or an evaluation loader."""
        return (self.options.shuffle, self.options.drop_last) if train else (False, False)


IMAGE_SHAPE = (1, 28, 28)


def normalize(pixels: torch.Tensor) -> torch.Tensor:
    """uint8 (or integer) pixels [..., 784] to float32 images [..., 1, 28, 28] in 0..1."""
    return pixels.to(torch.float32).div_(255).reshape(*pixels.shape[:-1], *IMAGE_SHAPE)


def pins_memory(requested: bool, device: torch.device) -> bool:
    """pin_memory as it applies: page-locked batches help only copies to a CUDA device."""
    return bool(requested) and device.type == "cuda"


def seeded_split(n: int, fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted (train, validation) indices of a seeded random split of n rows."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    n_val = max(1, int(round(n * fraction)))
    return order[n_val:].sort().values, order[:n_val].sort().values


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The training order of one epoch: a permutation of n rows drawn on the CPU from ``seed + epoch`` alone.

    As ``DistributedSampler`` draws its own, so every pipeline, every device and a resumed run draw the same one,
    whatever else used the random number generators before. Under DDP Lightning replaces a DataLoader's sampler
    with a ``DistributedSampler`` seeded by ``seed_everything``: the same order where that seed is ``data.seed``
    (42 in every stage config).
    """
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))


class EpochShuffle(RandomSampler):
    """A DataLoader's shuffle in :func:`epoch_order`.

    Lightning hands it the epoch (``set_epoch``) before each training epoch, and a loop without Lightning gets
    the next epoch's order at each pass.

    Args:
        data_source: the dataset; only its length is read.
        seed: the seed of every epoch's order (``data.seed``).
    """

    def __init__(self, data_source: Sized, seed: int):
        super().__init__(data_source)
        self.seed, self.epoch = seed, 0

    def set_epoch(self, epoch: int) -> None:
        """Draw the next pass's order for ``epoch``."""
        self.epoch = epoch

    def order(self) -> torch.Tensor:
        """This pass's order, as a tensor on the CPU; the next pass draws the next epoch's."""
        order = epoch_order(len(self.data_source), self.seed, self.epoch)
        self.epoch += 1
        return order

    def __iter__(self) -> Iterator[int]:
        return iter(self.order().tolist())
