"""One trial: a short, seeded fit of a project's own model and data with one candidate's settings, timed.

It runs in a process of its own, builds the model and the data from a LightningCLI config or from recipes, trains
with :class:`~mnistperf.diagnosis.EpochTimer` (its profiled window off), and writes beside the spec a JSON of the
steady epochs' samples/s and input-wait share (the first epoch, the warm-up, apart), or the error in one line.
"""

from __future__ import annotations

import importlib
import json
import pickle
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.callbacks import DeviceStatsMonitor, EarlyStopping, LearningRateMonitor, ModelCheckpoint

from mnistperf.console import calm_library_noise
from mnistperf.diagnosis import EpochTimer
from mnistperf.diagnosis.figures import INPUT_WAIT_SHARE, SAMPLES_PER_S
from mnistperf.diagnosis.measure.loader_options import loader_settings
from mnistperf.tune.knobs import rebuild_train_loader


@dataclass
class Recipe:
    """How another process makes the same object: an importable class or function and the arguments it is given."""

    module: str
    qualname: str
    args: dict[str, Any] = field(default_factory=dict)

    def target(self) -> Any:
        """The class or function itself, imported."""
        found: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            found = getattr(found, part)
        return found

    def build(self) -> Any:
        """The object, made with the recipe's arguments."""
        return self.target()(**self.args)


@dataclass
class TrialSpec:
    """One trial fit: what to build, the settings its loader is made again with, how long it trains, where."""

    root: str  # the trial's folder: the spec, its result, the fit's timing.json
    epochs: int
    steps: int
    seed: int
    config: str | None = None  # a LightningCLI config holding the candidate's settings
    cli: str | None = None  # the project's LightningCLI subclass that reads it (module.Class), else LightningCLI
    model: Recipe | None = None  # or the objects, made from recipes
    data: Recipe | None = None
    trainer: dict[str, Any] = field(default_factory=dict)  # with recipes: the Trainer's arguments
    rebuild: dict[str, Any] | None = None  # None: the loader as the project makes it; else made again with these


def trial_trainer(epochs: int, steps: int, root: str) -> dict[str, Any]:
    """The Trainer arguments every trial fit takes over the project's own: short, quiet, nothing saved."""
    return {
        "max_epochs": epochs,
        "min_epochs": None,
        "max_steps": -1,
        "max_time": None,
        "limit_train_batches": steps,
        "limit_val_batches": 0,
        "num_sanity_val_steps": 0,
        "val_check_interval": None,
        "check_val_every_n_epoch": 1,
        "fast_dev_run": False,
        "overfit_batches": 0.0,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": root,
    }


def left_out(callback_class: type) -> bool:
    """Whether a trial fit leaves a callback of the project's out: checkpoints, early stopping, a timer of its own.

    Those that write to a logger go too: a trial has none, and they refuse to run without one.
    """
    return issubclass(
        callback_class, (ModelCheckpoint, EarlyStopping, EpochTimer, LearningRateMonitor, DeviceStatsMonitor)
    )


def write_spec(spec: TrialSpec) -> Path:
    """Save the spec in its folder; the path a trial process is given."""
    path = Path(spec.root) / "spec.pickle"
    path.write_bytes(pickle.dumps(spec))
    return path


def result_path(spec_path: Path) -> Path:
    """Where the trial of ``spec_path`` writes its result."""
    return spec_path.with_suffix(".result.json")


def fit(spec: TrialSpec) -> dict[str, Any]:
    """Train as the spec says and return the steady figures from the timer's summary."""
    calm_library_noise()
    timer = EpochTimer(busy_window_steps=0)
    if spec.config is not None:
        from lightning.pytorch.cli import LightningCLI

        module, _, name = (spec.cli or "").rpartition(".")
        cli_class = Recipe(module, name).target() if spec.cli else LightningCLI
        cli = cli_class(
            args=["--config", spec.config],
            run=False,
            save_config_callback=None,
            trainer_defaults={"callbacks": [timer]},
            parser_kwargs={"exit_on_error": False},  # the parser's message comes back, not a usage and an exit
        )
        model, data, trainer = cli.model, cli.datamodule, cli.trainer
    else:
        assert spec.model is not None
        seed_everything(spec.seed, workers=True)
        model = spec.model.build()
        data = spec.data.build() if spec.data is not None else None
        kept = [c for c in spec.trainer.get("callbacks") or [] if not left_out(type(c))]
        trainer = Trainer(
            **{**spec.trainer, **trial_trainer(spec.epochs, spec.steps, spec.root), "callbacks": [*kept, timer]}
        )
    if spec.rebuild is not None:
        rebuild_train_loader(data if data is not None else model, spec.rebuild)
    trainer.fit(model, datamodule=data)
    if timer.summary_path is None:
        raise RuntimeError("the fit ended before its first epoch did: no figures")
    summary = json.loads(timer.summary_path.read_text())
    figures = {key: summary.get(key) for key in (SAMPLES_PER_S, INPUT_WAIT_SHARE, "device", "accelerator")}
    return {**figures, "loader": loader_settings(trainer.train_dataloader)}


ONE_LINE_CHARS = 400


def one_line(exc: BaseException) -> str:
    """An exception as one line, its lines joined, cut in the middle at ONE_LINE_CHARS (where a worker's error ends)."""
    text = " ".join(str(exc).split())
    if len(text) > ONE_LINE_CHARS:
        text = f"{text[: ONE_LINE_CHARS // 3]} ... {text[-(ONE_LINE_CHARS - ONE_LINE_CHARS // 3 - 5) :]}"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def main(spec_path: str) -> int:
    """Run the trial of a saved spec; write its result (or its error) beside it; 0 if it trained."""
    path = Path(spec_path)
    try:
        result = fit(pickle.loads(path.read_bytes()))
        code = 0
    except BaseException as exc:  # everything ends in the result file, for the parent to name
        traceback.print_exc()
        result, code = {"error": one_line(exc)}, 1
    result_path(path).write_text(json.dumps(result))
    sys.stdout.flush()
    sys.stderr.flush()
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
