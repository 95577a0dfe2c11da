"""scripts/gpu-check runs only where CUDA is, and a GPU comes rarely: these keep it runnable from a CPU.

Every bench the script starts must be one the bench accepts and every run of it one that fit would
build (stages, --set and --sweep keys, their values, the batch limits), or the GPU session that
finally runs it loses that part to a typo; its shell must parse; and without CUDA it must say so in
one line, write nothing and exit 2.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest
import torch
from conftest import CONFIGS, REPO

from mnistperf.bench.runner import parse_args, plan_runs
from mnistperf.fit_config import parse_fit_config

SCRIPT = REPO / "scripts" / "gpu-check"
BENCH = '"$py" -m mnistperf bench'
RUNNER_ONLY = ("--bare-lightning", "--loader-only")  # the baseline module's own flags, not fit's


def script_benches() -> list[list[str]]:
    """The arguments of every bench the script runs, as the shell would pass them ($out named OUT)."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    benches = []
    for line in text.splitlines():
        if BENCH in line:
            arguments = line.split(BENCH, 1)[1].split("||")[0].replace("$out", "OUT")
            benches.append(shlex.split(arguments))
    return benches


def test_the_script_is_valid_shell_and_runs_every_part():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    text = SCRIPT.read_text()
    default_parts = text.split('parts="', 1)[1].split('"', 1)[0].split(",")
    assert default_parts == ["tests", "fast", "graph", "compiled", "v1"]
    assert all(f"if wants {part}; then" in text for part in default_parts)
    assert len(script_benches()) == 5  # fast, graph, compiled and the two v1 benches


def test_the_script_runs_every_stage_config():
    """A new stage gets its GPU figures too: every config in configs/ is in one of the script's benches."""
    run = {stage for bench in script_benches() for stage in bench[bench.index("--stages") + 1].split(",")}
    assert run == {path.stem for path in CONFIGS.glob("*.yaml")}


@pytest.mark.parametrize("bench", script_benches(), ids=lambda args: args[args.index("--out") + 1])
def test_every_run_of_the_script_is_one_fit_would_build(bench):
    """Each planned run's fit options, read as fit reads them (the trainer, model and data built, nothing run)."""
    opts = parse_args([*bench, "--config-dir", str(CONFIGS)])
    plans = plan_runs(opts)
    assert plans, bench
    seen = set()
    for plan in plans:
        args = ("--config", str(plan.config), *(a for a in plan.args if a not in RUNNER_ONLY))
        if args in seen:  # a stage's bare-Lightning and plain-PyTorch rows read the same options
            continue
        seen.add(args)
        cli = parse_fit_config(args)
        cli.before_fit()  # the checks fit makes before training (batches per step, limits of 0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_it_says_so_writes_nothing_and_exits_2(tmp_path):
    out = tmp_path / "results"
    done = subprocess.run(["bash", str(SCRIPT), str(out)], capture_output=True, text=True,
                          env={**os.environ, "PYTHON": sys.executable})
    assert done.returncode == 2
    assert done.stderr.strip() == "gpu-check: no CUDA device here; run it on a machine with an NVIDIA GPU."
    assert not out.exists()


def test_a_missing_interpreter_is_named(tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "results")], capture_output=True, text=True,
                          env={**os.environ, "PYTHON": "no-such-python"})
    assert done.returncode == 2
    assert "no Python 'no-such-python' here; set PYTHON" in done.stderr
