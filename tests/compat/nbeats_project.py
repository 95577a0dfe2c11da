"""N-BEATS as pytorch-forecasting's tutorial trains it, as a DataModule and a model maker for ``tune_loaders``.

The data and the model are the compatibility tier's (test_pytorch_forecasting.py beside this file), on 40 series of
200 steps: enough steps an epoch for the loader's settings to show. Imported with this folder on the path.
"""

import test_pytorch_forecasting as tier
from lightning import LightningDataModule
from pytorch_forecasting import NBeats, TimeSeriesDataSet

BATCH = tier.BATCH


def training_set() -> TimeSeriesDataSet:
    """The tutorial's synthetic autoregressive series, 40 of 200 steps, their last steps held out."""
    return tier.datasets(series=40, timesteps=200)[0]


class NBeatsData(LightningDataModule):
    """The library's own loader, as its tutorial makes it: no loader setting to tune, so tune rebuilds it."""

    def train_dataloader(self):
        """The tutorial's training loader."""
        return training_set().to_dataloader(train=True, batch_size=BATCH, num_workers=0)


def make_model() -> NBeats:
    """N-BEATS from the training set, as the tutorial sizes it."""
    return tier.nbeats(training_set())
