"""N-BEATS as pytorch-forecasting's tutorial trains it, as a DataModule and a model maker for ``tune_loaders``."""

import pandas as pd
from lightning import LightningDataModule
from pytorch_forecasting import NBeats, TimeSeriesDataSet
from pytorch_forecasting.data import NaNLabelEncoder
from pytorch_forecasting.data.examples import generate_ar_data

BATCH = 32


def training_set(series: int = 40, steps: int = 200) -> TimeSeriesDataSet:
    """The tutorial's synthetic autoregressive series, its last four steps held out."""
    data = generate_ar_data(seasonality=10.0, timesteps=steps, n_series=series, seed=42)
    data["static"] = 2
    data["date"] = pd.Timestamp("2020-01-01") + pd.to_timedelta(data.time_idx, "D")
    cutoff = data["time_idx"].max() - 4
    return TimeSeriesDataSet(
        data[lambda x: x.time_idx <= cutoff],
        time_idx="time_idx",
        target="value",
        categorical_encoders={"series": NaNLabelEncoder().fit(data.series)},
        group_ids=["series"],
        time_varying_unknown_reals=["value"],
        max_encoder_length=12,
        max_prediction_length=4,
    )


class NBeatsData(LightningDataModule):
    """The library's own loader, as its tutorial makes it: no loader setting to tune, so tune rebuilds it."""

    def train_dataloader(self):
        """The tutorial's training loader."""
        return training_set().to_dataloader(train=True, batch_size=BATCH, num_workers=0)


def make_model() -> NBeats:
    """N-BEATS from the training set, as the tutorial sizes it."""
    return NBeats.from_dataset(
        training_set(),
        learning_rate=1e-3,
        log_interval=10,
        log_val_interval=1,
        weight_decay=1e-2,
        widths=[8, 32],
        backcast_loss_ratio=1.0,
    )
