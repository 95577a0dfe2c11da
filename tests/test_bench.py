"""The bench: planning, failures and Ctrl-C keep rows, report arithmetic, and one real run on tiny data."""

from __future__ import annotations

import collections
import contextlib
import csv
import io
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from conftest import CONFIGS, NO_WORKERS, fails_in_one_line
from emulated_graphs import EmulatedGraphs

from mnistperf.bench import published, reference_rows, runner
from mnistperf.bench.chart import chart_figure
from mnistperf.bench.columns import Row, table_rows
from mnistperf.bench.memory import TreeMemorySampler
from mnistperf.bench.plans import plan_runs, reference_row_stages
from mnistperf.bench.report import per_step, per_step_table, thresholds, write_all
from mnistperf.cli import main
from mnistperf.diagnosis.record.run import RunSummary
from mnistperf.diagnosis.record.text import format_split


def summary(train: float, evals: float, epochs: int = 2, acc: float = 0.9) -> dict:
    return {
        "avg_train_s": train,
        "avg_eval_s": evals,
        "total_train_s": train * epochs,
        "total_eval_s": evals * epochs,
        "samples_per_s": 1000 / train,
        "input_wait_share": 0.25,
        "final_metric": acc,
        "verdict": "compute-bound",
        "warmup": {"epoch": 1, "train_s": 3 * train, "eval_s": evals},
        "peak_rss_mb": {"main_process": 500.0, "tree_pss": 800.0},
        "device": "cpu (test)",
        "cpu_count": 2,
        "versions": {"torch": "x"},
        "data": {"batch_size": 512, "batches_per_step": 1},
    }


def test_table_speed_up_is_steady_state_epoch_time_against_the_first_row_and_shows_lightning_cost():
    rows = [
        Row("v1_naive", "v1_naive", summaries=[summary(10, 2)]),
        Row("v2_pinned", "v2_pinned", summaries=[summary(1, 0.5), summary(3, 0.5), summary(2, 0.5)]),
        Row("plain PyTorch (v2_pinned)", "v2_pinned", runner="plain", summaries=[summary(1.6, 0.5)]),
        Row("v3_resident", "v3_resident", error="failed (exit 1): boom"),
    ]
    table = table_rows(rows)
    assert table[0]["speed-up"] == "1.0x" and table[1]["speed-up"] == f"{12 / 2.5:.1f}x"  # (train + test) per epoch
    assert table[1]["warm-up train s"] == "6.00" and table[1]["verdict"] == "compute-bound"
    assert table[1]["train s/epoch"] == "2.00 [1.00-3.00]"  # median and min-max over repeats
    assert table[1]["published train s/epoch"] == f"{published.STAGES['v2_pinned'][0]:.2f}"
    assert table[2]["note"] == "stage/plain train time: 1.250x" and table[2]["published train s/epoch"] == ""
    bare = Row("bare Lightning (v2_pinned)", "v2_pinned", runner="bare", summaries=[summary(0.8, 0.0)])
    assert table_rows([*rows, bare])[4]["speed-up"] == "-"  # it validates nothing: no epoch to set beside others
    failed = [rows[3], bare, rows[2]]  # nor is it what the others are set against where its stage's row failed
    assert [row["speed-up"] for row in table_rows(failed)] == ["-", "-", "1.0x"]
    assert table[3]["note"] == "failed (exit 1): boom" and table[3]["train s/epoch"] == "-"
    assert table[1]["input wait"] == "25%" and table[1]["peak MB (main RSS / tree PSS)"] == "500 / 800"
    assert table[0]["samples/s"] == "100" and table[1]["samples/s"] == "500"  # the repeats' median
    assert table_rows([Row("fast", "v2_pinned", summaries=[summary(0.025, 0.1)])])[0]["samples/s"] == "40,000"
    assert table[1]["GPU busy"] == "-"  # a CPU run has no busy share
    gpu = table_rows([Row("v3_resident", "v3_resident", summaries=[{**summary(1, 0.5), "device_busy_share": 0.23}])])
    assert gpu[0]["GPU busy"] == "23%"


def test_bounded_epochs_of_different_batch_sizes_compare_per_sample_and_show_no_published_whole_epochs():
    """Ten batches of 16 against ten of 512: training 3x as long for 32x the samples is 10.7x as fast a sample."""

    def bounded(train: float, samples: int) -> dict:
        return {**summary(train, 0.2), "epochs": [{"samples": samples}] * 2}

    rows = [
        Row("v1_naive", "v1_naive", summaries=[bounded(1.0, 160)]),
        Row("v2_pinned", "v2_pinned", summaries=[bounded(3.0, 5120)]),
    ]
    table = table_rows(rows, {"limit_train_batches": 10})
    assert [row["speed-up"] for row in table] == ["1.0x", f"{(1.0 / 160) / (3.0 / 5120):.1f}x"] == ["1.0x", "10.7x"]
    assert table[1]["published train s/epoch"] == table[1]["published speed-up"] == ""  # whole epochs': not these
    whole = table_rows(
        [Row(r.label, r.stage, summaries=[bounded(s["avg_train_s"], 60_000)]) for r in rows for s in r.summaries]
    )
    assert whole[1]["speed-up"] == f"{1.2 / 3.2:.1f}x" and whole[1]["published train s/epoch"] != ""
    assert len(chart_figure(rows, "cpu", settings={"limit_train_batches": 10}).axes[0].containers) == 1  # measured
    assert len(chart_figure(rows, "cpu").axes[0].containers) == 2  # and the published beside


def test_the_gpu_busy_column_names_the_steps_each_run_profiled_on_cuda_and_no_cpu_window():
    def windowed(device: str, first: int | None, epoch: int = 2) -> dict:
        window = {"device": device, "share": 0.5, "epoch": epoch, "first_step": first, "last_step": (first or 0) + 19}
        return {**summary(1, 0.5), "busy_window": window}

    rows = [
        Row("v2_pinned", "v2_pinned", summaries=[windowed("cuda", 5), windowed("cuda", 5), windowed("cuda", 8, 3)]),
        Row("v3_resident", "v3_resident", summaries=[windowed("cpu", 3), windowed("cuda", None), summary(1, 0.5)]),
    ]
    busy = thresholds(rows)[1]
    assert "profiled over training steps 5-24 of epoch 2, steps 8-27 of epoch 3;" in busy
    assert "not profiled in these runs" in thresholds(rows[1:])[1]  # a CPU window, a CUDA one unread, none


def test_per_step_splits_a_step_into_plain_lightnings_loop_and_the_lab():
    def with_epochs(train: float) -> dict:
        return {
            **summary(train, 0.1),
            "data": {"batch_size": 512},
            "epochs": [{"samples": 60_000}, {"samples": 60_000}, {"samples": 60_000}],
        }

    rows = [
        Row("v2_pinned", "v2_pinned", summaries=[with_epochs(1.18)]),
        Row("bare Lightning (v2_pinned)", "v2_pinned", runner="bare", summaries=[with_epochs(1.06)]),
        Row("plain PyTorch (v2_pinned)", "v2_pinned", runner="plain", summaries=[with_epochs(0.59)]),
    ]
    (found,) = per_step(rows)
    assert found["steps_per_epoch"] == 118  # 117 x 512 + 96
    assert found["plain_step_ms"] == pytest.approx(590 / 118)
    assert found["lightning_loop_adds_ms"] == pytest.approx(470 / 118)
    assert found["lab_adds_ms"] == pytest.approx(120 / 118)
    assert found["stage_over_bare_x"] == pytest.approx(1.18 / 1.06)
    assert found["stage_over_bare_per_repeat"] == []  # one repeat: the ratio above is all there is
    assert table_rows(rows)[1]["note"] == f"stage/bare Lightning train time: {1.18 / 1.06:.3f}x"


def test_the_per_step_table_gives_each_repeats_ratio_where_every_repeat_of_both_rows_ran():
    def repeats(*trains: float) -> list[dict]:
        return [{**summary(t, 0.1), "epochs": [{"samples": 1024}] * 2} for t in trains]

    rows = [
        Row("v2_pinned", "v2_pinned", summaries=repeats(1.0, 1.5)),
        Row("bare Lightning (v2_pinned)", "v2_pinned", runner="bare", summaries=repeats(1.0, 1.0)),
        Row("plain PyTorch (v2_pinned)", "v2_pinned", runner="plain", summaries=repeats(0.5, 0.5)),
    ]
    (found,) = per_step(rows)
    assert found["stage_over_bare_per_repeat"] == [1.0, 1.5] and found["stage_over_bare_x"] == 1.25
    assert per_step_table(rows).splitlines()[-1].endswith("| 1.250x | 1.000x, 1.500x |")
    rows[1].summaries.pop()  # a repeat of the bare row failed: which pairs ran side by side is not known
    assert per_step(rows)[0]["stage_over_bare_per_repeat"] == []


def test_plan_covers_stages_sweeps_and_reference_rows():
    opts = runner.parse_args(
        [
            "--stages",
            "v1_bs512,v2_pinned",
            "--sweep",
            "data.batch_size=16,64",
            "--epochs",
            "2",
            "--config-dir",
            str(CONFIGS),
            "--dataset",
            "mnist",
        ]
    )
    plans = plan_runs(opts)
    assert [p.row.label for p in plans] == [
        "v1_bs512 batch_size=16",
        "v1_bs512 batch_size=64",
        "v2_pinned batch_size=16",
        "v2_pinned batch_size=64",
        "bare Lightning (v2_pinned)",
        "plain PyTorch (v2_pinned)",
    ]
    bare, _ = plans[-2].command(Path("/runs"), "r4")
    assert "mnistperf.bench.reference_rows" in bare and "--bare-lightning" in bare
    command, _ = plans[1].command(Path("/runs"), "r1")
    assert command[command.index("--data.batch_size") + 1] == "64"
    assert command[command.index("--data.dataset") + 1] == "mnist"
    assert command[command.index("--trainer.max_epochs") + 1] == "2"
    plain, _ = plans[-1].command(Path("/runs"), "r5")
    # The plain loop gets the fit command line itself: every override, trainer ones included.
    assert "mnistperf.bench.reference_rows" in plain
    for key, value in (
        ("--data.dataset", "mnist"),
        ("--trainer.max_epochs", "2"),
        ("--config", str(CONFIGS / "v2_pinned.yaml")),
    ):
        assert plain[plain.index(key) + 1] == value
    # --baseline is an alias of --reference-rows, so existing commands keep working.
    assert runner.parse_args(["--baseline", "none"]).reference_rows == "none"


@pytest.mark.parametrize(
    "run,expected",
    [
        (["v2_pinned", "v3_resident", "v3_compiled", "v4_graphed"], ["v2_pinned", "v4_graphed"]),
        (["v2_pinned", "v3_resident"], ["v2_pinned", "v3_resident"]),
        (["v1_naive", "streaming"], ["streaming"]),
    ],
)
def test_auto_reference_rows_are_v2_pinned_and_the_highest_resident_rung(run, expected):
    assert reference_row_stages("auto", run) == expected
    assert reference_row_stages("none", run) == []


def test_set_keeps_a_value_with_commas_whole():
    opts = runner.parse_args(
        [
            "--stages",
            "v2_pinned",
            "--config-dir",
            str(CONFIGS),
            "--reference-rows",
            "none",
            "--set",
            "trainer.devices=[0,1]",
        ]
    )
    command, _ = plan_runs(opts)[0].command(Path("/runs"), "r1")
    assert command[command.index("--trainer.devices") + 1] == "[0,1]"


def test_header_says_what_runs_even_when_set_gives_the_epochs():
    """`--set trainer.max_epochs=2` runs 2 epochs, and the header, the commands and the settings say 2, not 5."""
    opts = runner.parse_args(
        [
            "--stages",
            "v2_pinned",
            "--config-dir",
            str(CONFIGS),
            "--reference-rows",
            "none",
            "--set",
            "trainer.max_epochs=2",
            "--set",
            "trainer.limit_train_batches=7",
            "--set",
            "data.seed=3",
        ]
    )
    plans = plan_runs(opts)
    text = runner.header(opts, plans, Path("out"))
    first, second = text.splitlines()
    assert first.startswith("mnistperf: bench on cpu (")
    assert "1 configuration x 1 repeat, 2 epochs, 7 train batches per epoch; overrides: data.seed=3" in second
    command, _ = plans[0].command(Path("/runs"), "r1")
    assert [command[i + 1] for i, a in enumerate(command) if a == "--trainer.max_epochs"] == ["2"]
    assert (opts.epochs, opts.limit_train_batches) == (2, 7)


def test_a_bounded_bench_trains_the_same_batches_in_every_row_grouped_or_not():
    """--limit-train-batches counts training batches; a stage that takes k per Lightning step gets the whole
    groups that cover them (Lightning's own limit counts what the loader yields: groups)."""
    opts = runner.parse_args(
        [
            "--stages",
            "v2_pinned,v4_graphed",
            "--config-dir",
            str(CONFIGS),
            "--limit-train-batches",
            "40",
            "--sweep",
            "data.batches_per_step=1,16",
        ]
    )
    limits = {plan.row.label: plan.command(Path("/runs"), "r")[0] for plan in plan_runs(opts)}
    limits = {label: command[command.index("--trainer.limit_train_batches") + 1] for label, command in limits.items()}
    assert limits == {
        "v2_pinned batches_per_step=1": "40",
        "v2_pinned batches_per_step=16": "3",
        "v4_graphed batches_per_step=1": "40",
        "v4_graphed batches_per_step=16": "3",
        "bare Lightning (v2_pinned)": "40",
        "plain PyTorch (v2_pinned)": "40",
        "bare Lightning (v4_graphed)": "5",
        "plain PyTorch (v4_graphed)": "5",
    }  # its config's 8
    whole = runner.parse_args(["--stages", "v4_graphed", "--config-dir", str(CONFIGS), "--reference-rows", "none"])
    assert "--trainer.limit_train_batches" not in plan_runs(whole)[0].command(Path("/runs"), "r")[0]


def test_unknown_stage_and_bad_sweep_are_reported_by_name(capsys):
    for argv, expected in (
        (["--stages", "v9_magic"], "--stages: no config"),
        (["--sweep", "data.batch_size"], "--sweep 'data.batch_size': expected KEY=V1,V2"),
        (["--set", "data.num_workers"], "--set 'data.num_workers': expected KEY=VALUE"),
    ):
        fails_in_one_line(capsys, ["bench", "--config-dir", str(CONFIGS), *argv], expected)


def fake_runs(monkeypatch, outcomes):
    """Replace the child process: each call takes the next outcome ('ok', 'fail' or 'interrupt')."""
    calls = iter(outcomes)

    def run_process(command, label):
        outcome = next(calls)
        if outcome == "interrupt":
            raise KeyboardInterrupt
        if outcome == "fail":
            return 1, "torch.OutOfMemoryError: CUDA out of memory", {}
        out = Path(command[command.index("--trainer.logger.init_args.save_dir") + 1]) if "fit" in command else None
        if out is not None:
            target = out / command[command.index("--trainer.logger.init_args.name") + 1] / "version_0" / "timing.json"
        else:
            target = Path(command[command.index("--out") + 1])
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(summary(2.0, 0.5)))
        return 0, "", {"tree_pss": 900.0}

    monkeypatch.setattr(runner, "run_process", run_process)


def labels_run(monkeypatch) -> list[str]:
    """The labels of the runs, in the order they ran (beside whatever ``run_process`` already does)."""
    ran: list[str] = []
    run = runner.run_process
    monkeypatch.setattr(runner, "run_process", lambda command, label: (ran.append(label), run(command, label))[1])
    return ran


def test_a_stage_runs_beside_its_reference_rows_and_every_second_repeat_backwards(tmp_path, monkeypatch):
    """A ratio between a stage and its bare loop compares fits that met the same machine; a drift within a group
    falls on each row alike over two repeats. The table keeps the stages first."""
    fake_runs(monkeypatch, ["ok"] * 16)
    ran = labels_run(monkeypatch)
    stages = "v1_bs512,v2_pinned,v3_resident"
    options = ["--reference-rows", "v2_pinned", "--repeats", "2", "--config-dir", str(CONFIGS), "--out", str(tmp_path)]
    main(["bench", "--stages", stages, *options])
    group = ["v2_pinned", "bare Lightning (v2_pinned)", "plain PyTorch (v2_pinned)"]
    assert ran == ["v1_bs512", *group, "v3_resident", "v1_bs512", *group[::-1], "v3_resident"]
    labels = [row["label"] for row in json.loads((tmp_path / "results.json").read_text())["rows"]]
    assert labels == ["v1_bs512", "v2_pinned", "v3_resident", *group[1:]]


def test_the_reference_rows_of_a_stage_not_benched_as_itself_run_together_and_turn_too(tmp_path, monkeypatch):
    fake_runs(monkeypatch, ["ok"] * 6)
    ran = labels_run(monkeypatch)
    options = ["--reference-rows", "v2_pinned", "--repeats", "2", "--config-dir", str(CONFIGS), "--out", str(tmp_path)]
    main(["bench", "--stages", "v1_bs512", *options])
    group = ["bare Lightning (v2_pinned)", "plain PyTorch (v2_pinned)"]
    assert ran == ["v1_bs512", *group, "v1_bs512", *group[::-1]]


def test_a_failed_stage_keeps_its_error_and_the_other_rows(tmp_path, monkeypatch, capsys):
    fake_runs(monkeypatch, ["ok", "fail", "ok"])
    main(
        [
            "bench",
            "--stages",
            "v1_naive,v1_bs512,v2_pinned",
            "--reference-rows",
            "none",
            "--config-dir",
            str(CONFIGS),
            "--out",
            str(tmp_path),
        ]
    )
    data = json.loads((tmp_path / "results.json").read_text())
    assert [r["error"] for r in data["rows"]] == [
        None,
        "failed (exit 1): torch.OutOfMemoryError: CUDA out of memory",
        None,
    ]
    assert [len(r["summaries"]) for r in data["rows"]] == [1, 0, 1]
    with open(tmp_path / "results.csv") as handle:
        assert [row["stage"] for row in csv.DictReader(handle)] == ["v1_naive", "v1_bs512", "v2_pinned"]
    assert "CUDA out of memory" in (tmp_path / "results.md").read_text()


def test_the_progress_counts_the_runs_left_once_a_row_failed(tmp_path, monkeypatch, capsys):
    """A row that failed is not run again: the count of runs ahead drops by its later repeats."""
    fake_runs(monkeypatch, ["ok", "fail", "ok", "ok", "ok"])
    stages = ["--stages", "v1_naive,v1_bs512,v2_pinned", "--reference-rows", "none", "--repeats", "2"]
    main(["bench", *stages, "--config-dir", str(CONFIGS), "--out", str(tmp_path)])
    progress = [line.split(" (row")[0] for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert progress == ["[1/6] v1_naive", "[2/6] v1_bs512", "[3/5] v2_pinned", "[4/5] v1_naive", "[5/5] v2_pinned"]


def test_results_csv_holds_one_number_per_cell_with_the_settings_that_shaped_each_row(tmp_path, monkeypatch):
    pandas = pytest.importorskip("pandas")
    fake_runs(monkeypatch, ["ok"] * 8)
    main(
        [
            "bench",
            "--stages",
            "v1_bs512,v2_pinned",
            "--sweep",
            "data.batch_size=16,64",
            "--repeats",
            "2",
            "--limit-train-batches",
            "5",
            "--epochs",
            "3",
            "--reference-rows",
            "none",
            "--config-dir",
            str(CONFIGS),
            "--out",
            str(tmp_path),
        ]
    )
    table = pandas.read_csv(tmp_path / "results.csv")
    text = (tmp_path / "results.csv").read_text()
    assert not any(mark in text for mark in ("[", "%", "0x", " / "))  # no ranges, units or pairs inside cells
    for column in (
        "train_s_median",
        "train_s_min",
        "train_s_max",
        "speedup_x",
        "input_wait_pct",
        "epochs",
        "train_batches_limit",
        "repeats",
        "sweep:data.batch_size",
        "peak_tree_pss_mb",
        "batch_size",
        "batches_per_step",
    ):
        assert pandas.api.types.is_numeric_dtype(table[column]), column
    first = table.iloc[0]
    assert (first["epochs"], first["repeats"], first["train_batches_limit"]) == (3, 2, 5)
    assert not first["full_epochs"] and first["sweep:data.batch_size"] == 16 and first["device"] == "cpu (test)"
    assert first["input_wait_pct"] == 25 and first["speedup_x"] == 1
    assert (first["batch_size"], first["batches_per_step"]) == (512, 1)  # as the run's timing.json recorded them
    results = (tmp_path / "results.md").read_text()  # bounded epochs are said above the table, not taken for whole
    assert "- **bounded epochs**: 5 training batches per epoch, not whole epochs" in results.split("| ")[0]


def test_ctrl_c_keeps_the_rows_already_finished(tmp_path, monkeypatch, capsys):
    fake_runs(monkeypatch, ["ok", "interrupt"])
    with pytest.raises(SystemExit) as stop:
        main(["bench", "--stages", "v1_naive,v1_bs512,v2_pinned", "--config-dir", str(CONFIGS), "--out", str(tmp_path)])
    assert stop.value.code == 130  # cut short: the tables and files written, the status said
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert len(rows[0]["summaries"]) == 1
    assert [r["error"] for r in rows[1:]] == ["not run (interrupted)"] * 4
    assert "interrupted: keeping the rows already finished" in capsys.readouterr().out


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="the tree's memory is read from Linux's /proc")
def test_a_run_shorter_than_the_sampling_interval_still_has_its_memory_sampled():
    with TreeMemorySampler(os.getpid(), interval=60.0) as memory:
        pass  # over long before the first interval ends
    assert memory.peak_rss_mb > 0 and memory.peak_pss_mb > 0


def in_this_process(command: list[str], label: str) -> tuple[int, str, dict]:
    """``runner.run_process`` without the process: the run's command line (``python -m MODULE ARGS``) run by
    MODULE's ``main`` here, this process's memory sampled as the run's."""
    entry = {"mnistperf": main, "mnistperf.bench.reference_rows": reference_rows.main}[command[2]]
    said = io.StringIO()
    with TreeMemorySampler(os.getpid()) as memory, contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        try:
            entry(command[3:])
            status = 0
        except SystemExit as exit_info:
            status = exit_info.code if isinstance(exit_info.code, int) else 1
    last = runner._tail(collections.deque(said.getvalue().splitlines()))
    return status, last, {"tree_rss": memory.peak_rss_mb, "tree_pss": memory.peak_pss_mb}


def test_a_run_is_a_process_whose_exit_status_error_line_and_memory_are_kept(capsys):
    """A run that holds 64 MB for a moment, says an epoch line, then fails: its status, its error line, its peak."""
    child = (
        "import sys, time; hold = bytearray(64 * 2**20); print('epoch 1: train 1.0 s', flush=True); time.sleep(1); "
        "print('ValueError: no such batch', file=sys.stderr); sys.exit(3)"
    )
    status, last_line, memory = runner.run_process([sys.executable, "-c", child], "row")
    assert (status, last_line) == (3, "ValueError: no such batch")
    assert "    row: epoch 1: train 1.0 s" in capsys.readouterr().out  # its progress lines echoed
    if Path("/proc/self/smaps_rollup").exists():
        assert memory["tree_pss"] >= 64 and memory["tree_rss"] >= memory["tree_pss"] * 0.9, memory


@pytest.mark.parametrize("runs", ["in this process", pytest.param("as processes", marks=pytest.mark.slow)])
def test_real_bench_on_tiny_data_writes_every_result_file(workdir, monkeypatch, capsys, runs):
    if runs == "in this process":
        monkeypatch.setattr(runner, "run_process", in_this_process)
    shutil.copytree(CONFIGS, workdir / "configs")
    broken = (CONFIGS / "v2_pinned.yaml").read_text().replace("batch_size: 512", "batch_size: -3")
    (workdir / "configs" / "broken.yaml").write_text(broken)
    main(
        [
            "bench",
            "--stages",
            "v2_pinned,broken",
            "--epochs",
            "1",
            "--set",
            "data.num_workers=0",
            "--set",
            "data.persistent_workers=false",
            "--out",
            "out",
        ]
    )
    out = workdir / "out"
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == [
        "chart.png",
        "results.csv",
        "results.json",
        "results.md",
    ]
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert [r["label"] for r in rows] == [
        "v2_pinned",
        "broken",
        "bare Lightning (v2_pinned)",
        "plain PyTorch (v2_pinned)",
    ]
    assert rows[0]["summaries"][0]["config"] == "01_v2_pinned_r1"
    assert rows[0]["summaries"][0]["peak_rss_mb"]["tree_pss"] > 0
    assert "data.batch_size must be at least 1" in rows[1]["error"]
    assert rows[2]["summaries"][0]["runner"] == "bare" and rows[3]["summaries"][0]["runner"] == "plain"
    printed = capsys.readouterr().out
    # the runs counted as they start, each with its row's number in the table (a stage's reference rows beside it)
    assert "[1/4] v2_pinned (row 1, repeat 1/1)" in printed and "[4/4] broken (row 2, repeat 1/1)" in printed
    assert "stage/plain train time" in printed and "stage/bare Lightning" in printed
    assert "speed-up: steady (train + test) s/epoch of the first row" in printed  # beside train-time columns
    assert "| v2_pinned | 1 |" in printed  # the per-step table: 96 rows in one batch of 512


def test_a_graphed_stages_plain_and_bare_rows_run_its_whole_step_per_batch_of_a_group(workdir, monkeypatch):
    """For v4_graphed the reference rows run the stage's own step (graph logic emulated on a CPU), one per batch
    of each group: every row once per epoch, and the plain loop learns exactly what it learns ungrouped."""
    graphs_made = []

    def emulated(*args, **kwargs):
        graphs_made.append(EmulatedGraphs(*args, **kwargs))
        return graphs_made[-1]

    monkeypatch.setattr("mnistperf.model.step.StepGraphs", emulated)  # every TrainingStep's
    common = ["--config", str(CONFIGS / "v4_graphed.yaml"), "--trainer.max_epochs", "2", "--data.batch_size", "40"]
    summaries = {}
    for name, extra in (("plain", []), ("bare", ["--bare-lightning"]), ("plain ungrouped", [])):
        grouping = [] if name == "plain ungrouped" else ["--data.batches_per_step", "2"]
        reference_rows.main([*extra, "--out", f"{name}.json", *common, *grouping])
        summaries[name] = json.loads((workdir / f"{name}.json").read_text())
        assert [e["samples"] for e in summaries[name]["epochs"]] == [96, 96]  # 40 + 40 + 16, each row once
    # Per run: the parsed stage module's own graphs (unused by either row: 0), then the row's step (shapes 40
    # and 16, captured in epoch 1 only: 2).
    assert [g.captures for g in graphs_made] == [0, 2] * 3
    # The bare row times no waits, so it says so rather than reading 0 % and concluding from it.
    bare, plain = summaries["bare"], summaries["plain"]
    for row in (bare, *bare["epochs"]):
        assert row["input_wait_share"] is None and row["host_wait_share"] is None and row["verdict"] == "not measured"
    assert bare["split"]["input_wait_s"] is None and {e["input_wait_s"] for e in bare["epochs"]} == {None}
    assert format_split(RunSummary.of(bare), "epoch 2") is None  # no "waiting for data 0.00 ms"
    # The plain row times its waits: its verdict is read as the stage's are (its 2-step epochs' window priced as any)
    assert plain["input_wait_share"] is not None and plain["verdict"] != "not measured" and plain["verdict_reason"]
    for mine, theirs in zip(summaries["plain"]["epochs"], summaries["plain ungrouped"]["epochs"], strict=True):
        assert mine["val/loss"] == pytest.approx(theirs["val/loss"], abs=1e-6)


def test_the_plain_row_validates_on_the_batches_its_trainer_limits_validation_to(workdir, monkeypatch):
    """As the stage's own fit does (--set trainer.limit_val_batches=2): 2 of the test split's 5 batches of 8."""
    from mnistperf.model.step import TrainingStep

    phases, loss = [], TrainingStep.loss
    monkeypatch.setattr(
        TrainingStep, "loss", lambda self, batch, *phase: phases.append(phase) or loss(self, batch, *phase)
    )
    stage = ["--config", str(CONFIGS / "v2_pinned.yaml"), *NO_WORKERS, "--data.batch_size", "8"]
    reference_rows.main(
        ["--out", "plain.json", *stage, "--trainer.max_epochs", "1", "--trainer.limit_val_batches", "2"]
    )
    assert phases.count(("val",)) == 2


def test_the_chart_puts_each_published_figure_beside_the_measured_bar_with_speed_ups():
    rows = [
        Row("v1_naive", "v1_naive", summaries=[summary(100, 0)]),
        Row("v2_pinned", "v2_pinned", summaries=[summary(4, 0)]),
        Row("v3_resident", "v3_resident", summaries=[summary(2, 0)]),
        Row("v2_pinned batch_size=64", "v2_pinned", {"data.batch_size": "64"}, summaries=[summary(5, 0)]),
        Row("v4_graphed", "v4_graphed", error="failed (exit 1): boom"),
    ]
    fig = chart_figure(rows, "cpu (test)", log_scale=False)
    ax = fig.axes[0]
    measured, figures = ax.containers
    assert [bar.get_height() for bar in measured] == [100, 4, 2, 5]  # the failed row has no bar
    # Published figures only for the unmodified stages that have them, each right of its measured bar.
    assert [bar.get_height() for bar in figures] == [published.STAGES[s][0] for s in ("v1_naive", "v2_pinned")]
    assert figures[1].get_x() == pytest.approx(measured[1].get_x() + measured[1].get_width())
    assert [t.get_text() for t in ax.get_xticklabels()] == [r.label for r in rows[:4]]
    labels = [t.get_text() for t in ax.texts]
    assert labels == [
        "1.0x",
        "25.0x",
        "50.0x",
        "20.0x",
        f"{published.STAGES['v1_naive'][3]:.1f}x",
        f"{published.STAGES['v2_pinned'][3]:.1f}x",
    ]
    assert ax.get_yscale() == "log"  # 100 s against 0.44 s published: a linear axis would hide the small bars
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["cpu (test) (measured)", published.HARDWARE]


def test_the_chart_is_linear_for_a_narrow_range_unless_asked_for_a_log_axis():
    rows = [
        Row("v3_resident", "v3_resident", summaries=[summary(4, 0)]),
        Row("v3_compiled", "v3_compiled", summaries=[summary(2, 0)]),
    ]
    assert chart_figure(rows, "cpu", log_scale=False).axes[0].get_yscale() == "linear"
    assert len(chart_figure(rows, "cpu", log_scale=False).axes[0].containers) == 1  # nothing published for these
    assert chart_figure(rows, "cpu", log_scale=True).axes[0].get_yscale() == "log"


def test_redraw_draws_the_chart_again_from_results_json(tmp_path, capsys):
    rows = [
        Row("v1_naive", "v1_naive", summaries=[summary(10, 2)]),
        Row("v2_pinned", "v2_pinned", summaries=[summary(1, 0.5)]),
    ]
    write_all(rows, tmp_path, {"epochs": 2})
    (tmp_path / "chart.png").unlink()
    main(["bench", "--redraw", str(tmp_path)])
    assert (tmp_path / "chart.png").read_bytes().startswith(b"\x89PNG")
    capsys.readouterr()
    fails_in_one_line(capsys, ["bench", "--redraw", str(tmp_path / "nothing")], "--redraw")


def test_a_redraw_refuses_options_of_a_run_it_would_ignore(tmp_path, capsys):
    argv = ["bench", "--stages", "v2_pinned", "--redraw", str(tmp_path)]
    fails_in_one_line(capsys, argv, "--redraw runs nothing, so --stages would be ignored: drop it, or run the bench")


@pytest.mark.parametrize("epochs", [1, 2])
def test_a_bench_of_one_epoch_a_run_says_its_figures_hold_the_warm_up(tmp_path, monkeypatch, capsys, epochs):
    fake_runs(monkeypatch, ["ok"])
    options = ["--config-dir", str(CONFIGS), "--reference-rows", "none", "--out", str(tmp_path)]
    main(["bench", "--stages", "v2_pinned", "--epochs", str(epochs), *options])
    said = "one epoch a run: every figure is that epoch's, warm-up included (--epochs 2 or more leaves it out)"
    printed, written = capsys.readouterr().out, (tmp_path / "results.md").read_text()
    assert (said in printed, said in written) == (epochs == 1, epochs == 1)
    assert f"1 configuration x 1 repeat, {epochs} epoch{'s' if epochs > 1 else ''}," in printed
