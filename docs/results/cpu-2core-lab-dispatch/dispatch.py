"""What Lightning charged the lab's fit each step for the per-batch hooks its callbacks leave as Callback's.

Builds the trainer as ``fit`` builds it for v3_resident (its checkpoint, model summary, progress bar and the config's
saver; and as the bench runs it, without the bar and the summary), leaves out the EpochTimer (its hooks do work, and
it skipped its unused ones already), and times Lightning's own dispatch (``_call_callback_hooks``) of the step's five
hooks none of those callbacks overrides: ``on_train_batch_start``, ``on_before_zero_grad``, ``on_before_backward``,
``on_after_backward`` and ``on_before_optimizer_step``. Once with the hooks skipped, as the lab's trainer now has
them, once with them put back, as before. Best of 7 repeats of 20,000 steps; prints and writes dispatch.json here.

    python docs/results/cpu-2core-lab-dispatch/dispatch.py
"""

from __future__ import annotations

import json
import logging
import os
import platform
import timeit
from pathlib import Path

import lightning
import torch
from lightning.pytorch.trainer import call

from mnistperf.diagnosis import EpochTimer
from mnistperf.diagnosis.callbacks.batch_hooks import BATCH_HOOKS
from mnistperf.lightning_cli.mnistperf_cli import parse_fit_config

HERE = Path(__file__).resolve().parent
CONFIG = HERE.parents[2] / "configs" / "v3_resident.yaml"
STEPS, REPEATS = 20_000, 7
HOOK_ARGS: dict[str, tuple] = {  # the arguments Lightning passes after (trainer, module)
    "on_train_batch_start": (None, 0),
    "on_before_zero_grad": (None,),
    "on_before_backward": (None,),
    "on_after_backward": (),
    "on_before_optimizer_step": (None,),
}
BENCH = ("--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false")


def per_step_us(extra: tuple[str, ...], skipped: bool) -> tuple[float, list[str]]:
    """Microseconds of one step's five dispatches, best of REPEATS; the callbacks timed."""
    trainer = parse_fit_config(("--config", str(CONFIG), *extra)).trainer
    trainer.callbacks = [c for c in trainer.callbacks if not isinstance(c, EpochTimer)]
    for callback in trainer.callbacks:
        assert not any(callable(getattr(callback, hook)) for hook in HOOK_ARGS), type(callback).__name__
        if not skipped:  # as before: Lightning dispatches every per-batch hook the class leaves as Callback's
            for hook in BATCH_HOOKS:
                if vars(callback).get(hook, False) is None:
                    del vars(callback)[hook]

    def step() -> None:
        for hook, args in HOOK_ARGS.items():
            call._call_callback_hooks(trainer, hook, *args)

    us = min(timeit.repeat(step, number=STEPS, repeat=REPEATS)) / STEPS * 1e6
    return us, [type(c).__name__ for c in trainer.callbacks]


def main() -> None:
    """Time each arm, print and write the figures."""
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    result: dict[str, object] = {"what": __doc__.splitlines()[0], "hooks": list(HOOK_ARGS), "steps": STEPS}
    for name, extra in (("fit", ()), ("bench", BENCH)):
        for skipped in (False, True):
            us, callbacks = per_step_us(extra, skipped)
            arm = f"{name}, {'skipped' if skipped else 'dispatched'}"
            result[arm] = {"us_per_step": us, "callbacks": callbacks}
            print(f"{arm} ({', '.join(callbacks)}): {us:.2f} us a step", flush=True)
    result["environment"] = {
        "machine": platform.machine(),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "python": platform.python_version(),
        "load_average_1min": os.getloadavg()[0],
    }
    (HERE / "dispatch.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
