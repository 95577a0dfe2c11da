"""The plan: the parts in order of value with their planned minutes and commands, and the device call that runs them."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mnistperf import gpu_preflight
from mnistperf.gpu_check.pack import CARRIED_WHEELS, CARRY, SOURCES, WHEELS, size_mb

SITE = Path("/tmp/mnistperf-site")  # where the carried wheels are installed on the device
BENCH = ("{py}", "-m", "mnistperf", "bench", "--epochs", "4")


@dataclass(frozen=True)
class Part:
    """One part of the check: its planned minutes on one H100 or H200, what it measures and its commands.

    ``{py}`` and ``{out}`` in a command stand for the interpreter and the results folder.
    """

    name: str
    minutes: float
    what: str
    commands: tuple[tuple[str, ...], ...]


# In the order the next call wants them: what no GPU has measured yet (the streams, the CUDA-only tests with this
# code, the diagnosis's cost, its syncs), then the graphed step's probe, the fast stages beside bare Lightning again,
# and what settles or widens a figure. Planned minutes: what each part took on an H200
# (docs/results/cuda-h200/session*-parts.md), rounded up; the fast part at 6 min for 2 repeats, the streams at 2 (two
# of their three fits took 1.2 min), the probe at some 20 s a variant and the compiled one's compile, a compiled fit
# at v3_compiled's 15 s first epoch.
PARTS = (
    Part(
        "streams",
        2.0,
        "streaming and streaming_litdata beside v2_pinned",
        (
            (
                *BENCH,
                "--stages",
                "v2_pinned,streaming,streaming_litdata",
                "--reference-rows",
                "none",
                "--out",
                "{out}/streams",
            ),
        ),
    ),
    Part(
        "tests",
        2.0,
        "the CUDA-only tests (pytest -m cuda)",
        (("{py}", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda"),),
    ),
    Part(
        "timer",
        1.5,
        "v2_pinned's default fit and the newcomer's short fit, whole processes with and without the diagnosis",
        (("{py}", "-m", "mnistperf.gpu_check", "--timer-cost", "{out}/timer-cost.json"),),
    ),
    Part(
        "diagnosis",
        0.3,
        "examples/diagnose_your_run.py under torch.cuda.set_sync_debug_mode: the diagnosis's syncs, trace, verdict",
        (("{py}", "-m", "mnistperf.gpu_check", "--sync-probe", "{out}/diagnosis"),),
    ),
    Part(
        "probe",
        3.5,
        "the graphed step's floor on the card, then its GPU time per replay in variants beside a hand-written graphed "
        "step, its kernels",
        (
            ("{py}", "-m", "mnistperf.bench.step_floor", "{out}/probe"),
            ("{py}", "-m", "mnistperf.bench.graph_probe", "{out}/probe"),
        ),
    ),
    Part(
        "graph-compiled",
        1.5,
        "v4_graphed with its network compiled before capture (fused kernels in the graph) beside it as it is",
        (
            (
                *BENCH,
                "--stages",
                "v4_graphed",
                "--sweep",
                "model.compile=false,true",
                "--reference-rows",
                "none",
                "--out",
                "{out}/graph-compiled",
            ),
        ),
    ),
    Part(
        "fast",
        6.0,
        "v2_pinned, v3_resident and v4_graphed beside their bare-Lightning and plain-PyTorch rows, 4 epochs, 2 repeats",
        (
            (
                *BENCH,
                "--repeats",
                "2",
                "--stages",
                "v2_pinned,v3_resident,v4_graphed",
                "--reference-rows",
                "v2_pinned,v3_resident,v4_graphed",
                "--out",
                "{out}/fast",
            ),
        ),
    ),
    Part(
        "resident",
        3.5,
        "v3_resident beside its bare-Lightning and plain-PyTorch rows, 4 epochs, 4 repeats: the lab's cost settled",
        (
            (
                *BENCH,
                "--repeats",
                "4",
                "--stages",
                "v3_resident",
                "--reference-rows",
                "v3_resident",
                "--out",
                "{out}/resident",
            ),
        ),
    ),
    Part(
        "compiled",
        1.2,
        "v3_compiled beside v3_resident",
        ((*BENCH, "--stages", "v3_resident,v3_compiled", "--reference-rows", "none", "--out", "{out}/compiled"),),
    ),
    Part(
        "graph",
        0.8,
        "v4_graphed at 1, 4 and 16 optimizer steps per Lightning step (8, its own, is in fast)",
        (
            (
                *BENCH,
                "--stages",
                "v4_graphed",
                "--sweep",
                "data.batches_per_step=1,4,16",
                "--reference-rows",
                "none",
                "--out",
                "{out}/graph-groups",
            ),
        ),
    ),
    Part(
        "modes",
        1.0,
        "v3_compiled in reduce-overhead mode, keeping or dropping the last partial batch",
        (
            (
                *BENCH,
                "--stages",
                "v3_compiled",
                "--set",
                "model.compile_mode=reduce-overhead",
                "--sweep",
                "data.drop_last=false,true",
                "--reference-rows",
                "none",
                "--out",
                "{out}/compiled-modes",
            ),
        ),
    ),
    Part(
        "v1",
        2.5,
        "the v1 stages, bounded: v1_persistent, v1_pinned, v1_workers4 and v1_bs512 to 5 batches of 512, then "
        "v1_naive to 2,560 training samples, 3 epochs",
        (
            (
                "{py}",
                "-m",
                "mnistperf",
                "bench",
                "--stages",
                "v1_persistent,v1_pinned,v1_workers4,v1_bs512",
                "--epochs",
                "3",
                "--limit-train-batches",
                "5",
                "--set",
                "trainer.limit_val_batches=2",
                "--reference-rows",
                "none",
                "--out",
                "{out}/v1-bs512-bounded",
            ),
            (
                "{py}",
                "-m",
                "mnistperf",
                "bench",
                "--stages",
                "v1_naive",
                "--epochs",
                "3",
                "--limit-train-batches",
                "160",
                "--set",
                "trainer.limit_val_batches=40",
                "--reference-rows",
                "none",
                "--out",
                "{out}/v1-naive-bounded",
            ),
        ),
    ),
)
PART_NAMES = gpu_preflight.PARTS  # the same names, in the same order (a test holds them together)
SETUP_MINUTES = 0.5  # the preflight, the environment and preparing FashionMNIST from its files


def part_commands(part: Part, py: str, out: Path, dropped: Sequence[str]) -> list[list[str]]:
    """The part's commands with the interpreter and folder filled in and the stages the preflight dropped left out."""
    commands = []
    for template in part.commands:
        command = [word.replace("{py}", py).replace("{out}", str(out)) for word in template]
        if "--stages" in command:
            at = command.index("--stages") + 1
            kept = [stage for stage in command[at].split(",") if stage not in dropped]
            if not kept:
                continue
            command[at] = ",".join(kept)
        commands.append(command)
    return commands


def device_command(minutes: float, parts: Sequence[str]) -> str:
    """The one command a device call runs: install the carried wheels, then the check with its budget."""
    chosen = "" if list(parts) == list(PART_NAMES) else f" --parts {','.join(parts)}"
    return (
        f"python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target {SITE} "
        f"{WHEELS}/*.whl && export PYTHONPATH={SITE} && scripts/gpu-check --minutes {minutes:g}{chosen} "
        f"--source-root {SOURCES} --copy-to $OUT"
    )


def schedule(parts: Sequence[str], minutes: float) -> list[tuple[Part, bool]]:
    """(part, planned to start) in order: a part starts where its planned minutes fit what the ones before left."""
    left = minutes - SETUP_MINUTES
    planned = []
    for part in PARTS:
        if part.name not in parts:
            continue
        fits = part.minutes <= left
        left -= part.minutes if fits else 0
        planned.append((part, fits))
    return planned


def unpacked_wheels(folder: Path) -> list[str]:
    """The carried packages with no wheel in ``folder`` (a pack made before the list grew)."""
    names = [path.name.lower() for path in folder.glob("*.whl")]
    return [name for name in CARRIED_WHEELS if not any(n.startswith(name.replace("-", "_") + "-") for n in names)]


def dry_run(minutes: float, parts: Sequence[str]) -> list[str]:
    """The device call, what it carries and the planned minutes of each part, as lines to print."""
    carried = (
        f"{CARRY} ({size_mb(CARRY):.1f} MB)" if CARRY.is_dir() else f"{CARRY}: MISSING, run scripts/gpu-check --pack"
    )
    if CARRY.is_dir() and (lacking := unpacked_wheels(WHEELS)):
        carried += f"; no wheel of {', '.join(lacking)}: run scripts/gpu-check --pack"
    lines = [
        f"the device call (timeout_s {int(minutes * 60) + 90}: the budget, then the last part's grace and the copy):",
        f"  carry: [{str(CARRY)!r}]  = {carried}",
        f"  command: {device_command(minutes, parts)}",
        f"the plan, {minutes:g} minutes: {SETUP_MINUTES:g} min preflight, environment and data, then",
    ]
    if CARRY.is_dir():
        wheels = sorted(p.name for p in WHEELS.glob("*.whl"))
        lines.insert(2, f"    wheels: {', '.join(wheels) or 'none'}")
        lines.insert(3, f"    data: {', '.join(sorted(p.name for p in SOURCES.rglob('*.gz'))) or 'none'}")
    width = max((len(part) for part in parts), default=10)
    for part, fits in schedule(parts, minutes):
        mark = "runs" if fits else "left for the next call"
        lines.append(f"  {part.name:<{width}} {part.minutes:>4.1f} min  {mark}: {part.what}")
        lines += [f"      $ {shlex.join(cmd)}" for cmd in part_commands(part, "python3", Path("OUT"), ())]
    return lines
