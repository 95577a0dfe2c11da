"""What EpochTimer and SampleAudit together cost whole fits, each fit a fresh process, the arms alternating.

A pair is two fresh processes, one fit each: with the callbacks and without them (or with them handing every figure
to the loggers, ``all``), in an order that alternates from pair to pair so the machine's drift falls on both arms.
Each process imports first, then times its whole ``trainer.fit`` (the callbacks' work at the fit's ends inside) in
wall seconds and in its own CPU seconds. Prints and writes results-WORKLOAD.json beside this file: each arm's median
fit, the median of the pairs' ratios with a 95 % interval (pairs resampled with replacement), and the one-minute
load average before and after every pair.

    python docs/results/cpu-2core-fresh-cost/pairs.py WORKLOAD [PAIRS] [EPOCHS] [ARMS] [--together]

``--together`` runs every arm in this one process instead, after a warm-up fit of each, the arms' order alternating
from round to round (results-WORKLOAD-ARMS-together.json): fits seconds apart in one warm process, whose ratios are
far tighter than fresh processes', which differ from each other by up to 2x on this machine.

WORKLOAD: ``small`` (an MLP, 30 steps of 64 rows an epoch, 1-2 ms each, no logger), ``newcomer``
(examples/diagnose_your_run.py's MLP, 64 steps of about 3 ms, TensorBoard's logger), ``table`` (the small MLP logging
its loss every step to a logger that writes its table to disk on every call: Lightning's CSVLogger flushed each step),
``long`` (the small MLP, 300 steps an epoch, 24 epochs: a fit of some 10 s), ``chemprop`` (the compatibility tier's
MPNN, in .venv-compat-chemprop), ``mnist`` (MNIST's shape: a linear model on 60,000 random rows of 784 floats in batches
of 256, 235 steps an epoch of about 2 ms), ``cnn`` (the lab's SimpleCNN on 64 random 28x28 images a step, 200 steps an
epoch of about 11 ms, 5 epochs: a fit of some 12 s), ``graphs`` (a graph library's own batches: PyTorch Geometric's
two-layer GCN on 240 of its FakeDataset's graphs of about 20 nodes, 8 batches of 32 an epoch of some 5 ms; needs
``pip install torch_geometric``), ``bags`` (PyTorch's text-classification batch: an EmbeddingBag on 64 texts of 20-60
tokens a step, as labels, the tokens end to end and each text's offset; 30 steps an epoch of about 1.5 ms).

ARMS: comma-separated, of ``none``, ``both`` (the default callbacks) and ``all`` (both, with ``log_all=True``); for the
parts ``timer`` or ``audit`` alone, ``unwindowed`` (both, no profiled window), ``idle`` (two callbacks whose step hooks
do nothing) and ``least`` (two whose step hooks do the least a timer and an audit must: stamp the step's start and end,
read its samples once, hold its rows); and for what a part could buy at most, both with that part's work gone:
``hashless`` (the audit's content hash: its samples' positions instead), ``unreported`` (the timer's work at the fit's
end: nothing printed or written), or ``neither``. For a yardstick, ``lightning``: Lightning's own per-step monitor,
ThroughputMonitor, counting each batch by Lightning's ``extract_batch_size``. Default ``none,both``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE.parent))
from bootstrap import median_interval  # noqa: E402  # docs/results/bootstrap.py

EPOCHS = {
    "small": 3,
    "newcomer": 3,
    "table": 3,
    "long": 24,
    "chemprop": 3,
    "mnist": 3,
    "cnn": 5,
    "graphs": 3,
    "bags": 3,
}


MADE: list[Any] = []  # the callbacks of this process's latest fit, checked once it is timed


def callbacks(arm: str) -> list[Any]:
    """The arm's callbacks: none, both as they come, or both handing the loggers every figure.

    For the parts: the timer or the audit alone, both without the profiled window, or two callbacks whose two step hooks
    do nothing.
    """
    from idle_callbacks import Floor, LeastAudit, LeastTimer  # docs/results/idle_callbacks.py

    from mnistperf.diagnosis import EpochTimer, SampleAudit

    if not callable(getattr(EpochTimer, "_report", None)):  # else the unreported arms would time the timer as it is
        raise SystemExit("pairs.py: EpochTimer has no _report to leave out: mend the unreported arm")

    class Unreported(EpochTimer):
        def _report(self, trainer: Any, interrupted: bool) -> None:  # the summary, timing.json, the report: none
            self._reported = True

    def hashless(audit: SampleAudit) -> SampleAudit:  # the held steps' positions for their fingerprints
        if not callable(getattr(audit.hash, "fingerprints", None)):  # else the arm would time the audit as it is
            raise SystemExit("pairs.py: the audit's hash has no fingerprints to replace: mend the hashless arm")
        audit.hash.fingerprints = lambda steps, loader=0: torch.arange(sum(step.samples for step in steps))  # type: ignore[method-assign]
        return audit

    import torch
    from lightning.pytorch.callbacks import ThroughputMonitor
    from lightning.pytorch.utilities.data import extract_batch_size

    arms: dict[str, Callable[[], list[Any]]] = {  # made when chosen: only the arm's own callbacks are built
        "none": list,
        "both": lambda: [EpochTimer(), SampleAudit()],
        "all": lambda: [EpochTimer(log_all=True), SampleAudit(log_all=True)],
        "timer": lambda: [EpochTimer()],
        "audit": lambda: [SampleAudit()],
        "unwindowed": lambda: [EpochTimer(busy_window_steps=0), SampleAudit()],
        "idle": lambda: [Floor(), Floor()],  # the least two callbacks that see every step cost
        "least": lambda: [LeastTimer(), LeastAudit()],  # the least per-step work a timer and an audit need
        "hashless": lambda: [EpochTimer(), hashless(SampleAudit())],
        "unreported": lambda: [Unreported(), SampleAudit()],
        "neither": lambda: [Unreported(), hashless(SampleAudit())],
        "lightning": lambda: [ThroughputMonitor(batch_size_fn=extract_batch_size)],  # Lightning's own, per step
    }
    made = arms[arm]()
    MADE[:] = made  # a copy: the trainer gets a list of its own, which Lightning may add its callbacks to
    return made


def answered(made: list[Any], arm: str) -> None:
    """Stop where a callback of the diagnosis answered nothing, after the fit's timed region.

    An arm whose timer kept no epoch, or whose audit gave up on one, times a diagnosis that did not run (the hashless
    arm's did, from 85512ec to 6d8f1ed).
    """
    from mnistperf.diagnosis import EpochTimer, SampleAudit

    for callback in made:
        if isinstance(callback, EpochTimer) and not callback.epochs:
            raise SystemExit(f"pairs.py: arm {arm}: EpochTimer kept no epoch ({callback.problems.lines})")
        if isinstance(callback, SampleAudit) and not all(row.get("audited") for row in callback.epochs or [{}]):
            raise SystemExit(f"pairs.py: arm {arm}: SampleAudit gave up on an epoch ({callback.epochs})")


def trainer(root: Path, epochs: int, arm: str, **options: Any) -> Any:
    """A CPU Trainer with the arm's callbacks: no progress bar, model summary or checkpoint unless ``options`` say."""
    from lightning.pytorch import Trainer

    settings = {"enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False}
    return Trainer(
        accelerator="cpu", max_epochs=epochs, default_root_dir=root, callbacks=callbacks(arm), **{**settings, **options}
    )


def small(steps: int, logged: bool = False, kind: str = "mlp") -> tuple[Any, Any]:
    """The small MLP of ../cpu-2core-operator-clock/short_fits.py (seeded) and ``steps`` batches of 64 random rows.

    ``kind="cnn"``: its SimpleCNN on 64 random 28x28 images a batch instead.
    """
    from lightning.pytorch import seed_everything

    sys.path.insert(0, str(HERE.parent / "cpu-2core-operator-clock"))
    import short_fits

    class Logged(short_fits.Small):
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            self.log("train/loss", loss)
            return loss

    seed_everything(0, verbose=False)
    shape = (1, 28, 28) if kind == "cnn" else (32,)
    return (Logged if logged else short_fits.Small)(kind), short_fits.rows(shape, steps)


@functools.cache
def mnist_data() -> Any:
    """60,000 random rows of 784 floats and their labels (seeded): MNIST's shape, made once a process."""
    import torch
    from torch.utils.data import TensorDataset

    generator = torch.Generator().manual_seed(0)
    return TensorDataset(
        torch.rand(60000, 784, generator=generator), torch.randint(0, 10, (60000,), generator=generator)
    )


def mnist_rows() -> tuple[Any, Any]:
    """A linear model (seeded) and a shuffling loader of :func:`mnist_data` in batches of 256."""
    import torch
    from lightning.pytorch import LightningModule, seed_everything
    from torch.utils.data import DataLoader

    class Linear(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(784, 10)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return torch.nn.functional.cross_entropy(self.layer(batch[0]), batch[1])

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    seed_everything(0, verbose=False)
    return Linear(), DataLoader(mnist_data(), batch_size=256, shuffle=True)


def graph_batches() -> tuple[Any, Any]:
    """PyTorch Geometric's GCN (two convolutions, a mean pool; seeded) and its loader of 240 FakeDataset graphs."""
    import torch
    from lightning.pytorch import LightningModule, seed_everything
    from torch_geometric.datasets import FakeDataset
    from torch_geometric.loader import DataLoader
    from torch_geometric.nn import GCNConv, global_mean_pool

    class GCN(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.first, self.second, self.out = GCNConv(8, 32), GCNConv(32, 32), torch.nn.Linear(32, 3)

        def training_step(self, data: Any, batch_idx: int) -> Any:
            x = self.second(self.first(data.x, data.edge_index).relu(), data.edge_index).relu()
            return torch.nn.functional.cross_entropy(self.out(global_mean_pool(x, data.batch)), data.y)

        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters(), lr=0.01)

    seed_everything(0, verbose=False)
    graphs = FakeDataset(num_graphs=240, avg_num_nodes=20, num_channels=8, num_classes=3)
    return GCN(), DataLoader(graphs, batch_size=32, shuffle=True)


def text_bags() -> tuple[Any, Any]:
    """PyTorch's text-classification model (an EmbeddingBag and a linear layer; seeded) and 30 batches of 64 texts.

    Each batch as that tutorial's collate makes it: the labels, every text's tokens end to end, each text's offset.
    """
    import torch
    from lightning.pytorch import LightningModule, seed_everything
    from torch.utils.data import DataLoader

    class TextClassifier(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.embedding, self.out = torch.nn.EmbeddingBag(2000, 32), torch.nn.Linear(32, 4)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            labels, tokens, offsets = batch
            return torch.nn.functional.cross_entropy(self.out(self.embedding(tokens, offsets)), labels)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def collate(texts: list[tuple[int, Any]]) -> tuple[Any, Any, Any]:
        tokens = [t for _, t in texts]
        offsets = torch.tensor([0, *(len(t) for t in tokens[:-1])]).cumsum(0)
        return torch.tensor([label for label, _ in texts]), torch.cat(tokens), offsets

    seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(20, 60, (64 * 30,), generator=generator).tolist()
    texts = [(i % 4, torch.randint(1, 2000, (n,), generator=generator)) for i, n in enumerate(lengths)]
    return TextClassifier(), DataLoader(texts, batch_size=64, shuffle=True, collate_fn=collate)


def fit(workload: str, epochs: int, arm: str, root: Path) -> Any:
    """The workload's fit, built (data, model, trainer), and a function that runs it."""
    if workload in ("small", "long", "cnn"):
        steps = {"small": 30, "long": 300, "cnn": 200}[workload]
        module, loader = small(steps, kind="cnn" if workload == "cnn" else "mlp")
        run = trainer(root, epochs, arm, logger=False)
        return lambda: run.fit(module, loader)
    if workload == "table":
        from lightning.pytorch.loggers import CSVLogger

        module, loader = small(30, logged=True)
        logger = CSVLogger(root, name="table", flush_logs_every_n_steps=1)
        run = trainer(root, epochs, arm, logger=logger, log_every_n_steps=1)
        return lambda: run.fit(module, loader)
    if workload == "newcomer":
        from lightning.pytorch import seed_everything
        from torch.utils.data import DataLoader

        sys.path.insert(0, str(ROOT / "examples"))
        import diagnose_your_run as example

        seed_everything(0, verbose=False)
        loader = DataLoader(example.Points(4096), batch_size=64, shuffle=True)
        module = example.Classifier()
        run = trainer(root, epochs, arm, log_every_n_steps=10, devices=1)
        return lambda: run.fit(module, loader)
    if workload == "chemprop":  # the tier's own fit: its Trainer is made inside the time, in both arms alike
        if arm not in ("none", "both"):  # its fit makes the two callbacks itself: no other arm can be run
            raise SystemExit(f"pairs.py: the chemprop workload runs the arms none and both only, not {arm!r}")
        sys.path.insert(0, str(ROOT / "tests" / "compat"))
        import test_chemprop as case

        train_loader, val_loader, scaler = case.loaders()
        module = case.mpnn(scaler)
        return lambda: case.fit(root, module, train_loader, val_loader, epochs=epochs, diagnose=arm != "none")
    if workload in ("mnist", "graphs", "bags"):
        module, loader = {"mnist": mnist_rows, "graphs": graph_batches, "bags": text_bags}[workload]()
        run = trainer(root, epochs, arm, logger=False)
        return lambda: run.fit(module, loader)
    raise SystemExit(f"pairs.py: no workload {workload!r}; give one of {', '.join(EPOCHS)}")


def timed(workload: str, epochs: int, arm: str) -> dict[str, float]:
    """One fit of the workload, built afresh and timed (wall and this process's CPU seconds), its output discarded."""
    import io
    import logging
    import tempfile

    import mnistperf.diagnosis  # noqa: F401  (imported in every arm: a user's script imports what it uses)

    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    quiet = contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO())
    with tempfile.TemporaryDirectory() as scratch, quiet[0], quiet[1]:
        MADE.clear()
        run = fit(workload, epochs, arm, Path(scratch))
        wall, cpu = time.perf_counter(), time.process_time()
        run()
        took = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}
    answered(MADE, arm)
    return took


def child(workload: str, epochs: int, arm: str) -> None:
    """One fresh process's fit, timed; its figures as one JSON line on the last line of stdout."""
    print(json.dumps(timed(workload, epochs, arm)))


def main() -> None:
    """Run the pairs, print and write the figures."""
    import statistics

    together = "--together" in sys.argv
    args = [arg for arg in sys.argv[1:] if arg != "--together"]
    workload = args[0] if args else "small"
    pairs = int(args[1]) if len(args) > 1 else 20
    epochs = int(args[2]) if len(args) > 2 else EPOCHS[workload]
    arms = args[3].split(",") if len(args) > 3 else ["none", "both"]
    python = sys.executable
    seconds: dict[str, dict[str, list[float]]] = {clock: {arm: [] for arm in arms} for clock in ("wall", "cpu")}
    load = [os.getloadavg()[0]]
    if together:
        for arm in arms:
            timed(workload, epochs, arm)  # warm-up: imports and first calls, in no arm
    for pair in range(pairs):
        for arm in arms if pair % 2 == 0 else arms[::-1]:
            if together:
                took = timed(workload, epochs, arm)
            else:
                command = [python, __file__, "--child", workload, str(epochs), arm]
                found = subprocess.run(command, capture_output=True, text=True, check=True)
                took = json.loads(found.stdout.strip().splitlines()[-1])
            for clock, value in took.items():
                seconds[clock][arm].append(value)
        load.append(os.getloadavg()[0])
        print(f"pair {pair + 1}/{pairs}: " + ", ".join(f"{a} {seconds['wall'][a][-1]:.3f} s" for a in arms), flush=True)
    base = arms[0]
    result: dict[str, Any] = {"workload": workload, "epochs": epochs, "pairs": pairs, "load_average_1min": load}
    result["processes"] = "one, every arm alternating in it" if together else "a fresh one for every fit"
    for clock, values in seconds.items():
        row: dict[str, Any] = {"fit_s": values, "median_fit_s": {a: statistics.median(v) for a, v in values.items()}}
        for arm in arms[1:]:
            ratios = [a / b for a, b in zip(values[arm], values[base], strict=True)]
            row[f"{arm}_over_{base}"] = {"median_pair_ratio": statistics.median(ratios), "95": median_interval(ratios)}
        result[clock] = row
    import lightning
    import torch

    result["environment"] = {
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "python": platform.python_version(),
    }
    tag = ("" if arms == ["none", "both"] else "-" + "-".join(arms)) + ("-together" if together else "")
    (HERE / f"results-{workload}{tag}.json").write_text(json.dumps(result, indent=1) + "\n")
    for clock in ("wall", "cpu"):
        for arm in arms[1:]:
            ratio = result[clock][f"{arm}_over_{base}"]
            low, high = ratio["95"]
            print(
                f"{workload}, {clock}: median fit {result[clock]['median_fit_s'][base]:.3f} s {base}, "
                f"{result[clock]['median_fit_s'][arm]:.3f} s {arm}; "
                f"median pair ratio {ratio['median_pair_ratio']:.3f}x "
                f"(95 % {low:.3f}-{high:.3f}x); load {min(load):.2f}-{max(load):.2f}"
            )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        main()
