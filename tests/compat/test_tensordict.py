"""The two callbacks on TensorDict batches (TorchRL's and tensordict's own), loaded as tensordict's docs load them.

The library needs torch 2.11 or newer, so it is in no extra: .ci/run installs it into .venv after the README's run;
without it the module skips. The samples are image-caption pairs, each image under two captions (as a captioning set
holds them): only the caption tells a pair from its twin, so a fingerprint that leaves out a batch's strings reads
every other pair as a duplicate.
"""

from __future__ import annotations

import pytest

pytest.importorskip("tensordict")

import torch
from conftest import fit_module
from lightning import LightningModule
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase, tensorclass
from torch.utils.data import BatchSampler, DataLoader, RandomSampler

from mnistperf.diagnosis import EpochTimer, SampleAudit

IMAGES, BATCH = 12, 6
PAIRS = 2 * IMAGES


class Captioner(LightningModule):
    """Trains on the mean of a batch's images, whichever container holds them."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1))

    def training_step(self, batch, batch_idx):
        images = batch["image"] if isinstance(batch, TensorDictBase) else batch.image
        return self.weight * images.mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def pairs(repeated: int = 0) -> tuple[torch.Tensor, list[str]]:
    """Each of IMAGES seeded images twice, each time under a caption of its own; the first ``repeated`` pairs again."""
    images = torch.rand(IMAGES, 3, 4, 4, generator=torch.Generator().manual_seed(0)).repeat(2, 1, 1, 1)
    captions = [f"image {i % IMAGES}, caption {i // IMAGES}" for i in range(PAIRS)]
    return torch.cat([images, images[:repeated]]), captions + captions[:repeated]


def one_pair_each(images: torch.Tensor, captions: list[str]) -> list[TensorDict]:
    samples = []
    for image, caption in zip(images, captions, strict=True):
        sample = TensorDict({"image": image}, batch_size=[])
        sample["caption"] = caption
        samples.append(sample)
    return samples


def stacked(images: torch.Tensor, captions: list[str]) -> DataLoader:
    """A dataset of one TensorDict a pair, batched by ``torch.stack``: a TensorDict with a stack of captions."""
    return DataLoader(one_pair_each(images, captions), batch_size=BATCH, shuffle=True, collate_fn=torch.stack)


def lazily_stacked(images: torch.Tensor, captions: list[str]) -> DataLoader:
    return DataLoader(
        one_pair_each(images, captions), batch_size=BATCH, shuffle=True, collate_fn=LazyStackedTensorDict.lazy_stack
    )


def indexed(images: torch.Tensor, captions: list[str]) -> DataLoader:
    """The whole set as one TensorDict, each batch indexed out of it by a batch of indices."""
    whole = TensorDict({"image": images}, batch_size=[len(images)])
    whole["caption"] = captions
    sampler = BatchSampler(RandomSampler(range(len(images))), BATCH, drop_last=False)
    return DataLoader(whole, sampler=sampler, batch_size=None, collate_fn=lambda batch: batch)


@tensorclass
class Pair:
    image: torch.Tensor
    caption: str


def of_tensorclass(images: torch.Tensor, captions: list[str]) -> DataLoader:
    whole = Pair(image=images, caption=captions, batch_size=[len(images)])
    sampler = BatchSampler(RandomSampler(range(len(images))), BATCH, drop_last=False)
    return DataLoader(whole, sampler=sampler, batch_size=None, collate_fn=lambda batch: batch)


LOADERS = [stacked, lazily_stacked, indexed, of_tensorclass]


@pytest.mark.parametrize("loader", LOADERS)
def test_both_callbacks_count_every_pair_and_the_audit_tells_twins_apart_by_their_captions(loader):
    timer, audit = EpochTimer(), SampleAudit(dataset_size=PAIRS)
    fit_module(Captioner(), loader(*pairs()), callbacks=[timer, audit])
    assert not timer.problems.lines and not audit.problems.lines  # its first batch read without a failure said
    assert [row["samples"] for row in timer.epochs] == [PAIRS] * 2
    for row in audit.epochs:
        assert (row["audited"], row["seen"], row["distinct"], row["duplicates"], row["missing"]) == (
            True,
            PAIRS,
            PAIRS,
            0,
            0,
        )


@pytest.mark.parametrize("loader", LOADERS)
def test_the_audit_finds_pairs_the_set_holds_twice(loader):
    timer, audit = EpochTimer(), SampleAudit()
    fit_module(Captioner(), loader(*pairs(repeated=4)), callbacks=[timer, audit])
    assert [row["samples"] for row in timer.epochs] == [PAIRS + 4] * 2
    assert [(row["seen"], row["distinct"], row["duplicates"]) for row in audit.epochs] == [(PAIRS + 4, PAIRS, 4)] * 2
