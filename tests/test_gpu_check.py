"""scripts/gpu-check runs only where CUDA is, and a GPU comes rarely: these keep it runnable from a CPU.

Every bench the script starts must be one the bench accepts and every run of it one that fit would
build (stages, --set and --sweep keys, their values, the batch limits), or the GPU session that
finally runs it loses that part to a typo; its shell must parse; and without CUDA it must say so in
one line, write nothing and exit 2.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import CONFIGS, REPO

from mnistperf import gpu_preflight
from mnistperf.bench.runner import parse_args, plan_runs
from mnistperf.data.ingest import sources
from mnistperf.lightning_cli import parse_fit_config

SCRIPT = REPO / "scripts" / "gpu-check"
BENCH = '"$py" -m mnistperf bench'
RUNNER_ONLY = ("--bare-lightning", "--loader-only")  # the reference rows module's own flags, not fit's


def script_benches() -> list[list[str]]:
    """The arguments of every bench the script runs, as the shell would pass them ($out named OUT, the fast
    bench's stages all of them, as when the preflight drops none)."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    fast_stages = re.search(r"^fast_stages=(\S+)$", text, re.MULTILINE).group(1)
    benches = []
    for line in text.splitlines():
        if BENCH in line:
            arguments = (
                line.split(BENCH, 1)[1].split("||")[0].replace("$out", "OUT").replace("$fast_stages", fast_stages)
            )
            benches.append(shlex.split(arguments))
    return benches


def test_the_script_is_valid_shell_with_five_benches():
    """Its shell parses; which parts run by default is read from its own preflight line (below), not its text."""
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
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
    done = subprocess.run(
        ["bash", str(SCRIPT), str(out)], capture_output=True, text=True, env={**os.environ, "PYTHON": sys.executable}
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "gpu-check: no CUDA device here; run it on a machine with an NVIDIA GPU."
    assert not out.exists()


def test_a_missing_interpreter_is_named(tmp_path):
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "results")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": "no-such-python"},
    )
    assert done.returncode == 2
    assert "no Python 'no-such-python' here; set PYTHON" in done.stderr


# ---------------------------------------------------------------- the preflight
FAKE_CUDA = """import runpy, sys, torch
torch.cuda.is_available = lambda: True  # the script's own checks pass; anything that runs on the GPU fails
torch.cuda.get_device_name = lambda *args: "Test GPU"
flag, target, *rest = sys.argv[1:]
sys.argv = [target, *rest]
if flag == "-m":
    runpy.run_module(target, run_name="__main__", alter_sys=True)
else:
    exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
"""


@pytest.fixture
def fake_cuda_python(tmp_path) -> str:
    """An interpreter that reports a CUDA device it does not have (for -c and -m, as the script calls it)."""
    wrapper = tmp_path / "python-with-fake-cuda"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -c {shlex.quote(FAKE_CUDA)} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.fixture
def source_root(tmp_path) -> Path:
    """A --source-root holding every official FashionMNIST file name (the preflight looks, prepare verifies)."""
    folder = tmp_path / "sources" / "fashion-mnist"
    folder.mkdir(parents=True)
    for pair in sources.DATASETS["fashion_mnist"].splits.values():
        for raw in pair:
            (folder / raw.name).write_bytes(b"")
    return folder.parent


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine where torch.compile cannot reach a GPU")
def test_a_failing_compile_skips_only_what_compiles_and_says_how_to_fix_it(tmp_path, fake_cuda_python, source_root):
    out = tmp_path / "results"
    done = subprocess.run(
        ["bash", str(SCRIPT), str(out), "--preflight", "--source-root", str(source_root)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": fake_cuda_python},
    )
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("gpu-check: torch.compile cannot build a kernel on the GPU")
    assert (
        "C compiler" in line
        and "python3" in line
        and line.endswith("Skipped: part compiled, stage v3_compiled of fast.")
    )
    assert done.stdout.strip().splitlines()[-1] == "gpu-check: runs tests, fast, graph, v1 (fast without v3_compiled)"
    assert not out.exists()


def preflight(capsys, *args: str) -> tuple[int, list[str], str]:
    """The preflight in-process: (exit status, its stderr lines, its plan for the script)."""
    status = gpu_preflight.main(list(args))
    captured = capsys.readouterr()
    return status, captured.err.strip().splitlines(), captured.out.strip()


def test_without_data_or_its_files_only_the_tests_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gpu_preflight, "DATA_DIR", tmp_path / "data")
    monkeypatch.setattr(sources, "SYSTEM_DATASETS_DIR", tmp_path / "system")
    monkeypatch.delenv(sources.SOURCE_ROOT_ENV, raising=False)
    status, lines, plan = preflight(capsys, "--parts", "tests,fast,graph,v1")
    assert status == 1 and plan == "tests -"
    [line] = lines
    assert "no FashionMNIST in" in line and "--source-root DIR" in line
    assert line.endswith("Skipped: part fast, part graph, part v1.")


def test_data_files_offline_are_enough(tmp_path, monkeypatch, capsys, source_root):
    monkeypatch.setattr(gpu_preflight, "DATA_DIR", tmp_path / "data")
    status, lines, plan = preflight(capsys, "--parts", "graph,v1", "--source-root", str(source_root))
    assert (status, lines, plan) == (0, [], "graph,v1 -")


def test_a_source_root_that_is_not_there_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gpu_preflight, "DATA_DIR", tmp_path / "data")
    status, lines, plan = preflight(capsys, "--parts", "tests,graph", "--source-root", str(tmp_path / "nowhere"))
    assert status == 1 and plan == "tests -"
    assert f"--source-root {tmp_path / 'nowhere'}: no such folder" in lines[0]


def test_without_litdata_the_fast_bench_runs_without_its_stage(tmp_path, monkeypatch, capsys, source_root):
    monkeypatch.setattr(gpu_preflight, "DATA_DIR", tmp_path / "data")
    monkeypatch.setitem(sys.modules, "litdata", None)  # import litdata raises ImportError
    status, lines, plan = preflight(capsys, "--parts", "fast", "--source-root", str(source_root))
    if torch.cuda.is_available():  # the compile probe passes on a working GPU
        assert status == 1 and plan == "fast streaming_litdata"
    [line] = [line for line in lines if "litdata" in line]
    assert "pip install 'mnistperf[litdata]'" in line and line.endswith("Skipped: stage streaming_litdata of fast.")


def test_without_jsonargparse_nothing_runs(monkeypatch, capsys):
    monkeypatch.setattr("lightning.pytorch.cli._JSONARGPARSE_SIGNATURES_AVAILABLE", "")
    status, lines, plan = preflight(capsys, "--parts", "tests,v1")
    assert status == 2 and plan == "- -"
    assert "pip install 'jsonargparse[signatures]'" in lines[0] and lines[0].endswith("Skipped: part tests, part v1.")
    assert lines[-1] == "gpu-check: nothing asked for can run here; fix the lines above first."


def test_a_part_that_does_not_exist_is_named(capsys):
    status, lines, _ = preflight(capsys, "--parts", "tests,fastt")
    assert status == 2 and lines == [
        "gpu-check: --parts fastt: no such part; choose from tests,fast,graph,compiled,v1."
    ]
