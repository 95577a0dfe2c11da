"""A callback pays Lightning only for the per-batch hooks it uses (why: :func:`mnistperf.upstream.skip_hook`).

The timer's phase hooks are dispatched on the steps it samples for the split alone (:class:`SampledSteps`).
docs/results/cpu-2core-diagnosis-cost/dispatch.py measures them. A wrapper forwarding hooks to the callback must check
a hook is callable first, as Lightning does: a skipped one is None.
"""

from __future__ import annotations

import math

import torch
from lightning.pytorch import Callback

from mnistperf.diagnosis.measure.phases import StepPhases, any_sampled, sampled
from mnistperf.diagnosis.record.epoch_text import IN_WINDOW, unsampled
from mnistperf.upstream import restore_hook, skip_hook

# Those called for every batch: each loop's batch hooks, and those around the backward and the optimizer's step.
BATCH_HOOKS = tuple(
    hook for hook in vars(Callback) if "_batch_" in hook or hook.startswith(("on_before_", "on_after_"))
)
PHASE_HOOKS = ("on_before_backward", "on_after_backward", "on_before_optimizer_step")


def skip_unused_batch_hooks(callback: Callback) -> None:
    """Have Lightning skip each per-batch hook ``callback``'s class does not override (one set on it is left)."""
    for hook in BATCH_HOOKS:
        if hook not in vars(callback) and getattr(type(callback), hook) is getattr(Callback, hook):
            skip_hook(callback, hook)


class SampledSteps:
    """The sampled steps' phase marks (:class:`StepPhases` on ``device``); ``callback``'s phase hooks run on them only.

    A hook the callback's class overrides beyond ``owner``'s (a subclass's own) is dispatched every step.
    """

    def __init__(self, callback: Callback, owner: type[Callback], device: torch.device):
        self.callback, self.phases = callback, StepPhases(device)
        self.hooks = [hook for hook in PHASE_HOOKS if getattr(type(callback), hook) is getattr(owner, hook)]
        self.hooks_off()
        self.reset()

    def reset(self) -> None:
        """A new epoch: no step sampled, none passed over for the profiled window."""
        self.phases.reset()
        self.in_window = False

    def hooks_off(self) -> None:
        """Have Lightning skip the phase hooks: no sample is open (or one ended early)."""
        self._hooks(False)

    def _hooks(self, sampling: bool) -> None:
        self.sampling = sampling
        for hook in self.hooks:
            (restore_hook if sampling else skip_hook)(self.callback, hook)

    def step_start(self, index: int, accumulate: int, profiling: bool, epoch: int) -> None:
        """Training step ``index`` of ``epoch`` begins: stamped where it is sampled (none while the window profiles)."""
        if self.sampling:  # the next training step of a sample spanning several (gradient accumulation)
            self.phases.start()
        elif sampled(index, accumulate, epoch):
            self.in_window |= profiling
            if not profiling:
                self.phases.start(accumulate)
                self._hooks(True)

    def step_end(self) -> None:
        """The step ends; a sample done stops the phase hooks."""
        if self.sampling and self.phases.end():
            self.hooks_off()

    def mark(self, name: str) -> None:
        """A phase begins or ends on a sampled step (:meth:`StepPhases.mark`)."""
        if self.sampling:
            self.phases.mark(name)

    def split_reason(
        self, trained: tuple[int | None, int | None], accumulate: int, forward_s: float, epoch: int
    ) -> str | None:
        """Why epoch ``epoch`` that trained steps ``trained`` has no split; None where it has one or a sample began."""
        if not math.isnan(forward_s) or self.phases.started:
            return None
        if self.in_window:
            return IN_WINDOW
        return None if any_sampled(*trained, accumulate, epoch) else unsampled(*trained, accumulate)
