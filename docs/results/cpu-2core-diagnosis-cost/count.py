"""What EpochTimer and SampleAudit cost in instructions: the CPU work an epoch executes, counted by Valgrind.

measure.py times epochs side by side, and on a machine whose speed drifts its intervals stay wide. The
instructions an epoch executes do not drift: this script counts them with Valgrind's cachegrind
(../instructions.py: every instruction the process runs in user space, in every thread) for each of
measure.py's arms, on the same module, data and trainer, one arm per fit. An arm's instructions per epoch are
the difference between a fit of ``LONG`` epochs and one of ``SHORT`` epochs, divided by the epochs between: the
start of the process, the imports, the fit's set-up and its first epoch (the warm-up, with the timer's profiled
window) are in both and cancel.

Instructions are not time: they leave out what the callbacks' memory traffic and cache misses cost, what a
branch or a division costs more than an addition, and the kernel's work (writing the logs). measure.py's
ratios, on the same arms, say what the callbacks cost in time. Torch runs one thread here, so that no thread
spins while waiting; the "without" arm is counted twice, which shows how far two counts of the same fit differ.

    python docs/results/cpu-2core-diagnosis-cost/count.py [--audit] [--samples=N]

Writes counts.json (counts-audit.json with ``--audit``; ``-N`` added with ``--samples``) beside this file.
Needs ``valgrind`` on the PATH; about 20 minutes on the lab's 2-core CPU, two fits at a time.
"""

from __future__ import annotations

import json
import platform
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import lightning
import measure  # this folder's: the module, the data and the stand-in callbacks of every arm
import torch
from lightning.pytorch import seed_everything

from mnistperf.diagnosis import EpochTimer, SampleAudit

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from instructions import instructions, valgrind  # noqa: E402  # docs/results/instructions.py

SHORT, LONG = 2, 4


def fit(arm: str, epochs: int) -> None:
    """One fit of ``arm`` for ``epochs`` epochs, in this process (the one Valgrind counts)."""
    torch.set_num_threads(1)
    seed_everything(0, verbose=False)
    callbacks = measure.arm_callbacks(EpochTimer(), SampleAudit())[arm]
    with tempfile.TemporaryDirectory() as root:
        measure.train(callbacks, epochs, Path(root))


def main() -> None:
    """Count every arm's fits, two at a time, and print and write the instructions per epoch and their ratios."""
    arms = ("without", *measure.ARMS)  # "without" twice: the difference between two counts of one fit
    runs = [(arm, epochs) for arm in arms for epochs in (SHORT, LONG)]
    with tempfile.TemporaryDirectory() as scratch, ThreadPoolExecutor(2) as pool:
        outs = [Path(scratch) / f"{number}.out" for number in range(len(runs))]
        flags = [arg for arg in sys.argv[1:] if arg.startswith("--")]
        counts = list(
            pool.map(
                lambda run, out: instructions([sys.executable, __file__, f"--fit={run[0]},{run[1]}", *flags], out),
                runs,
                outs,
            )
        )
    per_epoch: dict[str, list[float]] = {}
    for (arm, _), short, long in zip(runs[::2], counts[::2], counts[1::2], strict=True):
        per_epoch.setdefault(arm, []).append((long - short) / (LONG - SHORT))
    base = per_epoch["without"][0]
    steps = measure.SAMPLES // measure.BATCH
    result = {
        "what": "instructions per training epoch of examples/diagnose_your_run.py's module"
        + (" on dict batches" if measure.AUDIT else "")
        + f", the difference of fits of {LONG} and {SHORT} epochs, counted by valgrind --tool=cachegrind",
        "samples_per_epoch": measure.SAMPLES,
        "batch_size": measure.BATCH,
        "steps_per_epoch": steps,
        "instructions_per_epoch": per_epoch,
        "repeat_of_without": per_epoch["without"][1] / base,
        "ratio": {arm: per_epoch[arm][0] / base for arm in measure.COMPARED},
        "instructions_per_step": {arm: (per_epoch[arm][0] - base) / steps for arm in measure.COMPARED},
        "environment": {
            "machine": platform.machine(),
            "torch_threads": 1,
            "torch": torch.__version__,
            "lightning": lightning.__version__,
            "python": platform.python_version(),
            "valgrind": valgrind(),
        },
    }
    name = "counts" + ("-audit" if measure.AUDIT else "") + (f"-{measure.GIVEN}" if measure.GIVEN else "")
    (HERE / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"without, counted twice: {result['repeat_of_without']:.5f}x")
    for arm in measure.COMPARED:
        print(
            f"{arm} / without: {result['ratio'][arm]:.4f}x the instructions, "
            f"{result['instructions_per_step'][arm]:+,.0f} a step of {base / steps:,.0f}"
        )


if __name__ == "__main__":
    given = next((arg.removeprefix("--fit=") for arg in sys.argv if arg.startswith("--fit=")), None)
    if given is not None:  # a child: one fit, counted
        name, count = given.split(",")
        fit(name, int(count))
    else:
        main()
