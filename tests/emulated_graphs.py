"""StepGraphs' logic on a CPU, for tests: the same static buffers, warm-up, undo and per-shape bookkeeping.

The "replay" calls the step on the static buffers, and refuses where a real graph would fail silently: where
the state it was captured over has moved or been replaced since (a real replay demands the same tensors at
the same addresses). Nothing is faster for it.
"""

from __future__ import annotations

from collections.abc import Callable

from mnistperf.model.graphs import Batch, StepGraphs, autocast_without_cache


class EmulatedGraphs(StepGraphs):
    """StepGraphs that captures on any device, its replays the step run on the static buffers."""

    def graphs_here(self, batch: Batch) -> bool:
        return True

    def record(self, inputs: Batch) -> Callable[[], None]:
        captured = [t.data_ptr() for t in self.state()]

        def replay() -> None:
            if [t.data_ptr() for t in self.state()] != captured:
                raise RuntimeError(
                    "StepGraphs: replaying a graph whose state moved or was replaced since its capture; "
                    "reset() the graphs first."
                )
            with autocast_without_cache(False):
                self.step(inputs)

        return replay
