"""SampleAudit in one process: duplicates, missing samples, any batch structure, strict mode and resuming."""

from __future__ import annotations

import collections
import dataclasses
import json

import pytest
import torch
from conftest import FailAt, fit_module
from lightning.fabric.utilities.distributed import DistributedSamplerWrapper
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch import callbacks as lightning_bars
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch.utils.data import (
    BatchSampler,
    ConcatDataset,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
    default_collate,
)

from mnistperf.diagnosis import EpochTimer
from mnistperf.diagnosis.callbacks.project_reader import LIGHTNING_BARS, lightnings, transfers_batches
from mnistperf.diagnosis.callbacks.sample_audit import SampleAudit, SampleAuditError
from mnistperf.diagnosis.measure import fingerprint, held_steps
from mnistperf.diagnosis.measure.fingerprint import Fingerprinter
from mnistperf.diagnosis.measure.sample_counts import (
    ORDER_SAMPLES,
    left_out_by_design,
    loader_causes,
    own_batch_sampler,
    padded_by_design,
    without_copies,
)
from mnistperf.diagnosis.record.audit_text import DRAWS_AGAIN, format_audit

ROWS = 24


class Rows(Dataset):
    """ROWS distinct samples, handed out as a dict, a tuple or a bare tensor."""

    def __init__(self, form: str = "tuple", rows: int = ROWS):
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(rows, 3, 4, generator=generator)
        self.y = torch.randint(0, 10, (rows,), generator=generator)
        self.form = form

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        if self.form == "dict":
            return {"image": self.x[i], "label": self.y[i]}
        if self.form == "indexed":
            return {"image": self.x[i], "label": self.y[i], "index": i}
        if self.form == "tensor":
            return self.x[i]
        return self.x[i], self.y[i]


class Probe(LightningModule):
    """Trains a constant: the audit only looks at the batches."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(torch.ones(1, 4, device=self.device)).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def audited(loader, audit: SampleAudit, epochs: int = 2, *others, **options) -> SampleAudit:
    """``audit`` after Probe trained on ``loader`` (checkpoints on where ``others`` hold a ModelCheckpoint)."""
    fit_module(
        Probe(), loader, callbacks=[audit, *others], max_epochs=epochs, enable_checkpointing=bool(others), **options
    )
    return audit


def counts(row: dict) -> tuple:
    return row["seen"], row["distinct"], row["duplicates"], row["missing"]


def test_an_audit_listed_in_a_second_fit_keeps_nothing_of_the_first(capsys):
    """The second fit's rows are its own, and its first epoch has no earlier order to compare with."""
    audit = audited(DataLoader(Rows(), batch_size=5), SampleAudit(), 2)  # not shuffled: the same order each epoch
    assert [row["epoch"] for row in audit.epochs] == [1, 2] and audit.epochs[1]["same_order_ranks"] == 1
    capsys.readouterr()
    audited(DataLoader(Rows(rows=10), batch_size=5), audit, 1)
    assert [(row["epoch"], row["seen"]) for row in audit.epochs] == [(1, 10)]
    assert "same order" not in capsys.readouterr().out


@pytest.mark.parametrize("form", ["dict", "tuple", "tensor"])
def test_a_clean_epoch_sees_every_sample_once_whatever_the_batch_holds(form, capsys):
    audit = audited(DataLoader(Rows(form), batch_size=5, shuffle=True), SampleAudit())
    assert [counts(row) for row in audit.epochs] == [(ROWS, ROWS, 0, 0)] * 2
    assert audit.epochs[0]["dataset_size"] == ROWS  # read from the DataLoader's dataset
    assert audit.epochs[1]["same_order_ranks"] == 0  # reshuffled
    out = capsys.readouterr().out
    assert f"sample audit, epoch 2: {ROWS} samples seen, {ROWS} distinct of {ROWS}: 0 duplicates, 0 missing" in out


@pytest.mark.parametrize("form", ["dict", "tuple", "tensor"])
def test_a_loader_that_repeats_samples_reports_the_duplicates(form, capsys):
    order = list(range(ROWS)) + [3, 7, 3]  # 3 seen three times, 7 twice
    audit = audited(DataLoader(Rows(form), batch_size=5, sampler=order), SampleAudit(), epochs=1)
    assert counts(audit.epochs[0]) == (ROWS + 3, ROWS, 3, 0)
    assert "3 duplicates, 0 missing\nSampleAudit: samples identified by content" in capsys.readouterr().out


class WeightsFirst(Rows):
    """Each batch led by a tensor of the project's own, not a sample's (three class weights), then its samples."""

    def __getitem__(self, i: int):
        return {"class_weights": torch.ones(3) / 3, "image": self.x[i], "label": self.y[i], "index": i}


def collate_weights_first(items: list) -> dict:
    samples = default_collate([{key: item[key] for key in ("image", "label", "index")} for item in items])
    return {"class_weights": items[0]["class_weights"], **samples}


def test_counts_of_a_guessed_sample_say_so_ask_no_cause_and_stop_no_fit_under_strict(capsys):
    """What a sample is was a guess (the first tensor's 3 rows): its counts are said to be the guess's, no cause of
    the data's is guessed beside them, and strict=True leaves the fit to run, saying once what to pass."""
    loader = DataLoader(WeightsFirst(), batch_size=6, shuffle=True, collate_fn=collate_weights_first)
    audit = audited(loader, SampleAudit(strict=True), epochs=3)
    assert [counts(row) for row in audit.epochs] == [(12, 1, 11, ROWS - 1)] * 3  # the same 3 weights every batch
    assert all(row["guessed"] for row in audit.epochs)
    out = capsys.readouterr().out
    assert out.count(f"11 duplicates, {ROWS - 1} missing; what a sample is was a guess") == 3
    assert "identified by content" not in out and "reshuffled" not in out
    assert out.count("SampleAudit: strict=True stops no fit on counts of a guess; pass sample_id= or") == 1

    named = audited(loader, SampleAudit(strict=True, sample_id="index"), epochs=1)
    assert [counts(row) for row in named.epochs] == [(ROWS, ROWS, 0, 0)] and "guessed" not in named.epochs[0]


def test_timing_json_keeps_the_audits_rows_and_problems_beside_the_timers_figures(tmp_path):
    timer, audit = EpochTimer(busy_window_steps=0), SampleAudit()
    fit_module(Probe(), DataLoader(Rows(), batch_size=5), callbacks=[timer, audit], default_root_dir=tmp_path)
    assert timer.summary_path is not None and len(audit.epochs) == 2
    kept = json.loads(timer.summary_path.read_text())["sample_audit"]
    assert kept == {"epochs": json.loads(json.dumps(audit.epochs)), "problems": []}
    alone = EpochTimer(busy_window_steps=0)
    fit_module(Probe(), DataLoader(Rows(), batch_size=5), callbacks=[alone], default_root_dir=tmp_path / "alone")
    assert alone.summary_path is not None and "sample_audit" not in json.loads(alone.summary_path.read_text())


def test_copies_in_the_data_read_by_content_are_said_once_and_leave_none_missing_where_each_index_is_drawn_once(capsys):
    rows = Rows()
    rows.x[5], rows.y[5] = rows.x[4], rows.y[4]  # the dataset holds one sample twice: every sample trained once
    audit = audited(DataLoader(rows, batch_size=5), SampleAudit(), epochs=2)
    assert [counts(row) for row in audit.epochs] == [(ROWS, ROWS - 1, 1, 0)] * 2  # each index drawn: none missing
    said = capsys.readouterr().out
    assert said.count(f"{ROWS - 1} distinct of {ROWS}: 1 duplicate, 0 missing") == 2
    note = (
        "SampleAudit: samples identified by content: identical samples in the data count as duplicates, and its "
        "sampler draws each index once: these are copies in the data, each of an index drawn"
    )
    assert said.count(note) == 1  # once a fit
    drawn = RandomSampler(rows, replacement=True, num_samples=ROWS, generator=torch.Generator().manual_seed(0))
    audit = audited(DataLoader(rows, batch_size=5, sampler=drawn), SampleAudit(), epochs=1)  # indices drawn again
    assert audit.epochs[0]["missing"] == ROWS - audit.epochs[0]["distinct"]  # then the missing are the unseen


def test_copies_in_the_data_leave_the_missing_a_design_or_a_resume_explains_and_each_loaders_own(capsys):
    """The copies alone leave none missing: drop_last's samples stay missing by design, a resume's replays took the
    places of as many missing, and each loader's counts agree with the total's."""
    rows = Rows()
    rows.x[5], rows.y[5] = rows.x[4], rows.y[4]
    audit = audited(DataLoader(rows, batch_size=5, drop_last=True), SampleAudit(), epochs=1)  # ROWS = 24: 4 dropped
    assert counts(audit.epochs[0]) == (20, 19, 1, 4) and audit.epochs[0]["dropped_last"] == 4
    assert "drop_last=True leaves 4 samples out" in capsys.readouterr().out
    resumed = {"seen": 40, "distinct": 23, "duplicates": 17, "dataset_size": 40, "missing": 17, "replayed": 16}
    without_copies(resumed)  # one copy, 16 seen again after a resume in the places of 16 never trained
    assert resumed["missing"] == 16
    loaders = {"a": {"seen": 40, "distinct": 39, "duplicates": 1, "dataset_size": 40, "missing": 1}}
    several = {"seen": 40, "distinct": 39, "duplicates": 1, "dataset_size": 40, "missing": 1, "loaders": loaders}
    without_copies(several)
    assert several["missing"] == loaders["a"]["missing"] == 0


def test_unexplained_duplicates_name_the_fields_a_sample_is_and_what_the_sampler_draws(capsys):
    rows = Rows("dict")
    rows.x[5], rows.y[5] = rows.x[4], rows.y[4]
    audited(DataLoader(rows, batch_size=5), SampleAudit(), epochs=1)  # in order: the sampler repeats nothing
    said = capsys.readouterr().out
    assert (
        "samples identified by content (all of 'image', 'label'): identical samples in the data count as duplicates"
        in said
    )
    assert "a field drawn afresh each step may hide others" in said and "fingerprint= what identifies a sample" in said
    assert "by design" not in said
    drawn = RandomSampler(Rows("dict"), replacement=True, num_samples=ROWS, generator=torch.Generator().manual_seed(0))
    audit = audited(DataLoader(Rows("dict"), batch_size=5, sampler=drawn), SampleAudit(), epochs=1)
    assert audit.epochs[0]["duplicates"] > 0 and "its sampler draws some indices again" in capsys.readouterr().out
    wrapped = DistributedSamplerWrapper(drawn, num_replicas=1, rank=0)  # as Lightning hands it to a rank under DDP
    audited(DataLoader(Rows("dict"), batch_size=5, sampler=wrapped), SampleAudit(), epochs=1)
    assert "its sampler draws some indices again" in capsys.readouterr().out
    indexed = WeightedRandomSampler([1.0] * ROWS, ROWS, generator=torch.Generator().manual_seed(0))
    audited(DataLoader(Rows("indexed"), batch_size=5, sampler=indexed), SampleAudit(sample_id="index"), epochs=1)
    said = capsys.readouterr().out  # by index too
    assert f"; {DRAWS_AGAIN}" in said and "by content" not in said
    audited(DataLoader(rows, batch_size=5, sampler=list(range(ROWS))), SampleAudit(), epochs=1)  # a list: it repeats
    assert "by design" not in capsys.readouterr().out  # none of its indices
    audited(DataLoader(rows, batch_size=5, sampler=[*range(ROWS), 0, 1]), SampleAudit(), epochs=1)
    assert DRAWS_AGAIN in capsys.readouterr().out
    audited(DataLoader(rows, batch_size=5, sampler=SubsetRandomSampler(range(ROWS))), SampleAudit(), epochs=1)
    assert "by design" not in capsys.readouterr().out  # a permutation of its indices: it repeats none
    named = [{"image": rows.x[i], "label": rows.y[i], "name": f"case {i - (i == 5)}"} for i in range(ROWS)]
    audited(DataLoader(named, batch_size=5), SampleAudit(), epochs=1)  # the strings are hashed: named too
    assert "(all of 'image', 'label', 'name')" in capsys.readouterr().out


class Repeating(BatchSampler):
    """A batch sampler of the user's own that gives each batch twice (repeat augmentation)."""

    def __iter__(self):
        for batch in super().__iter__():
            yield batch
            yield batch

    def __len__(self):
        return 2 * super().__len__()


def test_duplicates_under_a_batch_sampler_of_the_users_own_are_not_said_to_be_copies_in_the_data(capsys):
    rows = Rows("dict")
    batches = Repeating(SequentialSampler(rows), batch_size=5, drop_last=False)
    audit = audited(DataLoader(rows, batch_sampler=batches), SampleAudit(), epochs=1)
    said = capsys.readouterr().out
    assert audit.epochs[0]["duplicates"] == ROWS and "copies in the data" not in said  # its sampler draws once


def test_more_distinct_samples_than_the_dataset_holds_count_no_missing_and_say_what_may_make_them(capsys):
    """Each item made into 4 crops, the collate putting them end to end: the dataset's length counts items."""
    crops = [torch.randn(4, 3, generator=torch.Generator().manual_seed(i)) for i in range(8)]
    loader = DataLoader(crops, batch_size=2, collate_fn=torch.cat)
    audit = audited(loader, SampleAudit(), epochs=1, limit_train_batches=3)  # 2 of the 8 items left out
    row = audit.epochs[0]
    assert (row["seen"], row["distinct"], row["dataset_size"], row["missing"]) == (24, 24, 8, None)
    said = capsys.readouterr().out
    assert "24 distinct of 8: 0 duplicates, missing not counted (limit_train_batches=3: the epoch trains 3 of" in said
    assert "batches); 16 more distinct than the dataset holds" in said
    assert "several samples made of each item" in said


def test_a_loader_that_drops_samples_reports_them_missing_and_an_unshuffled_order_is_noticed(capsys):
    audit = audited(DataLoader(Rows(), batch_size=5, sampler=range(0, ROWS, 2)), SampleAudit())
    assert [counts(row) for row in audit.epochs] == [(ROWS // 2, ROWS // 2, 0, ROWS // 2)] * 2
    assert [row["same_order_ranks"] for row in audit.epochs] == [None, 1]
    assert "same order as epoch 1 on 1 of 1 rank: is the sampler (or the stream) reshuffled" in capsys.readouterr().out


@pytest.mark.parametrize("ranks", [None, 1], ids=["one process", "as Lightning wraps it under DDP"])
def test_a_subset_random_sampler_is_a_split_whose_indices_are_the_dataset_an_epoch_covers(capsys, ranks):
    """A training share drawn by SubsetRandomSampler beside a validation share: the other share is not missing.

    Under DDP, Lightning hands the sampler to each rank inside its DistributedSamplerWrapper: a split all the same.
    """
    train = SubsetRandomSampler(range(0, ROWS, 2), generator=torch.Generator().manual_seed(0))
    sampler = train if ranks is None else DistributedSamplerWrapper(train, num_replicas=ranks, rank=0)
    audit = audited(DataLoader(Rows(), batch_size=5, sampler=sampler), SampleAudit(strict=True))
    assert [counts(row) for row in audit.epochs] == [(ROWS // 2, ROWS // 2, 0, 0)] * 2
    assert audit.epochs[0]["dataset_size"] == ROWS // 2
    assert f"{ROWS // 2:,} distinct of {ROWS // 2:,}: 0 duplicates, 0 missing" in capsys.readouterr().out


def test_an_epoch_of_too_few_samples_to_tell_a_reshuffled_order_is_not_asked_about_its_sampler(capsys):
    """A full-batch fit (one graph, its nodes masked) has one sample an epoch: its order is always the same."""
    audit = audited(DataLoader(Rows(), batch_size=5, sampler=range(ORDER_SAMPLES - 1)), SampleAudit())
    assert [row["same_order_ranks"] for row in audit.epochs] == [None, None]
    assert "reshuffled" not in capsys.readouterr().out
    audit = audited(DataLoader(Rows(), batch_size=5, sampler=range(ORDER_SAMPLES)), SampleAudit())
    assert [row["same_order_ranks"] for row in audit.epochs] == [None, 1]  # as many: compared


@pytest.mark.parametrize(
    ("option", "batches"),
    [({"limit_train_batches": 0.5}, 2), ({"overfit_batches": 2}, 2), ({"limit_train_batches": 2}, 2)],
)
def test_an_epoch_the_trainer_cuts_to_fewer_batches_counts_no_missing_and_says_why(option, batches, capsys):
    """The batches the trainer's own option leaves out are not due: strict does not raise, nor is the order asked of
    a sampler Lightning stopped shuffling for overfit_batches."""
    audit = audited(DataLoader(Rows(), batch_size=6, shuffle=True), SampleAudit(strict=True), **option)
    assert [counts(row) for row in audit.epochs] == [(12, 12, 0, None)] * 2
    assert [row["same_order_ranks"] for row in audit.epochs][1] == (None if "overfit_batches" in option else 0)
    name, value = next(iter(option.items()))
    said = f"missing not counted ({name}={value}: the epoch trains {batches} of the loader's 4 batches)"
    assert capsys.readouterr().out.count(said) == 2


def test_an_epoch_max_steps_ends_inside_counts_no_missing_and_says_why(capsys):
    audit = audited(DataLoader(Rows(), batch_size=6, shuffle=True), SampleAudit(strict=True), max_steps=6)
    assert [counts(row) for row in audit.epochs] == [(ROWS, ROWS, 0, 0), (12, 12, 0, None)]
    said = "missing not counted (max_steps=6: the fit ended after 2 of the epoch's 4 batches)"
    assert capsys.readouterr().out.count(said) == 1


class StopAt(Callback):
    """Stops the fit after its ``step``-th training step, as Lightning's Timer (max_time) and EarlyStopping do."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step >= self.step:
            trainer.should_stop = True


def test_an_epoch_a_callback_stops_inside_counts_no_missing_and_says_why(capsys):
    audit = audited(DataLoader(Rows(), batch_size=6, shuffle=True), SampleAudit(strict=True), 2, StopAt(6))
    assert [counts(row) for row in audit.epochs] == [(ROWS, ROWS, 0, 0), (12, 12, 0, None)]
    said = "missing not counted (the fit was stopped (trainer.should_stop) after 2 of the epoch's 4 batches)"
    assert capsys.readouterr().out.count(said) == 1


def test_the_epoch_an_error_stops_is_audited_as_far_as_it_trained_and_strict_adds_no_error(capsys):
    audit = SampleAudit(strict=True)
    with pytest.raises(RuntimeError, match="a step failed"):  # the fit's own error, not SampleAuditError
        audited(DataLoader(Rows(), batch_size=6, shuffle=True), audit, 2, FailAt(6))
    assert [counts(row) for row in audit.epochs] == [(ROWS, ROWS, 0, 0), (12, 12, 0, None)]
    said = "missing not counted (the fit was interrupted after 2 of the epoch's 4 batches)"
    assert capsys.readouterr().out.count(said) == 1
    twice = SampleAudit(strict=True)  # each row twice: duplicates strict would raise on, had the epoch ended
    with pytest.raises(RuntimeError, match="a step failed"):
        audited(DataLoader(ConcatDataset([Rows(), Rows()]), batch_size=6, shuffle=True), twice, 1, FailAt(6))
    (row,) = twice.epochs
    assert row["seen"] == 36 and row["duplicates"] == 36 - row["distinct"] > 0 and row["missing"] is None


def test_the_samples_drop_last_leaves_out_are_missing_by_design_and_strict_does_not_raise(capsys):
    audit = audited(DataLoader(Rows(), batch_size=5, shuffle=True, drop_last=True), SampleAudit(strict=True))
    assert [counts(row) for row in audit.epochs] == [(20, 20, 0, 4)] * 2  # 24 rows: 4 batches of 5, 4 left out
    said = "4 missing; drop_last=True leaves 4 samples out, the last of each epoch's order, by design"
    assert capsys.readouterr().out.count(said) == 2


def test_under_ddp_drop_last_beside_a_distributed_samplers_padding_leaves_its_samples_out_by_design():
    """101 samples on 2 ranks: padded to 51 each, 3 dropped from each share of batches of 8; the padding's repeat is
    the last rank's last, so 5 distinct samples go missing, not 6, and strict does not raise for them."""
    sampler = DistributedSampler(Rows(rows=101), num_replicas=2, rank=0, shuffle=True)
    loader = DataLoader(Rows(rows=101), batch_size=8, sampler=sampler, drop_last=True)
    row = {"seen": 96, "distinct": 96, "duplicates": 0, "missing": 5, "dataset_size": 101, "per_rank": [48, 48]}
    row["same_order_ranks"] = 0
    row.update(loader_causes(row, [loader], [""], 6, 2))
    assert row["dropped_last"] == 5 and left_out_by_design(row) == 5
    said = "5 missing; drop_last=True leaves 5 samples out, the last of each rank's share of the epoch's order"
    assert said in format_audit({**row, "epoch": 1}, by_content=True)


def test_an_empty_batch_of_a_width_of_its_own_is_audited_as_no_samples():
    """A collate that pads each batch to its longest sample hands an empty batch out at width 0."""

    def padded(items: list) -> torch.Tensor:
        kept = [x.flatten() for x, y in items if y % 2 == 0]  # a filtering collate: even labels only
        return torch.stack(kept) if kept else torch.zeros(0, 0)

    data = Rows()
    data.y = torch.tensor([1] * 5 + [0] * (ROWS - 5))  # the first batch of 5 is filtered out whole
    audit = audited(DataLoader(data, batch_size=5, collate_fn=padded), SampleAudit(), epochs=1)
    assert counts(audit.epochs[0]) == (ROWS - 5, ROWS - 5, 0, 5)


def test_identical_samples_in_the_data_are_told_apart_by_their_index():
    data = Rows("dict")
    data.x[5], data.y[5] = data.x[4], data.y[4]  # one sample twice in the data itself
    by_content = audited(DataLoader(data, batch_size=5), SampleAudit(), epochs=1)
    data.form = "indexed"
    by_index = audited(DataLoader(data, batch_size=5), SampleAudit(sample_id="index"), epochs=1)
    assert counts(by_content.epochs[0]) == (ROWS, ROWS - 1, 1, 0)  # a copy in the data: each index drawn once
    assert counts(by_index.epochs[0]) == (ROWS, ROWS, 0, 0)


@pytest.mark.parametrize(
    "returned, said",
    [
        (lambda batch: batch[0][:, 0, 0], "returned torch.float32 [5]"),  # a float column: its values, not identities
        (lambda batch: batch[1][:, None].expand(-1, 2), "returned torch.int64 [5, 2]"),  # two per sample
        (lambda batch: batch[1].tolist(), "returned list"),
    ],
    ids=["floats", "two-dim", "a list"],
)
def test_a_fingerprint_function_returning_no_integer_tensor_of_one_dimension_is_named_and_the_epoch_not_audited(
    returned, said, capsys
):
    audit = audited(DataLoader(Rows(), batch_size=5), SampleAudit(fingerprint=returned), epochs=1)
    assert not audit.epochs[0]["audited"]
    assert f"SampleAudit fingerprint=: {said}, not an integer tensor [N] of one identity per sample" in (
        capsys.readouterr().out
    )


def test_a_fingerprint_of_one_column_or_of_a_squeezed_batch_of_one_is_read_as_one_a_sample():
    column = audited(DataLoader(Rows(), batch_size=5), SampleAudit(fingerprint=lambda batch: batch[1][:, None]), 1)
    squeezed = audited(DataLoader(Rows(), batch_size=1), SampleAudit(fingerprint=lambda b: b[1].squeeze()), 1)
    assert column.epochs[0]["seen"] == squeezed.epochs[0]["seen"] == ROWS


def test_a_fingerprint_function_and_a_tuple_position_name_the_identity():
    data = Rows()
    data.x[:] = 0  # every sample has the same image: only the label tells them apart
    audit = audited(DataLoader(data, batch_size=5), SampleAudit(fingerprint=lambda batch: batch[1]), epochs=1)
    assert audit.epochs[0]["distinct"] == len(set(data.y.tolist()))
    positional = audited(DataLoader(data, batch_size=5), SampleAudit(sample_id=1), epochs=1)
    assert positional.epochs[0]["distinct"] == len(set(data.y.tolist()))
    later, labelled = SampleAudit(), Rows()
    later.fingerprint = lambda batch: batch[1]  # set after the audit was made: read as the fit starts
    distinct = audited(DataLoader(labelled, batch_size=5), later, epochs=1).epochs[0]["distinct"]
    assert distinct == len(set(labelled.y.tolist())) < ROWS


def test_duplicates_among_rows_wider_than_the_words_hashed_name_max_words_that_reads_them_whole(capsys):
    rows = torch.zeros(ROWS, 1000)  # 2,000 words a row, each row one 1 of its own: distinct, sparse
    rows[torch.arange(ROWS), torch.arange(ROWS) * 37] = 1.0
    loader = DataLoader(torch.utils.data.TensorDataset(rows), batch_size=5)
    (row,) = audited(loader, SampleAudit(max_words=64), epochs=1).epochs
    assert row["duplicates"] > 0  # most rows' one 1 lies outside the 64 words read
    assert "rows of up to 2,000 words were hashed at 64 of them" in capsys.readouterr().out
    (whole,) = audited(loader, SampleAudit(max_words=2000), epochs=1).epochs
    assert whole["duplicates"] == 0 and "were hashed at" not in capsys.readouterr().out
    listed = DataLoader(loader.dataset, batch_size=5, sampler=[*range(ROWS), 0])  # a sampler's repeat explains them
    audited(listed, SampleAudit(max_words=2000), epochs=1)
    assert "were hashed at" not in capsys.readouterr().out


def test_strict_raises_at_the_end_of_an_epoch_with_a_fault():
    with pytest.raises(SampleAuditError, match=r"epoch 1: .* 1 duplicate, 0 missing.*strict=True"):
        audited(DataLoader(Rows(), batch_size=5, sampler=[*range(ROWS), 0]), SampleAudit(strict=True))
    audited(DataLoader(Rows(), batch_size=5), SampleAudit(strict=True))  # a clean run passes


def test_a_bad_sample_id_is_named_in_one_warning_and_the_epoch_not_audited(caplog):
    def collate(items):  # beside the index: a pair of ints a sample, and a mask
        batch = torch.utils.data.default_collate(items)
        return {**batch, "pair": torch.stack([batch["index"], batch["index"]], 1), "mask": batch["index"] > 3}

    for sample_id, why in (
        ("idx", "the batch has no such field"),
        ("image", "holds torch.float32 [5, 3, 4], not an integer tensor [N] of one index a sample"),
        ("pair", "holds torch.int64 [5, 2], not an integer tensor [N]"),  # not flattened into 10 samples
        ("mask", "holds torch.bool [5], not an integer tensor [N]"),  # not 2 samples told apart
    ):
        loader = DataLoader(Rows("indexed"), batch_size=5, collate_fn=collate)
        audit = audited(loader, SampleAudit(sample_id=sample_id), epochs=1)
        (row,) = audit.epochs
        assert row["audited"] is False and f"sample_id {sample_id!r}: {why}" in row["why"]
    said = [r.getMessage() for r in caplog.records if r.name == "mnistperf.diagnosis"]
    assert len(said) == 4
    from mnistperf.diagnosis.callbacks.sample_identity import SampleIdentity

    stacked = SampleIdentity("index", None, 2, fingerprint.Fingerprinter())  # k batches stacked: an index [k, B]
    ids = stacked.fingerprints({"index": torch.arange(8).view(2, 4), "x": torch.zeros(2, 4, 3)})
    assert ids.tolist() == list(range(8))
    assert all(line.startswith("SampleAudit: fingerprinting a training batch failed") for line in said)


Indexed = collections.namedtuple("Indexed", ["image", "index"])


class IndexedObject:
    def __init__(self, image, index):
        self.image, self.index = image, index


@dataclasses.dataclass
class IndexedData:
    image: torch.Tensor
    index: torch.Tensor


@pytest.mark.parametrize("kind", [Indexed, IndexedData, IndexedObject])
def test_a_sample_id_names_a_namedtuples_or_an_objects_field_by_its_name(kind):
    """Each index once, then the first five again: counted by the field the sample_id names."""

    def collate(samples):
        return kind(torch.stack([s["image"] for s in samples]), torch.tensor([s["index"] for s in samples]))

    loader = DataLoader(Rows("indexed"), batch_size=5, sampler=[*range(ROWS), *range(5)], collate_fn=collate)
    assert counts(audited(loader, SampleAudit(sample_id="index"), epochs=1).epochs[0]) == (ROWS + 5, ROWS, 5, 0)


def test_a_sample_id_that_names_a_tuples_method_is_no_field_of_it():
    (row,) = audited(DataLoader(Rows("tuple"), batch_size=5), SampleAudit(sample_id="index"), epochs=1).epochs
    assert row["audited"] is False and "sample_id 'index': the batch has no such field (it is a list)" in row["why"]


class Stream(IterableDataset):
    def __iter__(self):
        yield from Rows()


def test_the_dataset_size_is_unknown_for_a_stream_unless_given(capsys):
    audit = audited(DataLoader(Stream(), batch_size=5), SampleAudit(), epochs=1)
    assert counts(audit.epochs[0]) == (ROWS, ROWS, 0, None)
    assert "dataset size unknown: pass dataset_size" in capsys.readouterr().out
    given = audited(DataLoader(Stream(), batch_size=5), SampleAudit(dataset_size=ROWS + 2), epochs=1)
    assert counts(given.epochs[0]) == (ROWS, ROWS, 0, 2)


class WorkersStream(IterableDataset):
    """Rows() as a stream that each loader worker reads whole, or (``split``) only its own share of."""

    def __init__(self, split: bool):
        self.split = split

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        for index, item in enumerate(Rows()):
            if not self.split or info is None or index % info.num_workers == info.id:
                yield item


def test_a_stream_each_worker_reads_whole_is_said_to_repeat_every_sample_once_per_worker(capsys):
    whole = audited(DataLoader(WorkersStream(split=False), batch_size=4, num_workers=2), SampleAudit(), epochs=1)
    assert counts(whole.epochs[0]) == (2 * ROWS, ROWS, ROWS, None)
    assert whole.epochs[0]["read_whole"] == {"workers": 2, "ranks": 1, "stream": True}
    line = capsys.readouterr().out
    assert "; each of the loader's 2 workers iterates the whole IterableDataset, so every sample came 2 times" in line
    assert "identified by content" not in line  # the cause is named, not guessed
    split = audited(DataLoader(WorkersStream(split=True), batch_size=4, num_workers=2), SampleAudit(), epochs=1)
    assert counts(split.epochs[0]) == (ROWS, ROWS, 0, None) and "read_whole" not in split.epochs[0]
    with pytest.raises(SampleAuditError, match="every sample came 2 times"):  # a bug, not a design
        audited(DataLoader(WorkersStream(split=False), batch_size=4, num_workers=2), SampleAudit(strict=True), epochs=1)


def test_data_each_rank_reads_whole_is_said_with_the_share_to_keep():
    row = {"epoch": 1, "seen": 48, "distinct": 24, "duplicates": 24, "missing": 0, "dataset_size": 24}
    row |= {"per_rank": [24, 24], "same_order_ranks": None, "read_whole": {"workers": 1, "ranks": 2, "stream": True}}
    said = format_audit(row, by_content=True)
    assert "each of the 2 ranks iterates the whole IterableDataset, so every sample came 2 times" in said
    row["read_whole"] = {"workers": 2, "ranks": 2, "stream": True}
    said = format_audit(row, by_content=True)
    assert "each of the 2 ranks' 2 workers iterates the whole IterableDataset, so every sample came 4 times" in said
    row["read_whole"] = {"workers": 1, "ranks": 2, "stream": False}  # use_distributed_sampler=False, a plain sampler
    said = format_audit(row, by_content=True)
    assert "each of the 2 ranks reads the whole dataset, so every sample came 2 times: its sampler does not" in said
    assert "identified by content" not in said


def test_a_batch_sampler_handing_the_dataset_lists_of_indices_counts_against_its_size():
    """``batch_size=None`` with a BatchSampler as the sampler: the dataset's ``__getitem__`` takes each list whole."""
    data = Rows()
    sampler = BatchSampler(RandomSampler(data), batch_size=5, drop_last=True)
    audit = audited(DataLoader(data, sampler=sampler, batch_size=None), SampleAudit(), epochs=1)
    assert counts(audit.epochs[0]) == (20, 20, 0, 4)  # 4 lists of 5 indices from 24 rows
    assert audit.epochs[0]["dropped_last"] == 4  # the BatchSampler's own drop_last


class Buckets(Sampler):
    """A batch sampler of the project's own: lists of ``size`` shuffled indices, the short last one kept or not."""

    def __init__(self, rows: int, size: int, keep_short: bool):
        self.rows, self.size, self.keep_short = rows, size, keep_short

    def __iter__(self):
        order = torch.randperm(self.rows).tolist()
        for start in range(0, self.rows, self.size):
            if self.keep_short or start + self.size <= self.rows:
                yield order[start : start + self.size]

    def __len__(self) -> int:
        return -(-self.rows // self.size) if self.keep_short else self.rows // self.size


def test_a_batch_sampler_of_the_projects_own_counts_against_the_dataset_and_is_named_where_samples_are_missing(capsys):
    whole = audited(DataLoader(Rows(), batch_sampler=Buckets(ROWS, 5, keep_short=True)), SampleAudit(), epochs=1)
    assert counts(whole.epochs[0]) == (ROWS, ROWS, 0, 0) and "batch_sampler" not in whole.epochs[0]
    short = audited(DataLoader(Rows(), batch_sampler=Buckets(ROWS, 5, keep_short=False)), SampleAudit(), epochs=1)
    assert counts(short.epochs[0]) == (20, 20, 0, 4) and short.epochs[0]["batch_sampler"] == "Buckets"
    said = "4 missing; the loader's batch_sampler (Buckets) is the project's own and drew no index of these"
    assert said in capsys.readouterr().out
    with pytest.raises(SampleAuditError, match="Buckets"):  # it may be a bug: strict still raises
        audited(DataLoader(Rows(), batch_sampler=Buckets(ROWS, 5, False)), SampleAudit(strict=True), epochs=1)

    class Lists(BatchSampler):  # a subclass of torch's drawing as it likes is the project's own too
        def __iter__(self):
            yield from list(super().__iter__())[:-1]

    lists = audited(DataLoader(Rows(), batch_sampler=Lists(range(ROWS), 6, False)), SampleAudit(), epochs=1)
    assert counts(lists.epochs[0]) == (18, 18, 0, 6) and lists.epochs[0]["batch_sampler"] == "Lists"


def test_a_libraries_batch_sampler_is_not_taken_for_the_projects_own():
    """torchdata's StatefulDataLoader makes a BatchSampler subclass of its own: it draws as torch's does."""

    class Stateful(BatchSampler):
        pass

    Stateful.__module__ = "torchdata.stateful_dataloader.sampler"
    loader = DataLoader(Rows(), batch_sampler=Stateful(range(ROWS), 5, False))
    assert own_batch_sampler(loader) is None
    assert own_batch_sampler(DataLoader(Rows(), batch_sampler=Buckets(ROWS, 5, False))) == "Buckets"


def test_a_loader_whose_length_is_not_implemented_is_not_taken_to_stop_short_and_the_other_causes_still_read():
    """A length raising NotImplementedError is none, as Lightning's ``sized_len`` reads it: that loader did not stop
    short by design, and the longer loader beside it still did (the causes are not lost to the error)."""

    class Unsized:
        def __len__(self) -> int:
            raise NotImplementedError

    longer = DataLoader(Rows(), batch_size=2)  # 12 batches, of which the epoch ran 2
    each = {"missing": 20, "duplicates": 0}  # 4 of 24 seen
    row = {"missing": 40, "seen": 8, "distinct": 8, "loaders": {"unsized": each, "longer": each}}
    assert loader_causes(row, [Unsized(), longer], ["unsized", "longer"], 2, 1) == {"stopped_short": {"longer": 20}}


class Draws(Sampler):
    """A batch sampler of the project's own that draws each batch's indices at random, with replacement."""

    def __iter__(self):
        yield from torch.randint(0, ROWS, (4, 6), generator=torch.Generator().manual_seed(0)).tolist()

    def __len__(self) -> int:
        return 4


def test_a_batch_sampler_of_the_projects_own_that_holds_no_sampler_is_not_read_by_the_loaders_unused_one(capsys):
    """The DataLoader's own ``sampler`` (a SequentialSampler it made) draws nothing: whether it repeats is unknown."""
    audit = audited(DataLoader(Rows(), batch_sampler=Draws()), SampleAudit(), epochs=1)
    assert audit.epochs[0]["duplicates"] > 0
    assert "a sampler other than torch's may repeat some by design" in capsys.readouterr().out


def test_groups_of_batches_count_every_sample_with_two_sample_dims():
    data = Rows()
    groups = [(data.x[i : i + 6].reshape(2, 3, 3, 4), data.y[i : i + 6].reshape(2, 3)) for i in range(0, ROWS, 6)]
    audit = audited(DataLoader(groups, batch_size=None), SampleAudit(sample_dims=2, dataset_size=ROWS), epochs=1)
    assert counts(audit.epochs[0]) == (ROWS, ROWS, 0, 0)


def test_an_epoch_resumed_from_a_checkpoint_is_counted_whole_and_a_plain_loader_is_seen_to_start_over(tmp_path):
    """A plain DataLoader cannot resume inside an epoch: Lightning runs the epoch's remaining 3 batches from a
    fresh iterator, so the first 10 samples are seen twice and the last 9 never."""
    checkpoint = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_last=True)
    first = audited(DataLoader(Rows(), batch_size=5), SampleAudit(), 1, checkpoint, max_steps=2)
    assert counts(first.epochs[0]) == (10, 10, 0, None)  # stopped by max_steps after 2 of 5 batches: none missing
    resumed = audited(DataLoader(Rows(), batch_size=5), SampleAudit(), 1, ckpt_path=tmp_path / "last.ckpt")
    assert counts(resumed.epochs[0]) == (10 + 15, 15, 10, ROWS - 15)


def test_an_epoch_resumed_from_a_checkpoint_saved_without_the_audit_counts_no_missing(tmp_path, capsys):
    """The epoch's first 2 batches ran before the resume, where no audit saw them: they are not missing."""
    checkpoint = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_last=True)
    fit_module(
        Probe(), DataLoader(Rows(), batch_size=6), callbacks=[checkpoint], max_steps=2, enable_checkpointing=True
    )
    resumed = audited(DataLoader(Rows(), batch_size=6), SampleAudit(strict=True), 1, ckpt_path=tmp_path / "last.ckpt")
    assert counts(resumed.epochs[0]) == (12, 12, 0, None)  # the epoch's last 2 batches of 4
    said = "missing not counted (the fit resumed after 2 of the epoch's batches, from a checkpoint saved without"
    assert said in capsys.readouterr().out


def test_fingerprints_tell_any_bit_apart_and_agree_on_equal_samples():
    hash_ = Fingerprinter(max_words=640)
    for dtype in (torch.float32, torch.float16, torch.int64, torch.uint8, torch.bool):
        base = torch.zeros(2, 40, dtype=dtype)
        changed = base.clone()
        changed[1, 17] = 1
        prints = hash_([changed], 2)
        assert prints[0] == hash_([base], 2)[1] and prints[0] != prints[1], dtype
    big = torch.randn(3, 1000)  # more words than max_words: hashed on fixed positions, the same every call
    assert torch.equal(hash_([big], 3), hash_([big.clone()], 3)) and len(set(hash_([big], 3).tolist())) == 3
    many = torch.arange(100_000, dtype=torch.int64).reshape(-1, 1)
    assert torch.unique(hash_([many], len(many))).numel() == len(many) and (hash_([many], len(many)) >= 0).all()


def test_a_large_samples_positions_are_drawn_without_permuting_all_its_words(monkeypatch):
    """Images of a size of their own each draw positions: a permutation of every word would cost each its length."""
    permuted = []
    real = torch.randperm
    monkeypatch.setattr(torch, "randperm", lambda n, **kw: permuted.append(n) or real(n, **kw))
    hash_ = Fingerprinter(max_words=64)
    huge = torch.randn(2, 16 * 64)  # 2,048 words a sample: more than 16 times max_words
    prints = hash_([huge], 2)
    assert permuted == [] and torch.equal(prints, Fingerprinter(max_words=64)([huge.clone()], 2))
    assert prints[0] != prints[1] and (hash_._positions[(2048, huge.device)] < 2048).all()
    hash_([torch.randn(2, 8 * 64)], 2)  # 1,024 words: drawn distinct, from a permutation
    assert permuted == [1024]


@pytest.mark.parametrize(
    "row",
    [
        {
            "epoch": 1,
            "seen": 1200,
            "distinct": 1199,
            "duplicates": 1,
            "missing": 3,
            "dataset_size": 1202,
            "per_rank": [600, 600],
            "same_order_ranks": None,
        },
        {
            "epoch": 2,
            "seen": 7,
            "distinct": 7,
            "duplicates": 0,
            "missing": None,
            "dataset_size": None,
            "per_rank": [7],
            "same_order_ranks": 1,
        },
    ],
)
def test_the_report_line_carries_every_count(row):
    """The multi-process tests read the counts back from rank 0's line."""
    from records import audit_epochs

    expected = {k: row[k] for k in ("epoch", "seen", "distinct", "duplicates", "missing", "per_rank")}
    assert audit_epochs(format_audit(row, by_content=True) + "\n") == [
        {**expected, "same_order_ranks": row["same_order_ranks"] or 0}
    ]


@pytest.mark.parametrize("values", [[], [7], [3, 3, 3], [5, 1, 5, 2, 1, 2**62, 0]])
def test_the_cpu_counts_of_fingerprints_agree_with_torchs(values):
    from mnistperf.diagnosis.measure.sample_counts import distinct, seen_before

    fingerprints = torch.tensor(values, dtype=torch.int64)
    assert distinct(fingerprints) == torch.unique(fingerprints).numel() == len(set(values))
    before = torch.tensor([1, 2**62, 9])
    assert seen_before(fingerprints, before) == int(torch.isin(fingerprints, before).sum())


def test_the_device_path_of_the_hash_agrees_with_the_cpu_matmul_in_every_chunking(monkeypatch):
    values = torch.randint(-(2**15), 2**15, (50, 3000))
    weights = torch.randint(1, fingerprint.PRIME, (3000, fingerprint.LANES))
    exact = [
        sum(int(v) * int(w) for v, w in zip(row, weights[:, lane], strict=True)) % fingerprint.PRIME
        for row in values[:3]
        for lane in range(fingerprint.LANES)
    ]
    by_matmul = fingerprint.cpu_lane_sums([[values.numpy()]], fingerprint.halves(weights))
    assert by_matmul[:3].reshape(-1).tolist() == exact
    steps = [[values[:13].numpy()], [values[13:14].numpy()], [values[14:].numpy()]]  # steps that blocks straddle
    assert torch.equal(fingerprint.cpu_lane_sums(steps, fingerprint.halves(weights)), by_matmul)  # reduced at the end
    monkeypatch.setattr(fingerprint, "FLOAT_CHUNK_WORDS", 11)  # float64 matmuls of 11 words, the last one shorter
    assert torch.equal(fingerprint.cpu_lane_sums([[values.numpy()]], fingerprint.halves(weights)), by_matmul)
    monkeypatch.setattr(fingerprint, "BLOCK_BYTES", 8 * 3000 * 7)  # and blocks of 7 samples, the last one shorter
    monkeypatch.setattr(fingerprint, "BLOCK_ROWS", 1)
    assert torch.equal(fingerprint.cpu_lane_sums([[values.numpy()]], fingerprint.halves(weights)), by_matmul)
    assert torch.equal(fingerprint.cpu_lane_sums(steps, fingerprint.halves(weights)), by_matmul)  # chunk by chunk
    monkeypatch.setattr(fingerprint, "CHUNK_ELEMENTS", 50 * 2 * 7)  # chunks of 7 words, the last one shorter
    assert torch.equal(fingerprint.lane_sums(values, weights), by_matmul)


def test_the_hash_makes_narrow_rows_float64_in_small_blocks_and_wide_ones_enough_rows_at_once():
    assert fingerprint.block_rows(1920, 68) * 68 * 8 <= fingerprint.BLOCK_BYTES  # the small MLP's rows: a cache's worth
    assert fingerprint.block_rows(4096, 1570) == fingerprint.BLOCK_ROWS  # MNIST's: enough rows for a cheap product
    wide = fingerprint.block_rows(4096, fingerprint.BLOCK_BYTES)  # a row 8 times a block's bytes: one row a block
    assert wide == 1 and fingerprint.block_rows(3, 68) == 3 and fingerprint.block_rows(0, 68) == 1


def test_a_samples_tensors_hashed_in_one_product_give_the_sum_of_their_own_hashes(monkeypatch):
    hash_ = Fingerprinter(max_words=64)
    tensors = [torch.randn(5, 100), torch.randint(0, 255, (5, 3), dtype=torch.uint8), torch.arange(5)]
    lanes = torch.zeros(5, fingerprint.LANES, dtype=torch.int64)
    for offset, tensor in enumerate(tensors):  # each tensor's words times its own weights, summed modulo the prime
        words = hash_.words(tensor, 5)
        weights = hash_.weights(offset, words.shape[1], words.device)
        lanes += fingerprint.cpu_lane_sums([[words.numpy()]], fingerprint.halves(weights))
    lanes %= fingerprint.PRIME
    assert torch.equal(hash_(tensors, 5), lanes[:, 0] * fingerprint.PRIME + lanes[:, 1])
    monkeypatch.setattr(fingerprint, "BLOCK_BYTES", 8 * 70 * 2)  # the tensors' words side by side, 2 samples a block
    monkeypatch.setattr(fingerprint, "BLOCK_ROWS", 1)
    assert torch.equal(hash_(tensors, 5), lanes[:, 0] * fingerprint.PRIME + lanes[:, 1])


def test_the_padding_of_a_distributed_sampler_is_named_as_the_cause_of_its_duplicates():
    row = {
        "epoch": 1,
        "seen": 202,
        "distinct": 201,
        "duplicates": 1,
        "missing": 0,
        "dataset_size": 201,
        "per_rank": [101, 101],
        "same_order_ranks": None,
    }
    line = format_audit(row, by_content=True)
    assert "a distributed sampler pads 201 samples to a multiple of 2 ranks by repeating 1" in line
    assert "pads" not in format_audit({**row, "duplicates": 2, "seen": 203}, by_content=True)
    assert "(101 + 101 on 2 ranks)" in line and "(1,001 + 1,001 on 2 ranks)" in format_audit(
        {**row, "per_rank": [1001, 1001]}, by_content=True
    )
    # strict=True stops on no repeat the padding explains (what the strict check reads)
    assert padded_by_design(row) == 1 and padded_by_design({**row, "duplicates": 2}) == 0


@pytest.mark.parametrize("streamed_bytes", [fingerprint.STREAMED_BYTES, 0], ids=["joined", "streamed"])
def test_steps_hashed_together_give_each_sample_the_fingerprint_it_has_alone(monkeypatch, streamed_bytes):
    monkeypatch.setattr(held_steps, "HASH_SAMPLES", 7)  # hashed every two steps, across shapes
    monkeypatch.setattr(fingerprint, "STREAMED_BYTES", streamed_bytes)  # each step's rows joined first, or not
    generator = torch.Generator().manual_seed(3)
    batches = [
        {"x": torch.randn(n, width, generator=generator), "y": torch.randint(0, 9, (n,), generator=generator)}
        for n, width in ((4, 3), (4, 3), (2, 3), (4, 5), (3, 5), (4, 3))
    ]
    audit = SampleAudit()
    for batch in batches:  # each step counted as the next begins, the last at the epoch's end
        audit.on_train_batch_start(None, None, batch, 0)
    audit._settle()
    alone = torch.cat([audit.fingerprints(batch) for batch in batches])
    assert torch.equal(torch.cat(audit._local(Trainer(accelerator="cpu", logger=False))), alone)


def test_a_fingerprint_is_the_same_whatever_layouts_were_hashed_before_and_those_kept_are_bounded(monkeypatch):
    monkeypatch.setattr(fingerprint, "LAYOUTS_KEPT", 3)
    generator = torch.Generator().manual_seed(5)
    widths = (3, 7, 3, 9, 11, 3, 7, 40, 50, 60, 70, 40)  # from 40 floats, more than its 64 words: sampled positions
    batches = [[torch.randn(4, width, generator=generator), torch.arange(4)] for width in widths]
    kept = Fingerprinter(max_words=64)
    for batch in batches:  # padded to a width of their own, some widths again
        assert torch.equal(kept(batch, 4), Fingerprinter(max_words=64)(batch, 4))
        assert len(kept._combined) <= 3 and len(kept._positions) <= 3


def test_a_loader_that_reuses_its_batch_buffer_is_audited_by_content_at_each_step():
    buffer = torch.empty(5, 3, 4)

    def into_the_buffer(items):  # a collate that fills one preallocated tensor, as some fast loaders do
        out = buffer[: len(items)]
        torch.stack([x for x, _ in items], out=out)
        return out

    audit = audited(DataLoader(Rows(), batch_size=5, collate_fn=into_the_buffer), SampleAudit(), epochs=1)
    assert counts(audit.epochs[0]) == (ROWS, ROWS, 0, 0)


class InPlace(Probe):
    """Zeroes its batch's images in place, in ``where`` (its step or its batch-end hook), at the fit's ``steps``.

    ``steps``: the fit's steps, counted from 1; ``loader``: the loader whose images, in a batch of several loaders;
    ``skip_first``: epoch 1 trains no step (the module's batch-start hook returns -1 at its first batch).
    """

    def __init__(self, steps, where: str = "step", loader: str | None = None, skip_first: bool = False):
        super().__init__()
        self.zeroed, self.where, self.loader, self.skip_first, self.steps = steps, where, loader, skip_first, 0

    def on_train_batch_start(self, batch, batch_idx):
        if self.skip_first and self.trainer.current_epoch == 0:
            return -1
        return None

    def _zero(self, batch, where: str) -> None:
        if where == self.where and self.steps in self.zeroed:
            (batch if self.loader is None else batch[self.loader])[0].zero_()

    def training_step(self, batch, batch_idx):
        self.steps += 1
        self._zero(batch, "step")
        return super().training_step(batch, batch_idx)

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self._zero(batch, "end")


EVERY = range(1, 1000)  # every step of these short fits


def fitted(module: LightningModule, loader, epochs: int = 2, **options) -> SampleAudit:
    """SampleAudit after ``module`` trained on ``loader``."""
    audit = SampleAudit()
    fit_module(module, loader, callbacks=[audit], max_epochs=epochs, **options)
    return audit


def test_rows_collated_anew_are_kept_as_they_are_after_the_first_step_and_counted_the_same():
    audit = audited(DataLoader(Rows(), batch_size=5, shuffle=True), SampleAudit())
    assert [counts(row) for row in audit.epochs] == [(ROWS, ROWS, 0, 0)] * 2
    assert audit.kept.as_they_are  # default_collate stacks every batch anew: no copy after the first step


class OwnTransfer(Probe):
    """Hands its batches on through its own transfer hook, which could return any tensors."""

    def on_after_batch_transfer(self, batch, dataloader_idx):
        return batch


def test_rows_a_module_transfers_its_own_way_are_copied():
    audit = fitted(OwnTransfer(), DataLoader(Rows(), batch_size=5))
    assert [counts(row) for row in audit.epochs] == [(ROWS, ROWS, 0, 0)] * 2 and not audit.kept.as_they_are


def test_a_transfer_hook_and_a_progress_bar_are_known_on_either_lightning_package():
    class LightningModule:  # pytorch_lightning's base, the same code under the package's older name
        __module__ = "pytorch_lightning.core.module"

        def on_before_batch_transfer(self, batch, dataloader_idx):
            return batch

        def transfer_batch_to_device(self, batch, device, dataloader_idx):
            return batch

        def on_after_batch_transfer(self, batch, dataloader_idx):
            return batch

    class Plain(LightningModule):
        pass

    class Own(LightningModule):
        def transfer_batch_to_device(self, batch, device, dataloader_idx):
            return batch

    assert transfers_batches(Own()) and not transfers_batches(Plain())  # lightning's is_overridden raised for both
    assert transfers_batches(OwnTransfer()) and not transfers_batches(Probe()) and not transfers_batches(None)

    class TQDMProgressBar:  # the older package's bar, whose epochs the timer's first line numbers as it does
        __module__ = "pytorch_lightning.callbacks.progress.tqdm_progress"

    class MyBar(lightning_bars.TQDMProgressBar):  # a bar of the user's, which may count as it likes
        pass

    assert lightnings(TQDMProgressBar, *LIGHTNING_BARS) and lightnings(lightning_bars.RichProgressBar, *LIGHTNING_BARS)
    assert not lightnings(MyBar, *LIGHTNING_BARS)


def test_rows_from_a_loaders_worker_are_copied_so_that_no_shared_memory_is_held():
    audit = audited(DataLoader(Rows(), batch_size=5, num_workers=1), SampleAudit(), epochs=1)
    assert counts(audit.epochs[0]) == (ROWS, ROWS, 0, 0)
    assert not audit.kept.as_they_are  # each shared tensor held would keep a file descriptor open


@pytest.mark.cuda
def test_rows_on_the_gpu_are_kept_as_they_are_and_counted_the_same():
    audit = audited(DataLoader(Rows(), batch_size=5, pin_memory=True), SampleAudit(), accelerator="cuda", devices=1)
    assert [counts(row) for row in audit.epochs] == [(ROWS, ROWS, 0, 0)] * 2
    assert audit.kept.as_they_are  # a CUDA tensor is shared by definition, not through a worker's shared memory


@pytest.mark.cuda
def test_rows_on_the_host_beside_rows_on_the_gpu_are_hashed_on_the_gpu():
    """A NumPy field read first (a host tensor) does not bring the batch's GPU rows to the host to be hashed."""
    host, gpu = torch.arange(8).reshape(4, 2), torch.randn(4, 3, device="cuda")
    lanes = Fingerprinter().steps_lanes([([host, gpu], 4), ([host, gpu], 4)])
    assert lanes.device.type == "cuda" and lanes.shape[0] == 8


@pytest.mark.parametrize("where", ["step", "end"])
def test_a_module_that_changes_its_batch_in_place_from_the_first_step_has_every_step_copied(where):
    audit = fitted(InPlace(EVERY, where=where), DataLoader(Rows(), batch_size=5, shuffle=True))
    assert [counts(row) for row in audit.epochs] == [(ROWS, ROWS, 0, 0)] * 2 and not audit.kept.as_they_are


def test_a_change_in_place_to_a_second_loaders_batch_has_every_step_copied():
    loaders = {"a": DataLoader(Rows(), batch_size=5), "b": DataLoader(Rows(), batch_size=5)}
    audit = fitted(InPlace(EVERY, loader="b"), loaders)
    for row in audit.epochs:
        assert [counts(row["loaders"][name]) for name in "ab"] == [(ROWS, ROWS, 0, 0)] * 2


def test_an_epoch_that_trained_no_step_decides_nothing():
    audit = fitted(InPlace(EVERY, skip_first=True), DataLoader(Rows(), batch_size=5), epochs=2)
    assert counts(audit.epochs[0])[:2] == (0, 0)  # its one step begun was declined: not counted
    assert counts(audit.epochs[1]) == (ROWS, ROWS, 0, 0) and not audit.kept.as_they_are


class DeclinesAt(InPlace):
    """Declines epoch 1's step ``at`` as it begins (its batch-start hook returns -1), which ends that epoch."""

    def __init__(self, at: int):
        super().__init__(())
        self.at = at

    def on_train_batch_start(self, batch, batch_idx):
        return -1 if self.trainer.current_epoch == 0 and batch_idx == self.at else None


def test_a_step_the_module_declines_as_it_begins_is_not_counted():
    """The audit counts a step as the next begins; the declined one, which ends the epoch, is let go uncounted."""
    audit = fitted(DeclinesAt(2), DataLoader(Rows(), batch_size=5), epochs=2)
    assert counts(audit.epochs[0])[:2] == (10, 10)  # steps 1 and 2 of 5 rows, not the third
    assert counts(audit.epochs[1]) == (ROWS, ROWS, 0, 0)


def test_a_kept_step_that_changes_its_batch_in_place_leaves_its_epoch_not_audited_and_the_next_copied(capsys):
    audit = fitted(InPlace(range(3, 1000)), DataLoader(Rows(), batch_size=5))
    first, second = audit.epochs
    assert not first["audited"] and first["why"].startswith("a training step changed its batch's tensors in place")
    assert counts(second) == (ROWS, ROWS, 0, 0) and not audit.kept.as_they_are
    assert "epoch 1: not audited (a training step changed" in capsys.readouterr().out


def test_once_a_step_changed_its_batch_in_place_every_later_epoch_is_copied():
    audit = fitted(InPlace({3, 8}), DataLoader(Rows(), batch_size=5))  # step 3 of each epoch of 5
    first, second = audit.epochs
    assert not first["audited"] and counts(second) == (ROWS, ROWS, 0, 0)


def test_an_epoch_found_not_audited_before_a_checkpoint_is_not_audited_after_the_resume(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=4, save_last=True)
    audit = SampleAudit()
    fit_module(
        InPlace(range(3, 1000)),
        DataLoader(Rows(), batch_size=5),
        callbacks=[audit, checkpoint],
        max_epochs=1,
        enable_checkpointing=True,
        max_steps=4,
    )
    resumed = fitted(Probe(), DataLoader(Rows(), batch_size=5), 1, ckpt_path=tmp_path / "last.ckpt")
    assert not resumed.epochs[0]["audited"]
    assert resumed.epochs[0]["why"].startswith("a training step changed its batch's tensors in place")


def test_a_lone_loader_in_a_dict_is_audited_against_its_dataset():
    audit = audited({"only": DataLoader(Rows(), batch_size=5)}, SampleAudit(), epochs=1)
    assert counts(audit.epochs[0]) == (ROWS, ROWS, 0, 0) and "loaders" not in audit.epochs[0]


def test_a_checkpoint_saved_inside_an_epoch_the_audit_cannot_hash_leaves_the_fit_going(tmp_path, monkeypatch):
    """Rows held that cannot be hashed (emulated): the checkpoint's gather of the epoch must not raise."""

    def unhashable(self, steps):
        raise RuntimeError("these rows cannot be read as words")

    monkeypatch.setattr(Fingerprinter, "fingerprints", unhashable)
    checkpoint = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_last=True)
    audit = SampleAudit()
    fit_module(
        Probe(),
        DataLoader(Rows(), batch_size=5),
        callbacks=[audit, checkpoint],
        max_epochs=2,
        enable_checkpointing=True,
    )
    assert [row["audited"] for row in audit.epochs] == [False, False]  # said, not audited: the fit went on
    assert (tmp_path / "last.ckpt").exists()


class ReusedBatch:
    """A loader that hands out one batch object every step, its tensors replaced (a buffer reused)."""

    def __init__(self):
        self.data = Rows()
        self.batch = type("Buffer", (), {})()

    def __len__(self) -> int:
        return ROWS // 4

    def __iter__(self):
        for first in range(0, ROWS, 4):
            self.batch.x, self.batch.y = self.data.x[first : first + 4], self.data.y[first : first + 4]
            yield self.batch


def test_a_batch_object_the_loader_hands_out_again_is_read_anew_each_step():
    audit = audited(ReusedBatch(), SampleAudit(dataset_size=ROWS), epochs=1)  # alone: no other callback reads it
    assert counts(audit.epochs[0]) == (ROWS, ROWS, 0, 0)


def padded(items: list) -> tuple:
    """A collate that pads each batch's token sequences to its longest, as a language model's does."""
    longest = max(len(tokens) for tokens, _ in items)
    ids = torch.zeros(len(items), longest, dtype=torch.long)
    for row, (tokens, _) in enumerate(items):
        ids[row, : len(tokens)] = tokens
    return ids, torch.stack([label for _, label in items])


def test_sequences_padded_to_each_batchs_longest_past_max_words_are_said_to_miss_duplicates(capsys):
    """A sequence repeated in a batch padded wider: hashed at other positions, it reads as another sample."""
    generator = torch.Generator().manual_seed(0)
    tokens = [torch.randint(1, 1000, (20 + 5 * i,), generator=generator) for i in range(6)]
    data = [(t, torch.tensor(0)) for t in [*tokens, tokens[0]]]  # the first again, beside the longest: padded to 45
    for max_words, duplicates in ((64, 0), (180, 1)):  # 20-45 tokens of 4 words: 80-180 words
        audit = SampleAudit(max_words=max_words)
        fit_module(Probe(), DataLoader(data, batch_size=2, collate_fn=padded), callbacks=[audit], max_epochs=2)
        out = capsys.readouterr().out
        assert [row["duplicates"] for row in audit.epochs] == [duplicates] * 2
        said = "a tensor of the samples' rows comes in several widths past max_words=64 (80, 100, 140, 180 words"
        assert out.count(said) == (1 if max_words == 64 else 0)
        assert ("SampleAudit(max_words=180) reads every word" in out) == (max_words == 64)


def test_widths_vary_where_one_loaders_tensor_comes_in_several_one_past_max_words_not_across_loaders():
    hash = Fingerprinter(max_words=8)
    rows = [held_steps.Rows([torch.ones(2, width, dtype=torch.int16)], 2) for width in (8, 12)]
    hash.fingerprints([rows[0]])
    assert hash.widths_vary() is None  # one width so far
    hash.fingerprints([rows[1]])  # every word of the first, positions drawn of the second: two of one sample
    assert hash.widths_vary() == [8, 12]
    apart = Fingerprinter(max_words=8)
    apart.fingerprints([rows[0]], loader=0)
    apart.fingerprints([rows[1]], loader=1)  # two loaders, each of one width: nothing varies
    assert apart.widths_vary() is None
