"""N-BEATS as pytorch-forecasting's tutorial trains it, as a DataModule and a model maker for ``tune_loaders``.

The data and the model are the compatibility tier's (tests/compat/test_pytorch_forecasting.py), on 40 series of 200
steps: enough steps an epoch for the loader's settings to show.
"""

import sys
from pathlib import Path

from lightning import LightningDataModule
from pytorch_forecasting import NBeats, TimeSeriesDataSet

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "compat"))
import test_pytorch_forecasting as tier  # noqa: E402

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
