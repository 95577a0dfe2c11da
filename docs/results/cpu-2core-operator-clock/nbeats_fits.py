"""What pytorch-forecasting's N-BEATS fit reads with both callbacks: the compatibility tier's fit, batches of 8.

Each fit is the tier's (tests/compat/test_pytorch_forecasting.py), 3 epochs of 21 steps, built afresh; per fit its
wall time, the verdict, the window's share, the operator clock's bounds and, where no window ran, why. Run in the
library's environment, which .ci/run builds:

    .venv-compat-forecasting/bin/python docs/results/cpu-2core-operator-clock/nbeats_fits.py [FITS]
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "compat"))
import test_pytorch_forecasting as case  # noqa: E402  (the tier's fit)


def main() -> None:
    """Every fit in turn, a line each, with the machine's load before and after."""
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    print("load", os.getloadavg())
    for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 4):
        training, validation = case.datasets()
        train_loader = training.to_dataloader(train=True, batch_size=8, num_workers=0)
        val_loader = validation.to_dataloader(train=False, batch_size=8, num_workers=0)
        with tempfile.TemporaryDirectory() as root, contextlib.redirect_stdout(io.StringIO()):
            start = time.perf_counter()
            _, timer, _ = case.fit_nbeats(Path(root), training, train_loader, val_loader, epochs=3)
            took = time.perf_counter() - start
        window = timer.busy_window or {}
        steps = (window.get("first_step"), window.get("last_step")) if window.get("share") is not None else None
        print(
            f"fit {took:.2f} s, verdict {timer.clock.summary()['verdict']}, share {window.get('share')}, "
            f"bounds {window.get('operator_clock')}, steps {steps}, reason {window.get('reason') or ''}"
        )
    print("load", os.getloadavg())


if __name__ == "__main__":
    main()
