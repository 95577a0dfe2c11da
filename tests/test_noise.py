"""A run's own noise: a figure's spread over its steady epochs, and differences said within or beyond it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import fails_in_one_line

from mnistperf.cli import main
from mnistperf.diagnosis.figures import AVG_TRAIN_S, DEVICE_BUSY_SHARE, PEAK_RSS_MB, SAMPLES_PER_S, WORKERS_PSS_MB
from mnistperf.diagnosis.record.run import RunSummary
from mnistperf.diagnosis.show.commands import speed_check
from mnistperf.diagnosis.show.compare import (
    beyond,
    compare,
    format_comparison,
    noise,
    noise_word,
    spread,
    steady_values,
)


def summary(*train_s: float, samples: int = 600) -> RunSummary:
    """A run whose epochs took ``train_s`` each (the first the warm-up), every epoch ``samples`` samples."""
    epochs = [
        {"epoch": i + 1, "train_s": t, "samples_per_s": samples / t, "device_busy_share": 0.5}
        for i, t in enumerate(train_s)
    ]
    return RunSummary.of({"epochs": epochs, "steady_epochs": [2, len(epochs)] if len(epochs) > 1 else [1, 1]})


def test_a_figures_noise_is_its_spread_over_the_steady_epochs_the_warm_up_left_out():
    run = summary(9.0, 1.0, 1.1, 0.9)
    assert steady_values(run, AVG_TRAIN_S) == [1.0, 1.1, 0.9]  # the run's mean train time: its epochs' train_s
    assert spread(steady_values(run, AVG_TRAIN_S)) == pytest.approx(0.2)
    assert spread([1.0]) is None and spread([]) is None  # one steady epoch measured no spread


def test_figures_with_no_spread_per_epoch_have_no_noise():
    run = summary(9.0, 1.0, 1.1, 0.9)
    assert steady_values(run, PEAK_RSS_MB) == []  # one figure for the whole run
    assert steady_values(run, DEVICE_BUSY_SHARE) == []  # the profiled window's one reading, copied to every epoch
    run.epochs[1]["workers_pss_mb"] = run.epochs[2]["workers_pss_mb"] = 700.0
    assert steady_values(run, WORKERS_PSS_MB) == []  # memory's change across epochs is growth, not noise


def test_two_runs_differ_beyond_noise_only_past_the_larger_of_their_spreads():
    steady, shaky = summary(5.0, 1.0, 1.02, 0.98), summary(5.0, 1.0, 1.1, 0.9)
    assert noise(steady, shaky, AVG_TRAIN_S) == pytest.approx(0.2)
    assert noise(steady, summary(5.0, 1.0), AVG_TRAIN_S) == pytest.approx(0.04)  # only one run has a spread
    assert noise(summary(5.0, 1.0), summary(5.0, 2.0), AVG_TRAIN_S) is None
    assert beyond(1.15, 0.2) is False and beyond(1.25, 0.2) is True and beyond(0.75, 0.2) is True
    assert beyond(1.6, 0.55) is beyond(1 / 1.6, 0.55) is True  # a time and its throughput get the same call
    assert beyond(1.25, None) is None and beyond(None, 0.2) is None
    assert noise(steady, shaky, SAMPLES_PER_S) == pytest.approx(spread([600 / 1.0, 600 / 1.1, 600 / 0.9]))


def test_the_words_say_within_or_beyond_with_the_noise_or_that_it_is_not_known():
    assert noise_word(1.03, 0.05) == "within noise (±5%)"
    assert noise_word(1.30, 0.05) == "beyond noise (±5%)"
    assert noise_word(1.01, 0.0034) == "beyond noise (±0.3%)"  # not "beyond noise (±0%)"
    failed, line = speed_check({"slower": 0.004, "noise": 0.0034}, 0)
    assert failed and "B takes 0.4% more time than A per epoch, past the 0% allowed and the runs' noise (±0.3%)" in line
    assert noise_word(1.30, None) == "noise not known"
    assert noise_word(None, None) == "-"


def timing(folder, *train_s: float) -> str:
    """A timing.json as EpochTimer writes it, for epochs that took ``train_s`` each; its path."""
    from mnistperf.diagnosis.record.summary import aggregate

    rows = [
        {"epoch": i + 1, "train_s": t, "eval_s": 0.1, "samples": 600, "samples_per_s": 600 / t, "input_wait_share": 0.1}
        for i, t in enumerate(train_s)
    ]
    found = aggregate(rows, 0.5)
    folder.mkdir(parents=True)
    path = folder / "timing.json"
    path.write_text(json.dumps(found, default=str))
    return str(path)


@pytest.mark.parametrize(
    ("b_epochs", "allowed", "status", "said_"),
    [
        ((5.0, 1.30, 1.32, 1.31), "10", 1, "failed: B takes 29% more time than A per epoch, past the 10% allowed"),
        ((5.0, 1.05, 1.07, 1.06), "10", 0, "passed: B takes 4% more time than A per epoch, within the 10% allowed"),
        ((5.0, 1.14, 1.16, 1.15), "10", 0, "passed: B takes 13% more time"),  # past 10 %, not past 10 % and the noise
        ((5.0, 0.50, 0.51, 0.49), "0", 0, "passed: B takes 51% less time than A per epoch"),
    ],
)
def test_the_speed_check_fails_only_past_the_allowed_share_and_the_runs_noise(
    tmp_path, capsys, b_epochs, allowed, status, said_
):
    a = timing(tmp_path / "a", 5.0, 1.0, 1.1, 0.95)  # A's own spread: 15 %
    b = timing(tmp_path / "b", *b_epochs)
    if status:
        with pytest.raises(SystemExit) as ended:
            main(["compare", a, b, "--fail-if-slower", allowed])
        assert ended.value.code == status
    else:
        main(["compare", a, b, "--fail-if-slower", allowed])
    printed = capsys.readouterr()
    line = (printed.err if status else printed.out).strip().splitlines()[-1]
    assert line.startswith(f"compare: --fail-if-slower {allowed} ") and said_ in line, line
    assert "the runs' noise (±15%)" in line


def test_the_speed_check_echoes_a_bad_percentage_as_typed(tmp_path, capsys):
    a = timing(tmp_path / "a", 5.0, 1.0, 1.1)
    fails_in_one_line(capsys, ["compare", a, a, "--fail-if-slower", "-5"], "--fail-if-slower -5:", "e.g.")


def test_two_fits_of_the_same_numbers_read_within_noise_and_a_far_slower_one_beyond(tmp_path):
    a = json.loads(Path(timing(tmp_path / "a", 5.0, 1.0, 1.1, 0.95)).read_text())
    b = json.loads(Path(timing(tmp_path / "b", 5.0, 1.05, 0.97, 1.02)).read_text())
    slow = json.loads(Path(timing(tmp_path / "slow", 5.0, 3.6, 3.7, 3.5)).read_text())
    same = {row["key"]: row for row in compare(a, b)["rows"]}
    assert same["avg_train_s"]["beyond_noise"] is False and same["samples_per_s"]["beyond_noise"] is False
    far = {row["key"]: row for row in compare(a, slow)["rows"]}
    assert far["avg_train_s"]["beyond_noise"] is True and far["samples_per_s"]["beyond_noise"] is True
    printed = format_comparison(compare(a, slow), Path("a"), Path("slow"))
    assert "beyond noise (±15%)" in printed and "(0.28x, beyond noise (±15%))" in printed


def test_with_json_the_speed_checks_line_goes_to_stderr_and_stdout_stays_json(tmp_path, capsys):
    a = timing(tmp_path / "a", 5.0, 1.0, 1.1, 0.95)
    b = timing(tmp_path / "b", 5.0, 1.05, 1.07, 1.06)
    main(["compare", a, b, "--json", "--fail-if-slower", "10"])
    printed = capsys.readouterr()
    assert json.loads(printed.out)["bought"]["slower"] > 0
    assert printed.err.strip().startswith("compare: --fail-if-slower 10 passed")
