"""How a checkpoint meets a run: it brings state, the run keeps its settings.

A checkpoint brings the weights, the optimizer's state (Adam's moments and step counts) and the
loop's position. Everything else comes from the stage config and the command line of the run
that loads it, whatever stage or device wrote the file:

* **Key names** are the network's own, compiled or not (it is compiled in place), so a compiled and an
  uncompiled network read each other's checkpoints as they are.
* **Optimizer settings** (learning rate, betas, ``capturable``, ``fused``, ``foreach``, ...) are the
  run's: a checkpoint written by a graphed step on a GPU (capturable Adam, its step counts on the
  device) resumes eagerly on a CPU, and the reverse (:func:`follow_the_run`). Its state loads only
  into an optimizer of the same kind; otherwise the run says it starts a fresh one.
* **The loop's position** is Lightning's own, with the optimizer steps counted where this run counts
  them (automatic optimization, or the graphed step's manual one: :func:`carry_step_count`).
* **Model settings** that differ from the checkpoint's are named in one line (:func:`differences`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_info

from mnistperf.upstream import OPTIMIZER_STEP_PROGRESS

KIND_KEY = "kind"  # written into an optimizer's state_dict: the torch.optim algorithm that made its state
RUN_FLAGS = ("capturable", "fused", "foreach", "differentiable")


def optimizer_kind(optimizer: torch.optim.Optimizer) -> str:
    """The torch.optim algorithm an optimizer runs (``Adam`` for Adam and its subclasses)."""
    for cls in type(optimizer).__mro__:
        if cls.__module__.startswith("torch.optim") and cls is not torch.optim.Optimizer:
            return cls.__name__
    return type(optimizer).__name__


def follow_the_run(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Make ``optimizer`` record its kind in its state_dict and, when loading one, keep its own settings.

    Loading takes the saved state (moments, step counts) and nothing else: each parameter group keeps the
    run's learning rate and flags (``capturable``, ``fused``, ``foreach``), so torch places the step counts where
    this run's Adam needs them. A state_dict of another kind, or of other parameter groups, is not loaded:
    the run says it starts a fresh optimizer.

    Args:
        optimizer: the run's optimizer, before any state is loaded into it.
    """
    optimizer.register_state_dict_post_hook(_record_kind)
    optimizer.register_load_state_dict_pre_hook(_keep_run_settings)
    return optimizer


def _record_kind(optimizer: torch.optim.Optimizer, state_dict: dict[str, Any]) -> dict[str, Any]:
    state_dict[KIND_KEY] = optimizer_kind(optimizer)
    return state_dict


def _keep_run_settings(optimizer: torch.optim.Optimizer, state_dict: dict[str, Any]) -> dict[str, Any]:
    saved_kind = state_dict.pop(KIND_KEY, None)
    kind = optimizer_kind(optimizer)
    saved_groups = state_dict["param_groups"]
    sizes = [len(group["params"]) for group in optimizer.param_groups]
    why = None
    if saved_kind is not None and saved_kind != kind:
        why = f"it holds {saved_kind} state, this run optimizes with {kind}"
    elif [len(group["params"]) for group in saved_groups] != sizes:
        why = "its parameter groups do not match this run's"
    if why is not None:
        rank_zero_info(
            f"mnistperf: the checkpoint's optimizer state is not loaded ({why}): starting a fresh optimizer."
        )
        return optimizer.state_dict() | {"state": {}}
    groups = [
        {**{k: v for k, v in run.items() if k != "params"}, "params": saved["params"]}
        for run, saved in zip(optimizer.param_groups, saved_groups, strict=True)
    ]
    return {**state_dict, "param_groups": groups}


def carry_step_count(checkpoint: dict[str, Any], automatic: bool) -> None:
    """Put the checkpoint's optimizer steps into the progress this run's loop reads its global step from.

    Lightning counts them in one of two places (automatic or manual optimization); a checkpoint of the other
    kind would otherwise resume at global step 0.

    Args:
        checkpoint: a Lightning checkpoint, changed in place (nothing happens without a fit loop in it).
        automatic: whether the loading module optimizes automatically.
    """
    loop = checkpoint.get("loops", {}).get("fit_loop")
    if not loop:
        return
    auto_key, manual_key = OPTIMIZER_STEP_PROGRESS["automatic"], OPTIMIZER_STEP_PROGRESS["manual"]
    if auto_key not in loop or manual_key not in loop:
        return
    counts = {"auto": loop[auto_key]["optimizer"]["step"], "manual": loop[manual_key]}
    theirs, ours = ("manual", "auto") if automatic else ("auto", "manual")
    if counts[theirs]["total"]["completed"] > counts[ours]["total"]["completed"]:
        progress = {part: dict(values) for part, values in counts[theirs].items()}
        if automatic:
            loop[auto_key]["optimizer"]["step"] = progress
        else:
            loop[manual_key] = progress


def differences(saved: Mapping[str, Any], run: Mapping[str, Any], prefix: str) -> list[tuple[str, Any, Any]]:
    """(option, checkpoint's value, run's value) for every setting both name and that differs, in the run's order."""
    return [
        (f"{prefix}{name}", saved[name], value)
        for name, value in run.items()
        if not name.startswith("_") and name in saved and saved[name] != value
    ]


def differences_line(changed: list[tuple[str, Any, Any]], stage: str | None) -> str | None:
    """One line naming the settings the checkpoint was trained with that this run overrides (None when none)."""
    if not changed:
        return None
    trained = ", ".join(f"{option} {_yaml(old)}" for option, old, _ in changed)
    running = ", ".join(f"{option} {_yaml(new)}" for option, _, new in changed)
    return f"mnistperf: checkpoint trained with {trained}; running {stage or 'this run'}'s {running}"


def _yaml(value: Any) -> str:
    """A value as the configs spell it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
