"""The graphed step's floor on a card: its FLOPs and the bytes its operators move, against the card's peaks.

One eager step of the hand-written graphed step (:func:`~mnistperf.bench.graph_probe.eager_step`: 512 samples, bf16
autocast, channels_last, Adam), after a first one that makes Adam's state, is counted on the device at hand: its
FLOPs by torch's FlopCounterMode (the convolutions and matrix products, forward and backward), and the bytes each
operator that moves data reads and writes (its tensor arguments and results; views move none), as if nothing stayed
in a cache between operators. Against a card's dense peak for the number format and its memory bandwidth, the larger
of the two times estimates the least a replay could take where no operator's data stays in a cache; a replay
measured far above both is bound by its kernels' launches and latencies, not by arithmetic or memory. The counts
come from the operators of the device that ran them (a CPU's sequence, where no GPU is at hand, is close to but not
the same as cuDNN's).

    python -m mnistperf.bench.step_floor [--card "NVIDIA H200"] [OUT_DIR]   # floor.json and floor.md in OUT_DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from mnistperf.atomic import atomic_write_text
from mnistperf.bench.graph_probe import BATCH, batch, eager_step, hand_written_net
from mnistperf.diagnosis.measure.flops import OWN_PEAKS, first_named
from mnistperf.machine import describe_device
from mnistperf.upstream import TorchDispatchMode, tree_leaves

# Memory bandwidth from the vendors' data sheets, bytes/s, for the cards the lab's figures come from; the first name
# found in the device's name.
BANDWIDTH: tuple[tuple[str, float], ...] = (
    ("H200", 4.8e12),
    ("H100 NVL", 3.9e12),
    ("H100 PCIe", 2.0e12),
    ("H100", 3.35e12),
    ("A100.*80GB", 2.039e12),
    ("A100", 1.555e12),
)


class Traffic(TorchDispatchMode):
    """Counts the operators that move data and the bytes they read and write: tensor arguments and results.

    A view moves nothing. An argument written in place counts as read and written, except where the operator only
    writes it (an ``out=`` argument, the destination of ``copy_``, ``zero_`` or ``fill_``). An operator that moves no
    byte (a profiler's mark) is not counted.
    """

    WRITE_ONLY = frozenset({"aten::copy_", "aten::zero_", "aten::fill_"})  # their ``self`` is written, not read
    VIEWS = frozenset({"aten::_unsafe_view"})  # a view whose schema does not say so

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0
        self.operators = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        schema = func._schema
        written = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        views = schema.returns and all(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
        if schema.name in self.VIEWS or (views and not written):
            return out
        named = {arg.name: value for arg, value in zip(schema.arguments, args, strict=False)} | dict(kwargs or {})
        only_written = [n for n in written if n.startswith("out") or (n == "self" and schema.name in self.WRITE_ONLY)]
        read = _nbytes(tree_leaves([value for name, value in named.items() if name not in only_written]))
        mutated = _nbytes(tree_leaves([named[name] for name in written if name in named]))
        results = 0 if any(ret.alias_info is not None for ret in schema.returns) else _nbytes(tree_leaves(out))
        if read + mutated + results:
            self.bytes += read + mutated + results
            self.operators += 1
        return out


def _nbytes(leaves: Sequence[Any]) -> int:
    return sum(leaf.nbytes for leaf in leaves if isinstance(leaf, torch.Tensor))


@dataclass(frozen=True)
class StepCount:
    """One step's FLOPs, the bytes its operators read and write, how many operators moved data, where, and its batch."""

    flop_count: float
    bytes_moved: float
    operators: int
    device: str
    batch_size: int


def count(device: torch.device, bf16: bool = True, batch_size: int = BATCH) -> StepCount:
    """Count one step of the hand-written graphed step on ``device``, after a first step has made Adam's state.

    ``batch_size``: the first this many samples of the probe's batch (at most BATCH).
    """
    net = hand_written_net(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3, fused=True)
    data = {name: tensor[:batch_size].contiguous() for name, tensor in batch(device).items()}
    eager_step(net, optimizer, data, bf16)
    with FlopCounterMode(display=False) as flops, Traffic() as traffic:
        eager_step(net, optimizer, data, bf16)
    return StepCount(
        float(flops.get_total_flops()),
        float(traffic.bytes),
        traffic.operators,
        describe_device(device),
        len(data["label"]),
    )


def floor(step: StepCount, card: str, fmt: str = "bf16") -> dict[str, Any]:
    """The step's least time on ``card``: the larger of its FLOPs at the dense peak and its bytes at the bandwidth.

    Each figure is None, with why, where the card's peak or bandwidth is not known here.
    """
    peak = (first_named(OWN_PEAKS, card) or {}).get(fmt)
    bandwidth = first_named(BANDWIDTH, card)
    compute_s = step.flop_count / peak if peak else None
    memory_s = step.bytes_moved / bandwidth if bandwidth else None
    known = [s for s in (compute_s, memory_s) if s is not None]
    missing = [
        f"{what} ({table})"
        for what, value, table in (
            (f"{fmt} peak", peak, "mnistperf.diagnosis.measure.flops.OWN_PEAKS"),
            ("memory bandwidth", bandwidth, "mnistperf.bench.step_floor.BANDWIDTH"),
        )
        if value is None
    ]
    return {
        **asdict(step),
        "card": card,
        "number_format": fmt,
        "peak_flops_per_s": peak,
        "bandwidth_bytes_per_s": bandwidth,
        "compute_ms": None if compute_s is None else compute_s * 1e3,
        "memory_ms": None if memory_s is None else memory_s * 1e3,
        "floor_ms": max(known) * 1e3 if len(known) == 2 else None,
        "why_no_floor": f"no {' or '.join(missing)} is known for {card}" if missing else None,
    }


def lines(result: dict[str, Any]) -> list[str]:
    """The count and the floor as sentences."""
    said = [
        f"One step of {result['batch_size']} samples, counted on {result['device']}: "
        f"{result['flop_count'] / 1e9:.2f} GFLOP, {result['bytes_moved'] / 1e6:.1f} MB read and written by "
        f"{result['operators']} operators that move data."
    ]
    if result["floor_ms"] is None:
        return [*said, f"No floor: {result['why_no_floor']}."]
    return [
        *said,
        f"On {result['card']}: {result['compute_ms'] * 1e3:.1f} us at its {result['number_format']} peak "
        f"({result['peak_flops_per_s'] / 1e12:,.1f} TFLOP/s), {result['memory_ms'] * 1e3:.1f} us at its bandwidth "
        f"({result['bandwidth_bytes_per_s'] / 1e12:.2f} TB/s); with each operator's data from memory, a floor of "
        f"{result['floor_ms'] * 1e3:.1f} us a step.",
    ]


def write(out: Path, result: dict[str, Any]) -> None:
    """floor.json and floor.md in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "floor.json", json.dumps(result, indent=2) + "\n")
    text = "\n".join(["# The graphed step's floor", "", *(f"- {line}" for line in lines(result))])
    atomic_write_text(out / "floor.md", text + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Count the step on this machine's GPU (else its CPU) and print its floor on a card; write it to OUT_DIR."""
    parser = argparse.ArgumentParser(prog="python -m mnistperf.bench.step_floor", description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="where floor.json and floor.md go")
    parser.add_argument("--card", help="the GPU whose peaks the floor uses (default: this machine's)")
    opts = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    card = opts.card or (torch.cuda.get_device_name(device) if device.type == "cuda" else None)
    if card is None:
        print(
            "step floor: no GPU here to take the peaks of; name a card: "
            'python -m mnistperf.bench.step_floor --card "NVIDIA H200"',
            file=sys.stderr,
        )
        return 2
    result = floor(count(device), card)
    print("\n".join(f"step floor: {line}" for line in lines(result)), flush=True)
    if opts.out is not None:
        write(opts.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
