"""What short fits read with both callbacks at their defaults: the verdict, and what measured the time in operators.

Each fit runs in this process with EpochTimer and SampleAudit as a user adds them, on the CPU: SimpleCNN at a
batch of 64 for 2 epochs of 30 and of 90 steps, the newcomer's MLP of examples/diagnose_your_run.py for 3 epochs
(five times), a small MLP for 2 epochs of 30 steps and Lightning's BoringModel for 2 epochs. Per fit: its wall
time, the verdict, whether the window was profiled, timed by the operator clock or declined, and its share.

    .venv/bin/python docs/results/cpu-2core-operator-clock/short_fits.py

Prints one line per fit and writes short-fits.json beside this file.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.demos.boring_classes import BoringModel
from torch.utils.data import DataLoader, TensorDataset

from mnistperf.diagnosis import EpochTimer, SampleAudit
from mnistperf.model.network import SimpleCNN

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "examples"))
import diagnose_your_run as example  # noqa: E402  (the newcomer's model and data)


class Small(L.LightningModule):
    """SimpleCNN or a small MLP under Adam, on random rows."""

    def __init__(self, kind: str):
        super().__init__()
        if kind == "cnn":
            self.net = SimpleCNN()
        else:
            self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

    def training_step(self, batch, batch_idx):
        """The step's loss."""
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        """Adam at its defaults."""
        return torch.optim.Adam(self.parameters())


def rows(shape: tuple[int, ...], steps: int) -> DataLoader:
    """``steps`` batches of 64 random rows of ``shape``, each with a label."""
    count = 64 * steps
    return DataLoader(TensorDataset(torch.randn(count, *shape), torch.randint(0, 10, (count,))), batch_size=64)


def fit(name: str, module: L.LightningModule, loader: DataLoader, epochs: int) -> dict:
    """One fit with both callbacks; what it read."""
    timer = EpochTimer()
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=epochs,
        callbacks=[SampleAudit(), timer],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    start = time.perf_counter()
    trainer.fit(module, loader)
    took = time.perf_counter() - start
    summary, window = timer.clock.summary(), timer.busy_window or {}
    how = "operator clock" if "operator_clock" in window else "profiler" if window.get("share") is not None else "none"
    found = {
        "fit": name,
        "fit_s": took,
        "verdict": summary["verdict"],
        "measured_by": how,
        "share": window.get("share"),
        "bounds": window.get("operator_clock"),
        "steps": [window.get("first_step"), window.get("last_step")] if window.get("share") is not None else None,
        "waited_for_a_core": window.get("waited_for_a_core"),
        "reason": summary["verdict_reason"],
    }
    print(f"{name}: {took:.2f} s, {found['verdict']} ({how}, share {found['share']}, bounds {found['bounds']})")
    return found


def main() -> None:
    """Every fit in turn; short-fits.json written."""
    logging.getLogger("lightning").setLevel(logging.ERROR)
    torch.manual_seed(0)
    load = os.getloadavg()
    fits = [
        fit("SimpleCNN, 2 epochs of 30 steps", Small("cnn"), rows((1, 28, 28), 30), 2),
        fit("SimpleCNN, 2 epochs of 90 steps", Small("cnn"), rows((1, 28, 28), 90), 2),
        fit("small MLP, 2 epochs of 30 steps", Small("mlp"), rows((32,), 30), 2),
    ]
    for number in range(5):
        points = DataLoader(example.Points(4096), batch_size=64, shuffle=True)
        fits.append(fit(f"newcomer's MLP, 3 epochs ({number + 1})", example.Classifier(), points, 3))
    fits.append(fit("BoringModel, 2 epochs", BoringModel(), BoringModel().train_dataloader(), 2))
    result = {"load_before": load, "load_after": os.getloadavg(), "torch": torch.__version__, "fits": fits}
    (HERE / "short-fits.json").write_text(json.dumps(result, indent=1) + "\n")
    print("load", load, "->", result["load_after"])


if __name__ == "__main__":
    main()
