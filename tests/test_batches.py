"""How both callbacks read a batch's samples: one reader for any batch, graphs, fields and attributes among them."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from conftest import fit_module
from lightning import Callback, LightningModule
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

from mnistperf.diagnosis import EpochTimer, SampleAudit
from mnistperf.diagnosis.measure.batch_fields import tensors_of
from mnistperf.diagnosis.measure.fingerprint import Fingerprinter, text_digests
from mnistperf.diagnosis.measure.graph_batches import graph_count
from mnistperf.diagnosis.measure.held_steps import HeldSteps
from mnistperf.diagnosis.measure.samples import BY_FIRST_LENGTH, read
from mnistperf.diagnosis.record.epoch_text import counted_by as said
from mnistperf.diagnosis.record.epoch_text import format_counts

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
    assert list(read((graphs, targets)).lengths) == [graphs.atoms.shape[0], 3]
    audit = SampleAudit()
    assert audit.fingerprints((graphs, targets)).unique().numel() == graphs.atoms.shape[0]  # the atoms, read


def test_both_callbacks_say_once_what_they_count_when_a_batchs_tensors_disagree(capsys):
    loader = DataLoader(molecules(), batch_size=BATCH, collate_fn=graph_batch)
    fit_module(Readout(), loader, callbacks=[EpochTimer(), SampleAudit()])
    out = capsys.readouterr().out
    assert out.count("EpochTimer: the tensors of a training batch (tuple) lead with different lengths") == 1
    assert "samples a batch are counted (the first tensor's length); pass EpochTimer(samples_in_batch=" in out
    assert "define samples_in_batch" in out
    assert out.count("SampleAudit: the tensors of a training batch (tuple) lead with different lengths") == 1
    assert "pass sample_id= or fingerprint=" in out


def padded_time_major(items):
    """Sequences [T_i, 2] and labels as x [T, B, 2] padded to the batch's longest, and y [B]."""
    steps = max(len(x) for x, _ in items)
    x = torch.zeros(steps, len(items), 2)
    for at, (rows, _) in enumerate(items):
        x[: len(rows), at] = rows
    return x, torch.stack([label for _, label in items])


class TimeMajor(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_time_major_batch_whose_first_leads_alike_by_chance_is_said_at_the_first_that_does_not(capsys):
    """The first batch's longest sequence as long as its batch (x [4, 4, 2] beside y [4]) hides the guess: a later
    batch (x [6, 4, 2]) says it, once per callback, and the audit marks its counts a guess."""
    generator = torch.Generator().manual_seed(0)
    data = [(torch.randn(length, 2, generator=generator), torch.tensor(0)) for length in [4, 2, 3, 1, 6, 2, 2, 2]]
    audit, loader = SampleAudit(), DataLoader(data, batch_size=4, collate_fn=padded_time_major)
    fit_module(TimeMajor(), loader, callbacks=[EpochTimer(), audit])
    out = capsys.readouterr().out
    for callback in ("EpochTimer", "SampleAudit"):
        assert out.count(f"{callback}: the tensors of a training batch (tuple) lead with different lengths (6, 4)") == 1
    assert all(row["guessed"] for row in audit.epochs)


class Rollout:
    """A time-major batch that states its batch_size, as a [T, B] TensorDict of rollouts does: steps, then samples."""

    def __init__(self, rows: list[torch.Tensor]):
        self.obs = torch.stack(rows, dim=1)  # [T, B, F]
        self.batch_size = torch.Size(self.obs.shape[:2])


class RolloutModule(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch.obs).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_batch_size_of_several_dimensions_is_counted_by_its_first_and_both_callbacks_say_so_once(capsys):
    rows = [torch.randn(5, 3) for _ in range(16)]  # 16 rollouts of 5 steps, 4 a batch
    loader = DataLoader(rows, batch_size=4, collate_fn=Rollout)
    fit_module(RolloutModule(), loader, callbacks=[EpochTimer(), SampleAudit()])
    out = capsys.readouterr().out
    said = "a training batch (Rollout) states a batch_size of 2 dimensions (5, 4): 5 samples a batch are"
    assert out.count(f"EpochTimer: {said} counted (its batch_size's first dimension (Rollout)); pass") == 1
    assert out.count(f"SampleAudit: {said} audited (its batch_size's first dimension (Rollout)); pass") == 1


def test_training_batches_split_each_loaders_part_and_tell_what_the_first_batch_showed():
    """TrainingBatches splits a batch into each loader's part, tells which part's tensors disagree on a sample (the
    first batch alone), falls back to one loader where a hook reshaped the batch, and keeps what a step read until it
    trained."""
    from mnistperf.diagnosis.guard import Reporter
    from mnistperf.diagnosis.measure.batches import TrainingBatches
    from mnistperf.diagnosis.record.epoch_text import first_batch_lines

    batches = TrainingBatches(Reporter("Reader"), {"a": [0], "b": [1]}, guesses=True)
    batch = {"a": (torch.zeros(4, 2), torch.zeros(4)), "b": (torch.zeros(3, 5), torch.zeros(7))}
    assert batches.begin(batch, lambda part: len(part[0])) == [4, 3] and batches.several
    first = batches.take_first()
    assert first is not None and batches.take_first() is None  # told once
    assert batches.begin(batch, lambda part: len(part[0])) == [4, 3] and batches.take_first() is None  # checked once
    assert first_batch_lines(first, "read as one.", "taken as {samples} ({module})", "Readout") == [
        "the tensors of a training batch of loader b (tuple) lead with different lengths (3, 7): taken as 3 (Readout)"
    ]
    assert batches.trained() == [4, 3] and batches.trained() is None  # counted once
    reshaped = (torch.zeros(4, 2), torch.zeros(4))
    batches = TrainingBatches(Reporter("Reader"), {"a": [0], "b": [1]})
    assert batches.begin(reshaped, len) == [2] and not batches.several and batches.names == [""]
    lines = first_batch_lines(batches.take_first(), "read as one.", "", "Readout")
    assert lines == [
        "a training batch (tuple) does not hold the batches of the training loaders (a, b) at their keys (a hook of "
        "the module reshaped it?): read as one."
    ]
    one = TrainingBatches(Reporter("Reader"), guesses=True)
    one.begin({"x": torch.zeros(2), "y": torch.zeros(5)}, len)
    lines = first_batch_lines(one.take_first(), "", "{samples}", "Readout")
    assert lines == ["the tensors of a training batch (dict) lead with different lengths (2, 5): 2"]  # no loader named


class Linear(LightningModule):
    """A linear layer on batches of (x [B, 4], label [B]), validated on the same."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).mean()

    def validation_step(self, batch, batch_idx):
        return self.layer(batch[0]).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def labelled_rows() -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.full((4,), float(i)), torch.tensor(i)) for i in range(MOLECULES)]


@pytest.mark.parametrize("order", ["timer, audit", "audit, timer", "audit"])
def test_one_reading_of_each_batch_serves_both_callbacks(monkeypatch, order):
    """With both callbacks, in either order, each training batch is read once (the reader runs once a step), and both
    count it; no batch is held past the fit."""
    from mnistperf.diagnosis.measure import batches

    reads = []
    monkeypatch.setattr(batches, "read", lambda batch, dims=1: reads.append(batch) or read(batch, dims))
    timer, audit = EpochTimer(), SampleAudit()
    callbacks = {"timer, audit": [timer, audit], "audit, timer": [audit, timer], "audit": [audit]}[order]
    fit_module(Linear(), DataLoader(labelled_rows(), batch_size=BATCH), callbacks=callbacks, max_epochs=2)
    steps = 2 * MOLECULES // BATCH
    assert len(reads) == steps
    assert [row["samples"] for row in timer.epochs] == ([MOLECULES] * 2 if timer in callbacks else [])
    assert [(row["seen"], row["distinct"]) for row in audit.epochs] == [(MOLECULES, MOLECULES)] * 2
    assert batches.READINGS._step is None and not batches.READINGS._kept  # the last batch let go


def test_no_training_batch_is_held_through_a_validation_inside_the_epoch():
    """The audit alone counts the step before a validation as it starts, and lets go of its batch then."""
    from mnistperf.diagnosis.measure import batches

    held = []

    class Looks(Callback):
        def on_validation_start(self, trainer, pl_module):
            held.append(batches.READINGS._step is not None or bool(batches.READINGS._kept))

    audit = SampleAudit()
    loader = DataLoader(labelled_rows(), batch_size=BATCH)
    fit_module(Linear(), loader, loader, callbacks=[audit, Looks()], max_epochs=1, val_check_interval=2)
    assert held and not any(held)
    assert [row["seen"] for row in audit.epochs] == [MOLECULES]


# Batches of the kinds published libraries hand their steps, each holding 16 samples of 3x4x4 images.
SAMPLES, CHANNELS = 16, 3


@dataclasses.dataclass
class IterableBatch:
    """A dataclass batch that also iterates sample by sample (as a detection library's does)."""

    image: torch.Tensor
    label: torch.Tensor

    def __iter__(self):
        return iter({"image": image, "label": label} for image, label in zip(self.image, self.label, strict=True))

    def __len__(self):
        return len(self.label)


class AttributeBatch:
    """A plain object holding its tensors as attributes, with a private cache the reader leaves alone."""

    def __init__(self, image, label):
        self.image, self.label, self._cache = image, label, torch.zeros(1)


class SlotsBatch:
    """An object holding its tensors in slots, without a ``__dict__`` (as an attrs class's ``@define`` makes it)."""

    __slots__ = ("image", "label")

    def __init__(self, image, label):
        self.image, self.label = image, label


class SizedBatch(AttributeBatch):
    """An object that states its batch size, its first tensor time-major."""

    def __init__(self, image, label):
        super().__init__(image.transpose(0, 1), label)
        self.batch_size = len(label)


class GraphBatch:
    """A graph batch as graph libraries make it: node rows of every graph stacked, each node's graph (``batch``),
    each graph's first node (``ptr``), the graph count, a target per graph, and edges that are neither."""

    def __init__(self, graphs: list[torch.Tensor], targets: torch.Tensor):
        sizes = torch.tensor([len(g) for g in graphs])
        self.x = torch.cat(graphs)
        self.edge_index = torch.zeros(2, 3, dtype=torch.long)
        self.batch = torch.repeat_interleave(torch.arange(len(graphs)), sizes)
        self.ptr = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)])
        self.num_graphs = len(graphs)
        self.y = targets


def detection_batch(image: torch.Tensor, label: torch.Tensor) -> tuple:
    """A detection collate's batch, ``tuple(zip(*samples))``: each sample's image of its own width, its dict of
    targets with boxes of its own count; Lightning's reader takes the first image's channels for the batch's size."""
    kinds = [int(sample) % 3 for sample in label]  # a sample's width and box count, wherever it is
    samples = [
        (image[i, :, :, : 2 + kind], {"boxes": image[i, 0, : 1 + kind], "labels": label[i : i + 1]})
        for i, kind in enumerate(kinds)
    ]
    return tuple(zip(*samples, strict=True))


def images(samples: int = SAMPLES, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(samples, CHANNELS, 4, 4, generator=generator), torch.arange(samples) + seed * samples


def graph_list(count: int = SAMPLES) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randn(2 + i % 4, 5, generator=generator) for i in range(count)]


@pytest.mark.parametrize(
    ("batch", "counted_by"),
    [
        (IterableBatch(*images()), "the first tensor's length"),
        (AttributeBatch(*images()), "the first tensor's length"),
        (SlotsBatch(*images()), "the first tensor's length"),
        (SizedBatch(*images()), "its batch_size (SizedBatch)"),
        (GraphBatch(graph_list(), torch.zeros(SAMPLES)), "the graphs of its GraphBatch"),
        ((GraphBatch(graph_list(), torch.zeros(SAMPLES)), torch.zeros(SAMPLES)), "the graphs of its GraphBatch"),
    ],
    ids=["iterable dataclass", "attributes", "slots", "batch_size", "graphs", "graphs in a tuple"],
)
def test_the_reader_counts_the_samples_of_any_batch_where_lightnings_reader_may_not(batch, counted_by):
    reading = read(batch)
    assert (reading.samples, said(reading.counted_by)) == (SAMPLES, counted_by)
    assert all(t.shape[0] == SAMPLES for t in reading.rows) and reading.rows


def test_a_batch_of_one_item_a_sample_is_counted_by_its_items_and_a_feature_pyramid_is_not():
    image, label = images()
    for batch in (detection_batch(image, label), (list(image), label), {"image": list(image), "label": label}):
        reading = read(batch)
        assert (reading.samples, len(reading.items or [])) == (SAMPLES, SAMPLES), type(batch)
        assert said(reading.counted_by) == f"the items of its {type(batch).__name__}'s sequences"
    detected = read(detection_batch(image, label)).items
    assert detected is not None and [t.shape for t in detected[1]] == [(CHANNELS, 4, 3), (2, 4), (1,)]
    for last in (detection_batch(image[:1], label[:1]), ((image[0],), (label[0],))):  # an epoch's last batch of one
        one = read(last)  # not 2 records
        assert (one.samples, said(one.counted_by)) == (1, "the items of its tuple's sequences")
    levels = [image, image[:, :, :2, :2]]  # a pyramid's levels, each leading with the batch: not one item a sample
    assert (read((levels, levels)).samples, read((levels, levels)).items) == (SAMPLES, None)
    named = read((image, [f"file{i}.png" for i in range(SAMPLES)]))  # file names beside the batch's tensors
    assert (named.samples, named.items, len(named.rows)) == (SAMPLES, None, 1)


def test_a_nest_of_batched_records_is_counted_by_the_length_its_tensors_lead_with_not_by_its_sequences():
    """A retrieval batch: a query and a pair of documents, each a tokenizer's dict of ``[B, T]`` tensors."""

    def tokens(width: int) -> dict:
        ids = torch.arange(SAMPLES * width).reshape(SAMPLES, width)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    for batch in ({"query": tokens(6), "docs": (tokens(5), tokens(7))}, (tokens(6), (tokens(5), tokens(7)))):
        reading = read(batch)  # not 2 samples, one a document of the pair
        assert (reading.samples, reading.items) == (SAMPLES, None), type(batch)
        assert len(reading.rows) == 6 and all(t.shape[0] == SAMPLES for t in reading.rows)
    # a detection collate's targets beside their images: no tensor beside the columns, read by their items as before
    image, label = images()
    assert read(detection_batch(image, label)).samples == SAMPLES
    # clips of 16 frames, a box a frame, beside the clips' frame times [16] or a common size [1, 2]: by their items
    clips = tuple(torch.rand(16, 3, 4, 4) for _ in range(SAMPLES))
    boxes = tuple({"boxes": torch.rand(16, 4)} for _ in range(SAMPLES))
    assert read((clips, boxes, {"frame_t": torch.arange(16)})).samples == SAMPLES
    grey, one = (
        tuple(torch.rand(1, 4, 4) for _ in range(SAMPLES)),
        tuple({"boxes": torch.rand(1, 4)} for _ in range(SAMPLES)),
    )
    assert read((grey, one, {"orig_size": torch.tensor([[4, 4]])})).samples == SAMPLES


@pytest.mark.parametrize("size", [SAMPLES, 2])
def test_samples_handed_on_as_the_dataset_gave_them_are_counted_by_their_records_and_two_views_are_not(size):
    """``collate_fn=lambda samples: samples``: a list of (image, targets), of (image, 0-dim label) or of dicts."""
    image, label = images(size)
    as_given = [
        list(zip(*detection_batch(image, label), strict=True)),
        list(zip(image, label, strict=True)),
        [{"image": one, "label": its} for one, its in zip(image, label, strict=True)],
    ]
    for batch, guessed in zip(as_given, ((), (size, CHANNELS), (size, CHANNELS)), strict=True):
        reading = read(batch)  # one tensor and a label a record: a guess, said (a view of a batch and its weight?)
        counted = (reading.samples, said(reading.counted_by), reading.lengths)
        assert counted == (size, "its list's items", guessed), batch[0]
    records = list(zip(image, label.tolist(), strict=True))  # labels that are numbers: as records, as columns
    for given in (records, tuple(zip(*records, strict=True))):
        assert read(given).samples == size, type(given)
    views = read(({"x": image, "y": label}, {"x": image, "y": label}))  # two views of one batch
    assert (views.samples, views.items) == (size, None)
    tokens = read([{"ids": one.flatten(), "mask": one.flatten() > 0, "label": int(its)} for one, its in as_given[1]])
    assert (tokens.samples, tokens.lengths) == (size, (size, image[0].numel()))  # a label beside them: a guess, said


def test_samples_handed_on_as_given_are_audited_each_by_its_own_tensors_their_repeats_found():
    """A dataset that holds each of its samples twice, its samples handed on as the dataset gives them."""
    image, label = images(SAMPLES * BATCHES // 2)
    data = list(zip(*detection_batch(image, label), strict=True)) * 2
    loader = DataLoader(data, batch_size=SAMPLES, collate_fn=lambda samples: samples)
    timer, audit = EpochTimer(), SampleAudit(dataset_size=len(data))
    fit_module(Classifier(), loader, callbacks=[timer, audit])
    assert timer.epochs[0]["samples"] == len(data)
    row = audit.epochs[0]
    # each index drawn once: the duplicates are copies in the data, and none of its samples is missing
    assert (row["seen"], row["distinct"], row["duplicates"], row["missing"]) == (48, 24, 24, 0)


class Sequences(LightningModule):
    """Trains on the mean of each sequence of a nested tensor (a strided one has no mean of its own)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1))

    def training_step(self, batch, batch_idx):
        return self.weight * sum(sequence.mean() for sequence in batch[0].unbind())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


@pytest.mark.parametrize("layout", [torch.jagged, torch.strided])
def test_a_nested_tensors_samples_of_their_own_lengths_are_audited_each_by_its_own_rows(layout):
    """A nested tensor (sequences of their own lengths) beside the labels, each sample in the data twice.

    Strided is nested_tensor's default layout, whose ``shape`` raises: its length is read as ``size(0)``.
    """
    lengths = [2 + i % 3 for i in range(SAMPLES)]
    generator = torch.Generator().manual_seed(0)
    sequences = [torch.randn(length, 4, generator=generator) for length in lengths]
    batches = [
        (torch.nested.nested_tensor(sequences[i : i + 4], layout=layout), torch.arange(i, i + 4) % 8)
        for i in range(0, SAMPLES, 4)
    ] * 2
    timer, audit = EpochTimer(), SampleAudit(dataset_size=SAMPLES)
    fit_module(Sequences(), DataLoader(batches, batch_size=None), callbacks=[timer, audit], max_epochs=1)
    assert not timer.problems.lines and not audit.problems.lines
    row = audit.epochs[0]
    assert timer.epochs[0]["samples"] == 2 * SAMPLES
    assert (row["audited"], row["seen"], row["distinct"], row["duplicates"]) == (True, 2 * SAMPLES, SAMPLES, SAMPLES)


def test_a_text_columns_strings_are_part_of_each_samples_fingerprint_the_same_in_any_process():
    """Texts with one of two labels, as the default collate gathers dict samples: each text once, then each twice."""
    texts = [{"text": f"review {i}: {'good' if i % 2 else 'bad'}", "label": i % 2} for i in range(SAMPLES * BATCHES)]
    for data, distinct in ((texts, len(texts)), (texts[: len(texts) // 2] * 2, len(texts) // 2)):
        audit = SampleAudit(dataset_size=len(data))
        fit_module(Classifier(), DataLoader(data, batch_size=SAMPLES), callbacks=[audit], max_epochs=1)
        assert (audit.epochs[0]["seen"], audit.epochs[0]["distinct"]) == (len(data), distinct)
    code = (
        "from mnistperf.diagnosis.measure.fingerprint import text_digests; print(text_digests([['a', 'b']]).tolist())"
    )
    elsewhere = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONHASHSEED": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert elsewhere.stdout.strip() == str(text_digests([["a", "b"]]).tolist())  # Python's own str hash would differ


def test_the_strings_of_samples_read_one_item_each_are_part_of_their_fingerprints():
    """Records of a text and a 0-dim label handed on as given, and a detection batch with its file names."""
    reviews = [(f"review {i}", torch.tensor(i % 2)) for i in range(SAMPLES)]
    audit = SampleAudit()
    assert audit.fingerprints(reviews).unique().numel() == SAMPLES  # not two samples, one a label
    image, label = images()
    named = (*detection_batch(image, label * 0), tuple(f"image{i}.png" for i in range(SAMPLES)))
    assert read(named).samples == SAMPLES and audit.fingerprints(named).unique().numel() == SAMPLES
    renamed = (*named[:2], tuple(f"other{i}.png" for i in range(SAMPLES)))
    assert not (audit.fingerprints(renamed) == audit.fingerprints(named)).any()


def test_items_that_only_their_shapes_say_are_samples_are_counted_so_and_said_once(capsys):
    """``tuple(zip(*samples))`` of (image, 0-dim label): the items are counted, a guess each callback says once.

    (The loader hands the tuple on as a list.)"""
    batches = [tuple(zip(*zip(*images(seed=seed), strict=True), strict=True)) for seed in range(BATCHES)]
    timer, audit = EpochTimer(), SampleAudit(dataset_size=SAMPLES * BATCHES)
    fit_module(Classifier(), DataLoader(batches, batch_size=None), callbacks=[timer, audit])
    assert timer.epochs[0]["samples"] == SAMPLES * BATCHES and audit.epochs[0]["distinct"] == SAMPLES * BATCHES
    said = f"a training batch (list) lead with different lengths ({SAMPLES}, {CHANNELS}): {SAMPLES} samples a batch"
    out = capsys.readouterr().out
    assert out.count(f"EpochTimer: the tensors of {said} are counted (the items of its list's sequences)") == 1
    assert out.count(f"SampleAudit: the tensors of {said} are audited (the items of its list's sequences)") == 1


def test_views_crops_and_levels_of_a_batch_are_read_as_before_or_their_guess_is_said():
    """Lists of a batch's views, crops beside the batch's labels: not one item a sample, or said to be a guess."""
    x, y = torch.randn(4, 3, 16, 16), torch.arange(4)
    views = [[(x, y), (x[:, :, :8, :8], y)], [(x[:, 0, 0], y), (x[:, 0, :2, 0], y)], ((x[:2], x[:2]), y[:2])]
    for batch in views:  # each record, or the crops, leading with the batch: counted by it
        assert (read(batch).samples, read(batch).items) == (len(batch[1]) if isinstance(batch, tuple) else 4, None)
    crops = read(([x] * 2 + [x[:, :, :8, :8]] * 2, torch.ones(4)))  # 4 crops of a batch of 4: as before
    assert (crops.samples, crops.items) == (4, None)
    beside = read(([x[0]] * 6, torch.arange(6)))  # six 3-channel images beside six labels: counted 6, said
    assert (beside.samples, beside.lengths) == (6, (6, 3))


def test_a_single_text_column_and_a_records_number_label_are_part_of_each_fingerprint():
    audit = SampleAudit()
    prints = audit.fingerprints({"label": torch.tensor([0, 0, 1]), "text": ["a", "b", "c"]})
    assert prints.unique().numel() == 3
    image, label = images(4)
    relabelled = [audit.fingerprints(list(zip(image, (label + k).tolist(), strict=True))) for k in (0, 1)]
    assert not (relabelled[0] == relabelled[1]).any()  # the same images with other labels: other samples


def test_a_samples_fingerprint_is_its_own_items_whatever_the_batch_and_their_shapes_count():
    image, label = images()
    audit = SampleAudit()
    whole = audit.fingerprints(detection_batch(image, label))
    assert whole.unique().numel() == SAMPLES
    halves = [audit.fingerprints(detection_batch(image[i : i + 4], label[i : i + 4])) for i in range(0, SAMPLES, 4)]
    assert torch.equal(torch.cat(halves), whole)  # a sample's fingerprint does not depend on its neighbours
    reshaped = list(image[:2])
    reshaped[0] = reshaped[0].reshape(CHANNELS, 2, 8)  # the same values in another shape
    assert audit.fingerprints((reshaped, label[:2]))[0] != audit.fingerprints((list(image[:2]), label[:2]))[0]
    relabelled = detection_batch(image, label + 1)
    assert not (audit.fingerprints(relabelled) == whole).any()  # each sample's targets count too


def test_lightnings_reader_miscounts_the_iterable_dataclass_that_the_reader_counts():
    """Why the callbacks read batches themselves: Lightning's iterates it, and reads the first image's channels."""
    from lightning.pytorch.utilities.data import extract_batch_size

    batch = IterableBatch(*images())
    assert extract_batch_size(batch) == CHANNELS and read(batch).samples == SAMPLES


def test_a_graphs_fingerprint_is_its_own_node_rows_whatever_the_batch_it_is_in():
    graphs, targets = graph_list(), torch.zeros(SAMPLES)  # every graph shares its label: only its nodes tell it apart
    audit = SampleAudit()
    whole = audit.fingerprints(GraphBatch(graphs, targets))
    assert whole.unique().numel() == SAMPLES
    halves = [audit.fingerprints(GraphBatch(graphs[i : i + 4], targets[i : i + 4])) for i in range(0, SAMPLES, 4)]
    assert torch.equal(torch.cat(halves), whole)  # a graph's fingerprint does not depend on its neighbours
    swapped = [graphs[0].flip(0), *graphs[1:]]  # the same nodes in another order are another graph
    assert audit.fingerprints(GraphBatch(swapped, targets))[0] != whole[0]
    relabelled = audit.fingerprints(GraphBatch(graphs, torch.ones(SAMPLES)))
    assert not torch.equal(relabelled, whole)  # the graph's own rows count too


@pytest.mark.parametrize("index", [torch.int64, torch.uint8], ids=["int64", "uint8 index"])
def test_graph_steps_held_and_hashed_together_give_each_graph_the_fingerprint_it_has_in_one_batch(index):
    """Many graphs of a narrow index: joined, their numbers pass what the index's type holds."""
    graphs, targets = graph_list(300), torch.arange(300.0)  # each graph its own target: its rows in their order
    audit = SampleAudit()
    held = HeldSteps(audit.hash)
    for start, end in ((0, 3), (3, 8), (8, 9), (9, 200), (200, 300)):  # steps of 3, 5, 1, 191 and 100 graphs
        step = GraphBatch(graphs[start:end], targets[start:end])
        step.batch = step.batch.to(index)
        held.hold(0, audit.identity.rows(step))
    whole = audit.fingerprints(GraphBatch(graphs, targets))
    assert torch.equal(torch.cat(held.flush()[0]), whole) and whole.unique().numel() == 300


def test_a_held_graph_step_whose_nodes_name_a_graph_past_its_count_fails_as_it_would_alone():
    graphs, targets = graph_list(), torch.zeros(SAMPLES)
    audit = SampleAudit()
    held = HeldSteps(audit.hash)
    wrong = GraphBatch(graphs[:4], targets[:4])
    wrong.num_graphs, wrong.y = 3, targets[:3]  # its last graph's nodes uncounted
    held.hold(0, audit.identity.rows(wrong))
    held.hold(0, audit.identity.rows(GraphBatch(graphs[4:], targets[4:])))
    with pytest.raises(IndexError, match="names graph 3, where it counts 3"):
        held.flush()


def test_a_fits_graph_batches_are_hashed_together_not_step_by_step(monkeypatch):
    """A graph batch's rows are held like any other's: one hash of an epoch's few graphs, where there were 7 steps."""
    calls = []
    hash_graphs = Fingerprinter.graphs
    monkeypatch.setattr(Fingerprinter, "graphs", lambda *args: calls.append(1) or hash_graphs(*args))
    data = list(zip(graph_list(40), torch.zeros(40), strict=True))
    collate = lambda items: GraphBatch([g for g, _ in items], torch.stack([t for _, t in items]))  # noqa: E731
    audit = SampleAudit(dataset_size=len(data))
    fit_module(Classifier(), DataLoader(data, batch_size=6, shuffle=True, collate_fn=collate), callbacks=[audit])
    assert [(row["audited"], row["distinct"]) for row in audit.epochs] == [(True, len(data))] * 2
    assert len(calls) == 2


def test_a_batch_of_one_graph_says_once_that_its_graph_is_counted_and_how_to_count_its_nodes(capsys):
    """A full-batch fit (one graph, its nodes the samples of a node-level task) reads as one graph a step."""
    nodes = graph_list(1)[0]
    collate = lambda items: GraphBatch([g for g, _ in items], torch.stack([t for _, t in items]))  # noqa: E731
    timer, audit = EpochTimer(), SampleAudit()
    fit_module(Classifier(), DataLoader([(nodes, torch.zeros(1))], collate_fn=collate), callbacks=[timer, audit])
    assert [row["samples"] for row in timer.epochs] == [1, 1]
    out = capsys.readouterr().out
    said = f"holds one graph of {len(nodes)} nodes: 1 sample a batch is counted (the graphs of its GraphBatch)"
    assert out.count(f"EpochTimer: a training batch (GraphBatch) {said}; pass EpochTimer(") == 1
    assert out.count("1 sample a batch is audited (the graphs of its GraphBatch); pass sample_id=") == 1
    assert format_counts({"counted": 1, "batch": 1, "lightning": len(nodes)}).endswith(
        f"{len(nodes)} a batch where 1 is counted, and self.log weighs its epoch means by Lightning's reading unless "
        "given batch_size="
    )
    assert out.count("sample audit, epoch 2: 1 sample seen, 1 distinct") == 1
    # a batch of several graphs, or of one graph of one node, says nothing
    collate_two = lambda items: collate(items * 2)  # noqa: E731
    fit_module(Classifier(), DataLoader([(nodes, torch.zeros(1))], collate_fn=collate_two), callbacks=[EpochTimer()])
    fit_module(Classifier(), DataLoader([(nodes[:1], torch.zeros(1))], collate_fn=collate), callbacks=[EpochTimer()])
    assert "holds one graph" not in capsys.readouterr().out


class Classifier(LightningModule):
    """A module that trains on any of this file's batches: the mean of every float tensor of it."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1))

    def training_step(self, batch, batch_idx):
        floats = [t for t in tensors_of(batch) if t.is_floating_point()]
        return self.weight * sum(t.mean() for t in floats)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


BATCHES = 3


def batches_of(kind) -> list:
    """Three batches of ``kind``, every sample distinct."""
    if kind is GraphBatch:
        graphs = graph_list(SAMPLES * BATCHES)
        return [GraphBatch(graphs[i : i + SAMPLES], torch.zeros(SAMPLES)) for i in range(0, len(graphs), SAMPLES)]
    return [kind(*images(seed=seed)) for seed in range(BATCHES)]


@pytest.mark.parametrize("kind", [IterableBatch, AttributeBatch, SlotsBatch, SizedBatch, GraphBatch, detection_batch])
def test_both_callbacks_count_the_same_samples_of_any_batch_reading_each_batch_once(kind, monkeypatch, capsys):
    from mnistperf.diagnosis.measure import batches

    reads = []
    real = batches.read
    monkeypatch.setattr(batches, "read", lambda batch, dims=1: reads.append(batch) or real(batch, dims))
    timer, audit = EpochTimer(), SampleAudit(dataset_size=SAMPLES * BATCHES)
    loader = DataLoader(batches_of(kind), batch_size=None)
    fit_module(Classifier(), loader, callbacks=[timer, audit], max_epochs=2)
    assert [row["samples"] for row in timer.epochs] == [SAMPLES * BATCHES] * 2
    assert [(row["audited"], row["seen"], row["distinct"], row["missing"]) for row in audit.epochs] == [
        (True, SAMPLES * BATCHES, SAMPLES * BATCHES, 0)
    ] * 2
    assert len(reads) == 2 * BATCHES  # one reading a step, for both callbacks
    assert all("audit" not in row.get("sample_counts", {}) for row in timer.epochs)  # the audit agrees


def test_a_time_major_batch_is_counted_by_its_first_tensor_and_said_once(capsys):
    """[T, B, F] beside a [B] label: the first tensor leads with T; both callbacks say what they counted, once."""
    batches = [(torch.randn(7, SAMPLES, 2), torch.zeros(SAMPLES)) for _ in range(BATCHES)]
    timer, audit = EpochTimer(), SampleAudit()
    fit_module(Classifier(), DataLoader(batches, batch_size=None), callbacks=[timer, audit])
    out = capsys.readouterr().out
    assert timer.epochs[0]["samples"] == 7 * BATCHES
    said = "lead with different lengths (7, 16): 7 samples a batch are counted (the first tensor's length); pass "
    assert out.count(f"EpochTimer: the tensors of a training batch (list) {said}EpochTimer(samples_in_batch=") == 1
    assert (
        out.count(
            "SampleAudit: the tensors of a training batch (list) lead with different lengths (7, 16): 7 "
            "samples a batch are audited (the first tensor's length); pass sample_id= or fingerprint="
        )
        == 1
    )


def test_a_mapping_counted_by_its_first_tensor_names_that_tensors_key(capsys):
    """An atoms batch as a dict: each molecule's id first, then a row per atom; the key that counted is named."""
    batches = [{"id": torch.arange(4) + 4 * i, "positions": torch.randn(11, 3)} for i in range(BATCHES)]
    fit_module(Classifier(), DataLoader(batches, batch_size=None), callbacks=[EpochTimer(), SampleAudit()])
    out = capsys.readouterr().out
    assert "4 samples a batch are counted (the first tensor's length: 'id'); pass EpochTimer(" in out
    assert "4 samples a batch are audited (the first tensor's length: 'id'); pass sample_id=" in out


def test_counts_that_disagree_are_said_with_their_numbers_in_the_line_and_the_row(capsys):
    """The user's own count (a third of the batch) against the audit's, the loader's and Lightning's: all named."""
    data = [(torch.randn(4), torch.tensor(i)) for i in range(SAMPLES * BATCHES)]
    loader = DataLoader(data, batch_size=SAMPLES)
    timer = EpochTimer(samples_in_batch=lambda batch: len(batch[1]) // 4)
    fit_module(Classifier(), loader, callbacks=[timer, SampleAudit()])
    expected = {"counted": BATCHES * SAMPLES // 4, "audit": SAMPLES * BATCHES, "loader": SAMPLES * BATCHES}
    assert [row["sample_counts"] for row in timer.epochs] == [expected] * 2  # Lightning's differs from one's own
    out = capsys.readouterr().out
    assert out.count("; samples disagree: 12 counted, SampleAudit 48, the loader's length 48\n") == 2


def test_lightnings_reading_that_differs_from_the_readers_is_said_with_both(capsys):
    """The iterable dataclass: Lightning reads a batch's first image's channels (3), the reader its 16 samples."""
    timer = EpochTimer()
    fit_module(Classifier(), DataLoader(batches_of(IterableBatch), batch_size=None), callbacks=[timer, SampleAudit()])
    assert [row["sample_counts"] for row in timer.epochs] == [
        {"counted": SAMPLES * BATCHES, "batch": SAMPLES, "lightning": CHANNELS}
    ] * 2
    said = f"; samples disagree: Lightning reads 3 a batch where {SAMPLES} are counted, and self.log weighs its epoch"
    assert capsys.readouterr().out.count(f"{said} means by Lightning's reading unless given batch_size=\n") == 2


class LogsEachBatchSize(Classifier):
    """A module that gives self.log the samples of its batch (``batch_size``), every step or only some."""

    def __init__(self, every_step: bool):
        super().__init__()
        self.every_step = every_step

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        size = len(batch.label) if self.every_step or batch_idx else None  # only some: Lightning reads the first
        self.log("loss", loss, on_step=False, on_epoch=True, batch_size=size)
        return loss


@pytest.mark.parametrize("every_step", [True, False])
def test_lightnings_reading_is_not_said_where_self_log_is_given_each_batch_size(capsys, every_step):
    """Lightning's reading weighs no mean the module gave its own batch sizes: said only where one it weighs."""
    timer = EpochTimer()
    loader = DataLoader(batches_of(IterableBatch), batch_size=None)
    fit_module(LogsEachBatchSize(every_step), loader, callbacks=[timer, SampleAudit()])
    assert [row.get("sample_counts") for row in timer.epochs] == (
        [None] * 2 if every_step else [{"counted": SAMPLES * BATCHES, "batch": SAMPLES, "lightning": CHANNELS}] * 2
    )
    assert ("Lightning reads" in capsys.readouterr().out) is not every_step


def test_counts_that_agree_say_nothing_and_keep_no_row_entry(capsys):
    data = [(torch.randn(4), torch.tensor(i)) for i in range(SAMPLES * BATCHES)]
    timer = EpochTimer()
    fit_module(Classifier(), DataLoader(data, batch_size=SAMPLES, drop_last=True), callbacks=[timer, SampleAudit()])
    assert all("sample_counts" not in row for row in timer.epochs)
    assert "samples disagree" not in capsys.readouterr().out


def test_a_batch_the_module_skips_is_let_go_by_the_epochs_end():
    """Lightning ends no step whose batch start returned -1: the shared reading of it goes at the epoch's end."""
    from mnistperf.diagnosis.measure.batches import READINGS

    class SkipsLast(Classifier):
        def on_train_batch_start(self, batch, batch_idx):
            return -1 if batch_idx == BATCHES - 1 else None

    fit_module(
        SkipsLast(), DataLoader(batches_of(AttributeBatch), batch_size=None), callbacks=[EpochTimer(), SampleAudit()]
    )
    assert READINGS._kept == []


@pytest.mark.parametrize(
    "record",
    [
        lambda image, label: (image, int(label)),  # a number: the last batch, of one record, too
        lambda image, label: (image, f"class {int(label)}"),  # a string label
        lambda image, label: {"image": image, "path": f"{int(label)}.png"},  # a dict with its file's path
        lambda image, label: (image.flatten(), label.reshape(1)),  # a one-element tensor label
        lambda image, label: {"ids": image.flatten(), "mask": image.flatten() > 0, "label": int(label)},  # tokens
    ],
    ids=["number", "string", "path", "one-element", "tensors of one length"],
)
def test_records_a_label_says_are_samples_are_counted_and_audited_by_their_records_the_last_one_alone_too(record):
    """``collate_fn=lambda samples: samples`` over 33 samples in batches of 4: the last batch is a single record."""
    image, label = images(33)
    data = [record(one, its) for one, its in zip(image, label, strict=True)]
    loader = DataLoader(data, batch_size=4, collate_fn=lambda samples: samples)
    timer, audit = EpochTimer(), SampleAudit()
    fit_module(Classifier(), loader, callbacks=[timer, audit], max_epochs=1)
    counts = timer.epochs[0].get("sample_counts") or {}  # Lightning's reading of a record may differ: said
    assert timer.epochs[0]["samples"] == 33 and "audit" not in counts and "loader" not in counts, counts
    row = audit.epochs[0]
    assert (row["seen"], row["distinct"], row["duplicates"], row["missing"]) == (33, 33, 0, 0)


@pytest.mark.parametrize("emptied", [0, 2], ids=["first batch", "a later batch"])
@pytest.mark.parametrize("kind", [list, dict])
def test_a_batch_a_filtering_collate_leaves_empty_holds_no_sample_and_leaves_the_epoch_counted_and_audited(
    emptied, kind
):
    """Records whose collate drops the unreadable ones (here every record of one batch): that batch holds 0 samples,
    as a list of the records kept or a dict of their columns."""
    image, label = images(24)
    data = [(one, int(its)) for one, its in zip(image, label, strict=True)]
    dropped = range(4 * emptied, 4 * emptied + 4)

    def collate(samples):
        kept = [s for s in samples if s[1] not in dropped]
        if kind is list or not kept:
            return kind(kept)
        images_kept, labels_kept = torch.utils.data.default_collate(kept)
        return {"image": images_kept, "label": labels_kept}

    loader = DataLoader(data, batch_size=4, collate_fn=collate)
    timer, audit = EpochTimer(), SampleAudit()
    fit_module(Classifier(), loader, callbacks=[timer, audit], max_epochs=1)
    assert not timer.problems.lines and not audit.problems.lines
    assert (read([]).samples, read(()).samples, read({}).samples) == (0, 0, 0)
    assert timer.epochs[0]["samples"] == 20
    row = audit.epochs[0]
    assert (row["audited"], row["seen"], row["distinct"], row["missing"]) == (True, 20, 20, 4)


def test_what_the_first_batch_shows_is_read_from_the_first_that_holds_samples_where_a_filtering_collate_emptied_it(
    capsys,
):
    """The fit's first batch empty (a filtering collate kept none of it): the lines it would have shown come from the
    next one: time-major tensors beside their labels, and a 0-dim tensor first, which Lightning reads as 1 sample."""
    steps = torch.randn(20, 3, 2, generator=torch.Generator().manual_seed(0))  # 20 samples of 3 steps
    emptied = lambda i: [] if 0 in i else (torch.tensor(0.5), steps[i].transpose(0, 1), torch.zeros(len(i)))  # noqa: E731
    timer, audit = EpochTimer(), SampleAudit()
    loader = DataLoader(list(range(20)), batch_size=4, collate_fn=emptied)
    fit_module(Classifier(), loader, callbacks=[timer, audit], max_epochs=1)
    out = capsys.readouterr().out
    said = "the tensors of a training batch (tuple) lead with different lengths (3, 4): 3 samples a batch are"
    assert out.count(f"EpochTimer: {said} counted") == 1 and out.count(f"SampleAudit: {said} audited") == 1
    counts = timer.epochs[0]["sample_counts"]
    assert (counts["batch"], counts["lightning"]) == (3, 1)


def test_an_epoch_with_a_step_not_counted_keeps_its_other_counts_where_lightning_reads_the_first_batch_otherwise():
    """Records (Lightning reads a record's 4 features, not its 2 records), then a batch of strings alone: no count."""
    batches = [[(torch.randn(4), 0), (torch.randn(4), 1)], ["a text", "another"]]
    timer = EpochTimer()
    fit_module(Classifier(), DataLoader(batches, batch_size=None), callbacks=[timer], max_epochs=1)
    assert not timer.problems.lines
    assert timer.epochs[0]["samples"] is None


def test_a_text_column_nested_below_the_batchs_top_is_part_of_each_samples_fingerprint():
    """Samples alike but for their names, kept one level down: ``{"x": ..., "meta": {"name": ...}}``, collated."""
    data = [{"x": torch.zeros(2), "meta": {"name": f"sample {i}"}} for i in range(20)]
    audit = SampleAudit()
    fit_module(Classifier(), DataLoader(data, batch_size=4), callbacks=[audit], max_epochs=1)
    row = audit.epochs[0]
    assert (row["seen"], row["distinct"], row["duplicates"], row["missing"]) == (20, 20, 0, 0)


def read_only(array: np.ndarray) -> np.ndarray:
    array = array.copy()
    array.flags.writeable = False
    return array


@pytest.mark.parametrize(
    "collate",
    [
        lambda x, i: {"x": x, "c": torch.zeros(len(x))},  # NumPy features beside a tensor alike in every sample
        lambda x, i: (x, np.zeros(len(x))),  # NumPy alone
        lambda x, i: (read_only(x)[:, ::-1].astype(">f8"), np.zeros(len(x))),  # read-only, reversed, big-endian
        lambda x, i: (np.zeros((len(x), 2)), np.array([f"sample {j}" for j in i])),  # NumPy strings tell them apart
        lambda x, i: (np.zeros((len(x), 2)), np.array([f"sample {j}" for j in i], dtype=object)),  # (as pandas has)
        lambda x, i: (np.zeros((len(x), 2)), np.array(i, dtype="datetime64[s]")),  # timestamps tell them apart
    ],
    ids=["beside a tensor", "alone", "read-only view", "strings", "strings as objects", "timestamps"],
)
def test_numpy_arrays_in_a_batch_are_counted_and_hashed_as_tensors_so_samples_differing_there_are_told_apart(collate):
    """A collate of its own that leaves NumPy arrays in the batch: samples that differ only there are not duplicates."""
    features = np.random.default_rng(0).normal(size=(20, 3))
    loader = DataLoader(list(range(20)), batch_size=4, collate_fn=lambda i: collate(features[i], i))
    timer, audit = EpochTimer(), SampleAudit()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # (torch's on a read-only array shared, not copied)
        fit_module(Classifier(), loader, callbacks=[timer, audit], max_epochs=1)
    assert not timer.problems.lines and not audit.problems.lines
    assert timer.epochs[0]["samples"] == 20
    row = audit.epochs[0]
    assert (row["seen"], row["distinct"], row["duplicates"], row["missing"]) == (20, 20, 0, 0)


class BesideMeta(Classifier):
    """A module whose batches hold tensors on the meta device (shapes alone), kept there: it trains on the rest."""

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        return batch  # (on the CPU already; a meta tensor cannot be copied)

    def training_step(self, batch, batch_idx):
        return self.weight * sum(t.mean() for t in tensors_of(batch) if not t.is_meta and t.is_floating_point())


@pytest.mark.parametrize("real", [True, False], ids=["beside real tensors", "alone"])
def test_tensors_on_the_meta_device_are_not_hashed_and_a_batch_of_them_alone_is_not_audited_in_one_line(real):
    """A meta tensor has a shape and no values: hashed, it failed the epoch's audit; now the rest of the batch is."""
    features = torch.randn(20, 3, generator=torch.Generator().manual_seed(0))
    collate = lambda i: {"shape": torch.empty(len(i), 5, device="meta"), **({"x": features[i]} if real else {})}  # noqa: E731
    timer, audit = EpochTimer(), SampleAudit()
    fit_module(BesideMeta(), DataLoader(list(range(20)), batch_size=4, collate_fn=collate), callbacks=[timer, audit])
    assert not timer.problems.lines and [row["samples"] for row in timer.epochs] == [20, 20]
    if real:
        assert not audit.problems.lines
        assert [(row["seen"], row["distinct"], row["missing"]) for row in audit.epochs] == [(20, 20, 0)] * 2
    else:
        said = "the batch (dict) holds no tensor with values (its tensors are on the meta device); pass sample_id= or"
        assert len(audit.problems.lines) == 1 and said in audit.problems.lines[0]
        assert [row["audited"] for row in audit.epochs] == [False, False]


class SettingSizedBatch(AttributeBatch):
    """An object whose ``batch_size`` is the loader's setting, not what it holds: the last batch holds fewer."""

    def __init__(self, items: list):
        image, label = torch.stack([x for x, _ in items]), torch.stack([y for _, y in items])
        super().__init__(image, label)
        self.batch_size = 4


def test_a_batch_size_property_that_raises_leaves_the_batch_read_by_its_tensors():
    class Lazy:
        def __init__(self, x):
            self.x = x

        @property
        def batch_size(self):
            raise ValueError("batch_size not set for this batch")

    assert read(Lazy(torch.zeros(SAMPLES, 3))).samples == SAMPLES


def test_a_stated_batch_size_that_no_tensor_leads_with_is_not_taken_for_the_count():
    image, label = images(18)  # batches of 4, the last of 2
    loader = DataLoader(list(zip(image, label, strict=True)), batch_size=4, collate_fn=SettingSizedBatch)
    timer, audit = EpochTimer(), SampleAudit()
    fit_module(Classifier(), loader, callbacks=[timer, audit], max_epochs=1)
    assert timer.epochs[0]["samples"] == 18 and audit.epochs[0]["audited"]
    assert (audit.epochs[0]["seen"], audit.epochs[0]["distinct"], audit.epochs[0]["missing"]) == (18, 18, 0)


class NodeSizedGraphs(GraphBatch):
    """A graph batch without a graph count or pointer, whose length is its nodes (as some libraries' data objects)."""

    def __init__(self, graphs: list[torch.Tensor], targets: torch.Tensor):
        super().__init__(graphs, targets)
        del self.ptr, self.num_graphs

    def __len__(self) -> int:
        return len(self.x)


def test_a_graph_batch_without_a_count_is_counted_by_its_nodes_graph_index_before_its_length():
    generator = torch.Generator().manual_seed(0)
    graphs = [torch.randn(2 + i % 3, 4, generator=generator) for i in range(4)]
    reading = read(NodeSizedGraphs(graphs, torch.arange(4.0)))
    assert (reading.samples, said(reading.counted_by)) == (4, "the graphs of its NodeSizedGraphs")


def test_a_graph_batch_off_the_cpu_is_counted_by_its_length_where_it_has_one_not_implemented_being_none():
    """Off the CPU (counting its index would wait for the device) a graph batch of no count nor pointer is counted by
    its length; one raising NotImplementedError is none, as Lightning's ``sized_len`` reads it: no count, no error."""

    class Sized:
        def __len__(self) -> int:
            return 3

    class Unsized:
        def __len__(self) -> int:
            raise NotImplementedError

    index = torch.zeros(6, dtype=torch.int64, device="meta")  # a device's index, never read on the host
    assert graph_count(Sized(), index, None) == 3
    assert graph_count(Unsized(), index, None) is None


def test_a_list_of_same_shaped_tensors_without_labels_is_read_by_its_first_tensors_length():
    """No reading tells four 3-channel images handed on as given from a batch of 3: the docs say so, and how to say."""
    image, _ = images(4)
    assert read(list(image)).samples == CHANNELS


def test_a_graphs_edge_features_are_not_node_rows_even_where_the_edges_are_as_many_as_the_nodes():
    """Edges as many as the nodes by chance: read as node rows, they would tie each graph to its batch-mates."""
    generator = torch.Generator().manual_seed(0)
    graphs = [torch.randn(2 + i % 3, 4, generator=generator) for i in range(4)]

    def batched(order: list[int]) -> GraphBatch:
        batch = GraphBatch([graphs[i] for i in order], torch.tensor([float(i) for i in order]))
        batch.edge_attr = torch.randn(len(batch.x), 2, generator=generator)  # one edge a node, other values each time
        return batch

    audit = SampleAudit()
    first, again = audit.fingerprints(batched([0, 1, 2, 3])), audit.fingerprints(batched([3, 2, 1, 0]))
    assert torch.equal(first, again.flip(0))  # each graph's own, whatever its batch-mates and their edges


def test_every_rule_the_reader_counts_by_has_its_words():
    from mnistperf.diagnosis.measure.samples import Counted, Rule
    from mnistperf.diagnosis.record.epoch_text import COUNTING

    assert set(COUNTING) == set(Rule)
    assert said(Counted(Rule.STATED, "Batch")) == "its batch_size (Batch)"


class HeteroGraphBatch:
    """A heterogeneous graph batch as graph libraries make it: stores by name, each kind of node with an index and a
    pointer of its own, edges between kinds, a target per graph; ``to_dict()`` gives the stores, not the tensors."""

    def __init__(self, papers: list[torch.Tensor], authors: list[torch.Tensor], targets: torch.Tensor):
        self.num_graphs = len(papers)
        self._stores = {"_global_store": {"y": targets}}
        for kind, graphs in (("paper", papers), ("author", authors)):
            sizes = torch.tensor([len(g) for g in graphs])
            self._stores[kind] = {
                "x": torch.cat(graphs),
                "batch": torch.repeat_interleave(torch.arange(len(graphs)), sizes),
                "ptr": torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)]),
            }
        edges = len(self._stores["paper"]["x"])  # as many edges as paper nodes: still no node's rows
        self._stores[("author", "writes", "paper")] = {"edge_index": torch.zeros(2, edges, dtype=torch.long)}

    def to_dict(self) -> dict:
        return dict(self._stores)

    def __iter__(self):  # as the library's: Lightning's reader fails on it
        raise NotImplementedError


def hetero(indices: list[int], papers: list[torch.Tensor], authors: list[torch.Tensor]) -> HeteroGraphBatch:
    return HeteroGraphBatch([papers[i] for i in indices], [authors[i] for i in indices], torch.zeros(len(indices)))


def test_a_heterogeneous_graph_batch_counts_its_graphs_each_fingerprinted_by_every_kind_of_its_nodes():
    """Every graph shares its target: read by the graph rows alone, 8 graphs would be one sample, 7 duplicates."""
    generator = torch.Generator().manual_seed(0)
    papers = [torch.randn(2 + i % 3, 4, generator=generator) for i in range(8)]
    authors = [torch.randn(1 + i % 2, 3, generator=generator) for i in range(8)]
    reading = read(hetero(list(range(8)), papers, authors))
    assert (reading.samples, said(reading.counted_by)) == (8, "the graphs of its HeteroGraphBatch")
    audit = SampleAudit()
    whole = audit.fingerprints(hetero(list(range(8)), papers, authors))
    assert whole.unique().numel() == 8
    reordered = audit.fingerprints(hetero([7, 6, 5, 4, 3, 2, 1, 0], papers, authors))
    assert torch.equal(reordered, whole.flip(0))  # each graph's own, whatever its batch-mates
    other_authors = [authors[0] + 1, *authors[1:]]  # the same papers, another author: another graph
    assert audit.fingerprints(hetero(list(range(8)), papers, other_authors))[0] != whole[0]
    held = HeldSteps(audit.hash)  # held apart and hashed together: as in one batch
    for start, end in ((0, 3), (3, 4), (4, 8)):
        held.hold(0, audit.identity.rows(hetero(list(range(start, end)), papers, authors)))
    assert torch.equal(torch.cat(held.flush()[0]), whole)


def test_a_fit_on_heterogeneous_graph_batches_counts_and_audits_every_graph_once():
    generator = torch.Generator().manual_seed(1)
    papers = [torch.randn(2 + i % 3, 4, generator=generator) for i in range(12)]
    authors = [torch.randn(1 + i % 2, 3, generator=generator) for i in range(12)]
    loader = DataLoader([hetero(list(range(i, i + 4)), papers, authors) for i in (0, 4, 8)], batch_size=None)
    timer, audit = EpochTimer(), SampleAudit(dataset_size=12)
    fit_module(Classifier(), loader, callbacks=[timer, audit], max_epochs=2)
    assert [row["samples"] for row in timer.epochs] == [12, 12]
    assert [(row["seen"], row["distinct"], row["missing"]) for row in audit.epochs] == [(12, 12, 0)] * 2
    assert not timer.problems.lines and not audit.problems.lines  # Lightning's reader failing is no problem of theirs


def test_the_audit_says_once_which_rows_it_hashes_where_a_batch_states_its_size_beside_tensors_of_other_lengths(capsys):
    """The time-major images are not the samples' rows: the labels alone are hashed, and the audit says so; the
    timer's count is the batch's own, no guess."""
    loader = DataLoader(batches_of(SizedBatch), batch_size=None)
    timer, audit = EpochTimer(), SampleAudit()
    fit_module(Classifier(), loader, callbacks=[timer, audit], max_epochs=2)
    out = capsys.readouterr().out
    said = f"SampleAudit: the tensors of a training batch (SizedBatch) lead with different lengths ({SAMPLES}, "
    assert out.count(said) == 1
    assert f"{SAMPLES} samples a batch are audited (its batch_size (SizedBatch)); pass sample_id=" in out
    assert "EpochTimer: the tensors of a training batch" not in out


def packed_batch(sequences: list[torch.Tensor], labels: torch.Tensor) -> tuple:
    """A recurrent model's batch: its sequences packed (unsorted, as a collate packs them), beside their labels."""
    from torch.nn.utils.rnn import pack_sequence

    return pack_sequence(sequences, enforce_sorted=False), labels


def test_a_packed_sequence_batch_counts_its_sequences_each_fingerprinted_by_its_own_steps():
    """Packed, a batch's steps lead with its tokens; a sequence is a sample, the same whatever its batch-mates."""
    generator = torch.Generator().manual_seed(0)
    sequences = [torch.randn(2 + i % 5, 3, generator=generator) for i in range(8)]
    labels = torch.zeros(8)  # one label: only the steps tell the sequences apart
    reading = read(packed_batch(sequences, labels))
    assert (reading.samples, said(reading.counted_by)) == (8, "the sequences of its PackedSequence")
    audit = SampleAudit()
    whole = audit.fingerprints(packed_batch(sequences, labels))
    assert whole.unique().numel() == 8
    shorter = [1, 0, 3, 2]  # batch-mates of other lengths, another order: another longest sequence
    assert torch.equal(audit.fingerprints(packed_batch([sequences[i] for i in shorter], labels[:4])), whole[shorter])
    padded = torch.cat([sequences[0], torch.zeros(1, 3)])  # the same steps, and a step of zeros: another sequence
    assert audit.fingerprints(packed_batch([padded, *sequences[1:]], labels))[0] != whole[0]
    alone = packed_batch(sequences, labels)[0]  # a PackedSequence is a namedtuple of tensors: not read as one
    assert (read(alone).samples, said(read(alone).counted_by)) == (8, "the sequences of its PackedSequence")
    assert torch.equal(audit.fingerprints(alone), audit.fingerprints((alone, torch.empty(8, 0))))
    sparse = SampleAudit(max_words=4)  # fewer words hashed than a step holds: the same ones whatever the batch
    longer = [*sequences[:2], torch.randn(500, 3, generator=generator)]
    assert torch.equal(
        sparse.fingerprints(packed_batch(longer, labels[:3]))[:2],
        sparse.fingerprints(packed_batch(sequences[:2], labels[:2])),
    )


def test_a_fit_on_packed_sequences_counts_and_audits_each_sequence_once_and_says_lightning_reads_its_steps(capsys):
    generator = torch.Generator().manual_seed(1)
    data = [(torch.randn(2 + i % 5, 3, generator=generator), torch.tensor(0.0)) for i in range(12)]
    collate = lambda items: packed_batch([s for s, _ in items], torch.stack([y for _, y in items]))  # noqa: E731
    timer, audit = EpochTimer(), SampleAudit(dataset_size=len(data))
    loader = DataLoader(data, batch_size=4, shuffle=True, collate_fn=collate)
    fit_module(PackedReadout(), loader, callbacks=[timer, audit])
    assert [row["samples"] for row in timer.epochs] == [12, 12]
    assert [(row["seen"], row["distinct"], row["missing"]) for row in audit.epochs] == [(12, 12, 0)] * 2
    assert "samples disagree: Lightning reads" in capsys.readouterr().out  # it reads the packed steps' length


class PackedReadout(Classifier):
    """The mean of a packed batch's steps."""

    def training_step(self, batch, batch_idx):
        return self.weight * batch[0].data.mean()


def sparse_rows(count: int = 8, seed: int = 0) -> torch.Tensor:
    """Rows of a bag of words: few nonzeros a row, some rows with the same nonzero count."""
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(count, 30, generator=generator) < 0.15
    return mask * torch.rand(count, 30, generator=generator)


@pytest.mark.parametrize("layout", ["coo", "csr", "bsr"])
def test_a_sparse_batch_fingerprints_each_sample_by_its_own_nonzeros_whatever_its_batch(layout):
    """A block layout's blocks span two samples' rows: the zeros they store are no sample's."""

    def sparse(rows: torch.Tensor) -> torch.Tensor:
        if layout == "bsr":
            return rows.to_sparse_bsr((2, 2)) if len(rows) % 2 == 0 else rows.to_sparse_bsr((1, 2))
        return rows.to_sparse() if layout == "coo" else rows.to_sparse_csr()

    rows, labels = sparse_rows(), torch.zeros(8)  # one label: only the nonzeros tell the samples apart
    audit = SampleAudit()
    whole = audit.fingerprints((sparse(rows), labels))
    assert whole.unique().numel() == 8
    order = [5, 1, 7]
    assert torch.equal(audit.fingerprints((sparse(rows[order]), labels[:3])), whole[order])
    moved = rows.clone()
    moved[0] = moved[0].roll(1)  # the same values in other columns: another sample
    assert audit.fingerprints((sparse(moved), labels))[0] != whole[0]


def test_a_fit_on_sparse_batches_counts_and_audits_every_sample_once():
    rows = sparse_rows(12, seed=1)
    data = list(zip(rows, torch.zeros(12), strict=True))
    collate = lambda items: (torch.stack([r for r, _ in items]).to_sparse(), torch.stack([y for _, y in items]))  # noqa: E731
    timer, audit = EpochTimer(), SampleAudit(dataset_size=len(data))
    fit_module(
        SparseReadout(), DataLoader(data, batch_size=4, shuffle=True, collate_fn=collate), callbacks=[timer, audit]
    )
    assert [row["samples"] for row in timer.epochs] == [12, 12]
    assert [(row["seen"], row["distinct"], row["missing"]) for row in audit.epochs] == [(12, 12, 0)] * 2


class SparseReadout(Classifier):
    """The mean of a sparse batch's values."""

    def training_step(self, batch, batch_idx):
        return self.weight * batch[0].to_dense().mean()


def test_a_column_made_by_transposing_a_row_is_hashed_as_any_column():
    """``labels[None].T``: one word a sample, strided by the batch; its own layout is no reason to give up."""
    image, label = images()
    audit = SampleAudit()
    assert torch.equal(audit.fingerprints((image, label[None].T)), audit.fingerprints((image, label[:, None].clone())))


def test_token_ids_a_collate_leaves_as_lists_are_part_of_each_samples_fingerprint():
    """``{"input_ids": [[...], ...], "label": tensor}``: read by the label alone, every text of one label was one."""
    texts = [([i, i + 1, 7][: 2 + i % 2], i % 2) for i in range(SAMPLES * BATCHES)]

    def collate(items: list) -> dict:
        return {"input_ids": [ids for ids, _ in items], "label": torch.tensor([label for _, label in items])}

    for data, distinct in ((texts, len(texts)), (texts[: len(texts) // 2] * 2, len(texts) // 2)):
        audit = SampleAudit(dataset_size=len(data))
        loader = DataLoader(data, batch_size=SAMPLES, collate_fn=collate)
        fit_module(Classifier(), loader, callbacks=[audit], max_epochs=1)
        assert (audit.epochs[0]["seen"], audit.epochs[0]["distinct"]) == (len(data), distinct)
    ids = {"x": torch.zeros(3, 2), "index": [10, 11, 12]}  # a column of numbers: each sample's own
    assert SampleAudit().fingerprints(ids).unique().numel() == 3


def bag_batch(texts: list[torch.Tensor], labels: torch.Tensor, last: bool = False) -> tuple:
    """PyTorch's text-classification batch for ``nn.EmbeddingBag``: labels, the texts' tokens end to end, offsets."""
    lengths = torch.tensor([0, *(len(text) for text in texts)])
    offsets = lengths.cumsum(0) if last else lengths[:-1].cumsum(0)  # include_last_offset: the end too
    return labels, torch.cat(texts), offsets


def token_texts(count: int, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 50, (3 + i % 4,), generator=generator) for i in range(count)]


@pytest.mark.parametrize("last", [False, True], ids=["offsets", "include_last_offset"])
def test_bags_marked_by_offsets_are_counted_each_fingerprinted_by_its_own_tokens_whatever_its_batch(last):
    """Read by its first tensor, every text's fingerprint was its label and its offset: distinct texts collided."""
    texts, labels = token_texts(8), torch.tensor([0, 1, 0, 1, 0, 1, 0, 1])
    batch = bag_batch(texts, labels, last)
    assert (read(batch).samples, said(read(batch).counted_by)) == (8, "the bags its tensor 2's offsets mark")
    tokens_first = (batch[1], batch[2], batch[0])  # (text, offsets, label): its first tensor leads with the tokens
    first = read(tokens_first)
    assert (first.samples, said(first.counted_by)) == (8, "the bags its tensor 1's offsets mark")
    audit = SampleAudit()
    whole = audit.fingerprints(batch)
    assert whole.unique().numel() == 8
    order = [5, 0, 4]  # other batch-mates, shorter (padded to another width), in another order: the same fingerprints
    assert torch.equal(audit.fingerprints(bag_batch([texts[i] for i in order], labels[order], last)), whole[order])
    assert audit.fingerprints(bag_batch(texts, 1 - labels, last))[0] != whole[0]  # the same text, another label
    padded = torch.cat([texts[0], torch.zeros(1, dtype=torch.int64)])  # a token 0 after it: another text
    assert audit.fingerprints(bag_batch([padded, *texts[1:]], labels, last))[0] != whole[0]
    assert torch.equal(audit.fingerprints(tokens_first), whole)
    held = HeldSteps(audit.hash)  # steps held and hashed together: each bag's fingerprint as in its own batch
    for part in (slice(0, 3), slice(3, 8)):
        held.hold(0, audit.identity.rows(bag_batch(texts[part], labels[part], last)))
    assert torch.equal(torch.cat(held.flush()[0]), whole)


def test_offsets_with_an_empty_bag_or_off_their_rows_are_not_read_as_bags():
    """Strictly rising from 0 within the rows, or the batch is read as before: its count said to be a guess."""
    texts, labels = token_texts(4), torch.zeros(4, dtype=torch.int64)  # sorted from 0, but repeated: no offsets
    for batch in (
        bag_batch([texts[0], texts[0][:0], *texts[2:]], labels),  # an empty bag
        (labels, torch.cat(texts), torch.tensor([1, 2, 3, 4])),  # not from 0
        (labels, torch.zeros(3), torch.tensor([0, 1, 2, 3])),  # past the rows
    ):
        reading = read(batch)
        assert (said(reading.counted_by), reading.bags, len(reading.lengths)) == (said(BY_FIRST_LENGTH), None, 2)


@pytest.mark.parametrize(
    ("batch", "samples"),
    [
        ((torch.randint(0, 9, (32, 16)), torch.arange(32), torch.arange(16)), 32),  # positions shared by the batch
        ((torch.randn(4, 3, 8, 8), torch.tensor([0, 2, 3]), torch.randn(3, 4), torch.tensor([1, 1, 2])), 4),  # boxes
        ((torch.randn(20, 4, 3), torch.arange(4)), 20),  # time-major, beside an unshuffled first batch's ids
        ((torch.arange(4), torch.randn(20, 4, 3)), 4),
        ((torch.randn(8, 5), torch.arange(8), torch.arange(8), torch.ones(10)), 8),  # ids beside class weights
        ((torch.randn(5, 3), torch.arange(5), torch.randn(25, 3), torch.arange(25)), 5),  # a 5-way 1-shot episode
        ((torch.tensor(0.5), torch.randn(20, 4, 3), torch.tensor(7), torch.arange(4)), 20),  # 0-dim tensors among them
    ],
    ids=["positions", "boxes", "time-major", "ids-first", "class-weights", "episode", "0-dim"],
)
def test_integer_columns_beside_tensors_of_other_lengths_are_not_taken_for_offsets(batch, samples):
    """Only offsets right after 1-dim integer tokens, and not 0, 1, 2, ...: each of these is read as before."""
    reading = read(batch)
    assert (reading.samples, reading.bags, said(reading.counted_by)) == (samples, None, said(BY_FIRST_LENGTH))


def test_a_label_before_the_tokens_is_not_taken_for_their_offsets_whatever_its_values():
    """A batch of one bag labelled 0 (include_last_offset), and labels that happen to rise from 0: the offsets win."""
    tokens = torch.arange(1, 11)
    one = read((torch.tensor([0]), tokens[:3], torch.tensor([0, 3])))
    assert (one.samples, one.bags.starts.tolist(), [t.tolist() for t in one.rows]) == (1, [0], [[0]])
    rising = read((torch.tensor([0, 2, 5, 7]), tokens, torch.tensor([0, 3, 4, 6])))
    assert (rising.samples, rising.bags.starts.tolist(), [t.tolist() for t in rising.rows]) == (
        4,
        [0, 3, 4, 6],
        [[0, 2, 5, 7]],
    )


def test_a_bag_past_max_words_is_hashed_from_its_own_rows_and_leaves_the_others_as_they_are_alone():
    """A long text beside short ones: each short text's fingerprint as without it, the long one's its own."""
    audit = SampleAudit(max_words=16)  # 4 tokens of 4 words each a bag at most, hashed as a row
    texts, labels = token_texts(6), torch.zeros(7, dtype=torch.int64)
    short = [text[:3] for text in texts]
    long = torch.randint(1, 50, (40,), generator=torch.Generator().manual_seed(3))
    alone = audit.fingerprints(bag_batch(short, labels[:6]))
    beside = audit.fingerprints(bag_batch([*short, long], labels))
    assert torch.equal(beside[:6], alone)
    assert torch.equal(audit.fingerprints(bag_batch([long, short[0]], labels[:2])), beside[[6, 0]])
    other = long.clone()
    other[20] += 1  # one token apart, inside the bag: another text
    assert audit.fingerprints(bag_batch([other], labels[:1]))[0] != beside[6]


def test_strings_beside_bags_are_part_of_each_bags_fingerprint():
    texts, labels = token_texts(2), torch.zeros(2, dtype=torch.int64)
    same = [texts[0], texts[0]]  # one text's tokens twice, under two titles
    found = SampleAudit().fingerprints((*bag_batch(same, labels), ["first title", "second title"]))
    assert found.unique().numel() == 2


def test_a_fit_on_bags_counts_and_audits_every_text_once_and_finds_a_text_listed_twice(capsys):
    class BagReadout(Classifier):
        def __init__(self):
            super().__init__()
            self.bag = torch.nn.EmbeddingBag(50, 2)  # the batch is what it takes

        def training_step(self, batch, batch_idx):
            return self.bag(batch[1], batch[2]).mean()

    texts = list(zip(token_texts(SAMPLES * BATCHES), torch.arange(SAMPLES * BATCHES) % 4, strict=True))
    collate = lambda items: bag_batch([t for t, _ in items], torch.stack([y for _, y in items]))  # noqa: E731
    for data, distinct in ((texts, len(texts)), (texts[: len(texts) // 2] * 2, len(texts) // 2)):
        timer, audit = EpochTimer(), SampleAudit(dataset_size=len(data))
        loader = DataLoader(data, batch_size=8, shuffle=True, collate_fn=collate)
        fit_module(BagReadout(), loader, callbacks=[timer, audit], max_epochs=1)
        assert timer.epochs[0]["samples"] == len(data)
        assert (audit.epochs[0]["seen"], audit.epochs[0]["distinct"]) == (len(data), distinct)
    assert "lead with different lengths" not in capsys.readouterr().out


class Windowed(Classifier):
    """A library's step that trains on more rows than its batch holds: WINDOWS drawn from the batch's series."""

    def training_step(self, batch, batch_idx):
        series = batch[0]
        rows = series[torch.arange(WINDOWS) % len(series)]  # the step's windows, each a series' row here
        loss = self.weight * rows.mean()
        self.log("train_loss", loss, on_epoch=True, batch_size=WINDOWS)
        self.log("lr", 0.1, on_epoch=True, batch_size=1)  # a value weighed by one: the most given is what counts
        return loss


WINDOWS = 40


def test_a_step_that_tells_self_log_of_more_samples_than_its_batch_holds_is_said_with_both_counts(capsys):
    data = [(torch.randn(4), torch.tensor(i)) for i in range(SAMPLES * BATCHES)]
    timer = EpochTimer()
    fit_module(Windowed(), DataLoader(data, batch_size=SAMPLES), callbacks=[timer])
    assert [row["sample_counts"] for row in timer.epochs] == [
        {"counted": SAMPLES * BATCHES, "logged": WINDOWS * BATCHES, "loader": SAMPLES * BATCHES}
    ] * 2
    said = f"; samples disagree: 48 counted (the loader's length agrees), self.log's batch sizes {WINDOWS * BATCHES}\n"
    assert capsys.readouterr().out.count(said) == 2
    # a count of the user's that agrees with what self.log was given says nothing
    agreeing = EpochTimer(samples_in_batch=lambda batch: WINDOWS)
    fit_module(Windowed(), DataLoader(data, batch_size=SAMPLES), callbacks=[agreeing])
    assert all("logged" not in row.get("sample_counts", {}) for row in agreeing.epochs)


class LogsItsBatchSize(Classifier):
    """A library's step that tells ``self.log`` its configured batch size, the short last batch's too."""

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.log("train_loss", loss, on_epoch=True, batch_size=SAMPLES)
        return loss


def test_a_step_that_logs_the_loaders_batch_size_on_its_short_last_batch_is_no_disagreement(capsys):
    data = [(torch.randn(4), torch.tensor(i)) for i in range(SAMPLES * BATCHES - 5)]
    batches = BatchSampler(SequentialSampler(data), SAMPLES, drop_last=False)  # no loader length known to agree
    for loader in (DataLoader(data, batch_size=SAMPLES), DataLoader(data, batch_sampler=batches)):
        timer = EpochTimer()
        fit_module(LogsItsBatchSize(), loader, callbacks=[timer])
        assert [row["samples"] for row in timer.epochs] == [len(data)] * 2
        assert all("sample_counts" not in row for row in timer.epochs)
    assert "samples disagree" not in capsys.readouterr().out
    # a count short of the logged batch size on every step is still said
    timer = EpochTimer(samples_in_batch=lambda batch: len(batch[0]) - 1)
    fit_module(LogsItsBatchSize(), DataLoader(data, batch_size=SAMPLES), callbacks=[timer])
    assert timer.epochs[0]["sample_counts"]["logged"] == SAMPLES * BATCHES


def atoms_dict(graphs: list[torch.Tensor], energies: torch.Tensor) -> dict[str, torch.Tensor]:
    """A graph batch as a dict, as atomistic libraries collate it: edges first, each atom's structure (``batch``),
    atom rows, then a row per structure and each structure's atom count; no graph count, no pointer."""
    sizes = torch.tensor([len(g) for g in graphs])
    edges = int(sizes.sum()) * 2
    return {
        "edge_index": torch.zeros(2, edges, dtype=torch.long),
        "edge_cell_shift": torch.zeros(edges, 3),
        "batch": torch.repeat_interleave(torch.arange(len(graphs)), sizes),
        "pos": torch.cat(graphs),
        "total_energy": energies[:, None],
        "num_atoms": sizes,
    }


def test_a_dict_graph_batch_counts_and_audits_its_structures_not_its_edge_rows(capsys):
    graphs, energies = graph_list(), torch.arange(float(SAMPLES))
    graphs[5], energies[5] = graphs[4], energies[4]  # one structure twice in the data
    steps = [atoms_dict(graphs[i : i + 4], energies[i : i + 4]) for i in range(0, SAMPLES, 4)]
    reading = read(steps[0])
    assert (reading.samples, said(reading.counted_by)) == (4, "the graphs of its dict")
    timer, audit = EpochTimer(), SampleAudit(dataset_size=SAMPLES)
    fit_module(Classifier(), DataLoader(steps, batch_size=None), callbacks=[timer, audit])
    assert [row["samples"] for row in timer.epochs] == [SAMPLES] * 2
    assert [(row["seen"], row["distinct"], row["missing"]) for row in audit.epochs] == [(SAMPLES, SAMPLES - 1, 0)] * 2
    out = capsys.readouterr().out
    assert "lead with different lengths" not in out and "(all of 'pos', 'total_energy', 'num_atoms')" in out
    assert out.count("samples disagree: Lightning reads 2 a batch where 4 are counted") == 2  # edge_index's 2 rows
    # a 1-dim integer "batch" beside no count of graphs is no graph batch: its first tensor counts
    plain = {"batch": torch.arange(8), "x": torch.randn(8, 3)}
    assert read(plain).samples == 8 and said(read(plain).counted_by) == "the first tensor's length"
