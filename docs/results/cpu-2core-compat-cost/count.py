"""What EpochTimer and SampleAudit cost a whole short fit in instructions, which the machine's load does not move.

measure.py times whole fits side by side; on 2 shared cores a second-long fit varies by more than the 2 % and
5 % the callbacks may cost, so its intervals stay wide. This script counts the instructions of one fit per
process with Valgrind's cachegrind (../instructions.py), for five arms of the same fit: ``imports`` (everything
the fit imports, the diagnosis included, and nothing run), ``without`` (the fit), ``timer`` (the fit with
EpochTimer), ``both`` (with EpochTimer and SampleAudit) and, for scale, ``plain`` (with two callbacks whose per-step
hooks do nothing: measure.py's arm_callbacks; not for forecasting). The fit's own instructions are ``without`` less
``imports``; an arm's cost is its extra instructions over the fit's own, which holds everything the callbacks do
once a fit (the summary, timing.json, the busy window where the fit can pay for it) as users meet it.

    .venv/bin/python docs/results/cpu-2core-compat-cost/count.py newcomer|small [EPOCHS] [--cycles] [--arms A,B,...]
        [--layouts K]
    .venv-compat-forecasting/bin/python docs/results/cpu-2core-compat-cost/count.py forecasting [EPOCHS] [BATCH]

Writes counts-LIBRARY-EPOCHS.json beside this file. Needs ``valgrind``; a few minutes per arm, two at a time.
``--cycles`` also simulates the caches and the branch predictor (about twice as slow) and gives each arm's cost in
estimated cycles too (../instructions.py), which weighs the callbacks' code running cold between the step's tensor
operations; it writes counts-LIBRARY-EPOCHS-cycles.json. ``--arms A,B`` counts those arms (``imports`` and ``without``
always), among them ``unparted`` (both callbacks, no step timed by its parts), ``unwindowed`` (both, no profiled
window) and ``unwindowed-unparted`` (neither); it writes counts-LIBRARY-EPOCHS-A-B.json.

A count depends on where the process's memory lies: the same fit, its folder's name one character longer, counted
17 M instructions more (3.4 % of the small MLP's fit), through the lookups of hash tables keyed by address in torch's
import. Every arm's command line is therefore of one length (the arm's name and its folder padded with ``_``), and
``--layouts K`` counts every arm K times, its folder one character longer each time: each arm's cost is the median over
the layouts, their spread beside it (``layouts`` in the file; ``instructions`` are the first layout's). The default
is 3.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ARMS = ("imports", "without", "timer", "both", "plain")
PAD = "_"  # pads an arm's name and folder: no arm's name holds it
LAYOUTS = 3


def child(library: str, epochs: int, batch: str, arm: str, root: Path) -> None:
    """One arm in this process: measure.py's fit of ``library`` with the arm's callbacks, or none at all."""
    sys.argv = ["measure.py", library, "1", str(epochs), batch if library == "forecasting" else arm]
    sys.path.insert(0, str(HERE))
    import logging

    import measure  # this folder's: the fits of every library

    logging.getLogger("lightning").setLevel(logging.ERROR)
    measure.load()  # in every arm, "imports" too: a fit's count is the fit's own, not its modules' first import
    if arm == "imports":
        return
    if library == "forecasting" and arm == "timer":
        raise SystemExit("forecasting's fit takes both callbacks or none")
    measure.timed(root, diagnose=arm != "without")


def fit_and_costs(per_arm: dict[str, int]) -> tuple[int, dict[str, float]]:
    """From a figure per arm: the fit's own (``without`` less ``imports``) and each diagnosed arm's cost over it."""
    fit = per_arm["without"] - per_arm["imports"]
    costs = {arm: 1 + (value - per_arm["without"]) / fit for arm, value in per_arm.items()}
    return fit, {arm: cost for arm, cost in costs.items() if arm not in ("imports", "without")}


def medians(by_layout: list[tuple[int, dict[str, float]]]) -> tuple[int, dict[str, float]]:
    """:func:`fit_and_costs` of every layout, each figure the median over the layouts."""
    fit = int(statistics.median(own for own, _ in by_layout))
    return fit, {arm: statistics.median(costs[arm] for _, costs in by_layout) for arm in by_layout[0][1]}


def main() -> None:
    """Count every arm (two at a time) and write the counts and the costs."""
    if sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5].rstrip(PAD), Path(sys.argv[6]))
        return
    args = sys.argv[1:]
    simulate = "--cycles" in args
    given = {flag: args[args.index(flag) + 1] for flag in ("--arms", "--layouts") if flag in args[:-1]}
    taken = {at for flag in given for at in (args.index(flag), args.index(flag) + 1)}  # each flag and its value
    args = [arg for at, arg in enumerate(args) if at not in taken and arg != "--cycles"]
    chosen = given["--arms"].split(",") if "--arms" in given else None
    layouts = int(given.get("--layouts", LAYOUTS))
    if layouts < 1:
        raise SystemExit("--layouts takes 1 or more")
    library = args[0]
    epochs = int(args[1]) if len(args) > 1 else 3
    batch = args[2] if len(args) > 2 else "8"
    arms = [arm for arm in ARMS if not (library == "forecasting" and arm in ("timer", "plain"))]
    if chosen:
        arms = ["imports", "without", *(arm for arm in chosen if arm not in ("imports", "without"))]
    sys.path.insert(0, str(HERE.parent))
    from instructions import estimated_cycles, events, valgrind  # docs/results/instructions.py

    width = max(map(len, arms))
    with tempfile.TemporaryDirectory() as scratch:

        def count(run: tuple[int, str]) -> dict[str, int]:
            layout, arm = run
            name = arm.ljust(width, PAD)  # every arm's command line of one length
            folder = f"{scratch}/{PAD * layout}{name}"
            command = [sys.executable, __file__, "--child", library, str(epochs), batch, name, folder]
            return events(command, Path(scratch) / f"{name}-{layout}.cachegrind", simulate)

        runs = [(layout, arm) for layout in range(layouts) for arm in arms]
        with ThreadPoolExecutor(2) as pool:
            counted = dict(zip(runs, pool.map(count, runs), strict=True))
        per_layout = [{arm: counted[layout, arm] for arm in arms} for layout in range(layouts)]
        simulated = per_layout[0]
        answers = {}  # what each diagnosed fit answered (the first layout's): a cost is only worth its answer
        for arm in arms[2:]:
            for found in Path(scratch, arm.ljust(width, PAD)).rglob("timing.json"):
                summary = json.loads(found.read_text())
                window = summary.get("busy_window") or {}
                answers[arm] = {
                    "verdict": summary.get("verdict"),
                    "window": "operator clock" if "operator_clock" in window else window.get("share") and "profiler",
                    "share": window.get("share"),
                    "reason": window.get("reason"),
                }
    layout_counts = [{arm: arm_events["Ir"] for arm, arm_events in found.items()} for found in per_layout]
    layout_costs = [fit_and_costs(counts) for counts in layout_counts]
    counts = layout_counts[0]
    fit, costs = medians(layout_costs)
    result = {
        "what": f"instructions of one whole {library} fit of {epochs} epochs per process, by arm",
        "library": library,
        "epochs": epochs,
        **({"batch_size": int(batch)} if library == "forecasting" else {}),
        "instructions": counts,
        "fit_instructions": fit,
        "cost": costs,
        "layouts": [
            {"padding": layout, "instructions": found, "fit_instructions": own, "cost": cost}
            for layout, (found, (own, cost)) in enumerate(zip(layout_counts, layout_costs, strict=True))
        ],
        "answers": answers,
        "environment": {"machine": platform.machine(), "python": platform.python_version(), "valgrind": valgrind()},
    }
    if simulate:
        cycles = {arm: estimated_cycles(arm_events) for arm, arm_events in simulated.items()}
        by_layout = [fit_and_costs({arm: estimated_cycles(e) for arm, e in found.items()}) for found in per_layout]
        fit_cycles, cycle_costs = medians(by_layout)
        result.update(
            what=f"instructions and estimated cycles of one whole {library} fit of {epochs} epochs per process, by arm",
            events=simulated,
            estimated_cycles=cycles,
            fit_estimated_cycles=fit_cycles,
            cost_in_estimated_cycles=cycle_costs,
        )
    name = f"counts-{library}-{epochs}{'-' + '-'.join(chosen) if chosen else ''}{'-cycles' if simulate else ''}.json"
    (HERE / name).write_text(json.dumps(result, indent=1) + "\n")
    spread = {arm: [round(cost[arm], 4) for _, cost in layout_costs] for arm in costs}
    print(json.dumps({**{key: result[key] for key in ("fit_instructions", "cost", "answers")}, "by_layout": spread}))
    if simulate:
        print(json.dumps({"cost_in_estimated_cycles": result["cost_in_estimated_cycles"]}))


if __name__ == "__main__":
    main()
