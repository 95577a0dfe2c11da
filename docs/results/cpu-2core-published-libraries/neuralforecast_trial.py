"""neuralforecast's models fitted as its documentation fits them, with EpochTimer and SampleAudit in their trainer.

`python neuralforecast_trial.py MODEL SERIES` (nhits, mlp, lstm, patchtst, tft) in an environment with neuralforecast
and mnistperf: SERIES seeded random-walk series of 120 days in batches of 8 series, 9 steps (3 epochs of 3 steps at
20 series), on the CPU. neuralforecast copies the callbacks it is given, so the figures are read from the timing.json
the timer writes into this folder, and the lines from its output.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from mnistperf.diagnosis.pytorch_lightning import EpochTimer, SampleAudit


def frame(count: int, length: int = 120) -> pd.DataFrame:
    """``count`` seeded random walks of ``length`` days, in neuralforecast's long format."""
    rng = np.random.default_rng(0)
    days = pd.date_range("2024-01-01", periods=length, freq="D")
    return pd.concat(
        [pd.DataFrame({"unique_id": f"s{i}", "ds": days, "y": rng.normal(size=length).cumsum()}) for i in range(count)]
    )


def fit(kind: str, count: int) -> None:
    """Train model ``kind`` on ``count`` series with both callbacks; print the timer's epochs and window."""
    from neuralforecast import NeuralForecast
    from neuralforecast.models import LSTM, MLP, NHITS, TFT, PatchTST

    options = dict(h=12, input_size=24, max_steps=9, batch_size=8, accelerator="cpu", logger=False)
    quiet = dict(enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False)
    model = {"nhits": NHITS, "mlp": MLP, "lstm": LSTM, "patchtst": PatchTST, "tft": TFT}[kind](
        callbacks=[EpochTimer(), SampleAudit()], **options, **quiet
    )
    NeuralForecast(models=[model], freq="D").fit(frame(count))
    summary = json.loads(Path("timing.json").read_text())
    print("timer", kind, [(e["samples"], e["verdict"]) for e in summary["epochs"]], summary["busy_window"])


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    fit(sys.argv[1], int(sys.argv[2]))
