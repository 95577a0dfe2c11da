"""What ``scripts/gpu-check`` needs, checked in seconds before it spends minutes on a GPU.

Each missing piece is one line on stderr naming its fix, and costs only the parts (and the
benches' stages) that need it; the rest still run. On stdout: the parts that can run and the stages to
leave out of their benches, as two comma-separated words (``-`` for none).
Exit status: 0 when everything asked for can run, 1 when some of it cannot, 2 when nothing can.

    python -m mnistperf.gpu_preflight --parts fast,tests,... [--source-root DIR]
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mnistperf.install_check import litdata_install

PARTS = (
    "streams",
    "tests",
    "timer",
    "diagnosis",
    "probe",
    "graph-compiled",
    "fast",
    "resident",
    "compiled",
    "graph",
    "modes",
    "v1",
)  # gpu_check's
# the parts that train on FashionMNIST
DATA_PARTS = ("fast", "resident", "compiled", "v1", "streams", "timer", "graph", "graph-compiled", "modes")
STAGED_PART = "streams"  # the part whose bench can run without a stage whose library is missing
DATA_DIR = Path("data")
DATASET = "fashion_mnist"


@dataclass(frozen=True)
class Need:
    """One thing the check needs, the parts and bench stages that need it, and how to look for it.

    Args:
        name: what it is, for the summary line.
        parts: the parts that cannot run without it.
        stages: the stages of a bench that cannot run without it (the rest of that bench still can).
        problem: None when present, else the one line naming what is missing and its fix.
    """

    name: str
    parts: tuple[str, ...]
    stages: tuple[str, ...]
    problem: Callable[[str | None], str | None]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:160]}" if text else type(exc).__name__


def jsonargparse_problem(source_root: str | None) -> str | None:
    """None when LightningCLI can read signatures, else the line saying what to install."""
    from mnistperf.upstream import jsonargparse_signatures_available

    available = jsonargparse_signatures_available()
    if available:
        return None
    return (
        f"LightningCLI cannot run ({available}); every part trains through it: pip install 'jsonargparse[signatures]'"
    )


def import_problem(module: str, install: str) -> Callable[[str | None], str | None]:
    """A check that is None when ``module`` imports, else the line saying what to install (``install``)."""

    def problem(source_root: str | None) -> str | None:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return f"{module} does not import ({_first_line(exc)}): {install}"
        return None

    return problem


def compile_problem(source_root: str | None) -> str | None:
    """None when torch.compile builds and runs a kernel on the GPU, else the line saying what it lacks."""
    import torch

    try:
        torch.compile(lambda x: torch.sin(x) + 1)(torch.ones(8, device="cuda"))
        torch.cuda.synchronize()
    except Exception as exc:  # a missing compiler or header surfaces as whatever Triton's build raises
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        return (
            f"torch.compile cannot build a kernel on the GPU ({_first_line(exc)}); Triton needs a C compiler "
            f"and Python's headers: apt-get install gcc python{version}-dev (or set CC to a compiler)"
        )
    return None


def data_problem(source_root: str | None) -> str | None:
    """None when FashionMNIST can be prepared without the network, else the line saying where to put it.

    That is when it is prepared in data/ already, or when its official files lie where prepare looks first
    (``--source-root``, the system's datasets folder, an earlier download).
    """
    from mnistperf.data.ingest import prepare, sources
    from mnistperf.errors import DataError

    if all(prepare.is_ready(prepare.split_path(DATA_DIR, DATASET, split)) for split in prepare.SPLITS):
        return None
    spec = sources.DATASETS[DATASET]
    try:
        folders = sources.candidate_dirs(spec, source_root, DATA_DIR / spec.folder / "raw", option="--source-root")
    except DataError as exc:
        return str(exc)
    names = [raw.name for raw in spec.raw_files]
    missing = [name for name in names if not any((folder / name).is_file() for folder in folders)]
    if not missing:
        return None
    return (
        f"no {spec.folder} in {DATA_DIR}/ and {missing[0]} not in {', '.join(map(str, folders))}: pass "
        f"--source-root DIR (the folder holding {spec.source_folder}/ with the official .gz files), or copy "
        f"{DATA_DIR}/{spec.folder}/ from a machine where `python -m mnistperf prepare` ran"
    )


NEEDS = (
    Need("jsonargparse", tuple(p for p in PARTS if p != "probe"), (), jsonargparse_problem),  # the probe has no CLI
    Need("pytest", ("tests",), (), import_problem("pytest", "pip install pytest")),
    Need("data", DATA_PARTS, (), data_problem),
    Need("torch.compile", ("compiled", "graph-compiled", "modes"), (), compile_problem),
    Need("litdata", (), ("streaming_litdata",), import_problem("litdata", litdata_install())),
)


def plan(
    parts: Sequence[str], source_root: str | None = None, needs: Sequence[Need] = NEEDS
) -> tuple[list[str], list[str], list[str]]:
    """(parts that can run, bench stages to leave out, one line per missing piece).

    A piece no asked part needs is not looked for.
    """
    runnable, dropped, lines = list(parts), list[str](), list[str]()
    for need in needs:
        wanted = [part for part in need.parts if part in runnable]
        if not wanted and not (need.stages and STAGED_PART in runnable):
            continue
        problem = need.problem(source_root)
        if problem is None:
            continue
        runnable = [part for part in runnable if part not in need.parts]
        staged = need.stages if STAGED_PART in runnable else ()
        dropped += staged
        cost = ", ".join([*(f"part {p}" for p in wanted), *(f"stage {s} of {STAGED_PART}" for s in staged)])
        lines.append(f"gpu-check: {problem}. Skipped: {cost}.")
    return runnable, dropped, lines


def main(argv: Sequence[str] | None = None) -> int:
    """Check, print the lines and the plan; the exit status (0, 1 or 2) as the module docstring says."""
    parser = argparse.ArgumentParser(prog="python -m mnistperf.gpu_preflight", description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--source-root", default=None)
    opts = parser.parse_args(argv)
    asked = [part for part in opts.parts.split(",") if part]
    unknown = [part for part in asked if part not in PARTS]
    if unknown:
        print(f"gpu-check: --parts {unknown[0]}: no such part; choose from {','.join(PARTS)}.", file=sys.stderr)
        return 2
    runnable, dropped, lines = plan(asked, opts.source_root)
    for line in lines:
        print(line, file=sys.stderr)
    print(",".join(runnable) or "-", ",".join(dropped) or "-")
    if not runnable:
        print("gpu-check: nothing asked for can run here; fix the lines above first.", file=sys.stderr)
        return 2
    return 1 if lines else 0


if __name__ == "__main__":
    raise SystemExit(main())
