"""Where both callbacks' Python goes on a short fit, in bytecodes run, which the machine's load does not move.

count.py gives the callbacks' whole cost in instructions, but not by function: Python's own work shows there as the
interpreter's loop. This script counts the bytecodes each function of the project ran (and those it called, anywhere,
``inclusive``) during one fit of measure.py's FIT with both callbacks, after one warm-up fit in this process, with
``sys.settrace``'s opcode events: a count per function that no wall clock gives on two shared cores. The fit runs
many times slower under the trace, so a decision the diagnosis takes by its clock (the profiled window's price) may
differ from an untraced fit's.

    .venv/bin/python docs/results/cpu-2core-compat-cost/opcodes.py [FIT] [EPOCHS]

Prints the 40 largest inclusive counts and writes opcodes-FIT-EPOCHS.json beside this file.
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FIT = sys.argv[1] if len(sys.argv) > 1 else "small"
EPOCHS = sys.argv[2] if len(sys.argv) > 2 else "3"


def key(code: Any) -> str:
    """A function as ``file:line:name``, its path from the package (or the standard library's) on."""
    path = code.co_filename.split("/src/")[-1].split("site-packages/")[-1].split("/lib/python3")[-1]
    return f"{path}:{code.co_firstlineno}:{code.co_name}"


def main() -> None:
    """Trace one fit; print and write each function's bytecodes, its own and inclusive, and its calls."""
    sys.argv = ["measure.py", FIT, "1", EPOCHS, "both"]  # measure.py reads its fit, epochs and arm on import
    sys.path.insert(0, str(HERE))
    import measure  # this folder's

    logging.getLogger("lightning").setLevel(logging.ERROR)
    measure.load()
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    stack: list[list[Any]] = []  # per frame entered: its code, its own bytecodes, those of the frames it called

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event == "opcode":
            stack[-1][1] += 1
        elif event == "return":
            code, alone, below = stack.pop()
            own[key(code)] += alone
            inclusive[key(code)] += alone + below
            if stack:
                stack[-1][2] += alone + below
        return local

    def entered(frame: Any, event: str, arg: Any) -> Any:  # the project's frames, and all they call
        if event != "call" or (not stack and "/mnistperf/" not in frame.f_code.co_filename):
            return None
        stack.append([frame.f_code, 0, 0])
        calls[key(frame.f_code)] += 1
        frame.f_trace_opcodes = True
        return local

    with tempfile.TemporaryDirectory() as scratch, contextlib.redirect_stdout(io.StringIO()):
        measure.FITS[FIT](Path(scratch) / "warm-up", True)
        sys.settrace(entered)
        try:
            measure.FITS[FIT](Path(scratch) / "traced", True)
        finally:
            sys.settrace(None)
    result = {
        "what": f"bytecodes run in the project's functions (and below them) in one {FIT} fit of {EPOCHS} epochs",
        "total": sum(own.values()),
        "inclusive": dict(inclusive.most_common()),
        "own": dict(own.most_common()),
        "calls": dict(calls.most_common()),
    }
    (HERE / f"opcodes-{FIT}-{EPOCHS}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['total']:,} bytecodes in all")
    for name, count in inclusive.most_common(40):
        print(f"{count:9,d} {calls[name]:6,d} calls  {name}")


if __name__ == "__main__":
    main()
