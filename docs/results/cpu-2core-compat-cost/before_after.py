"""Both callbacks' cost in instructions for two commits of the code, side by side: what a change of them bought.

For each commit's source tree (a git worktree), count.py's ``imports``, ``without`` and ``both`` arms of the small
fit, counted by cachegrind (../instructions.py); a tree's cost is its extra instructions over the fit's own, as
count.py has it. Writes counts-small-EPOCHS-before-after.json beside this file.

    git worktree add /tmp/before OLD && git worktree add /tmp/after NEW
    .venv/bin/python docs/results/cpu-2core-compat-cost/before_after.py /tmp/before /tmp/after [EPOCHS]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ARMS = ("imports", "without", "both")


def main() -> None:
    """Count every arm of both trees, two at a time, and write the counts and each tree's cost."""
    trees, epochs = (
        [Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()],
        sys.argv[3] if len(sys.argv) > 3 else "6",
    )
    sys.path.insert(0, str(HERE.parent))
    from instructions import events, valgrind  # docs/results/instructions.py

    def count(job: tuple[Path, str]) -> int:
        tree, arm = job
        script = tree / "docs" / "results" / "cpu-2core-compat-cost" / "count.py"
        with tempfile.TemporaryDirectory() as scratch:
            command = [sys.executable, str(script), "--child", "small", epochs, "8", arm, scratch]
            return events(command, Path(scratch) / "out.cachegrind")["Ir"]

    result: dict[str, object] = {"what": f"instructions of the small fit of {epochs} epochs, per arm, per tree"}
    for name, tree in zip(("before", "after"), trees, strict=True):
        commit = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        os.environ["PYTHONPATH"] = str(tree / "src")
        with ThreadPoolExecutor(2) as pool:
            counts = dict(zip(ARMS, pool.map(count, [(tree, arm) for arm in ARMS]), strict=True))
        fit = counts["without"] - counts["imports"]
        result[name] = {
            "commit": commit.stdout.strip(),
            "instructions": counts,
            "cost": 1 + (counts["both"] - counts["without"]) / fit,
        }
    result["valgrind"] = valgrind()
    (HERE / f"counts-small-{epochs}-before-after.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({name: result[name]["cost"] for name in ("before", "after")}))  # type: ignore[index]


if __name__ == "__main__":
    main()
