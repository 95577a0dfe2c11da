"""What EpochTimer and SampleAudit together cost a published library's fit, in instructions counted by Valgrind.

measure.py times whole fits of the compatibility tier with and without the two callbacks, and on this machine its
intervals stay wide. Here Valgrind's cachegrind counts the instructions instead (../instructions.py): for each arm,
a process makes one warm-up fit with both callbacks (imports and first-call costs) and then ``SHORT`` or ``LONG``
fits of the arm, each built afresh as measure.py builds them; an arm's fit is the difference between the two
processes' counts, divided by the fits between. The plain arm is counted twice, which shows how far two counts of
the same fits differ. Torch runs one thread. Run in the library's environment, which .ci/run builds:

    .venv-compat-chemprop/bin/python docs/results/cpu-2core-compat-cost/count.py chemprop
    .venv-compat-forecasting/bin/python docs/results/cpu-2core-compat-cost/count.py forecasting

Each fit has measure.py's default 3 epochs.
Writes counts-LIBRARY.json beside this file. About 15 minutes a library on the lab's 2-core CPU.
"""

from __future__ import annotations

import importlib
import json
import logging
import platform
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import lightning
import measure  # this folder's: the library's fits, built as the tier's tests build them
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from instructions import instructions, valgrind  # noqa: E402  # docs/results/instructions.py

SHORT, LONG = 1, 3


def fits(arm: str, count: int) -> None:
    """A warm-up fit with both callbacks, then ``count`` fits of ``arm``, in this process (the one counted)."""
    torch.set_num_threads(1)
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as scratch:
        measure.timed(Path(scratch) / "warm-up", diagnose=True)
        for number in range(count):
            measure.timed(Path(scratch) / str(number), diagnose=arm == "with")


def main() -> None:
    """Count every arm's processes, two at a time, and print and write the instructions per fit and their ratio."""
    arms = ("without", "without", "with")  # "without" twice: the difference between two counts of the same fits
    runs = [(arm, count) for arm in arms for count in (SHORT, LONG)]
    command = [sys.executable, __file__, measure.LIBRARY, "1", str(measure.EPOCHS)]  # measure.py's arguments
    with tempfile.TemporaryDirectory() as scratch, ThreadPoolExecutor(2) as pool:
        outs = [Path(scratch) / f"{number}.out" for number in range(len(runs))]
        counts = list(pool.map(lambda run, out: instructions([*command, f"--fits={run[0]},{run[1]}"], out), runs, outs))
    per_fit: dict[str, list[float]] = {}
    for (arm, _), short, long in zip(runs[::2], counts[::2], counts[1::2], strict=True):
        per_fit.setdefault(arm, []).append((long - short) / (LONG - SHORT))
    package = importlib.import_module(measure.PACKAGES[measure.LIBRARY])
    result = {
        "what": f"instructions per whole fit of the compatibility tier's {measure.LIBRARY} test, with and without "
        f"EpochTimer and SampleAudit: the difference of processes of {LONG} and {SHORT} fits after a warm-up fit, "
        "counted by valgrind --tool=cachegrind",
        "library": f"{measure.PACKAGES[measure.LIBRARY]} {package.__version__}",
        "epochs_per_fit": measure.EPOCHS,
        "instructions_per_fit": per_fit,
        "repeat_of_without": per_fit["without"][1] / per_fit["without"][0],
        "ratio": per_fit["with"][0] / per_fit["without"][0],
        "environment": {
            "machine": platform.machine(),
            "torch_threads": 1,
            "torch": torch.__version__,
            "lightning": lightning.__version__,
            "python": platform.python_version(),
            "valgrind": valgrind(),
        },
    }
    (HERE / f"counts-{measure.LIBRARY}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"{result['library']}: without, counted twice: {result['repeat_of_without']:.5f}x; "
        f"with / without: {result['ratio']:.4f}x the instructions of a fit of {per_fit['without'][0] / 1e9:.2f} G"
    )


if __name__ == "__main__":
    given = next((arg.removeprefix("--fits=") for arg in sys.argv if arg.startswith("--fits=")), None)
    if given is not None:  # a child: its fits, counted
        name, number = given.split(",")
        fits(name, int(number))
    else:
        main()
