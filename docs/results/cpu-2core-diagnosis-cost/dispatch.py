"""What Lightning charges a callback for the per-batch hooks it calls on it: the four between a step's start and end.

Times Lightning's own dispatch (``_call_callback_hooks``) of ``on_before_zero_grad``,
``on_before_backward``, ``on_after_backward`` and ``on_before_optimizer_step``, the hooks of an
automatic-optimization step besides its start and end, on a Trainer with no callback (not even its
default checkpoint and summary), with an empty ``Callback``, with an EpochTimer whose unused
per-batch hooks are put back (the timer before
:func:`mnistperf.diagnosis.callbacks.batch_hooks.skip_unused_batch_hooks`),
and with EpochTimer as it is. Best of 7 repeats of 20,000 steps each; prints and writes
dispatch.json beside this file.

    python docs/results/cpu-2core-diagnosis-cost/dispatch.py
"""

from __future__ import annotations

import json
import logging
import platform
import timeit
from pathlib import Path

import lightning
import torch
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.trainer import call

from mnistperf.diagnosis import EpochTimer

HERE = Path(__file__).resolve().parent
STEPS, REPEATS = 20_000, 7
HOOK_ARGS: dict[str, tuple] = {  # the arguments Lightning passes after (trainer, module)
    "on_before_zero_grad": (None,),
    "on_before_backward": (None,),
    "on_after_backward": (),
    "on_before_optimizer_step": (None,),
}


def per_step_us(callbacks: list[Callback]) -> float:
    """Microseconds of one step's four dispatches, best of REPEATS."""
    trainer = Trainer(
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=callbacks,
    )

    def step() -> None:
        for hook, args in HOOK_ARGS.items():
            call._call_callback_hooks(trainer, hook, *args)

    return min(timeit.repeat(step, number=STEPS, repeat=REPEATS)) / STEPS * 1e6


def main() -> None:
    """Time each arm, print and write the figures."""
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    every_hook = EpochTimer()
    for hook in HOOK_ARGS:
        vars(every_hook).pop(hook, None)
    arms = {
        "no callback": [],
        "empty Callback": [Callback()],
        "EpochTimer, every hook dispatched": [every_hook],
        "EpochTimer": [EpochTimer()],
    }
    us = {name: per_step_us(callbacks) for name, callbacks in arms.items()}
    for name, value in us.items():
        print(f"{name}: {value:.2f} us a step")
    result = {
        "what": "Lightning's dispatch of the four per-batch hooks of a step besides its start and end",
        "hooks": list(HOOK_ARGS),
        "steps": STEPS,
        "repeats": REPEATS,
        "us_per_step": us,
        "environment": {
            "machine": platform.machine(),
            "torch": torch.__version__,
            "lightning": lightning.__version__,
            "python": platform.python_version(),
        },
    }
    (HERE / "dispatch.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
