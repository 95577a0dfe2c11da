"""mnistperf tune: it measures, stops when input is no longer the bound, and writes a config fit runs as is."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from conftest import CONFIGS, NO_WORKERS, fails_in_one_line, run_stage, stage_argv, stage_params

from mnistperf.cli import main
from mnistperf.data.ingest import prepare
from mnistperf.lightning_cli.mnistperf_cli import parse_fit_config
from mnistperf.tune import policy, probes, stages
from mnistperf.tune.command import probes_path, probes_table, tuned_config
from mnistperf.tune.search import Outcome, Run, Search, Trial


@pytest.fixture
def short_probes(monkeypatch) -> None:
    """Tiny data: short probes."""
    monkeypatch.setattr(probes, "REPEATS", 2)
    monkeypatch.setattr(probes.Probes, "batches", 4)


def tune(*args: str) -> None:
    main(["tune", "--set", "data.batch_size=16", "--budget", "2", *args])


@pytest.mark.slow
@pytest.mark.usefixtures("short_probes")
@pytest.mark.parametrize("config", stage_params())
def test_tune_writes_a_config_that_fit_runs_as_is(workdir, config, capsys):
    tune("--config", str(CONFIGS / config), "--out", "tuned.yaml")
    out = capsys.readouterr().out
    assert out.startswith("mnistperf: tune on cpu (")  # the device it measures on, first
    assert "[probe 1] step" in out and "stopped:" in out  # progress while it runs, and why it stopped
    text = (workdir / "tuned.yaml").read_text()
    assert text.startswith("# mnistperf tune: tuned from") and "# Step alone:" in text and "# Stopped:" in text
    tuned = yaml.safe_load(text)
    assert tuned["data"]["pipeline"] in ("v1", "v2", "resident", "stream", "litdata")
    assert tuned["data"]["batch_size"] == 16  # the batch size stays unless asked
    table = probes_path(workdir / "tuned.yaml").read_text()
    assert "| 1 | step | batch_size=16 |" in table and "| loader |" in table
    # Groups of batches stay only where the resident pipeline can make them (v4_graphed asks for 8).
    grouped = config == "v4_graphed.yaml" and tuned["data"]["pipeline"] == "resident"
    assert tuned["data"]["batches_per_step"] == (8 if grouped else 1)
    if config in ("v1_bs512.yaml", "v4_graphed.yaml"):  # these train for real; the others write the same kind of file
        summary = run_stage("tuned.yaml", "--trainer.enable_progress_bar", "false", epochs=1, quiet=False)
        assert summary["data"]["pipeline"] == tuned["data"]["pipeline"]


@pytest.mark.usefixtures("short_probes")
def test_a_loader_faster_than_the_step_stops_the_search(workdir, monkeypatch, capsys):
    """Make the step slow: the first loader outruns it, so nothing else is probed."""
    monkeypatch.setattr(probes, "time_step", lambda *a, **k: [10.0, 10.0])
    tune("--config", str(CONFIGS / "v1_bs512.yaml"), "--out", "tuned.yaml")
    out = capsys.readouterr().out
    assert "stopped: compute-bound: the loader" in out
    assert out.count("] loader") == 1


@pytest.mark.usefixtures("short_probes")
def test_tune_on_data_not_yet_prepared_prepares_it_as_fit_does(fake_raw, tmp_path, monkeypatch, capsys):
    """A newcomer's first command may be tune: the official files are made into Parquet first, not refused."""
    monkeypatch.setattr(probes, "time_step", lambda *a, **k: [10.0, 10.0])  # the first loader outruns it: one probe
    settings = ["--set", "data.dataset=mnist", "--set", f"data.source_root={fake_raw.root}"]
    tune("--config", str(CONFIGS / "v1_bs512.yaml"), *settings, "--out", "tuned.yaml")
    assert "stopped: compute-bound: the loader" in capsys.readouterr().out
    assert all(prepare.split_path(tmp_path / "data", "mnist", split).is_file() for split in prepare.SPLITS)


@pytest.mark.usefixtures("short_probes")
def test_a_probe_still_drawing_batches_when_the_budget_ends_stops_there(workdir):
    """A slow loader's probe begun with little budget left ends at the budget's end, not at its own."""
    cli = parse_fit_config(stage_argv("v2_pinned", *NO_WORKERS)[1:])
    options = {**{k: v for k, v in cli.datamodule.hparams.items() if not k.startswith("_")}, "batches_per_step": 1}
    found = probes.Probes(options, cli.model, torch.device("cpu"))
    settings = {"pipeline": "v2", "num_workers": 0}
    for kind in (probes.LOADER, probes.BOTH):
        run = found(Trial(settings, kind=kind), 0.0)  # nothing left: stopped at its first batch
        assert run.timed_out and run.rates == []
        assert not found(Trial(settings, kind=kind), 600.0).timed_out


@pytest.mark.usefixtures("short_probes")
def test_ctrl_c_keeps_the_best_found_so_far(workdir, monkeypatch, capsys):
    calls = []
    real = probes.time_loader

    def interrupt_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(probes, "time_loader", interrupt_second)
    monkeypatch.setattr(probes, "time_step", lambda *a, **k: [1e12, 1e12])  # no loader outruns this step
    with pytest.raises(SystemExit) as stop:  # cut short: the status says so, as bench's does
        tune("--config", str(CONFIGS / "v1_bs512.yaml"), "--out", "tuned.yaml")
    assert stop.value.code == 130
    out = capsys.readouterr().out
    assert "stopped: interrupted (Ctrl-C): the best found so far is kept" in out
    assert yaml.safe_load((workdir / "tuned.yaml").read_text())["data"]["pipeline"] == "resident"


@pytest.mark.usefixtures("short_probes")
def test_ctrl_c_while_a_noisy_probe_is_measured_again_keeps_its_first_measurement(workdir, monkeypatch, capsys):
    calls = []

    def noisy_then_interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the second measurement of the first, noisy, probe
            raise KeyboardInterrupt
        return [100.0, 1000.0], 0.1

    monkeypatch.setattr(probes, "time_loader", noisy_then_interrupted)
    monkeypatch.setattr(probes, "time_step", lambda *a, **k: [1e12, 1e12])
    with pytest.raises(SystemExit) as stop:  # cut short: the status says so, as bench's does
        tune("--config", str(CONFIGS / "v1_bs512.yaml"), "--out", "tuned.yaml")
    assert stop.value.code == 130
    out = capsys.readouterr().out
    assert "[probe 2] loader pipeline=resident" in out and "stopped: interrupted (Ctrl-C)" in out
    assert yaml.safe_load((workdir / "tuned.yaml").read_text())["data"]["pipeline"] == "resident"


@pytest.mark.usefixtures("short_probes")
@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--set", "data.num_wrkers=2"], "--set data.num_wrkers: no stage config has this option"),
        (["--budget", "0.01"], "--budget 0.01: too small to measure anything; give at least 0.25 minutes"),
        (["--budget-s", "-5"], "--budget-s -5: too small to measure anything; give at least 15 seconds"),
        (["--budget-s", "inf"], "--budget-s inf: give a finite budget, at least 15 seconds"),
        (["--set", "data.batch_size=0"], "data.batch_size must be at least 1"),
    ],
)
def test_bad_input_ends_in_one_line(workdir, capsys, argv, expected):
    fails_in_one_line(capsys, ["tune", "--config", str(CONFIGS / "v1_bs512.yaml"), *argv], expected)


def probe(kind: str, settings: dict, rates, start_s: float = 0.0) -> Trial:
    return Trial(settings, kind=kind, runs=[Run(list(rates), start_s=start_s)])


def test_predicted_rate_overlaps_with_workers_and_adds_up_without():
    with_workers = probe("loader", {"num_workers": 2}, [1000.0])
    alone = probe("loader", {"num_workers": 0}, [1000.0])
    assert stages.predicted(with_workers, 500.0, 10_000) == pytest.approx(500.0)
    assert stages.predicted(alone, 1000.0, 10_000) == pytest.approx(500.0)
    slow_start = probe("loader", {"num_workers": 2}, [1000.0], start_s=10.0)
    assert stages.predicted(slow_start, 500.0, 10_000) == pytest.approx(10_000 / 30)


def test_without_workers_none_are_kept_nor_prefetched_and_the_variants_around_the_best_need_workers():
    loader = {"num_workers": 0, "persistent_workers": True, "prefetch_factor": 4, "pin_memory": True}
    assert policy.without_workers(loader) == {**loader, "persistent_workers": False, "prefetch_factor": None}
    keys = {"num_workers": "data.workers", "persistent_workers": "data.keep"}  # a project's own names
    own = {"data.workers": 0, "data.keep": True, "data.prefetch": 4}
    assert policy.without_workers(own, keys) == {**own, "data.keep": False}
    assert policy.variants_around({**loader, "persistent_workers": False, "pin_memory": False}, on_gpu=False) == []
    best = {"num_workers": 2, "persistent_workers": True, "prefetch_factor": None, "pin_memory": True, "batch_size": 8}
    assert [label for _, label in policy.variants_around(best, on_gpu=True)] == [
        "workers not kept",
        "prefetch factor 4",
        "memory not pinned",
        "batch 16: changes the training",
        "batch 32: changes the training",
    ]


def test_the_settings_started_from_stay_unless_the_best_beats_them_by_more_than_the_noise_or_is_as_fast_and_cheaper():
    search = Search(lambda trial, s: Run(), 60, lambda line: None, stages.probe_line)
    start = probe("both", {}, [100.0, 100.0])
    assert policy.settled(search, probe("both", {}, [104.0]), start, 0.05, "the start", cheaper=False)[0] is start
    assert search.stopped == "; measured again, the best did not beat the start by more than the noise"
    as_fast = probe("both", {}, [104.0])
    assert policy.settled(search, as_fast, start, 0.05, "the start", cheaper=True)[0] is as_fast
    noisy = probe("both", {}, [100.0, 120.0])  # a spread of 18 %, which 125 does not beat
    assert policy.settled(search, probe("both", {}, [125.0]), noisy, 0.05, "", cheaper=False) == (noisy, 20 / 110)


def _outcome(step_rates, bigger_rates, *others) -> Outcome:
    step = probe("step", {"batch_size": 512}, step_rates)
    bigger = probe("step", {"batch_size": 1024}, bigger_rates)
    return Outcome([step, *[probe("loader", {"num_workers": 0}, r) for r in others], bigger], best={})


def test_a_quiet_machine_gets_the_batch_projection_and_no_warning():
    outcome = _outcome([1000, 1010, 990], [1500, 1510, 1490], [800, 810, 805])
    assert "would step at 1,500 samples/s (+50%)" in stages.batch_projection(outcome)
    assert stages.noise_warning(outcome) is None


def test_a_noisy_machine_is_said_and_its_projection_withheld():
    """A loaded machine's figures (a batch 'stepping' at -82 %, spreads of 17-137 %) are not printed as findings."""
    outcome = _outcome([11000, 4000, 9000], [1969, 3000, 5000], [800, 300, 900])
    assert "could not be measured reliably" in stages.batch_projection(outcome)
    assert "would step at" not in stages.batch_projection(outcome)
    warning = stages.noise_warning(outcome)
    assert "the machine was busy" in warning and "idle machine" in warning


def test_a_difference_within_the_noise_is_no_projection():
    outcome = _outcome([1000, 1100, 950], [1050, 1000, 1120])
    assert "no faster or slower than the probes' noise" in stages.batch_projection(outcome)


def test_a_noisy_probe_is_measured_again():
    measured = [[100.0, 1000.0, 500.0], [1000.0, 1000.0, 1000.0], [1000.0, 1010.0]]
    lines: list[str] = []
    finder = Search(lambda trial, s: Run(measured.pop(0)), 60, lines.append, stages.probe_line, policy.NOISY_SPREAD)
    noisy = finder.trial({"batch_size": 8}, kind="step")
    assert len(noisy.rates) == 6 and "repeated (6 runs)" in stages.probe_note(noisy) and "repeated (6 runs)" in lines[0]
    quiet = finder.trial({"batch_size": 8}, kind="step")
    assert not measured and len(quiet.rates) == 2 and len(lines) == 2  # measured once, said once each


def test_a_noisy_probe_the_budget_stops_as_it_is_measured_again_is_said_once_as_stopped():
    runs = [Run([100.0, 1000.0, 500.0], seconds=0.1), Run(seconds=5.0, timed_out=True)]
    lines: list[str] = []
    finder = Search(lambda trial, s: runs.pop(0), 60, lines.append, stages.probe_line, policy.NOISY_SPREAD)
    with finder.stops():
        finder.trial({"batch_size": 8}, kind="loader")
    (said,) = lines  # not its first run again, nor called repeated
    assert "failed: stopped after 5 s: the budget ended" in said and "repeated" not in said
    assert finder.stopped.startswith("the budget ended during a trial, which was stopped")


def test_a_step_probe_the_budget_stopped_is_listed_as_stopped_and_projects_nothing():
    outcome = _outcome([1000, 1010], [2000, 2010])
    stopped = outcome.trials[1]
    stopped.runs = [Run(seconds=5.0, error="stopped after 5 s: the budget ended")]
    assert stages.batch_projection(outcome) is None  # no step at 0 samples/s, -100 %
    assert "failed: stopped after 5 s" in stages.probe_note(stopped)


class TimedOutInput:
    """Probes that measure every trial at once, but the budget ends as the input config's settings train beside."""

    options = {"pipeline": "v2", "num_workers": 2, "persistent_workers": True, "prefetch_factor": None}
    options |= {"pin_memory": False, "batch_size": 64}
    device = torch.device("cpu")

    def __init__(self, interrupted: bool = False):
        self.interrupted = interrupted  # Ctrl-C as the input config's settings train, not the budget's end

    def __call__(self, trial: Trial, seconds: float) -> Run:
        if trial.kind == "both" and trial.settings["pipeline"] == "v2":
            if self.interrupted:
                raise KeyboardInterrupt
            return Run(seconds=5.0, timed_out=True)
        pipeline = trial.settings.get("pipeline")
        rate = {"step": 1000.0, "loader": 50.0 if pipeline == "v2" else 5000.0}.get(trial.kind, 900.0)
        return Run([rate, rate], seconds=0.1, wait=0.0)


def test_a_best_the_budget_left_unmeasured_beside_the_input_config_is_said_unconfirmed_and_its_row_unmeasured():
    lines: list[str] = []
    found = stages.outcome(TimedOutInput(), 600, lines.append, 6400, ["resident", "v2"], 1, False)
    assert found.best["pipeline"] == "resident"  # the best found so far, kept
    assert found.stopped.endswith(
        "; the best predicted was not measured beside the input config's settings (more --budget is)"
    )
    stopped = next(line for line in lines if "input config" in line)
    assert ": not measured, input config, failed: stopped after 5 s" in stopped
    (row,) = [row for row in probes_table(found).splitlines() if "input config" in row]
    assert "| - | - |" in row  # no samples/s, no spread: not 0
    cut = stages.outcome(TimedOutInput(interrupted=True), 600, [].append, 6400, ["resident", "v2"], 1, False)
    assert cut.stopped.startswith("interrupted (Ctrl-C)")  # no more budget to ask for: Ctrl-C stopped it
    assert cut.stopped.endswith("; the best predicted was not measured beside the input config's settings")


def test_the_step_probe_runs_a_graphed_stages_whole_step(monkeypatch):
    """For model.cuda_graph the probe times the stage's graphed step (emulated on a CPU): one capture for the
    batch shape, and the weights trained exactly as the eager probe step trains them."""
    import torch
    from emulated_graphs import EmulatedGraphs

    from mnistperf.model import ImageClassifier

    monkeypatch.setattr("mnistperf.model.step.StepGraphs", EmulatedGraphs)
    batch = {"image": torch.rand(16, 1, 28, 28), "label": torch.randint(0, 10, (16,))}
    trained = []
    for graphed in (True, False):
        torch.manual_seed(0)
        model = ImageClassifier(cuda_graph=graphed)
        step = model.standalone_step()  # what time_step and time_training run
        for _ in range(3):
            step(batch)
        assert step.graphs.captures == (1 if graphed else 0)
        trained.append([p.detach().clone() for p in model.parameters()])
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*trained, strict=True))


def test_the_tuned_config_leaves_the_input_config_as_it_was(tmp_path):
    config = yaml.safe_load((CONFIGS / "v2_pinned.yaml").read_text())
    before = json.dumps(config, sort_keys=True)
    outcome = Outcome([probe("step", {"batch_size": 512}, [1000.0])], best={"num_workers": 1})
    tuned = yaml.safe_load(
        tuned_config(config, outcome, CONFIGS / "v2_pinned.yaml", tmp_path / "tuned.yaml", "cpu", 1.0)
    )
    assert json.dumps(config, sort_keys=True) == before
    assert tuned["data"]["num_workers"] == 1 and tuned["trainer"]["logger"]["init_args"]["name"] == "tuned"


def test_a_stage_tunes_the_resident_pipeline_only_where_the_split_fits_in_half_the_free_memory(workdir, monkeypatch):
    """96 training rows need about 150 KB on the device: with 200 KB free, resident is left out, saying why."""
    import torch

    said: list[str] = []
    options = {"dataset": "fashion_mnist", "data_dir": "data", "batch_size": 8}
    cpu = torch.device("cpu")
    monkeypatch.setattr(stages, "free_memory_bytes", lambda device: 200 * 2**10)
    assert "resident" not in stages.pipelines_to_try(options, cpu, said.append)
    assert any(line.startswith("resident: the training split needs about") for line in said), said
    monkeypatch.setattr(stages, "free_memory_bytes", lambda device: 2**30)
    assert "resident" in stages.pipelines_to_try(options, cpu, said.append)


@pytest.mark.parametrize(
    ("wait", "said", "searched"),
    [
        (0.6, "input-bound: the host waited for data 60%", True),
        (0.03, "within the noise of these measurements (5%); no loader setting can win more", False),
        (0.2, "not input-bound: the host waited for data 20%", True),  # above the noise: a setting may win up to it
    ],
)
def test_the_input_wait_decides_whether_a_loader_setting_is_tried_and_says_what_it_can_win(wait, said, searched):
    from types import SimpleNamespace

    from mnistperf.tune.end_to_end import what_bounds

    line, search = what_bounds(SimpleNamespace(wait=wait), noise=0.05)
    assert said in line and search is searched
    assert ("about that much, at most, is what a loader setting can win" in line) is (wait == 0.2)
