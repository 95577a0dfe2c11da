"""scripts/gpu-check runs only where CUDA is, and a GPU comes rarely: these keep it runnable from a CPU.

Every bench the check starts must be one the bench accepts and every run of it one that fit would build
(stages, --set and --sweep keys, their values, the batch limits), or the GPU session that finally runs it
loses that part to a typo; its plan must fit its budget, in order; and without CUDA it must say so in one
line, write nothing and exit 2.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import CONFIGS, REPO, stage_marks
from lightning.pytorch.callbacks import ModelSummary

from mnistperf import gpu_preflight
from mnistperf.bench.plans import plan_runs
from mnistperf.bench.runner import parse_args
from mnistperf.data.ingest import sources
from mnistperf.gpu_check.command import main as check_main
from mnistperf.gpu_check.plan import PARTS, SETUP_MINUTES, part_commands, schedule
from mnistperf.gpu_check.probes import timer_cost_of
from mnistperf.gpu_check.run import run_part
from mnistperf.install_check import litdata_install
from mnistperf.lightning_cli.mnistperf_cli import parse_fit_config

SCRIPT = REPO / "scripts" / "gpu-check"
RUNNER_ONLY = ("--bare-lightning", "--loader-only")  # the reference rows module's own flags, not fit's


def check_benches() -> list[list[str]]:
    """The arguments of every bench the check runs, with nothing dropped by the preflight."""
    benches = []
    for part in PARTS:
        for command in part_commands(part, "python3", Path("OUT"), ()):
            if command[1:4] == ["-m", "mnistperf", "bench"]:
                benches.append(command[4:])
    return benches


def test_the_parts_are_the_preflights_in_its_order():
    assert tuple(part.name for part in PARTS) == gpu_preflight.PARTS


def test_the_check_runs_every_stage_config():
    """A new stage gets its GPU figures too: every config in configs/ is in one of the check's benches."""
    run = {stage for bench in check_benches() for stage in bench[bench.index("--stages") + 1].split(",")}
    assert run == {path.stem for path in CONFIGS.glob("*.yaml")}


def bench_stages() -> list:
    """Each stage of each bench the check runs, as test parameters (bench, stage), marked as its config needs."""
    return [
        pytest.param(bench, stage, id=f"{bench[bench.index('--out') + 1]}:{stage}", marks=stage_marks(stage))
        for bench in check_benches()
        for stage in bench[bench.index("--stages") + 1].split(",")
    ]


@pytest.mark.parametrize(("bench", "stage"), bench_stages())
def test_every_run_of_the_check_is_one_fit_would_build(bench, stage):
    """Each planned run's fit options, read as fit reads them (the trainer, model and data built, nothing run)."""
    opts = parse_args([*bench, "--config-dir", str(CONFIGS)])
    plans = [plan for plan in plan_runs(opts) if plan.config.stem == stage]
    assert plans, bench
    seen = set()
    for plan in plans:
        args = ("--config", str(plan.config), *(a for a in plan.args if a not in RUNNER_ONLY))
        if args in seen:  # a stage's bare-Lightning and plain-PyTorch rows read the same options
            continue
        seen.add(args)
        cli = parse_fit_config(args)
        cli.before_fit()  # the checks fit makes before training (batches per step, limits of 0)
        options = [a for a in args[2:] if a not in RUNNER_ONLY]
        for key, value in zip(options[::2], options[1::2], strict=True):
            assert built(cli, key) == yaml.safe_load(value), (stage, key, value)
        config = yaml.safe_load(plan.config.read_text())
        assert cli.datamodule.hparams["pipeline"] == config["data"]["pipeline"]  # the stage's own data, built


def built(cli, key: str):
    """What the fit ``cli`` built holds for the option ``--key`` (``trainer.max_epochs``, ``data.drop_last``, ...)."""
    section, name = key.removeprefix("--").split(".")
    if section == "trainer":
        if name == "enable_progress_bar":
            return cli.trainer.progress_bar_callback is not None
        if name == "enable_model_summary":
            return any(isinstance(callback, ModelSummary) for callback in cli.trainer.callbacks)
        return getattr(cli.trainer, name)
    return {"model": cli.model, "data": cli.datamodule}[section].hparams[name]


def test_the_timer_arm_without_the_timer_has_no_callback():
    cli = parse_fit_config(("--config", str(CONFIGS / "v2_pinned.yaml"), "--trainer.callbacks=[]"))
    assert not any(type(c).__name__ == "EpochTimer" for c in cli.trainer.callbacks)


def test_a_preflight_drop_leaves_the_stage_out_of_its_bench():
    [streams] = [part for part in PARTS if part.name == gpu_preflight.STAGED_PART]
    [command] = part_commands(streams, "py", Path("OUT"), ("streaming_litdata",))
    assert command[command.index("--stages") + 1] == "v2_pinned,streaming"


def test_the_plan_starts_parts_in_order_only_where_they_fit():
    planned = schedule(gpu_preflight.PARTS, 8.0)
    assert [part.name for part, _ in planned] == list(gpu_preflight.PARTS)
    left = 8.0 - SETUP_MINUTES
    for part, fits in planned:
        assert fits == (part.minutes <= left)
        left -= part.minutes if fits else 0
    assert planned[0][1] and not all(fits for _, fits in planned)


def test_a_first_call_of_8_minutes_runs_what_no_gpu_has_measured_first_and_leaves_the_probe():
    """What a GPU is wanted for first comes first: the streams, the CUDA-only tests, the diagnosis's cost and its
    syncs; the probe and the parts that settle or widen a figure wait for a later call."""
    names = [part.name for part in PARTS]
    assert names[:5] == ["streams", "tests", "timer", "diagnosis", "probe"]
    ran = [part.name for part, fits in schedule(gpu_preflight.PARTS, 8.0) if fits]
    assert ran[:4] == ["streams", "tests", "timer", "diagnosis"] and "probe" not in ran
    assert "graph-compiled" in ran  # v4_graphed compiled before capture, beside it as it is


def test_the_probe_part_counts_the_step_s_floor_before_its_variants_into_the_same_folder():
    [probe] = [part for part in PARTS if part.name == "probe"]
    floor, variants = part_commands(probe, "py", Path("OUT"), ())
    assert floor == ["py", "-m", "mnistperf.bench.step_floor", "OUT/probe"]
    assert variants == ["py", "-m", "mnistperf.bench.graph_probe", "OUT/probe"]


def test_the_dry_run_names_the_call_its_carry_and_every_part(capsys):
    assert check_main(["--dry-run", "--minutes", "5", "--parts", "fast,tests"]) == 0
    text = capsys.readouterr().out
    assert "carry: ['.gpu-carry']" in text and "--minutes 5 --parts fast,tests" in text
    lines = text.splitlines()
    rows = [(at, line) for at, line in enumerate(lines) if line.startswith("  ") and " min " in line]
    assert [line.split()[0] for _, line in rows] == ["tests", "fast"]  # in the plan's order, whatever the order asked
    assert "(timeout_s " in text and "carry: ['.gpu-carry']  = .gpu-carry: " in text  # the call's limit, the carry
    (_, tests), (_, fast) = rows
    assert " min  runs: " in tests and " min  left for the next call: " in fast  # 6 minutes do not fit in 5
    assert all(lines[at + 1].startswith("      $ python3 -m ") for at, _ in rows)  # each part's commands


def test_a_pack_made_before_a_package_joined_the_carried_ones_is_named(tmp_path):
    from mnistperf.gpu_check.pack import CARRIED_WHEELS
    from mnistperf.gpu_check.plan import unpacked_wheels

    for name in CARRIED_WHEELS[1:]:
        (tmp_path / f"{name.replace('-', '_')}-1.0-py3-none-any.whl").touch()
    (tmp_path / f"{CARRIED_WHEELS[0]}_extra-1.0-py3-none-any.whl").touch()  # another package sharing its prefix
    assert unpacked_wheels(tmp_path) == [CARRIED_WHEELS[0]]
    (tmp_path / f"{CARRIED_WHEELS[0]}-1.0-py3-none-any.whl").touch()
    assert unpacked_wheels(tmp_path) == []


def test_a_part_started_from_a_check_that_ignores_interrupts_can_still_be_interrupted(tmp_path):
    """A check run in the background ignores SIGINT, and a part would inherit that: its time limit interrupts it."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        test_a_part_that_runs_past_its_time_is_interrupted_and_keeps_its_output(tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_part_that_runs_past_its_time_is_interrupted_and_keeps_its_output(tmp_path):
    script = "\n".join(
        ["import time", "try:", "    print('started', flush=True)", "    time.sleep(60)", "except KeyboardInterrupt:"]
    )
    script += "\n    print('kept')"
    with open(tmp_path / "log", "w") as log:
        status = run_part([sys.executable, "-c", script], time.monotonic() + 3, log)  # started well within it
    assert status == "cut at its time limit"
    assert (tmp_path / "log").read_text().splitlines()[-2:] == ["started", "kept"]


@pytest.mark.parametrize(
    ("argv", "named"), [(["--parts", "fast,fastt"], "--parts fastt"), (["--minutes", "0"], "--minutes 0")]
)
def test_a_wrong_option_is_named(argv, named, capsys):
    with pytest.raises(SystemExit) as ended:
        check_main([*argv, "--dry-run"])
    assert ended.value.code == 2 and named in capsys.readouterr().err


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
@pytest.mark.parametrize("run", ["in this process", pytest.param("as the script runs it", marks=pytest.mark.slow)])
def test_a_failing_compile_skips_only_what_compiles_and_says_how_to_fix_it(
    fake_cuda_python, source_root, monkeypatch, capsys, run
):
    if run == "in this process":
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "Test GPU")
        status, err, out = preflight(capsys, "--source-root", str(source_root))
    else:
        done = subprocess.run(
            [fake_cuda_python, "-m", "mnistperf.gpu_preflight", "--source-root", str(source_root)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        )
        status, err, out = done.returncode, done.stderr.splitlines(), done.stdout
    assert status == 1, err
    [line] = [line for line in err if "torch.compile" in line]
    assert line.startswith("gpu-check: torch.compile cannot build a kernel on the GPU")
    assert "C compiler" in line and "python3" in line
    assert line.endswith("Skipped: part compiled, part graph-compiled, part modes.")
    runnable = out.split()[0].split(",")
    assert not {"compiled", "graph-compiled"} & set(runnable) and {"fast", "tests", "graph", "v1"} <= set(runnable)


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
    assert line.endswith("Skipped: part fast, part v1, part graph.")


def test_data_files_offline_are_enough(tmp_path, monkeypatch, capsys, source_root):
    monkeypatch.setattr(gpu_preflight, "DATA_DIR", tmp_path / "data")
    status, lines, plan = preflight(capsys, "--parts", "graph,v1", "--source-root", str(source_root))
    assert (status, lines, plan) == (0, [], "graph,v1 -")


def test_a_source_root_that_is_not_there_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gpu_preflight, "DATA_DIR", tmp_path / "data")
    status, lines, plan = preflight(capsys, "--parts", "tests,graph", "--source-root", str(tmp_path / "nowhere"))
    assert status == 1 and plan == "tests -"
    assert f"--source-root {tmp_path / 'nowhere'}: no such folder" in lines[0]


def test_without_litdata_the_streams_bench_runs_without_its_stage(tmp_path, monkeypatch, capsys, source_root):
    monkeypatch.setattr(gpu_preflight, "DATA_DIR", tmp_path / "data")
    monkeypatch.setitem(sys.modules, "litdata", None)  # import litdata raises ImportError
    status, lines, plan = preflight(capsys, "--parts", "streams", "--source-root", str(source_root))
    assert status == 1 and plan == "streams streaming_litdata"
    [line] = lines
    assert litdata_install() in line and line.endswith("Skipped: stage streaming_litdata of streams.")


def test_without_jsonargparse_nothing_runs(monkeypatch, capsys):
    monkeypatch.setattr("lightning.pytorch.cli._JSONARGPARSE_SIGNATURES_AVAILABLE", "")
    status, lines, plan = preflight(capsys, "--parts", "tests,v1")
    assert status == 2 and plan == "- -"
    assert "pip install 'jsonargparse[signatures]'" in lines[0] and lines[0].endswith("Skipped: part tests, part v1.")
    assert lines[-1] == "gpu-check: nothing asked for can run here; fix the lines above first."


def test_a_part_that_does_not_exist_is_named(capsys):
    status, lines, _ = preflight(capsys, "--parts", "tests,fastt")
    assert status == 2 and lines == [
        f"gpu-check: --parts fastt: no such part; choose from {','.join(gpu_preflight.PARTS)}."
    ]


def test_the_graph_probe_keeps_each_variant_as_it_finishes(tmp_path, monkeypatch):
    """A probe cut at its time limit keeps the variants it measured, in probe.md and probe.json, with their ratio."""
    from types import SimpleNamespace

    from mnistperf.bench import graph_probe

    names = list(graph_probe.VARIANTS)
    assert names[:3] == ["step", "step, cudnn.benchmark", graph_probe.REFERENCE]  # what tells most comes first
    timings = {"step": 1.2, "step, cudnn.benchmark": 0.66, graph_probe.REFERENCE: 0.6}

    def fake_run(command, **kwargs):
        name = command[-1]
        if name not in timings:
            raise KeyboardInterrupt  # the part's time limit, during the fourth variant
        row = {"variant": name, "ms_per_replay": timings[name], "ms_per_replay_range": [0.5, 1.3],
               "kernels_per_replay": 80, "top_kernels": [{"kernel": "cudnn_conv", "us_per_replay": 9.0, "calls": 20}],
               "device": "a GPU"}  # fmt: skip
        return SimpleNamespace(returncode=0, stdout=json.dumps(row) + "\n", stderr="")

    monkeypatch.setattr(graph_probe.subprocess, "run", fake_run)
    with pytest.raises(KeyboardInterrupt):
        graph_probe.run_all(tmp_path)
    kept = json.loads((tmp_path / "probe.json").read_text())
    assert [row["variant"] for row in kept] == names[:3]
    table = (tmp_path / "probe.md").read_text()
    assert "| step | 1.200 | 0.500-1.300 | 2.00x | 80 |" in table
    assert "| step, cudnn.benchmark | 0.660 | 0.500-1.300 | 1.10x | 80 |" in table
    assert "`cudnn_conv` | 9.0 | 20 |" in table


def test_the_timer_cost_keeps_what_each_diagnosed_fit_read(tmp_path):
    """A fit's cost is only worth its answer: the ratios come with each diagnosed fit's verdict and window."""
    writes = (
        "import json, pathlib, sys\n"
        "if '--with' in sys.argv:\n"
        "    folder = pathlib.Path(sys.argv[1], f'run-{len(list(pathlib.Path(sys.argv[1]).iterdir()))}')\n"
        "    folder.mkdir()\n"
        "    read = {'verdict': 'overhead-bound', 'busy_window': {'device': 'cuda', 'share': 0.3}}\n"
        "    (folder / 'timing.json').write_text(json.dumps(read))\n"
    )
    target = tmp_path / "cost.json"
    timer_cost_of(
        target, 2, [sys.executable, "-c", writes, "{out}"], {"with": ["--with"], "without": []}, "a stand-in fit"
    )
    result = json.loads(target.read_text())
    assert len(result["ratios"]) == 2
    each = {"verdict": "overhead-bound", "share": 0.3, "reason": None}
    assert result["answers"] == [{"file": "run-0/timing.json", **each}, {"file": "run-1/timing.json", **each}]


def test_the_check_runs_what_fits_cuts_what_overruns_names_the_rest_and_archives_the_small_files(
    tmp_path, monkeypatch, capsys
):
    """Three stub parts in a minute's budget: one done, one cut at 1.5 times its plan, one too long to start; each
    status in parts.md and parts.json, the command for the rest printed, and the archive without the bulky files."""
    import argparse
    import tarfile

    from mnistperf.gpu_check import run as check_run
    from mnistperf.gpu_check.plan import Part

    commands = {
        "quick": [sys.executable, "-c", "import pathlib, sys; pathlib.Path(sys.argv[1], 'a.pt.trace.json').touch()"],
        "slow": [sys.executable, "-c", "import time; time.sleep(60)"],
        "long": [sys.executable, "-c", "pass"],
    }
    parts = [Part("quick", 0.1, "writes a trace", ()), Part("slow", 0.02, "sleeps", ()), Part("long", 90, "x", ())]
    monkeypatch.setattr(check_run, "PARTS", parts)
    monkeypatch.setattr(check_run.gpu_preflight, "plan", lambda asked, root: (asked, [], []))
    monkeypatch.setattr(check_run, "environment", lambda: "device: Test GPU\n")
    monkeypatch.setattr(
        check_run, "part_commands", lambda part, python, out, dropped: [[*commands[part.name], str(out)]]
    )
    out, back = tmp_path / "out", tmp_path / "back"
    opts = argparse.Namespace(minutes=1.0, parts="quick,slow,long", source_root=None, out=out, copy_to=str(back))
    assert check_run.check(opts) == 1  # parts left over
    statuses = {r["part"]: r["status"] for r in json.loads((out / "parts.json").read_text())["parts"]}
    assert statuses["quick"] == "done" and statuses["slow"] == "cut at its time limit", statuses
    assert statuses["long"].startswith("not started: 90 min planned, ") and statuses["long"].endswith(" left")
    assert "| slow | 0.02 |" in (out / "parts.md").read_text()
    printed = capsys.readouterr().out
    assert "gpu-check: the rest, in a later call: scripts/gpu-check --parts slow,long --minutes N" in printed
    with tarfile.open(back / "results.tar.gz") as archive:
        names = archive.getnames()
    assert "out/parts.md" in names and not any(name.endswith(".pt.trace.json") for name in names)
    assert (out / "a.pt.trace.json").exists() and (back / "parts.md").exists()


def test_a_pack_without_the_official_files_names_the_one_missing_and_writes_nothing(tmp_path, monkeypatch):
    from mnistperf.gpu_check import pack

    monkeypatch.setattr(pack, "SOURCES", tmp_path / "carry" / "datasets")
    monkeypatch.setattr(pack, "WHEELS", tmp_path / "carry" / "wheels")
    with pytest.raises(SystemExit) as refused:
        pack.pack(tmp_path / "nowhere")
    assert str(refused.value).startswith(f"gpu-check --pack: {tmp_path / 'nowhere' / 'fashion-mnist'}/")
    assert str(refused.value).endswith("(e.g. --source-root ../shared/datasets).")
    assert not (tmp_path / "carry").exists()
