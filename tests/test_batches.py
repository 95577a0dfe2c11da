"""Batches whose tensors do not all lead with the samples: a graph batch's atoms and its molecules."""

from __future__ import annotations

import dataclasses

import torch
from lightning import LightningModule, Trainer
from torch.utils.data import DataLoader

from mnistperf.diagnosis import EpochTimer, SampleAudit
from mnistperf.diagnosis.measure.batches import leading_lengths, tensors_of

MOLECULES, BATCH = 12, 3


@dataclasses.dataclass
class Graphs:
    """Atoms of several molecules stacked, built after init from the molecules' parts, as graph libraries do."""

    parts: dataclasses.InitVar[list[torch.Tensor]]
    atoms: torch.Tensor = dataclasses.field(init=False)

    def __post_init__(self, parts: list[torch.Tensor]) -> None:
        self.atoms = torch.cat(parts)


def graph_batch(items):
    return Graphs([atoms for atoms, _ in items]), torch.stack([target for _, target in items])


def molecules() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [(torch.randn(2 + i % 3, 4, generator=generator), torch.zeros(1)) for i in range(MOLECULES)]


class Readout(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        graphs, targets = batch
        return self.layer(graphs.atoms).mean() + targets.sum() * 0

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_every_field_of_a_dataclass_is_read_those_set_after_init_too():
    graphs, targets = graph_batch(molecules()[:3])
    assert [t.shape[0] for t in tensors_of((graphs, targets))] == [graphs.atoms.shape[0], 3]
    assert leading_lengths((graphs, targets)) == [graphs.atoms.shape[0], 3]
    audit = SampleAudit()
    assert audit.fingerprints((graphs, targets)).unique().numel() == graphs.atoms.shape[0]  # the atoms, read


def test_both_callbacks_say_once_what_they_count_when_a_batchs_tensors_disagree(capsys):
    timer, audit = EpochTimer(), SampleAudit()
    trainer = Trainer(
        accelerator="cpu",
        max_epochs=2,
        callbacks=[timer, audit],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Readout(), DataLoader(molecules(), batch_size=BATCH, collate_fn=graph_batch))
    out = capsys.readouterr().out
    assert out.count("EpochTimer: the tensors of a training batch (tuple) lead with different lengths") == 1
    assert "samples are counted as the first tensor's" in out and "define samples_in_batch" in out
    assert out.count("SampleAudit: the tensors of a training batch (tuple) lead with different lengths") == 1
    assert "pass sample_id= or fingerprint=" in out


def test_one_reading_of_a_batch_serves_both_callbacks(capsys):
    """TrainingBatches splits a batch into each loader's part, says once which part's tensors disagree on a sample,
    falls back to one loader where a hook reshaped the batch, and keeps what a step read until it trained."""
    from types import SimpleNamespace

    from mnistperf.diagnosis.guard import Reporter
    from mnistperf.diagnosis.measure.batches import TrainingBatches

    trainer = SimpleNamespace(is_global_zero=True, progress_bar_callback=None, lightning_module=Readout())
    batches = TrainingBatches(Reporter("Reader"), "read as one.", {"a": [0], "b": [1]}, "taken as {first} ({module})")
    batch = {"a": (torch.zeros(4, 2), torch.zeros(4)), "b": (torch.zeros(3, 5), torch.zeros(7))}
    assert batches.begin(trainer, batch, lambda part: len(part[0])) == [4, 3] and batches.several
    assert batches.begin(trainer, batch, lambda part: len(part[0])) == [4, 3]  # the first batch alone is checked
    said = capsys.readouterr().out.splitlines()
    assert said == [
        "Reader: the tensors of a training batch of loader b (tuple) lead with different lengths (3, 7): taken as 3 "
        "(Readout)"
    ]
    assert batches.trained() == [4, 3] and batches.trained() is None  # counted once
    reshaped = (torch.zeros(4, 2), torch.zeros(4))
    batches = TrainingBatches(Reporter("Reader"), "read as one.", {"a": [0], "b": [1]})
    assert batches.begin(trainer, reshaped, len) == [2] and not batches.several and batches.names == [""]
    assert (
        "training loaders (a, b) at their keys (a hook of the module reshaped it?): read as one."
        in capsys.readouterr().out
    )
    one = TrainingBatches(Reporter("Reader"), "", guess="{first}")
    one.begin(trainer, {"x": torch.zeros(2), "y": torch.zeros(5)}, len)
    assert "a training batch (dict) lead with different lengths (2, 5): 2" in capsys.readouterr().out  # no loader named
