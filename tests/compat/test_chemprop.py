"""The two callbacks on chemprop v2 (molecular property prediction), trained as its training notebook trains.

Runs in its own environment (.ci/run makes .venv-compat-chemprop); elsewhere the module skips.
The molecules are small chains written here as SMILES, with random targets: a fit takes seconds on a CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("chemprop")

import numpy as np
import torch
from chemprop import data, featurizers, models, nn
from lightning import pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint

from mnistperf.diagnosis import EpochTimer, SampleAudit

EPOCHS = 2
ENDS = ("", "O", "N", "Cl", "F", "C(=O)O")


def molecules(longest: int = 12) -> tuple[list[str], np.ndarray]:
    """Distinct chains of 2 to ``longest`` carbons with one end group each (66 by default), a random target each."""
    smiles = [f"C{'C' * n}{end}" for n in range(1, longest) for end in ENDS]
    return smiles, np.random.default_rng(0).normal(size=(len(smiles), 1))


def datasets(longest: int = 12):
    """The notebook's split, featurizer, training and validation datasets, and target scaling."""
    smis, ys = molecules(longest)
    all_data = [data.MoleculeDatapoint.from_smi(smi, y) for smi, y in zip(smis, ys, strict=True)]
    mols = [d.mol for d in all_data]
    train_indices, val_indices, test_indices = data.make_split_indices(mols, "random", (0.8, 0.1, 0.1))
    train_data, val_data, _ = data.split_data_by_indices(all_data, train_indices, val_indices, test_indices)
    featurizer = featurizers.SimpleMoleculeMolGraphFeaturizer()
    train_dset = data.MoleculeDataset(train_data[0], featurizer)
    scaler = train_dset.normalize_targets()
    val_dset = data.MoleculeDataset(val_data[0], featurizer)
    val_dset.normalize_targets(scaler)
    return train_dset, val_dset, scaler


def loaders():
    """The notebook's loaders over :func:`datasets`; the batch leaves one molecule over."""
    train_dset, val_dset, scaler = datasets()
    batch_size = next(b for b in range(5, len(train_dset)) if len(train_dset) % b == 1)
    train_loader = data.build_dataloader(train_dset, batch_size=batch_size, num_workers=0)
    val_loader = data.build_dataloader(val_dset, batch_size=batch_size, num_workers=0, shuffle=False)
    return train_loader, val_loader, scaler


def mpnn(scaler, model_class=models.MPNN) -> models.MPNN:
    ffn = nn.RegressionFFN(output_transform=nn.UnscaleTransform.from_standard_scaler(scaler))
    metrics = [nn.metrics.RMSE(), nn.metrics.MAE()]
    return model_class(nn.BondMessagePassing(), nn.MeanAggregation(), ffn, True, metrics)


def fit(root: Path, model: models.MPNN, train_loader, val_loader, epochs=EPOCHS, diagnose=True):
    """The notebook's trainer; ``diagnose`` adds the two callbacks (the cost measurement turns it off)."""
    timer, audit = EpochTimer(), SampleAudit()
    checkpointing = ModelCheckpoint(root / "checkpoints", "best-{epoch}-{val_loss:.2f}", "val_loss", mode="min")
    trainer = pl.Trainer(
        logger=False,
        default_root_dir=root,
        enable_checkpointing=True,
        enable_progress_bar=False,
        accelerator="cpu",
        devices=1,
        max_epochs=epochs,
        callbacks=[checkpointing, timer, audit] if diagnose else [checkpointing],
    )
    trainer.fit(model, train_loader, val_loader)
    return trainer, timer, audit


def molecules_per_epoch(train_loader) -> int:
    """An independent pass over the library's loader: the molecules its batches' atoms belong to, per epoch."""
    return sum(batch.bmg.batch.unique().numel() for batch in train_loader)


@pytest.fixture(scope="module")
def notebook_fit(tmp_path_factory: pytest.TempPathFactory):
    train_loader, val_loader, scaler = loaders()
    root = tmp_path_factory.mktemp("chemprop")
    trainer, timer, audit = fit(root, mpnn(scaler), train_loader, val_loader)
    return root, train_loader, trainer, timer, audit


def test_fit_finishes_and_writes_timing_json(notebook_fit):
    root, _, trainer, timer, _ = notebook_fit
    assert trainer.state.finished and trainer.current_epoch == EPOCHS
    assert list((root / "checkpoints").glob("best-*.ckpt"))
    summary = json.loads((root / "timing.json").read_text())  # logger=False: the trainer's root folder
    assert summary["problems"] == [] and summary["interrupted"] is False
    assert summary["epochs"] == json.loads(json.dumps(timer.epochs))
    assert [row["epoch"] for row in summary["epochs"]] == list(range(1, EPOCHS + 1))


def test_audit_sees_every_molecule_once_but_the_one_build_dataloader_drops(notebook_fit):
    """build_dataloader drops a last batch of one molecule (for batch norm): that molecule is missing, no other."""
    _, train_loader, _, _, audit = notebook_fit
    size = len(train_loader.dataset)
    assert train_loader.drop_last and size % train_loader.batch_size == 1
    assert molecules_per_epoch(train_loader) == size - 1
    for epoch, row in enumerate(audit.epochs, 1):
        assert row["audited"] and row["epoch"] == epoch
        assert (row["seen"], row["distinct"], row["duplicates"]) == (size - 1, size - 1, 0)
        assert (row["dataset_size"], row["missing"]) == (size, 1)


def test_both_callbacks_count_molecules_the_graphs_of_chemprops_batch(notebook_fit):
    """A BatchMolGraph stacks its molecules' atoms (``V``), names each atom's molecule (``batch``) and says how many
    molecules it holds (its length): a sample is a molecule, to the timer as to the audit."""
    _, train_loader, _, timer, audit = notebook_fit
    assert [row["samples"] for row in timer.epochs] == [molecules_per_epoch(train_loader)] * EPOCHS
    assert [row["seen"] for row in audit.epochs] == [molecules_per_epoch(train_loader)] * EPOCHS


class CountedMPNN(models.MPNN):
    """The notebook's model with the samples_in_batch the diagnosis docs ask for, from chemprop's own count."""

    def samples_in_batch(self, batch) -> int:
        return self.get_batch_size(batch)


def test_samples_in_batch_makes_the_timer_count_molecules(tmp_path: Path):
    train_loader, val_loader, scaler = loaders()
    trainer, timer, audit = fit(tmp_path, mpnn(scaler, CountedMPNN), train_loader, val_loader)
    assert trainer.state.finished
    molecules = molecules_per_epoch(train_loader)
    assert [row["samples"] for row in timer.epochs] == [molecules] * EPOCHS
    assert [row["seen"] for row in audit.epochs] == [molecules] * EPOCHS


def test_audit_tells_apart_molecules_that_share_a_label():
    """A classification set's molecules share labels: only their graphs tell them apart."""
    smis, _ = molecules()
    featurizer = featurizers.SimpleMoleculeMolGraphFeaturizer()
    points = [data.MoleculeDatapoint.from_smi(smi, np.array([i % 2], dtype=float)) for i, smi in enumerate(smis)]
    loader = data.build_dataloader(data.MoleculeDataset(points, featurizer), batch_size=8, shuffle=False)
    audit = SampleAudit()
    fingerprints = torch.cat([audit.fingerprints(batch) for batch in loader])
    assert fingerprints.unique().numel() == len(smis)


def test_tune_loaders_ends_and_build_dataloader_takes_the_settings_it_returns():
    """tune_loaders on the notebook's model and the library's own loader, which the DataModule gives no setting:
    every trial rebuilds it and trains, and the library's entry point takes what it returns and all it tried."""
    from chemprop_project import BATCH, MoleculeData, datasets, make_model

    from mnistperf.tune import tune_loaders

    result = tune_loaders(make_model, MoleculeData, {"accelerator": "cpu"}, budget_s=90, steps=6, epochs=2)
    assert result.rebuilt and result.settings == {}  # nothing of the DataModule's own: a code change, if any
    assert all(t.error is None for t in result.outcome.trials)  # each tried (the noise may leave only one) trained
    tried = [{key.rsplit(".", 1)[-1]: value for key, value in t.settings.items()} for t in result.outcome.trials]
    for settings in [result.loader_args, *tried]:  # what it returned, and every setting it could have returned
        loader = data.build_dataloader(datasets()[0], batch_size=BATCH, **settings)
        assert loader.num_workers == settings.get("num_workers", 0)
