"""``tune_loaders`` on a compatibility-tier library: pytorch-forecasting's N-BEATS, as its tutorial trains it.

tests/compat/nbeats_project.py makes the model and a DataModule around the library's own
``TimeSeriesDataSet.to_dataloader``, which exposes no loader setting, so every trial rebuilds its DataLoader.
The settings tune returns go back into the library's entry point, ``to_dataloader(**loader_args)``, which
must accept them. Run in the library's environment, which .ci/run builds, on a quiet machine:

    .venv-compat-forecasting/bin/python docs/results/cpu-2core-tune-any-project/nbeats.py
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "compat"))

from nbeats_project import BATCH, NBeatsData, make_model, training_set  # noqa: E402

from mnistperf.tune import tune_loaders  # noqa: E402

began = time.perf_counter()
result = tune_loaders(
    make_model, NBeatsData, {"accelerator": "cpu", "gradient_clip_val": 0.1}, budget_s=240, steps=20, epochs=3
)
print(f"tune_loaders took {time.perf_counter() - began:.1f} s of wall time")
print(result.table)
print("settings:", result.settings, "loader arguments:", result.loader_args)
loader = training_set().to_dataloader(train=True, batch_size=BATCH, **result.loader_args)
print("to_dataloader accepts them:", f"num_workers={loader.num_workers}", f"persistent={loader.persistent_workers}")
