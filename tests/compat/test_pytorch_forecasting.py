"""The two callbacks on pytorch-forecasting (time series), trained as its N-BEATS tutorial trains.

Runs in its own environment (.ci/run makes .venv-compat-forecasting); elsewhere the module skips.
The data is the library's own AR generator, made here at a few hundred rows: a fit takes seconds on a CPU.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("pytorch_forecasting")

import lightning.pytorch as pl
import pandas as pd
import torch
from pytorch_forecasting import NBeats, TimeSeriesDataSet
from pytorch_forecasting.data import NaNLabelEncoder
from pytorch_forecasting.data.examples import generate_ar_data
from torch.utils.data import WeightedRandomSampler

from mnistperf.diagnosis import EpochTimer, SampleAudit

EPOCHS, BATCH = 2, 32
ENCODER, PREDICTION = 12, 4


def datasets(series: int = 4, timesteps: int = 60) -> tuple[TimeSeriesDataSet, TimeSeriesDataSet]:
    """The tutorial's training and validation sets, on ``series`` series of ``timesteps`` steps."""
    data = generate_ar_data(seasonality=10.0, timesteps=timesteps, n_series=series, seed=42)
    data["static"] = 2
    data["date"] = pd.Timestamp("2020-01-01") + pd.to_timedelta(data.time_idx, "D")
    cutoff = data["time_idx"].max() - PREDICTION
    training = TimeSeriesDataSet(
        data[lambda x: x.time_idx <= cutoff],
        time_idx="time_idx",
        target="value",
        categorical_encoders={"series": NaNLabelEncoder().fit(data.series)},
        group_ids=["series"],
        time_varying_unknown_reals=["value"],
        max_encoder_length=ENCODER,
        max_prediction_length=PREDICTION,
    )
    validation = TimeSeriesDataSet.from_dataset(training, data, min_prediction_idx=cutoff + 1)
    return training, validation


def windows(training: TimeSeriesDataSet, loader) -> list[tuple[int, int]]:
    """One pass over the loader: every sample's (series, first predicted step), decoded by the library."""
    seen: list[tuple[int, int]] = []
    for x, _ in loader:
        index = training.x_to_index(x)
        seen += list(zip(index["series"].tolist(), index["time_idx"].tolist(), strict=True))
    return seen


def expected_row(epoch: int, seen: list[tuple[int, int]], size: int) -> dict:
    distinct = len(set(seen))
    return {
        "epoch": epoch,
        "seen": len(seen),
        "distinct": distinct,
        "duplicates": len(seen) - distinct,
        "dataset_size": size,
        "missing": size - distinct,
    }


def nbeats(training: TimeSeriesDataSet) -> NBeats:
    """The tutorial's N-BEATS for ``training``."""
    return NBeats.from_dataset(
        training,
        learning_rate=1e-3,
        log_interval=10,
        log_val_interval=1,
        weight_decay=1e-2,
        widths=[8, 32],
        backcast_loss_ratio=1.0,
    )


def fit_nbeats(root: Path, training: TimeSeriesDataSet, train_loader, val_loader, epochs=EPOCHS, diagnose=True):
    """The tutorial's trainer and model; ``diagnose`` adds the two callbacks (the cost measurement turns it off)."""
    timer, audit = EpochTimer(), SampleAudit()
    trainer = pl.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        gradient_clip_val=0.1,
        default_root_dir=root,
        enable_progress_bar=False,
        callbacks=[timer, audit] if diagnose else [],
    )
    trainer.fit(nbeats(training), train_dataloaders=train_loader, val_dataloaders=val_loader)
    return trainer, timer, audit


def check_timing_json(trainer: pl.Trainer, timer: EpochTimer) -> dict:
    summary = json.loads((Path(trainer.log_dir) / "timing.json").read_text())
    assert summary["problems"] == []
    assert summary["interrupted"] is False
    assert summary["epochs"] == json.loads(json.dumps(timer.epochs))
    return summary


def audit_rows(audit: SampleAudit) -> list[dict]:
    keys = ("epoch", "seen", "distinct", "duplicates", "dataset_size", "missing")
    return [{k: row[k] for k in keys} for row in audit.epochs]


def test_nbeats_tutorial_shuffled_windows_less_the_dropped_last_batch(tmp_path: Path):
    """to_dataloader(train=True): shuffled, drop_last; every epoch sees the same windows, the last partial batch out."""
    training, validation = datasets()
    train_loader = training.to_dataloader(train=True, batch_size=BATCH, num_workers=0)
    val_loader = validation.to_dataloader(train=False, batch_size=BATCH, num_workers=0)
    assert train_loader.drop_last and len(training) % BATCH  # a partial batch is left out
    independent = windows(training, train_loader)
    assert len(independent) == len(training) // BATCH * BATCH

    trainer, timer, audit = fit_nbeats(tmp_path, training, train_loader, val_loader)

    assert trainer.state.finished and trainer.current_epoch == EPOCHS
    assert [row["samples"] for row in timer.epochs] == [len(independent)] * EPOCHS
    summary = check_timing_json(trainer, timer)
    assert summary["model"]["output_transformer"].startswith("GroupNormalizer(")  # JSON cannot hold it: its repr
    assert audit_rows(audit) == [expected_row(e, independent, len(training)) for e in range(1, EPOCHS + 1)]
    assert audit.epochs[0]["missing"] == len(training) % BATCH and audit.epochs[0]["duplicates"] == 0


def test_weighted_sampler_duplicates_match_an_independent_replay(tmp_path: Path):
    """The docs' WeightedRandomSampler draws with replacement: the audit's duplicates and missing are the replay's."""
    training, validation = datasets()
    weights = torch.linspace(0.2, 2.0, len(training), dtype=torch.float64)
    generator = torch.Generator().manual_seed(7)
    sampler = WeightedRandomSampler(weights, len(training), generator=generator)
    train_loader = training.to_dataloader(train=True, batch_size=BATCH, sampler=sampler, shuffle=False, num_workers=0)
    val_loader = validation.to_dataloader(train=False, batch_size=BATCH, num_workers=0)
    start = generator.get_state()
    replay = [windows(training, train_loader) for _ in range(EPOCHS)]
    generator.set_state(start)
    assert all(Counter(epoch).most_common(1)[0][1] > 1 for epoch in replay)  # draws repeat windows
    assert replay[0] != replay[1]

    trainer, timer, audit = fit_nbeats(tmp_path, training, train_loader, val_loader)

    assert trainer.state.finished
    assert [row["samples"] for row in timer.epochs] == [len(epoch) for epoch in replay]
    check_timing_json(trainer, timer)
    assert audit_rows(audit) == [expected_row(e, seen, len(training)) for e, seen in enumerate(replay, 1)]
    assert all(row["duplicates"] > 0 and row["missing"] > 0 for row in audit.epochs)


def test_tune_loaders_ends_and_to_dataloader_takes_the_settings_it_returns():
    """tune_loaders on the tutorial's N-BEATS and the library's own loader, which the DataModule gives no setting:
    every trial rebuilds it and trains, and the library's entry point takes what it returns and all it tried."""
    from nbeats_project import BATCH, NBeatsData, make_model, training_set

    from mnistperf.tune import tune_loaders

    trainer = {"accelerator": "cpu", "gradient_clip_val": 0.1}
    result = tune_loaders(make_model, NBeatsData, trainer, budget_s=90, steps=6, epochs=2)
    assert result.rebuilt and result.settings == {}  # nothing of the DataModule's own: a code change, if any
    assert all(t.error is None for t in result.outcome.trials)  # each tried (the noise may leave only one) trained
    tried = [{key.rsplit(".", 1)[-1]: value for key, value in t.settings.items()} for t in result.outcome.trials]
    for settings in [result.loader_args, *tried]:  # what it returned, and every setting it could have returned
        loader = training_set().to_dataloader(train=True, batch_size=BATCH, **settings)
        assert loader.num_workers == settings.get("num_workers", 0)
