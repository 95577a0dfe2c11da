"""chemprop's MPNN as its training notebook trains it, as a DataModule and a model maker for ``tune_loaders``.

The molecules, the featurizer and the model are the compatibility tier's (test_chemprop.py beside this file), on
chains of up to 60 carbons (354 molecules) in batches of 16: enough steps an epoch for the loader's settings to show.
The loader is the library's own ``build_dataloader``, which the DataModule gives no setting, so tune rebuilds it.
Imported with this folder on the path.
"""

from functools import cache

import test_chemprop as tier
from chemprop import data, models
from lightning import LightningDataModule

BATCH = 16
LONGEST = 60


@cache
def datasets():
    """The training and validation datasets and the target scaling (made once per process)."""
    return tier.datasets(LONGEST)


class MoleculeData(LightningDataModule):
    """The notebook's training loader, as the library makes it."""

    def train_dataloader(self):
        """``build_dataloader`` over the training molecules (its featurizer runs as each molecule is read)."""
        return data.build_dataloader(datasets()[0], batch_size=BATCH, num_workers=0)


def make_model() -> models.MPNN:
    """The notebook's MPNN, its output unscaled with the training targets' scaling, counting molecules as samples."""
    return tier.mpnn(datasets()[2], tier.CountedMPNN)
