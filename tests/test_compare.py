"""What a change bought: two runs side by side, and B's gain held against the ceiling A's summary stated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import NO_WORKERS, fails_in_one_line, run_stage

from mnistperf.cli import main
from mnistperf.diagnosis.record.run import RunSummary, find_summary
from mnistperf.diagnosis.show.compare import compare, format_comparison, gain_over


def run(train_s: float, samples: int, verdict: str, wait: float, ceiling: float | None = None, **more) -> dict:
    """A summary as EpochTimer writes it, its figures given."""
    advice = {"verdict": verdict, "ceiling": "...", "hints": []}
    if ceiling is not None:
        advice["at_most_s_less"] = ceiling
    return {
        "avg_train_s": train_s,
        "samples_per_s": samples / train_s,
        "input_wait_share": wait,
        "verdict": verdict,
        "advice": advice,
        "split": {"input_wait_s": wait * train_s, "forward_s": 1.0, "backward_s": 1.0, "optimizer_s": 0.5},
        "peak_rss_mb": {"main_process": 900.0},
        "epochs": [{"epoch": 1, "workers_pss_mb": 300.0}],
        **more,
    }


def write(folder: Path, summary: dict) -> Path:
    path = folder / "version_0" / "timing.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(summary))
    return path


def test_a_gain_within_what_a_predicted_for_the_bound_b_removed():
    a = run(10.0, 60_000, "input-bound", 0.6, ceiling=6.0)
    b = run(5.0, 60_000, "overhead-bound", 0.1)
    gain = gain_over(RunSummary.of(a), RunSummary.of(b))
    assert gain["saved_s"] == pytest.approx(5.0) and gain["speed_up"] == pytest.approx(2.0)
    assert gain["within"] and gain["removed"] and not gain["scaled"]
    rows = {row["key"]: row for row in compare(a, b)["rows"]}
    assert rows["avg_train_s"]["ratio"] == pytest.approx(0.5) and rows["samples_per_s"]["ratio"] == pytest.approx(2.0)
    assert rows["input_wait_share"]["a"] == pytest.approx(60.0)


def test_a_gain_beyond_the_ceiling_says_more_changed_than_the_bound():
    a, b = run(10.0, 60_000, "input-bound", 0.3, ceiling=3.0), run(4.0, 60_000, "overhead-bound", 0.1)
    gain = gain_over(RunSummary.of(a), RunSummary.of(b))
    assert gain["within"] is False
    text = format_comparison(
        compare(run(10.0, 60_000, "input-bound", 0.3, ceiling=3.0), run(4.0, 60_000, "x", 0.1)),
        Path("a/timing.json"),
        Path("b/timing.json"),
    )
    assert "beyond the 3.00 s" in text and "more changed than that bound" in text


def test_a_slower_b_is_said_to_have_bought_none_of_the_ceiling():
    a, b = run(10.0, 60_000, "input-bound", 0.3, ceiling=3.0), run(12.0, 60_000, "input-bound", 0.3)
    text = format_comparison(compare(a, b), Path("a/timing.json"), Path("b/timing.json"))
    assert (
        "B takes 2.00 s more" in text
        and "where A's summary said fixing its input-bound bound could buy up to 3.00 s" in text
    )
    assert "within the 3.00 s" not in text and "the machine's load moved" not in text


def test_a_gain_beside_a_move_in_the_machines_load_says_so():
    """No setting of the runs records the machine's load: the training thread's wait for a core does."""
    a = run(10.0, 60_000, "compute-bound", 0.01, core_wait_share=0.63)
    b = run(4.0, 60_000, "compute-bound", 0.01, core_wait_share=0.32)
    text = format_comparison(compare(a, b), Path("a/timing.json"), Path("b/timing.json"))
    said = "the training thread waited for a core 63% of A's train time and 32% of B's: the machine's load moved"
    assert said in text and "A's summary stated no ceiling" in text
    steady = format_comparison(compare(a, {**b, "core_wait_share": 0.6}), Path("a/timing.json"), Path("b/timing.json"))
    assert "the machine's load moved" not in steady


def test_runs_of_different_epochs_are_compared_per_sample():
    a = run(10.0, 60_000, "input-bound", 0.6, ceiling=6.0)
    b = run(3.0, 30_000, "input-bound", 0.6)  # half the samples in 3 s: 6 s for A's epoch
    gain = gain_over(RunSummary.of(a), RunSummary.of(b))
    assert gain["scaled"] and gain["saved_s"] == pytest.approx(4.0) and not gain["removed"]


def test_the_verdicts_stand_in_their_columns_however_long_they_are():
    """Each right-aligned under its run's header, as the figures are: 'overhead-bound' once ran into B's verdict."""
    a, b = run(10.0, 60_000, "overhead-bound", 0.1), run(5.0, 60_000, "compute-bound", 0.1)
    lines = format_comparison(compare(a, b), Path("a"), Path("b")).splitlines()
    header = next(line for line in lines if line.endswith("the runs' noise"))
    (verdicts,) = [line for line in lines if line.startswith("verdict ")]
    ends = [verdicts.index(word) + len(word) for word in ("overhead-bound", "compute-bound")]
    assert ends == [header.index(" A ") + 2, header.index(" B ") + 2]


def test_an_old_summary_without_advice_says_there_was_no_ceiling():
    a = run(10.0, 60_000, "input-bound", 0.6)
    del a["advice"]
    assert "stated no ceiling" in format_comparison(compare(a, a), Path("a"), Path("b"))


def test_a_folder_gives_its_newest_timing_json_and_a_wrong_path_fails_in_one_line(tmp_path, capsys):
    old = write(tmp_path / "old", run(10.0, 60_000, "input-bound", 0.6, ceiling=6.0))
    new = write(tmp_path / "new", run(5.0, 60_000, "overhead-bound", 0.1))
    assert find_summary(tmp_path) == new and find_summary(old) == old
    main(["compare", str(old), str(new.parent.parent)])
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("A: ") and printed[1].startswith("B: ")  # the answer under them, before the table
    assert printed[2].startswith(
        "B saves 5.00 s per epoch (2.00x, noise not known: each run has 0 steady epochs measuring it), within"
    )
    fails_in_one_line(capsys, ["compare", str(tmp_path / "nowhere"), str(new)], "no such file or folder (give a")
    # a misspelt run's folder: the one meant, whole, so that the line pasted again compares
    fails_in_one_line(capsys, ["compare", str(tmp_path / "nwe"), str(new)], f"did you mean {tmp_path / 'new'}?")
    (new.parent / "timing.html").write_text("")  # a file no compare reads is no run meant: the summary beside it is
    fails_in_one_line(capsys, ["compare", str(new.parent / "timing.htm"), str(new)], f"did you mean {new}?")
    (tmp_path / "empty").mkdir()
    fails_in_one_line(capsys, ["compare", str(tmp_path / "empty"), str(new)], f"the newest under {tmp_path}: {new}")


def test_the_lab_ladder_v1_pinned_against_v2_pinned(workdir, capsys):
    small = ("--data.batch_size", "32", *NO_WORKERS)
    run_stage("v1_pinned", *small, epochs=2)
    run_stage("v2_pinned", *small, epochs=2)
    capsys.readouterr()
    logs = workdir / "lightning_logs"
    main(["compare", str(logs / "v1_pinned"), str(logs / "v2_pinned"), "--json"])
    found = json.loads(capsys.readouterr().out)
    assert found["names"] == ["v1_pinned", "v2_pinned"]
    keys = {row["key"] for row in found["rows"]}
    assert {"avg_train_s", "samples_per_s", "split.input_wait_s", "peak_rss_mb.main_process"} <= keys
    assert found["bought"]["saved_s"] is not None and found["bought"]["bound"] == found["verdicts"][0]


def test_what_changed_between_the_runs_is_listed_and_a_gain_beyond_the_ceiling_set_down_to_it():
    a = run(10.0, 60_000, "input-bound", 0.3, ceiling=3.0, data={"num_workers": 0, "batch_size": 512})
    b = run(4.0, 60_000, "overhead-bound", 0.1, data={"num_workers": 2, "batch_size": 512})
    text = format_comparison(compare(a, b), Path("a/timing.json"), Path("b/timing.json"))
    assert "changed: data.num_workers 0 -> 2" in text.splitlines()[: text.splitlines().index("")]
    assert (
        "beyond the 3.00 s that A's summary said fixing its input-bound bound could buy: more changed than that "
        "bound (data.num_workers 0 -> 2)" in text
    )
    same = format_comparison(compare(a, run(4.0, 60_000, "x", 0.1, data=a["data"])), Path("a"), Path("b"))
    assert "changed: nothing the runs record" in same and "so the machine's load or the data moved it" in same


def test_a_setting_a_run_asked_for_but_its_device_did_not_apply_is_said_beside_its_change():
    a = run(10.0, 60_000, "input-bound", 0.3, data={"pin_memory": False, "pin_memory_applied": False})
    b = run(9.0, 60_000, "input-bound", 0.3, data={"pin_memory": True, "pin_memory_applied": False})
    text = format_comparison(compare(a, b), Path("a/timing.json"), Path("b/timing.json"))
    assert "changed: data.pin_memory False -> True (not applied in B: skipped where it ran)" in text
    both = run(9.0, 60_000, "input-bound", 0.3, data={"pin_memory": True, "pin_memory_applied": False, "x": 1})
    text = format_comparison(compare(b, both), Path("a/timing.json"), Path("b/timing.json"))
    assert "changed: data.x - -> 1" in text and "applied in neither" not in text  # pin_memory itself did not change
    applied = run(9.0, 60_000, "input-bound", 0.3, data={"pin_memory": True, "pin_memory_applied": True})
    text = format_comparison(compare(a, applied), Path("a/timing.json"), Path("b/timing.json"))
    assert "data.pin_memory False -> True; data.pin_memory_applied False -> True" in text and "not applied" not in text
    # a run written before the model recorded what applied: neither another model nor a change
    old, new = (
        run(9.0, 60_000, "input-bound", 0.3, model={"lr": 0.1, "compile": True, **more})
        for more in ({}, {"compile_applied": False})
    )
    text = format_comparison(compare(old, new), Path("a/timing.json"), Path("b/timing.json"))
    assert "changed: nothing the runs record" in text and "other models" not in text


def test_epochs_of_other_sizes_and_an_interrupted_run_are_flagged_at_the_top():
    a = run(10.0, 60_000, "input-bound", 0.6, ceiling=6.0)
    stopped = [{"epoch": 1}, {"epoch": 2, "partial": {"steps": 3, "batches": 8}}]  # inside its second epoch
    b = run(3.0, 30_000, "input-bound", 0.6, interrupted=True, epochs=stopped)
    lines = format_comparison(compare(a, b), Path("a"), Path("b")).splitlines()
    notes = [line for line in lines[: lines.index("")] if line.startswith("note: ")]
    assert notes[0] == (
        "note: A's steady epochs train 60,000 samples and B's 30,000: compare per sample (throughput, median step), "
        "not per epoch"
    )
    said = "note: B was interrupted: the figures cover the 1 finished epoch(s) and 3 of epoch 2's 8 batches"
    assert said in notes
    from mnistperf.diagnosis.show.report import comparison_section, html_report

    section = comparison_section(compare(a, b))  # the page says what the text says above its table
    assert f'<p class="note">{said}</p>' in section.replace("&#x27;", "'") and section.index(said[:20]) < section.index(
        "<table"
    )
    page = html_report([("b", b)])  # a run's own page says it was interrupted
    assert '<p id="interrupted">Interrupted: the figures cover the 1 finished epoch(s) and 3 of' in page
    failed = {**b, "stopped_by": "ValueError"}  # stopped by an error: said so, in the notes and on its page
    said = "note: B was stopped by an error (ValueError): the figures cover the 1 finished epoch(s) and 3 of epoch 2's"
    assert [line for line in format_comparison(compare(a, failed), Path("a"), Path("b")).splitlines() if said in line]
    assert '<p id="interrupted">Stopped by an error (ValueError): the figures' in html_report([("b", failed)])
    from mnistperf.diagnosis.record.epoch_text import how_stopped

    assert (
        how_stopped("SIGTERMException") == "stopped (SIGTERMException)"
    )  # a kill or a preemption: no error of its own
    table = lines[lines.index("") + 2 :]  # after the blank line, the table's header
    assert table[0].startswith("throughput (samples/s)")  # the per-sample figures lead


def test_two_models_that_save_no_hyperparameters_or_cut_epochs_apart_are_told_apart(tmp_path):
    import torch
    from conftest import fit_module
    from lightning import LightningModule
    from torch.utils.data import DataLoader, TensorDataset

    from mnistperf.diagnosis import EpochTimer

    class Net(LightningModule):
        def __init__(self, *widths):
            super().__init__()  # no save_hyperparameters(): timing.json's model is {}
            self.net = torch.nn.Sequential(*(torch.nn.Linear(a, b) for a, b in zip(widths, widths[1:], strict=False)))

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class Deeper(Net):
        pass

    rows = TensorDataset(torch.randn(32, 4))
    for name, module, limit, loader in (
        ("a", Net(4, 1), 1.0, DataLoader(rows, batch_size=8)),
        ("b", Deeper(4, 8, 1), 3, DataLoader(rows, batch_size=8, num_workers=1, persistent_workers=True)),
    ):
        fit_module(
            module, loader, callbacks=[EpochTimer()], default_root_dir=tmp_path / name, limit_train_batches=limit
        )
    a, b = (json.loads((tmp_path / name / "timing.json").read_text()) for name in "ab")
    found = compare(RunSummary.of(a), RunSummary.of(b))
    assert {"module.class Net -> Deeper", "module.parameters 5 -> 49"} <= set(found["changed"])
    assert "trainer.limit_train_batches 1.0 -> 3" in found["changed"]  # epochs cut apart: said, not the machine's
    # a plain DataLoader's settings, where no DataModule records its own
    assert {"loader.num_workers 0 -> 1", "loader.persistent_workers False -> True"} <= set(found["changed"])
    older = {key: value for key, value in a.items() if key not in ("loader", "module", "trainer")}  # before these
    changed = compare(RunSummary.of(older), RunSummary.of(b))["changed"]
    assert not any(c.startswith(("loader.", "module.", "trainer.")) for c in changed)


def test_what_the_advice_changes_in_a_fit_is_recorded_and_listed_as_changed(tmp_path):
    """A callback left out, a logger's writes made rarer, a bar drawn less often, fewer threads: each a fix the advice
    names, and each listed by compare, not put down to the machine's load."""
    import torch
    from conftest import fit_module
    from lightning.pytorch.callbacks import Callback, TQDMProgressBar
    from lightning.pytorch.loggers import CSVLogger
    from test_timing_any_project import TupleBatches
    from torch.utils.data import DataLoader, TensorDataset

    from mnistperf.diagnosis import EpochTimer

    class Slow(Callback):
        pass

    data = DataLoader(TensorDataset(torch.randn(16, 3), torch.randint(0, 2, (16,))), batch_size=4)
    threads = torch.get_num_threads()
    runs = []
    for callbacks, every, refresh in (([Slow()], 1, 1), ([], 50, 20)):
        timer = EpochTimer()
        logger = CSVLogger(tmp_path, f"run{len(runs)}")
        bar = TQDMProgressBar(refresh_rate=refresh)
        options = {"enable_progress_bar": True, "log_every_n_steps": every, "logger": logger}
        fit_module(TupleBatches(), data, callbacks=[timer, bar, *callbacks], default_root_dir=tmp_path, **options)
        runs.append(RunSummary.of(json.loads(timer.summary_path.read_text())))
        torch.set_num_threads(1)
    torch.set_num_threads(threads)
    changed = compare(*runs)["changed"]
    assert "fit.callbacks.Slow 1 -> -" in changed and "fit.log_every_n_steps 1 -> 50" in changed
    assert "fit.progress_bar_refresh_rate 1 -> 20" in changed
    assert (f"fit.torch_threads {threads} -> 1" in changed) == (threads != 1)
    assert not [line for line in changed if line.startswith(("fit.loggers", "fit.callbacks.EpochTimer"))]


def test_a_culprits_gain_is_held_to_what_a_said_of_it_and_a_slower_b_to_what_changed():
    from mnistperf.diagnosis.show.compare import format_bought

    a = run(1.0, 6_400, "overhead-bound", 0.0, ceiling=0.5)
    a["advice"]["culprit"] = {"part": "callback Slow", "per": "step", "share": 0.5, "s": 0.002, "speed_up_at_most": 2.0}
    changed = ["fit.callbacks.Slow 1 -> -"]
    bought = format_bought(gain_over(RunSummary.of(a), RunSummary.of(run(0.8, 6_400, "overhead-bound", 0.0))), changed)
    # 1.25x, within the ceiling (0.2 s of 0.5 s), short of what the culprit's removal was said to buy
    assert "; short of the 2.00x that A said a step without callback Slow could be; B is still" in bought
    assert bought.startswith("B saves 0.20 s per epoch (1.25x") and "within the 0.50 s" in bought
    assert "as much as the 2.00x" in format_bought(
        gain_over(RunSummary.of(a), RunSummary.of(run(0.5, 6_400, "compute-bound", 0.0)))
    )
    still = run(0.8, 6_400, "overhead-bound", 0.0)  # B names the same culprit: it was not taken out
    still["advice"]["culprit"] = a["advice"]["culprit"]
    assert "without callback Slow" not in format_bought(gain_over(RunSummary.of(a), RunSummary.of(still)))
    unbounded = run(1.0, 6_400, "overhead-bound", 0.0)  # no ceiling stated, B slower: tied to what changed
    slower = format_bought(
        gain_over(RunSummary.of(unbounded), RunSummary.of(run(2.0, 6_400, "input-bound", 0.4))),
        ["loader.num_workers 0 -> 2"],
    )
    assert slower.endswith("; B is slower after what changed (loader.num_workers 0 -> 2)")
