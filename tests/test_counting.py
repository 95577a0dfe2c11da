"""Both callbacks count what trained, on every loop: a batch the module skips, several training loaders in each of
CombinedLoader's modes, an epoch resumed inside it, gradient accumulation and a one-step fit.

Each case is checked against the module's own record of the samples that reached ``training_step``, in a fit whose
weights are bit-identical with and without the callbacks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from conftest import fit_module
from lightning import LightningModule
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.profilers import SimpleProfiler
from lightning.pytorch.utilities import CombinedLoader
from torch.utils.data import DataLoader, Dataset, Subset

from mnistperf.diagnosis import EpochTimer, SampleAudit
from mnistperf.diagnosis.measure import phases
from mnistperf.diagnosis.record.epoch_text import unsampled

ROWS, BATCH, EPOCHS = 24, 4, 2


class Indexed(Dataset):
    """Distinct rows, each a dict of its features and its index."""

    def __init__(self, rows: int = ROWS):
        self.x = torch.randn(rows, 3, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int):
        return {"x": self.x[index], "index": index}


def loader_parts(batch) -> dict[str, dict | None]:
    """Each training loader's batch in a step's batch, named as the callbacks name loaders ("" for one loader)."""
    if isinstance(batch, dict) and "index" in batch:
        return {"": batch}
    if isinstance(batch, dict):
        return dict(batch)
    return {str(i): part for i, part in enumerate(batch)}


class Recorder(LightningModule):
    """Records the sample indices that reach training_step, per epoch (Lightning's, from 1) and per loader.

    Args:
        skip_at: the batch index at which its on_train_batch_start returns -1 (Lightning skips the rest of the epoch).
    """

    def __init__(self, skip_at: int | None = None):
        super().__init__()
        self.layer = torch.nn.Linear(3, 2)
        self.skip_at = skip_at
        self.record: dict[int, dict[str, list[int]]] = {}

    def on_train_batch_start(self, batch, batch_idx):
        return -1 if batch_idx == self.skip_at else None

    def training_step(self, batch, batch_idx):
        seen = self.record.setdefault(self.current_epoch + 1, {})
        loss = torch.zeros(())
        for name, part in loader_parts(batch).items():
            if part is None:  # max_size mode: this loader is done
                continue
            seen.setdefault(name, []).extend(part["index"].tolist())
            loss = loss + torch.nn.functional.cross_entropy(self.layer(part["x"]), part["index"] % 2)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def samples(self, epoch: int) -> int:
        return sum(len(indices) for indices in self.record.get(epoch, {}).values())


def weights(module: LightningModule) -> list[torch.Tensor]:
    return [t.detach().clone() for t in module.state_dict().values()]


def fitted(data: Callable[[], object], watch: bool, skip_at=None, audit_options=None, kind=None, **options):
    """A fresh Recorder (or ``kind``; the same initial weights every time) fitted on ``data()``, watched by both
    callbacks or not (the audit's options ``audit_options``)."""
    torch.manual_seed(0)
    module = (kind or Recorder)(skip_at)
    timer, audit = EpochTimer(), SampleAudit(**(audit_options or {}))
    trainer = fit_module(module, data(), callbacks=[timer, audit] if watch else [], **options)
    return module, timer, audit, trainer


def watched(data: Callable[[], object], skip_at=None, audit_options=None, kind=None, **options):
    """:func:`fitted` with the callbacks, after checking the fit ends with the same weights, bit for bit, without."""
    bare, *_ = fitted(data, False, skip_at, kind=kind, **options)
    module, timer, audit, trainer = fitted(data, True, skip_at, audit_options, kind, **options)
    assert all(torch.equal(a, b) for a, b in zip(weights(bare), weights(module), strict=True))
    assert bare.record == module.record
    return module, timer, audit, trainer


def expected(indices: list[int], size: int) -> dict:
    """An audit's counts of a loader that gave ``indices`` from a dataset of ``size``."""
    distinct = len(set(indices))
    return {
        "seen": len(indices),
        "distinct": distinct,
        "duplicates": len(indices) - distinct,
        "dataset_size": size,
        "missing": size - distinct,
    }


def counts(row: dict) -> dict:
    return {k: row[k] for k in ("seen", "distinct", "duplicates", "dataset_size", "missing")}


def problems(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "mnistperf.diagnosis"]


@pytest.mark.parametrize("skip_at", [0, 1, 5])
def test_a_batch_the_module_skips_is_counted_by_neither_callback(skip_at, caplog):
    """Lightning calls the callbacks' on_train_batch_start before the module's, whose -1 skips the batch and the rest
    of the epoch: a batch counts once it has trained. Skipped at 5, 40 samples trained in two epochs, not 48."""
    module, timer, audit, trainer = watched(lambda: DataLoader(Indexed(), batch_size=BATCH), skip_at, max_epochs=EPOCHS)
    trained = [module.samples(epoch) for epoch in range(1, EPOCHS + 1)]
    assert trained == [skip_at * BATCH] * EPOCHS and trainer.global_step == EPOCHS * skip_at
    assert [row["samples"] for row in timer.epochs] == trained
    batches = ROWS // BATCH  # the row says the steps that ran, not the one declined
    assert [row["partial"] for row in timer.epochs] == [{"steps": skip_at, "batches": batches}] * EPOCHS
    assert len(audit.epochs) == EPOCHS
    declined = f"the module's on_train_batch_start returned -1, ending the epoch after {skip_at} of the epoch's 6 "
    declined += "batches"
    for epoch, row in enumerate(audit.epochs, start=1):  # the batches it skipped are not missing: strict stays quiet
        assert counts(row) == {**expected(module.record.get(epoch, {}).get("", []), ROWS), "missing": None}
        assert row["limited"] == declined
    if skip_at == 0:
        reason = "the epoch trained no step, and the split times step 2 of an epoch, then one in each 16 after it"
        assert [row["split_reason"] for row in timer.epochs] == [reason] * EPOCHS
    assert problems(caplog) == []


def test_a_batch_a_collate_left_none_is_missing_not_a_step_the_module_declined():
    """Lightning skips a None batch before any hook: its samples never trained, and the epoch goes on."""
    collate = torch.utils.data.default_collate

    def data():
        return DataLoader(
            Indexed(), batch_size=BATCH, collate_fn=lambda rows: None if rows[0]["index"] == 8 else collate(rows)
        )

    module, timer, audit, trainer = watched(data)
    for epoch, row in enumerate(audit.epochs, start=1):
        assert counts(row) == expected(module.record[epoch][""], ROWS) and row["missing"] == BATCH
        assert "limited" not in row


class FetchesItsOwn(Recorder):
    """A training step that fetches its own batch from Lightning's ``dataloader_iter``."""

    def training_step(self, dataloader_iter):
        batch, batch_idx, _ = next(dataloader_iter)
        return super().training_step(batch, batch_idx)


def test_a_step_that_fetches_its_own_batches_is_counted_whole_by_both_callbacks(capsys):
    """Lightning hands such a step's hooks the batch fetched before it (None at first): the last one no hook sees."""
    module, timer, audit, trainer = watched(lambda: DataLoader(Indexed(), batch_size=BATCH), kind=FetchesItsOwn)
    assert [row["samples"] for row in timer.epochs] == [module.samples(epoch) for epoch in (1, 2)] == [ROWS] * 2
    for epoch, row in enumerate(audit.epochs, start=1):
        assert counts(row) == expected(module.record[epoch][""], ROWS) and row["missing"] == 0
    assert "samples disagree" not in capsys.readouterr().out


class FetchesTwo(Recorder):
    """A training step that fetches two batches from ``dataloader_iter`` and trains on the second."""

    def training_step(self, dataloader_iter):
        next(dataloader_iter)
        batch, batch_idx, _ = next(dataloader_iter)  # the loader may run out here: the step ends the epoch untrained
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("rows", [6 * BATCH, 5 * BATCH])
def test_a_step_that_fetches_several_batches_is_counted_by_the_one_it_trained_on(rows, capsys):
    """Each step counted by its last batch, alike by both; the loader running out inside a step (5 batches: the third
    step's second fetch) leaves the batch that step fetched untrained, and its epoch whole, not cut short."""
    module, timer, audit, _ = watched(lambda: DataLoader(Indexed(rows), batch_size=BATCH), kind=FetchesTwo)
    for epoch, (row, audited) in enumerate(zip(timer.epochs, audit.epochs, strict=True), start=1):
        trained = module.record[epoch][""]
        assert len(trained) == (3 * BATCH if rows == 6 * BATCH else 2 * BATCH)
        assert row["samples"] == len(trained) and "partial" not in row
        assert counts(audited) == expected(trained, rows)
    assert "samples disagree" not in capsys.readouterr().out


class RaisesInStep(Recorder):
    """Its step 4 of epoch 2 raises before it trains."""

    def training_step(self, batch, batch_idx):
        if self.current_epoch == 1 and batch_idx == 3:
            raise RuntimeError("the step fails")
        return super().training_step(batch, batch_idx)


class StopsAfterStep(Callback):
    """Ctrl-C after step 4 of epoch 2 trained, in a callback listed before both of the lab's."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.current_epoch == 1 and batch_idx == 3:
            raise KeyboardInterrupt


@pytest.mark.parametrize("where", ["inside the step", "after it trained"])
def test_a_step_an_error_stops_is_counted_alike_by_both_callbacks_as_it_trained_or_not(where, capsys):
    """The step that raised counts where it trained (an error in a hook after it), not where it raised inside."""
    torch.manual_seed(0)
    module = RaisesInStep() if where == "inside the step" else Recorder()
    timer, audit = EpochTimer(), SampleAudit()
    stop = [] if where == "inside the step" else [StopsAfterStep()]
    with pytest.raises(RuntimeError if where == "inside the step" else SystemExit):  # (Lightning's, after Ctrl-C)
        fit_module(module, DataLoader(Indexed(), batch_size=BATCH), callbacks=[*stop, timer, audit], max_epochs=2)
    trained = module.samples(2)
    assert trained == (3 if where == "inside the step" else 4) * BATCH
    assert timer.epochs[1]["samples"] == audit.epochs[1]["seen"] == trained
    assert audit.epochs[1]["limited"] == f"the fit was interrupted after {trained // BATCH} of the epoch's 6 batches"
    assert "samples disagree" not in capsys.readouterr().out


def two_loaders(rows_a: int, batch_a: int, rows_b: int, batch_b: int, kind: str, mode: str | None):
    """Loaders a and b (b's rows are a's first ones: the same samples in two loaders), as a dict or a list, plain or in
    a CombinedLoader of ``mode``."""

    def data():
        a = Indexed(rows_a)
        loaders = [DataLoader(a, batch_size=batch_a), DataLoader(Subset(a, range(rows_b)), batch_size=batch_b)]
        structure = dict(zip("ab", loaders, strict=True)) if kind == "dict" else loaders
        return structure if mode is None else CombinedLoader(structure, mode)

    return data


@pytest.mark.parametrize(
    ("rows_a", "batch_a", "rows_b", "batch_b", "kind", "mode"),
    [
        (48, 4, 24, 4, "dict", None),  # Lightning's default, max_size_cycle: b's 24 samples twice an epoch
        (24, 4, 12, 3, "dict", "max_size_cycle"),
        (24, 4, 12, 3, "list", "min_size"),
        (24, 4, 12, 3, "dict", "max_size"),
    ],
)
def test_every_loaders_samples_are_counted_and_told_apart(rows_a, batch_a, rows_b, batch_b, kind, mode, capsys, caplog):
    data = two_loaders(rows_a, batch_a, rows_b, batch_b, kind, mode)
    module, timer, audit, _ = watched(data, max_epochs=EPOCHS)
    names = ("a", "b") if kind == "dict" else ("0", "1")
    sizes = dict(zip(names, (rows_a, rows_b), strict=True))
    out = capsys.readouterr().out
    assert len(timer.epochs) == EPOCHS
    for epoch, (row, audited) in enumerate(zip(timer.epochs, audit.epochs, strict=True), start=1):
        record = module.record[epoch]
        assert row["samples"] == module.samples(epoch)
        assert row["loader_samples"] == {name: len(record[name]) for name in names}
        each = {name: expected(record[name], sizes[name]) for name in names}
        assert {name: counts(c) for name, c in audited["loaders"].items()} == each
        assert counts(audited) == {
            key: sum(c[key] for c in each.values())
            for key in ("seen", "distinct", "duplicates", "dataset_size", "missing")
        }
    if mode is None:  # the case: equal batches, b cycled; before, 48 samples an epoch and no duplicate
        assert [counts(row) for row in audit.epochs] == [
            {"seen": 96, "distinct": 72, "duplicates": 24, "dataset_size": 72, "missing": 0}
        ] * EPOCHS
        assert out.count("samples/s (2 loaders of 48 samples each), ") == EPOCHS  # the timer's line
        assert "loader b gave more samples than it holds: a shorter loader is cycled" in out
        assert "identical samples in the data" not in out
    if mode == "min_size":  # the epoch ends with b's 4 batches: a's other 8 samples are left out, by design
        assert [row["stopped_short"] for row in audit.epochs] == [{"0": 8}] * EPOCHS
        assert out.count("loader 0 left 8 samples out: the epoch ends at its shortest loader's end") == EPOCHS
    else:
        assert all("stopped_short" not in row for row in audit.epochs)
    assert problems(caplog) == []


def test_strict_does_not_raise_for_the_samples_a_min_size_epoch_leaves_out_by_design():
    _, _, audit, _ = watched(
        two_loaders(24, 4, 12, 3, "dict", "min_size"), audit_options={"strict": True}, max_epochs=1
    )
    assert audit.epochs[0]["missing"] == 8 and audit.epochs[0]["stopped_short"] == {"a": 8}


def test_a_sample_id_names_each_loaders_own_index_and_loaders_sharing_indices_stay_apart(caplog):
    """Loader b's indices are also a's: by index, as by content, a sample of b is not one of a."""
    module, _, audit, _ = watched(two_loaders(24, 4, 12, 3, "dict", None), audit_options={"sample_id": "index"})
    assert audit.epochs and len(audit.epochs) == len(module.record)
    for epoch, row in enumerate(audit.epochs, start=1):
        each = {name: expected(module.record[epoch][name], size) for name, size in (("a", 24), ("b", 12))}
        assert {name: counts(c) for name, c in row["loaders"].items()} == each
        assert row["distinct"] == 36 and row["duplicates"] == 6  # b's 12 samples cycled to 6 batches of 3
    assert problems(caplog) == []


class Merging(Recorder):
    """Merges the two loaders' batches into one before the step, as a module's own hook may."""

    def on_before_batch_transfer(self, batch, dataloader_idx):
        return {
            "x": torch.cat([batch["a"]["x"], batch["b"]["x"]]),
            "index": torch.cat([batch["a"]["index"], 100 + batch["b"]["index"]]),
        }


def test_a_batch_a_hook_merged_from_several_loaders_is_counted_as_one_loaders_saying_so(capsys, caplog):
    module, timer, audit, _ = watched(two_loaders(24, 4, 12, 3, "dict", None), kind=Merging)
    assert [row["samples"] for row in timer.epochs] == [module.samples(1), module.samples(2)] == [42, 42]
    assert "loader_samples" not in timer.epochs[0] and "loaders" not in audit.epochs[0]
    assert [row["distinct"] for row in audit.epochs] == [len(set(module.record[e][""])) for e in (1, 2)] == [36, 36]
    out = capsys.readouterr().out
    assert out.count("does not hold the batches of the training loaders (a, b) at their keys") == 2  # each, once
    assert problems(caplog) == []


def test_a_sequential_combined_loader_is_refused_by_lightning_as_without_the_callbacks(caplog):
    data = two_loaders(24, 4, 12, 3, "dict", "sequential")
    raised = []
    for watch in (False, True):
        with pytest.raises(ValueError, match="does not support the `CombinedLoader") as error:
            fitted(data, watch, max_epochs=EPOCHS)
        raised.append(str(error.value))
    assert raised[0] == raised[1] and problems(caplog) == []


def resumed_inside_epoch_2(folder: Path, data: Callable[[], object], watch: bool, between=lambda: None):
    """A fit stopped after 2 of epoch 2's steps (max_steps), with a checkpoint there, then a fit resumed from it to the
    end of epoch 3 (``between`` runs between the two): the first fit's record, the second's module and callbacks."""
    torch.manual_seed(0)
    first = Recorder()
    checkpoint = ModelCheckpoint(dirpath=folder, every_n_train_steps=2, save_last=True)
    callbacks = [EpochTimer(), SampleAudit()] if watch else []
    fit_module(first, data(), callbacks=[*callbacks, checkpoint], max_epochs=3, enable_checkpointing=True, max_steps=8)
    between()
    module = Recorder()
    callbacks = [EpochTimer(), SampleAudit()] if watch else []
    fit_module(module, data(), callbacks=callbacks, max_epochs=3, ckpt_path=folder / "last.ckpt")
    return first.record, module, callbacks


def test_strict_stops_no_fit_resumed_inside_an_epoch_for_the_samples_the_resume_replayed(tmp_path):
    """The resume's repeats, and the samples they took the place of, are by design: strict goes on past them."""
    checkpoint = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_last=True)
    data = lambda: DataLoader(Indexed(), batch_size=BATCH)  # noqa: E731
    first = dict(max_epochs=3, enable_checkpointing=True, max_steps=8)
    fit_module(Recorder(), data(), callbacks=[SampleAudit(), checkpoint], **first)
    audit = SampleAudit(strict=True)
    fit_module(Recorder(), data(), callbacks=[audit], max_epochs=3, ckpt_path=tmp_path / "last.ckpt")
    row = audit.epochs[0]
    assert row["replayed"] == row["duplicates"] == row["missing"] == 2 * BATCH and len(audit.epochs) == 2


def test_an_epoch_resumed_twice_counts_both_resumes_replays_and_strict_goes_on(tmp_path):
    """Each resume starts a plain loader's epoch over: the replays of the first resume are carried by the second's
    checkpoint, so every duplicate is one a resume made."""
    data = lambda: DataLoader(Indexed(), batch_size=BATCH)  # noqa: E731
    saved = lambda folder: ModelCheckpoint(dirpath=folder, every_n_train_steps=2, save_last=True)  # noqa: E731
    first = dict(max_epochs=3, enable_checkpointing=True)
    fit_module(Recorder(), data(), callbacks=[SampleAudit(), saved(tmp_path / "a")], max_steps=8, **first)
    again = dict(max_steps=10, ckpt_path=tmp_path / "a" / "last.ckpt")  # two more of epoch 2's steps
    fit_module(Recorder(), data(), callbacks=[SampleAudit(), saved(tmp_path / "b")], **first, **again)
    audit, module = SampleAudit(strict=True), Recorder()
    fit_module(module, data(), callbacks=[audit], max_epochs=3, ckpt_path=tmp_path / "b" / "last.ckpt")
    assert module.record[2][""] == list(range(2 * BATCH))  # the epoch's last two steps, its loader started over
    row = audit.epochs[0]
    assert row["seen"] == ROWS and row["distinct"] == 2 * BATCH
    assert row["replayed"] == row["duplicates"] == row["missing"] == 4 * BATCH and len(audit.epochs) == 2


class Validated(Recorder):
    def validation_step(self, batch, batch_idx):
        return None


def test_an_epoch_lightning_runs_without_a_step_after_a_chain_of_resumes_is_said_and_not_the_warm_up(tmp_path, capsys):
    """A checkpoint saved at an epoch's last step, resumed, leaves the next fit's epoch-end checkpoint a loop state
    that has its next epoch's steps done: Lightning runs that epoch without a step."""
    data = lambda: DataLoader(Indexed(), batch_size=BATCH)  # noqa: E731
    steps = ROWS // BATCH
    at_last = ModelCheckpoint(dirpath=tmp_path / "a", every_n_train_steps=steps, save_top_k=-1, filename="{step}")
    fit_module(Validated(), data(), data(), callbacks=[at_last], max_epochs=2, enable_checkpointing=True)
    ends = ModelCheckpoint(dirpath=tmp_path / "b", save_last=True)
    first = tmp_path / "a" / f"step={steps}.ckpt"  # saved at epoch 1's last step
    fit_module(Validated(), data(), data(), callbacks=[ends], max_epochs=3, enable_checkpointing=True, ckpt_path=first)
    capsys.readouterr()
    timer, audit, module = EpochTimer(), SampleAudit(), Validated()
    fit_module(module, data(), data(), callbacks=[timer, audit], max_epochs=5, ckpt_path=tmp_path / "b" / "last.ckpt")
    out = capsys.readouterr().out
    assert sorted(module.record) == [5], "Lightning ran epoch 4's steps: the chain no longer makes an epoch of none"
    assert (
        "epoch 4: no step of it ran (its loader gave no batch, or the checkpoint the fit resumed from had its " in out
    )
    assert [row["epoch"] for row in timer.epochs] == [5]  # no row for epoch 4: epoch 5 is the fit's warm-up
    row = audit.epochs[0]
    assert row["epoch"] == 4 and row["seen"] == 0 and row["missing"] is None and "no step of it ran" in row["limited"]


def resumed_and_bare(folder: Path, data: Callable[[], object], between=lambda: None):
    """:func:`resumed_inside_epoch_2` watched, after checking its weights are those of the same fits without the
    callbacks, bit for bit."""
    _, bare, _ = resumed_inside_epoch_2(folder / "bare", data, False)
    first, module, callbacks = resumed_inside_epoch_2(folder / "watched", data, True, between)
    assert all(torch.equal(a, b) for a, b in zip(weights(bare), weights(module), strict=True))
    assert module.record == bare.record
    return first, module, callbacks


def test_a_fit_resumed_inside_an_epoch_numbers_it_as_lightning_and_names_the_resume_for_its_duplicates(
    tmp_path, capsys, caplog
):
    data = lambda: DataLoader(Indexed(), batch_size=BATCH)  # noqa: E731
    first, module, (timer, audit) = resumed_and_bare(tmp_path, data, between=capsys.readouterr)
    out = capsys.readouterr().out  # the resumed fit's
    assert sorted(module.record) == [2, 3]  # Lightning's numbers of the epochs this fit trained in
    assert [row["epoch"] for row in timer.epochs] == [2, 3]
    assert [row["samples"] for row in timer.epochs] == [module.samples(2), module.samples(3)]
    assert re.search(r"^epoch 2: train", out, re.M) and not re.search(r"^epoch 1: train", out, re.M)
    before, after = first[2][""], module.record[2][""]  # epoch 2 before the checkpoint, and after the resume
    assert len(before) == 2 * BATCH and len(after) == ROWS - 2 * BATCH  # the plain loader started the epoch over
    row = audit.epochs[0]
    assert row["epoch"] == 2 and counts(row) == expected(before + after, ROWS)
    assert row["replayed"] == sum(index in set(before) for index in after) == row["duplicates"] == 2 * BATCH
    assert "8 of the duplicates were seen again after the fit resumed from a checkpoint saved inside this epoch" in out
    assert "identical samples in the data" not in out
    assert counts(audit.epochs[1]) == expected(module.record[3][""], ROWS) and audit.epochs[1]["replayed"] is None
    assert problems(caplog) == []


def test_a_resumed_epoch_of_several_loaders_is_counted_per_loader(tmp_path, caplog):
    first, module, (timer, audit) = resumed_and_bare(tmp_path, two_loaders(24, 4, 12, 3, "dict", None))
    assert [row["epoch"] for row in timer.epochs] == [2, 3]
    assert timer.epochs[0]["loader_samples"] == {name: len(module.record[2][name]) for name in "ab"}
    for name, size in (("a", 24), ("b", 12)):
        assert counts(audit.epochs[0]["loaders"][name]) == expected(first[2][name] + module.record[2][name], size)
        assert counts(audit.epochs[1]["loaders"][name]) == expected(module.record[3][name], size)
    assert problems(caplog) == []


@pytest.mark.parametrize("accumulate", [2, 3])
def test_under_gradient_accumulation_the_split_times_whole_optimizer_steps(accumulate, tmp_path):
    """A sample is one optimizer step's training steps: the sampled ones reach the optimizer's hook."""
    rows = 36 * BATCH  # 36 steps an epoch
    profiler = SimpleProfiler(dirpath=tmp_path, filename="profile")
    options = {"max_epochs": EPOCHS, "accumulate_grad_batches": accumulate, "profiler": profiler}
    module, timer, _, trainer = watched(lambda: DataLoader(Indexed(rows), batch_size=BATCH), **options)
    assert [row["samples"] for row in timer.epochs] == [module.samples(epoch) for epoch in (1, 2)] == [rows] * EPOCHS
    for row in timer.epochs:
        assert None not in (row["forward_s"], row["backward_s"], row["optimizer_s"]) and "split_reason" not in row
    assert None not in json.loads(timer.summary_path.read_text())["split"].values()
    # the sampled optimizer steps of the fit: each epoch's second (steps 3-4, or 4-6), then one in each 16 drawn
    windows = sum(phases.sampled(index, accumulate, epoch) for epoch in range(EPOCHS) for index in range(36))
    assert windows >= EPOCHS
    report = (tmp_path / "fit-profile.txt").read_text()
    calls = dict(re.findall(r"\[Callback\]EpochTimer\.(\w+)\s*\|\s*\S+\s*\|\s*(\d+)", report))
    assert int(calls["on_before_backward"]) == int(calls["on_after_backward"]) == windows * accumulate
    assert int(calls["on_before_optimizer_step"]) == windows


def test_an_accumulation_changed_by_epoch_is_followed_by_the_split():
    """GradientAccumulationScheduler changes accumulate_grad_batches between epochs: each epoch samples by its own."""
    from lightning.pytorch.callbacks import GradientAccumulationScheduler

    timer = EpochTimer()
    scheduler = GradientAccumulationScheduler({0: 1, 1: 4})
    fit_module(Recorder(None), DataLoader(Indexed(36 * BATCH), batch_size=BATCH), callbacks=[timer, scheduler])
    assert len(timer.epochs) == EPOCHS == 2
    for row in timer.epochs:
        assert None not in (row["forward_s"], row["backward_s"], row["optimizer_s"]) and "split_reason" not in row


def test_a_one_step_fit_says_why_it_has_no_split(capsys):
    module, timer, audit, trainer = watched(lambda: DataLoader(Indexed(), batch_size=BATCH), fast_dev_run=True)
    (row,) = timer.epochs
    assert audit.epochs[0]["limited"].startswith("fast_dev_run=True: the epoch trains 1 of the loader's")  # its own
    assert row["samples"] == module.samples(1) == BATCH and row["forward_s"] is None
    reason = "the epoch trained step 1 only, and the split times step 2 of an epoch, then one in each 16 after it"
    assert row["split_reason"] == reason
    out = capsys.readouterr().out
    assert out.count(f"EpochTimer: train time is not split into forward, backward and optimizer: {reason}.") == 1


def test_under_fast_dev_run_the_timer_prints_its_headline_and_writes_no_file_as_lightning_writes_none(tmp_path, capsys):
    from mnistperf.diagnosis.callbacks.run_files import FAST_DEV_RUN

    timer = EpochTimer()
    loader = DataLoader(Indexed(), batch_size=BATCH)
    fit_module(Recorder(None), loader, callbacks=[timer], fast_dev_run=True, default_root_dir=tmp_path)
    out = capsys.readouterr().out
    assert "Verdict: " in out and f"not written ({FAST_DEV_RUN})" in out and "mnistperf report" not in out
    assert timer.summary_path is None and list(tmp_path.iterdir()) == []


def test_a_timer_given_a_second_fit_says_why_that_fit_has_no_split_too(capsys):
    timer = EpochTimer()
    for _ in range(2):
        fit_module(Recorder(None), DataLoader(Indexed(), batch_size=BATCH), callbacks=[timer], fast_dev_run=True)
    assert capsys.readouterr().out.count("EpochTimer: train time is not split into forward, backward") == 2


class FakeClock:
    """time.perf_counter standing still but for the steps a test gives it."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_sample_holds_an_optimizer_steps_training_steps_and_one_cut_short_is_left_out(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(phases.time, "perf_counter", clock)
    stamps = phases.StepPhases(torch.device("cpu"))

    def step(first: bool, marks: list[tuple[str, float]]) -> bool:
        stamps.start(3) if first else stamps.start()
        for name, seconds in marks:
            clock.now += seconds
            if name != "end":
                stamps.mark(name)
        return stamps.end()

    forward_backward = [("backward", 1.0), ("backward_end", 2.0), ("end", 0.5)]
    assert not step(True, forward_backward) and not step(False, forward_backward)
    assert step(False, [("backward", 1.0), ("backward_end", 2.0), ("optimizer", 0.5), ("end", 3.0)])
    whole = 3 * 3.0 + 2 * 0.5 + 3.5
    assert stamps.shares() == pytest.approx({"forward": 3 / whole, "backward": 6 / whole, "optimizer": 3 / whole})
    stamps.reset()
    assert not step(True, forward_backward) and not step(False, forward_backward)
    assert step(False, forward_backward)  # three steps and no update: the epoch ended (or it was skipped)
    assert stamps.shares() is None and stamps.started


def test_which_steps_are_sampled_with_and_without_accumulation_and_why_an_epoch_has_none():
    # each epoch's second step (optimizer step), then one in each block of 16 at a place drawn for the epoch
    assert [i for i in range(80) if phases.sampled(i)] == [1, 27, 42, 54, 71]
    assert [i for i in range(80) if phases.sampled(i, 1, epoch=1)] == [1, 22, 32, 50, 78]
    assert [i for i in range(80) if phases.sampled(i, 2)] == [2, 54]  # optimizer steps 1 and 27
    assert unsampled(2, 3, 4) == (
        "the epoch trained steps 3-4 only, and the split times steps 5-8 of an epoch (one optimizer step: "
        "accumulate_grad_batches=4), then one optimizer step's in each 16 after it"
    )
    assert not phases.any_sampled(2, 3, 4) and not phases.any_sampled(None, None, 1)
    assert phases.any_sampled(2, 4, 4)  # step 5 begins a sample: its split was lost another way
    assert phases.any_sampled(2, 27, 1) and not phases.any_sampled(2, 26, 1)  # index 27: step 28
    assert phases.any_sampled(2, 22, 1, epoch=1) and not phases.any_sampled(2, 21, 1, epoch=1)  # its 22
