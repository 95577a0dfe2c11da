"""What reading one batch costs the callbacks (``samples.read``, once a step), at an older commit and now.

The older commit's samples.py is imported from a temporary folder beside the installed package; each batch kind is
read by both in turn, the best of 5 repeats of 2,000 reads, three times over (the best kept). The one-minute load
average before and after is kept with the figures.

    .venv/bin/python docs/results/cpu-2core-batch-reading/read_cost.py OLD_COMMIT

Writes results-OLD_COMMIT.json beside this file.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path
from typing import Any

import torch

from mnistperf.diagnosis.measure import samples

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


@dataclasses.dataclass
class Fields:
    """A dataclass batch that also iterates."""

    image: torch.Tensor
    label: torch.Tensor

    def __iter__(self):
        return iter([self.image, self.label])


def batches() -> dict[str, Any]:
    """The batch kinds read: the common ones, a text batch's file names, and a detection collate's."""
    x, y = torch.rand(64, 32), torch.arange(64)
    images = [torch.rand(3, 20, 20 + i % 3) for i in range(8)]
    targets = [{"boxes": torch.rand(1 + i % 3, 4), "labels": torch.tensor([i])} for i in range(8)]
    return {
        "a tuple of tensors": (x, y),
        "a dict of tensors": {"x": x, "y": y},
        "(a dict of tensors, a tensor)": ({"x": x, "m": x}, y),
        "a dataclass of tensors": Fields(x, y),
        "tensors and 64 file names": (x, y, [f"f{i}.png" for i in range(64)]),
        "a detection collate's (images, targets) of 8": (tuple(images), tuple(targets)),
    }


def older(commit: str) -> Any:
    """The commit's samples module, imported under another name."""
    text = subprocess.run(
        ["git", "show", f"{commit}:src/mnistperf/diagnosis/measure/samples.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "older_samples.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("older_samples", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def best_us(module: Any, batch: Any) -> float:
    """The best time of one read, in microseconds."""
    timer = timeit.Timer(lambda: module.read(batch))
    return min(min(timer.repeat(5, 2000)) / 2000 * 1e6 for _ in range(3))


def main() -> None:
    """Each batch kind read by the older module and by this one, printed and written."""
    commit = sys.argv[1]
    before = os.getloadavg()[0]
    then = older(commit)
    rows = []
    for name, batch in batches().items():
        old_us, new_us = best_us(then, batch), best_us(samples, batch)
        counts = then.read(batch).samples, samples.read(batch).samples
        rows.append(
            {"batch": name, "old_us": old_us, "new_us": new_us, "old_samples": counts[0], "new_samples": counts[1]}
        )
        print(f"{name}: {old_us:.2f} us ({counts[0]} samples) then, {new_us:.2f} us ({counts[1]} samples) now")
    environment = {"python": platform.python_version(), "torch": torch.__version__, "machine": platform.machine()}
    result = {"old": commit, "load": [before, os.getloadavg()[0]], "environment": environment, "rows": rows}
    (HERE / f"results-{commit}.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
