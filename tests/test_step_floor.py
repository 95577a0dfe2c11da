"""The graphed step's floor: what its operators move, its FLOPs, and the larger time on a card's peaks."""

import json

import pytest
import torch

from mnistperf.bench import step_floor
from mnistperf.bench.step_floor import StepCount, Traffic, count, floor
from mnistperf.machine import describe_device


def test_an_operator_counts_what_it_reads_and_writes_and_a_view_nothing():
    x = torch.ones(1000)  # 4,000 bytes
    with Traffic() as viewed:
        x.view(10, 100).t()
    with Traffic() as added:
        x + 1  # noqa: B018  (read x, write a new tensor)
    with Traffic() as in_place:
        x.add_(1)  # read x, write x
    with Traffic() as copied:
        x.copy_(torch.zeros(1000))  # read the zeros, write x
    with Traffic() as marked, torch.profiler.record_function("a mark"):  # an operator that moves nothing
        pass
    assert (viewed.operators, viewed.bytes) == (0, 0)
    assert (added.operators, added.bytes) == (1, 8000)
    assert (in_place.operators, in_place.bytes) == (1, 8000)
    assert (copied.operators, copied.bytes) == (2, 12000)  # the zeros made (4,000 written), then copied (8,000)
    assert (marked.operators, marked.bytes) == (0, 0)


def test_the_step_s_flops_grow_with_its_samples_and_its_operators_do_not():
    small, large = count(torch.device("cpu"), batch_size=8), count(torch.device("cpu"), batch_size=16)
    assert large.flop_count == 2 * small.flop_count > 0
    assert large.operators == small.operators > 10
    assert large.bytes_moved > small.bytes_moved  # activations grow; the parameters and Adam's state do not
    assert (small.batch_size, large.batch_size) == (8, 16) and small.device.startswith("cpu")


def test_the_floor_is_the_larger_of_the_two_times_on_a_known_card():
    step = StepCount(flop_count=989.4e12 * 1e-3, bytes_moved=4.8e12 * 2e-3, operators=60, device="cpu", batch_size=512)
    result = floor(step, "NVIDIA H200")
    assert result["compute_ms"] == pytest.approx(1.0) and result["memory_ms"] == pytest.approx(2.0)
    assert result["floor_ms"] == pytest.approx(2.0) and result["why_no_floor"] is None
    busier = floor(StepCount(3 * 989.4e12 * 1e-3, 4.8e12 * 2e-3, 60, "cpu", 512), "NVIDIA H200")
    assert busier["floor_ms"] == pytest.approx(3.0)


def test_an_unknown_card_has_no_floor_and_says_which_table_lacks_it():
    result = floor(StepCount(1e9, 1e6, 60, "cpu", 512), "Tesla T4")
    assert result["floor_ms"] is None
    assert "OWN_PEAKS" in result["why_no_floor"] and "step_floor.BANDWIDTH" in result["why_no_floor"]
    assert step_floor.lines(result)[-1] == f"No floor: {result['why_no_floor']}."


def test_the_command_writes_the_floor_for_a_named_card(tmp_path, capsys):
    assert step_floor.main(["--card", "NVIDIA H200", str(tmp_path)]) == 0
    written = json.loads((tmp_path / "floor.json").read_text())
    assert written["card"] == "NVIDIA H200" and written["floor_ms"] > 0
    assert written["floor_ms"] == max(written["compute_ms"], written["memory_ms"])
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("step floor: One step of 512 samples, counted on ")
    assert (tmp_path / "floor.md").read_text().count("\n- ") == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU here has a name to take the peaks of")
def test_without_a_gpu_the_command_asks_for_a_card_in_one_line(capsys):
    assert step_floor.main([]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.endswith('python -m mnistperf.bench.step_floor --card "NVIDIA H200"')


@pytest.mark.cuda
def test_on_a_gpu_the_step_is_counted_there_and_the_floor_takes_its_name(tmp_path):
    assert step_floor.main([str(tmp_path)]) == 0
    written = json.loads((tmp_path / "floor.json").read_text())
    assert written["card"] == torch.cuda.get_device_name(0) and written["device"] == describe_device(
        torch.device("cuda")
    )
    assert written["flop_count"] == count(torch.device("cpu")).flop_count  # the network's FLOPs, whatever the device
