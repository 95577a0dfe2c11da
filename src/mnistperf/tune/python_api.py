"""``tune_loaders(model, datamodule, trainer_kwargs, budget_s=...)``: tune the loader of a project without a CLI.

Every trial makes the model and the DataModule again in a fresh process, each from an importable class and the
arguments it keeps, or from an importable class or function that makes it; one defined in ``__main__`` or inside
a function cannot be made elsewhere, and the error says so, with the fix.
"""

from __future__ import annotations

import inspect
import pickle
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mnistperf.diagnosis.measure.loader_options import arguments
from mnistperf.errors import ConfigError
from mnistperf.tune import end_to_end
from mnistperf.tune.knobs import ARG, project_knobs
from mnistperf.tune.options import checked_budget
from mnistperf.tune.search import Outcome
from mnistperf.tune.trial import Recipe, TrialSpec

WHERE = "tune_loaders"


@dataclass
class TuneResult:
    """What ``tune_loaders`` found: the settings in the project's terms, the speed-up, and every trial."""

    settings: dict[str, Any]  # the DataModule's arguments to change, by its own names (empty where none change)
    loader_args: dict[str, Any]  # DataLoader arguments for train_dataloader, where tune rebuilt the loader (code)
    rebuilt: bool  # whether the DataLoader was rebuilt with the settings tried (the DataModule exposes none)
    kept: bool  # whether the untouched settings stay
    speedup: float  # the chosen settings' steady samples/s over the untouched settings'
    table: str  # every trial, as a Markdown table
    findings: list[str]  # what bounds the run, what was chosen and why the search stopped, as sentences
    outcome: Outcome  # every trial, with its runs


def importable(target: Any, role: str) -> tuple[str, str]:
    """(module, qualname) of a class or function another process can import; one line with the fix where not."""
    module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    if not module or not qualname:
        raise ConfigError(f"{WHERE}: the {role} {target!r} has no import path; pass an object, a class or a function")
    if module == "__main__" or "<locals>" in qualname:
        place = "__main__ (a script run directly, or a notebook)" if module == "__main__" else "a function"
        raise ConfigError(
            f"{WHERE}: the {role}'s {qualname.split('.<locals>.')[-1]} is defined in {place}, so a fresh process "
            f"cannot make it again; move it into a module of your project (e.g. myproj/{role}.py) and import it "
            "from there"
        )
    fix = "; pass it as its module names it, that module importable here (PYTHONPATH=/path/to/project)"
    handed(target, f"the {role}'s {module}.{qualname}", fix)  # pickle's test: the module imports, naming this object
    return module, qualname


def recipe(made: Any, role: str, kind: type) -> Recipe:
    """How a fresh process makes the model or the DataModule again: from its class and saved arguments, or a maker."""
    if not isinstance(made, kind):  # a class or function that makes one
        if not (inspect.isroutine(made) or (isinstance(made, type) and issubclass(made, kind))):
            given = f"the class {made.__qualname__}" if isinstance(made, type) else f"a {type(made).__qualname__}"
            raise ConfigError(
                f"{WHERE}: the {role} must be a {kind.__name__}, or a class or function making one, not {given}"
            )
        return Recipe(*importable(made, role))
    module, qualname = importable(type(made), role)
    saved = {k: v for k, v in dict(getattr(made, "hparams", {})).items() if not k.startswith("_")}
    parameters = inspect.signature(type(made)).parameters.values()
    named = [p for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    missing = [p.name for p in named if p.default is p.empty and p.name not in saved]
    if missing:
        raise ConfigError(
            f"{WHERE}: the {role}'s {qualname} does not keep its arguments {', '.join(missing)}, so a fresh process "
            "cannot make it again; call self.save_hyperparameters() in its __init__, or pass a function that makes it"
        )
    found = Recipe(module, qualname, {p.name: saved[p.name] for p in named if p.name in saved})
    handed(found, f"the {role}'s saved arguments", "; pass a function that makes it")
    return found


def handed(value: Any, what: str, fix: str = "") -> None:
    """One line, with the fix, where ``what`` cannot be handed to another process (pickled)."""
    try:
        pickle.dumps(value)
    except Exception as exc:  # any object pickle refuses, with its own error type
        raise ConfigError(f"{WHERE}: {what} cannot be handed to another process ({exc}){fix}") from exc


def tune_loaders(
    model: Any,
    datamodule: Any = None,
    trainer_kwargs: dict[str, Any] | None = None,
    *,
    budget_s: float = 300.0,
    knobs: dict[str, list[Any]] | None = None,
    tune_batch_size: bool = False,
    steps: int = 20,
    epochs: int = 3,
    repeats: int = end_to_end.REPEATS,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> TuneResult:
    """Measure which DataLoader settings train this model and data fastest here, each in a fresh process.

    Args:
        model: the LightningModule (an object of an importable class that saved its arguments), or an importable
            class or function that makes it.
        datamodule: the LightningDataModule, the same way; None where the model makes its own loaders.
        trainer_kwargs: the Trainer's arguments (precision, accelerator, ...); each trial sets its own length,
            and leaves out checkpoints, early stopping and loggers.
        budget_s: seconds of measuring at most, 15 or more; then the best found so far is kept.
        knobs: the settings to try, each with its values: a DataModule argument (``{"workers": [0, 2, 4]}``) or a
            DataLoader setting (``{"num_workers": [0, 2]}``, which rebuilds the loader); given, only these are
            tried. By default the loader's settings found among the DataModule's arguments.
        tune_batch_size: also try 2x and 4x the batch size (it changes the training).
        steps: training steps per epoch of each trial.
        epochs: epochs of each trial, the first a warm-up left out of its figures.
        repeats: runs of the untouched settings, whose spread is the noise.
        seed: the seed every trial fit takes.
        log: where progress lines go.
    """
    from lightning.pytorch import LightningDataModule, LightningModule

    if epochs < 2 or steps < 1 or repeats < 1:
        raise ConfigError(f"{WHERE}: give epochs of at least 2 (the first is a warm-up), steps and repeats of 1")
    checked_budget(budget_s, f"{WHERE}: budget_s={budget_s:g}", "the untouched settings' trial alone takes")
    model_recipe = recipe(model, "model", LightningModule)
    data_recipe = recipe(datamodule, "datamodule", LightningDataModule) if datamodule is not None else None
    trainer = dict(trainer_kwargs or {})
    handed(trainer, "trainer_kwargs")
    where = f"{WHERE}'s datamodule ({data_recipe.qualname if data_recipe else 'none: the model makes its loaders'})"
    currents = arguments(data_recipe.target(), data_recipe.args) if data_recipe is not None else {}
    for key, values in (knobs or {}).items():
        if not isinstance(values, (list, tuple)):
            raise ConfigError(
                f"{WHERE}: knobs={{{key!r}: {values!r}}}: give the values to try as a list, e.g. {{{key!r}: [0, 2, 4]}}"
            )
    found = project_knobs(currents, "", list((knobs or {}).items()), where, tune_batch_size)
    modules = [r.module for r in (model_recipe, data_recipe) if r is not None]

    def made(settings: dict[str, Any], root: Path) -> dict[str, Any]:  # the data's recipe, with the knobs' arguments
        changes = {key: settings[key] for key in found.keys(ARG) if key in settings}
        return {"data": replace(data_recipe, args={**data_recipe.args, **changes})} if data_recipe else {}

    spec = TrialSpec("", epochs, steps, seed, model=model_recipe, data=data_recipe, trainer=trainer)
    outcome = end_to_end.project_outcome(found, spec, made, where, WHERE, [], modules, budget_s, repeats, log)
    lines = end_to_end.findings(outcome, found, where)
    for line in lines:
        log(line)
    settings, loader = outcome.changes(found.keys(ARG)), end_to_end.loader_args(outcome, found)
    table = end_to_end.trials_table(outcome)
    return TuneResult(settings, loader, found.rebuilt, outcome.kept, outcome.speedup, table, lines, outcome)
