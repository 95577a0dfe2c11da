"""The graphed step's GPU time per replay, in variants beside a hand-written graphed step, each in a fresh process.

A replay of v4_graphed's step (one 512-sample batch: forward, loss, sums, backward, Adam) is timed with CUDA events
around many replays, no profiler running, in each variant of :data:`VARIANTS`: the step as the stage runs it, with
``torch.backends.cudnn.benchmark`` on before the warm-up that precedes capture, without the in-graph sums, in
float32; and a hand-written step (:func:`hand_written_step`: the same network and batch, captured as PyTorch's CUDA
notes describe, with ``cudnn.benchmark`` on, as the figure it is compared with was measured; once more with its
network compiled before capture, its kernels fused) on the same GPU, so the ratio needs no other card. cuDNN keeps
the algorithms it chose for a shape for the life of a process, whichever way it chose them, so every variant runs in
a process of its own. After the timing, one profiler window attached after capture reads the ten longest kernels and
how many kernels a replay launched; one variant starts an empty profiler before capture first, to see whether that
blinds a later window.

    python -m mnistperf.bench.graph_probe OUT_DIR            # every variant: probe.json and probe.md
    python -m mnistperf.bench.graph_probe --variant NAME     # one variant, its figures as JSON on stdout
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from mnistperf.atomic import atomic_write_text
from mnistperf.tables import markdown_table

BATCH = 512  # v4_graphed's batch
ROUNDS, REPLAYS = 5, 100  # timed rounds, each of this many replays between two CUDA events
WARM_REPLAYS = 20  # untimed replays first
PROFILED_REPLAYS = 20
TOP_KERNELS = 10


@dataclass(frozen=True)
class Variant:
    """One way of building and capturing the step.

    Args:
        hand_written: the hand-written step instead of the stage's.
        benchmark: ``torch.backends.cudnn.benchmark`` on before the warm-up (cuDNN times its algorithms there).
        sums: the stage's in-graph sums of loss and correct predictions.
        bf16: bf16 autocast, as the stage's ``bf16-mixed``; else float32.
        profiler_before_capture: an empty profiler run before capture (torch's guard against pytorch#75504).
        compiled: the hand-written step's network compiled in place (torch.compile's default mode: fused kernels),
            compiled in the warm-up, then captured like the rest.
    """

    hand_written: bool = False
    benchmark: bool = False
    sums: bool = True
    bf16: bool = True
    profiler_before_capture: bool = False
    compiled: bool = False


VARIANTS = {  # in order of what they tell: a part cut at its time limit keeps the first ones
    "step": Variant(),
    "step, cudnn.benchmark": Variant(benchmark=True),
    "hand-written, cudnn.benchmark": Variant(hand_written=True, benchmark=True),
    "hand-written, compiled, cudnn.benchmark": Variant(hand_written=True, benchmark=True, compiled=True),
    "hand-written": Variant(hand_written=True),
    "step, empty profiler before capture": Variant(profiler_before_capture=True),
    "step without sums": Variant(sums=False),
    "step in float32": Variant(bf16=False),
    "step, cudnn.benchmark, float32": Variant(benchmark=True, bf16=False),
}
REFERENCE = "hand-written, cudnn.benchmark"  # the step the stage's is held against


def batch(device: torch.device) -> dict[str, torch.Tensor]:
    """A resident batch as the stage hands it over: normalized float images and their labels."""
    generator = torch.Generator(device="cpu").manual_seed(0)
    images = torch.randn(BATCH, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 10, (BATCH,), generator=generator)
    return {"image": images.to(device), "label": labels.to(device)}


def stage_step(variant: Variant, device: torch.device) -> Callable[[dict[str, torch.Tensor]], None]:
    """v4_graphed's step as its trainer runs it: captured at its first call, replayed at every later one."""
    from mnistperf.model import ImageClassifier

    model = ImageClassifier(channels_last=True, fused_adam=True, cuda_graph=True).to(device)
    model.net.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    return model.standalone_step("bf16-mixed" if variant.bf16 else "32-true", summed=variant.sums)


def hand_written_step(variant: Variant, device: torch.device) -> Callable[[dict[str, torch.Tensor]], None]:
    """The same network and batch in one hand-captured CUDA graph: static buffers, side-stream warm-up, replay."""
    net = hand_written_net(device)
    if variant.compiled:
        net.compile()  # compiled at the warm-up's first call, before capture
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3, fused=True, capturable=True)
    static: dict[str, torch.Tensor] = {}

    def whole() -> None:
        eager_step(net, optimizer, static, variant.bf16)

    graph = torch.cuda.CUDAGraph()

    def step(data: dict[str, torch.Tensor]) -> None:
        if not static:
            static.update({name: tensor.clone() for name, tensor in data.items()})
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    whole()
            torch.cuda.current_stream().wait_stream(side)
            with torch.cuda.graph(graph):
                whole()
        for name, tensor in data.items():
            static[name].copy_(tensor, non_blocking=True)
        graph.replay()

    return step


def hand_written_net(device: torch.device) -> torch.nn.Module:
    """The hand-written step's network: the stages' SimpleCNN on ``device``, its weights channels-last."""
    from mnistperf.model.network import SimpleCNN

    return SimpleCNN().to(device).to(memory_format=torch.channels_last)  # type: ignore[call-overload]


def eager_step(
    net: torch.nn.Module, optimizer: torch.optim.Optimizer, data: dict[str, torch.Tensor], bf16: bool
) -> None:
    """The hand-written step once, eagerly: grads zeroed in place, forward and loss under autocast, backward, Adam."""
    optimizer.zero_grad(set_to_none=False)
    with torch.autocast(data["image"].device.type, dtype=torch.bfloat16, enabled=bf16, cache_enabled=False):
        images = data["image"].contiguous(memory_format=torch.channels_last)
        loss = torch.nn.functional.cross_entropy(net(images), data["label"])
    loss.backward()
    optimizer.step()


def kernel_table(profiler: Any, replays: int) -> tuple[int, list[dict[str, Any]]]:
    """(kernels launched per replay, the longest kernels by their total time) from a profiler's device events."""
    rows = []
    for event in profiler.key_averages():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        total_us = getattr(event, "self_device_time_total", None)
        if total_us is None:
            total_us = event.self_cuda_time_total
        rows.append({"kernel": event.key, "us_per_replay": total_us / replays, "calls": event.count})
    rows.sort(key=lambda row: -row["us_per_replay"])
    return round(sum(row["calls"] for row in rows) / replays), rows[:TOP_KERNELS]


def measure(name: str) -> dict[str, Any]:
    """One variant's figures: ms per replay (median and range over rounds), then the kernels a profiler saw."""
    variant = VARIANTS[name]
    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = variant.benchmark
    if variant.profiler_before_capture:
        with torch.profiler.profile():
            pass
    data = batch(device)
    step = (hand_written_step if variant.hand_written else stage_step)(variant, device)
    step(data)  # warm-up and capture
    for _ in range(WARM_REPLAYS):
        step(data)
    per_replay_ms = []
    for _ in range(ROUNDS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(REPLAYS):
            step(data)
        end.record()
        end.synchronize()
        per_replay_ms.append(start.elapsed_time(end) / REPLAYS)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        for _ in range(PROFILED_REPLAYS):
            step(data)
        torch.cuda.synchronize()
    kernels, top = kernel_table(profiler, PROFILED_REPLAYS)
    return {
        "variant": name,
        **asdict(variant),
        "ms_per_replay": statistics.median(per_replay_ms),
        "ms_per_replay_range": [min(per_replay_ms), max(per_replay_ms)],
        "kernels_per_replay": kernels,
        "top_kernels": top,
        "device": torch.cuda.get_device_name(0),
    }


def run_all(out: Path, names: Sequence[str] = tuple(VARIANTS)) -> list[dict[str, Any]]:
    """Every variant in a process of its own; probe.json and probe.md in ``out``; the figures."""
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for name in names:
        done = subprocess.run(
            [sys.executable, "-m", "mnistperf.bench.graph_probe", "--variant", name],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            results.append({"variant": name, "failed": done.stderr.strip().splitlines()[-1:]})
            print(f"graph probe: {name}: failed\n{done.stderr[-3000:]}", flush=True)
            continue
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        row = results[-1]
        print(f"graph probe: {name}: {row['ms_per_replay']:.3f} ms per replay, "
              f"{row['kernels_per_replay']} kernels seen per replay", flush=True)  # fmt: skip
        write(out, results)  # after every variant: a probe cut at its time limit keeps what it measured
    write(out, results)
    print(markdown(results), flush=True)
    return results


def write(out: Path, results: list[dict[str, Any]]) -> None:
    """probe.json and probe.md in ``out`` from the variants measured so far."""
    atomic_write_text(out / "probe.json", json.dumps(results, indent=2) + "\n")
    atomic_write_text(out / "probe.md", markdown(results))


def markdown(results: list[dict[str, Any]]) -> str:
    """The variants' table, their ratio to the hand-written step, and each variant's longest kernels."""
    measured = {r["variant"]: r for r in results if "ms_per_replay" in r}
    reference = measured.get(REFERENCE, {}).get("ms_per_replay")
    device = next((r["device"] for r in measured.values()), "no device")
    lines = [
        f"# The graphed step per replay ({BATCH} samples) on {device}",
        "",
        f"CUDA events around {ROUNDS} rounds of {REPLAYS} replays, no profiler running; each variant in a fresh "
        f"process. Kernels: a profiler attached after capture, over {PROFILED_REPLAYS} replays.",
        "",
    ]
    rows = []
    for r in results:
        if "ms_per_replay" not in r:
            rows.append([r["variant"], "failed", "", "", ""])
            continue
        ratio = f"{r['ms_per_replay'] / reference:.2f}x" if reference else ""
        low, high = r["ms_per_replay_range"]
        median, kernels = r["ms_per_replay"], r["kernels_per_replay"]
        rows.append([r["variant"], f"{median:.3f}", f"{low:.3f}-{high:.3f}", ratio, kernels])
    header = ["variant", "ms per replay", "range", "/ hand-written", "kernels per replay"]
    lines.append(markdown_table(header, rows, right={1, 3, 4}))
    for r in measured.values():
        lines += ["", f"## {r['variant']}: the {TOP_KERNELS} longest kernels", ""]
        top = [[f"`{k['kernel'][:110]}`", f"{k['us_per_replay']:.1f}", k["calls"]] for k in r["top_kernels"]]
        lines.append(markdown_table(["kernel", "us per replay", "calls"], top, right={1, 2}))
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one variant (``--variant``) or all of them into a folder."""
    parser = argparse.ArgumentParser(prog="python -m mnistperf.bench.graph_probe", description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="where probe.json and probe.md go")
    parser.add_argument("--variant", choices=list(VARIANTS), help="measure this variant alone, JSON on stdout")
    opts = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("graph probe: no CUDA device here; the graphed step replays only on a GPU.", file=sys.stderr)
        return 2
    if opts.variant:
        print(json.dumps(measure(opts.variant)))
        return 0
    if opts.out is None:
        parser.error("give OUT_DIR (or --variant NAME)")
    results = run_all(opts.out)
    return 0 if all("ms_per_replay" in r for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
