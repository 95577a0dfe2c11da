"""The whole training step as one CUDA graph: captured once per batch shape, replayed every step.

* :class:`StepGraphs` runs a step function ``step(batch)`` that updates state in place (weights,
  optimizer moments, sums). On CUDA it keeps static input buffers and one graph per batch shape; the
  first call with a shape warms up on a side stream, puts the state back exactly as it was, captures,
  then replays. Elsewhere it calls the step eagerly. ``captures`` counts the graphs made. A subclass
  can record something other than a CUDA graph (:meth:`StepGraphs.graphs_here`, :meth:`StepGraphs.record`).
* :class:`GraphedAdam`, an Adam whose ``step(closure)`` runs only the closure (the replayed graph, which
  holds the update recorded by :meth:`GraphedAdam.update`); its checkpointed state is Adam's own.

A captured step may not sync with the host, branch on data or change shape. Why: docs/stages.md#graphed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from mnistperf.diagnosis.measure.busy_window import before_graph_capture

Batch = dict[str, torch.Tensor]


class GraphedAdam(torch.optim.Adam):
    """Adam whose ``step(closure)`` only runs the closure; :meth:`update` is Adam's own step, for the graph.

    ``capturable`` where a graph captures its update (its step count then lives on the device, so a replayed
    graph advances it), and only there: capturable Adam is slower when it runs eagerly. A checkpoint's flags
    give way to the run's (:func:`mnistperf.model.checkpoint.follow_the_run`).
    """

    def step(self, closure: Callable[[], object] | None = None):
        """Run the closure, which runs (or replays) the whole step; there is no step without one."""
        if closure is None:
            raise RuntimeError("GraphedAdam.step needs the closure that runs (or replays) the whole step.")
        return closure()

    def update(self) -> None:
        """Adam's update of the parameters from their gradients (recorded into the graph when capturing)."""
        torch.optim.Adam.step(self)


def step_state(module: torch.nn.Module, optimizer: torch.optim.Optimizer, *extra: torch.Tensor) -> list[torch.Tensor]:
    """The tensors a whole training step changes, what :class:`StepGraphs` asks for as ``state``.

    They are the module's parameters and buffers, the optimizer's state (moments, step counts) and any ``extra``
    (running sums).
    """
    tensors = [*module.parameters(), *module.buffers()]
    tensors += [t for state in optimizer.state.values() for t in state.values() if isinstance(t, torch.Tensor)]
    return tensors + list(extra)


@dataclass
class _Captured:
    inputs: Batch  # static buffers the graph reads; each step's batch is copied into them
    replay: Callable[[], None]


def _shape_key(batch: Batch) -> tuple:
    return tuple((name, tuple(t.shape), t.dtype, t.device) for name, t in sorted(batch.items()))


class StepGraphs:
    """Runs ``step(batch)`` as a replayed CUDA graph, one per batch shape (eagerly off CUDA).

    Args:
        step: the whole training step; it must update everything it changes in place.
        state: the tensors ``step`` changes (parameters, buffers, optimizer state, sums); asked
            before and after the warm-up, so that the warm-up can be undone.
        warmup_steps: eager steps on a side stream before a capture (lazy initialization of
            cuDNN/cuBLAS workspaces and of the optimizer's state happens there, not in the graph).
    """

    def __init__(
        self,
        step: Callable[[Batch], None],
        state: Callable[[], Iterable[torch.Tensor]],
        warmup_steps: int = 3,
    ):
        self.step = step
        self.state = state
        self.warmup_steps = warmup_steps
        self.graphs: dict[tuple, _Captured] = {}
        self.captures = 0

    def reset(self) -> None:
        """Forget every graph; the next call with each shape captures again.

        Call it whenever the state the graphs read and write may have moved or been replaced (a fit's start and
        end, a checkpoint loaded).
        """
        self.graphs.clear()

    def __call__(self, batch: Batch) -> None:
        """Run the step on a batch: replay its shape's graph (captured at its first call) on CUDA, else eagerly."""
        if not self.graphs_here(batch):
            self.step(batch)
            return
        key = _shape_key(batch)
        captured = self.graphs.get(key)
        if captured is None:
            captured = self.graphs[key] = self._capture(batch)
        for name, tensor in batch.items():
            captured.inputs[name].copy_(tensor, non_blocking=True)
        captured.replay()

    def graphs_here(self, batch: Batch) -> bool:
        """Whether this batch's step is captured and replayed: where the batch is on CUDA."""
        return all(t.is_cuda for t in batch.values())

    def record(self, inputs: Batch) -> Callable[[], None]:
        """Capture the step over the static ``inputs`` (warmed up, state undone) and return its replay."""
        # Each graph has its own memory pool: the full batch's and the last batch's replays interleave in no
        # fixed order, which a shared pool would require. Every tensor that outlives a step (weights, gradients,
        # Adam's state, the sums) was made by the warm-up, outside the pools.
        before_graph_capture()  # so that a profiled busy window sees this graph's kernels
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.step(inputs)
        return graph.replay

    # ------------------------------------------------------------------ capture
    def _capture(self, batch: Batch) -> _Captured:
        inputs = {name: tensor.clone() for name, tensor in batch.items()}
        on_cuda = all(t.is_cuda for t in inputs.values())
        with autocast_without_cache(on_cuda):
            self._warm_up(inputs, on_cuda)
            replay = self.record(inputs)
        self.captures += 1
        return _Captured(inputs, replay)

    def _warm_up(self, inputs: Batch, on_cuda: bool) -> None:
        """A few eager steps on a side stream, then every tensor of the state as it was before them."""
        before = {id(t): (t, t.detach().clone()) for t in self.state()}
        stream = torch.cuda.Stream() if on_cuda else None
        if stream is not None:
            stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream) if stream is not None else nullcontext():
            for _ in range(self.warmup_steps):
                self.step(inputs)
        if stream is not None:
            torch.cuda.current_stream().wait_stream(stream)
        with torch.no_grad():
            for tensor in self.state():
                if id(tensor) in before:
                    tensor.copy_(before[id(tensor)][1])
                else:  # made by the warm-up (Adam's moments and step count, the sums): as if never made
                    tensor.zero_()


def autocast_without_cache(on_cuda: bool):
    """The autocast already in force (Lightning's bf16-mixed), with its weight-cast cache off, as capture needs."""
    device = "cuda" if on_cuda else "cpu"
    return torch.autocast(
        device, dtype=torch.get_autocast_dtype(device), enabled=torch.is_autocast_enabled(device), cache_enabled=False
    )
