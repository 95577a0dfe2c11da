"""What the diagnosis says a part around the step costs, against the time saved by fitting again without it.

Four parts, each on the small MLP's steps of 1-2 ms (300 steps an epoch, 3 epochs): a progress bar redrawn every
step (``bar``), a callback spending 1 ms in each ``on_train_batch_end`` (``callback``), a logger whose
``log_metrics`` takes 0.5 ms, written every step (``logger``), and ``self.log`` of 20 values each step (``log``);
and one between epochs: a callback spending 0.2 s in each ``on_train_epoch_end`` (``epoch_end``).
A pair is two fresh processes, the part in and out, in an order that alternates from pair to pair; both have
EpochTimer, which times the steps, and the time between epochs, by their parts. The saving predicted is the part's
seconds a step (the run's ``step_parts``) times the fit's steps, or its seconds between epochs (``between_epochs``)
times the fit's epochs; the saving measured is the pair's difference in whole-fit seconds. Prints and writes
results-CASE.json beside this file, with the one-minute load average before and after every pair. ``--show CASE``
fits once with the part in and prints what the diagnosis prints (docs/diagnose.md quotes the callback's).

    python docs/results/cpu-2core-culprit/check.py CASE [PAIRS]
    python docs/results/cpu-2core-culprit/check.py --show CASE
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from bootstrap import median_interval  # noqa: E402  # docs/results/bootstrap.py

STEPS, EPOCHS = 300, 3
PART = {
    "bar": "callback TQDMProgressBar",
    "callback": "callback Costly",
    "logger": "logger Slow",
    "log": "self.log",
    "epoch_end": "callback SlowEpochEnd",
}
BETWEEN = {"epoch_end"}  # the cases whose part is between epochs: predicted and measured per epoch


def busy(seconds: float) -> None:
    """Spend ``seconds`` on the CPU (a sleep would hand the core to the loader)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def fit(case: str, with_part: bool, show: bool = False) -> dict[str, Any]:
    """One fit of the case, the part in or out: its whole-fit seconds and the timer's step parts.

    ``show``: what the diagnosis prints is left on the terminal.
    """
    import torch
    from lightning.pytorch import Callback, LightningModule, Trainer, seed_everything
    from lightning.pytorch.callbacks import TQDMProgressBar
    from lightning.pytorch.loggers import Logger
    from torch.utils.data import DataLoader, TensorDataset

    from mnistperf.diagnosis import EpochTimer

    class Costly(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            busy(1e-3)

    class SlowEpochEnd(Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            busy(0.2)

    class Slow(Logger):
        name, version = "slow", 0

        def log_metrics(self, metrics, step=None):
            busy(0.5e-3)

        def log_hyperparams(self, params, *args, **kwargs):
            pass

    class Small(LightningModule):
        def __init__(self, values: int):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
            self.values = values

        def training_step(self, batch, batch_idx):
            loss = torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])
            for value in range(self.values):
                self.log(f"train/v{value}", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    seed_everything(0, verbose=False)
    rows = torch.randn(64 * STEPS, 32), torch.randint(0, 10, (64 * STEPS,))
    loader = DataLoader(TensorDataset(*rows), batch_size=64)
    timer = EpochTimer()
    callbacks: list[Any] = [timer]
    options: dict[str, Any] = {"enable_progress_bar": False, "logger": False}
    values = 0
    if with_part and case == "bar":
        callbacks.append(TQDMProgressBar(refresh_rate=1))
        options["enable_progress_bar"] = True
    if with_part and case == "callback":
        callbacks.append(Costly())
    if with_part and case == "epoch_end":
        callbacks.append(SlowEpochEnd())
    if case == "logger":  # the module logs its loss each step either way; the logger writes it or is not there
        values = 1
        options.update(logger=Slow() if with_part else False, log_every_n_steps=1)
    if case == "log" and with_part:
        values = 20
    logging.getLogger("lightning").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as scratch:
        trainer = Trainer(
            accelerator="cpu",
            max_epochs=EPOCHS,
            default_root_dir=scratch,
            enable_checkpointing=False,
            enable_model_summary=False,
            callbacks=callbacks,
            **options,
        )
        with contextlib.nullcontext() if show else contextlib.redirect_stdout(io.StringIO()):
            start = time.perf_counter()
            trainer.fit(Small(values), loader)
            took = time.perf_counter() - start
        summary = json.loads(Path(timer.summary_path).read_text()) if timer.summary_path else {}
    return {"fit_s": took, "step_parts": summary.get("step_parts"), "between_epochs": summary.get("between_epochs")}


def main() -> None:
    """Run the pairs of the case given, print and write the figures."""
    if sys.argv[1] == "--child":
        print(json.dumps(fit(sys.argv[2], sys.argv[3] == "in")))
        return
    if sys.argv[1] == "--show":
        fit(sys.argv[2], True, show=True)
        return
    case, pairs = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10
    found: dict[str, list[Any]] = {"in": [], "out": []}
    load = [os.getloadavg()[0]]
    for pair in range(pairs):
        for arm in ("in", "out") if pair % 2 == 0 else ("out", "in"):
            command = [sys.executable, __file__, "--child", case, arm]
            ran = subprocess.run(command, capture_output=True, text=True, check=True)
            found[arm].append(json.loads(ran.stdout.strip().splitlines()[-1]))
        load.append(os.getloadavg()[0])
        print(f"pair {pair + 1}/{pairs}: in {found['in'][-1]['fit_s']:.3f} s, out {found['out'][-1]['fit_s']:.3f} s")
    steps = STEPS * EPOCHS
    per, times, parts = ("epoch", EPOCHS, "between_epochs") if case in BETWEEN else ("step", steps, "step_parts")
    measured = [(a["fit_s"] - b["fit_s"]) / times for a, b in zip(found["in"], found["out"], strict=True)]
    predicted = [run[parts]["parts"].get(PART[case], 0.0) for run in found["in"]]
    result = {
        "case": case,
        "part": PART[case],
        "pairs": pairs,
        "steps": steps,
        "fit_s": {arm: [run["fit_s"] for run in runs] for arm, runs in found.items()},
        f"predicted_s_per_{per}": predicted,
        f"measured_s_per_{per}": measured,
        "predicted_median": statistics.median(predicted),
        "measured_median": statistics.median(measured),
        "measured_95": median_interval(measured),
        f"timed_{per}s": [run[parts][f"{per}s"] for run in found["in"]],
        "load_average_1min": load,
        "environment": {
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
        },
    }
    result["predicted_over_measured"] = result["predicted_median"] / result["measured_median"]
    (HERE / f"results-{case}.json").write_text(json.dumps(result, indent=1) + "\n")
    low, high = result["measured_95"]
    each = "a step" if per == "step" else "an epoch"
    print(
        f"{case}: {PART[case]} predicted {result['predicted_median'] * 1e3:.3f} ms {each}, measured "
        f"{result['measured_median'] * 1e3:.3f} ms (95 % {low * 1e3:.3f}-{high * 1e3:.3f}); predicted/measured "
        f"{result['predicted_over_measured']:.2f}; load {min(load):.2f}-{max(load):.2f}"
    )


if __name__ == "__main__":
    main()
