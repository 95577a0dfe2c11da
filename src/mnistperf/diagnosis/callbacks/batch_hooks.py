"""A callback pays Lightning only for the per-batch hooks it uses (why: :func:`mnistperf.upstream.skip_hook`).

docs/results/cpu-2core-diagnosis-cost/dispatch.py measures them. A wrapper forwarding hooks to the callback must check
a hook is callable first, as Lightning does: a skipped one is None.
"""

from __future__ import annotations

from lightning.pytorch import Callback

from mnistperf.upstream import skip_hook

# Those called for every batch: each loop's batch hooks, and those around the backward and the optimizer's step.
BATCH_HOOKS = tuple(
    hook for hook in vars(Callback) if "_batch_" in hook or hook.startswith(("on_before_", "on_after_"))
)


def skip_unused_batch_hooks(callback: Callback) -> None:
    """Have Lightning skip each per-batch hook ``callback``'s class does not override (one set on it is left)."""
    for hook in BATCH_HOOKS:
        if hook not in vars(callback) and getattr(type(callback), hook) is getattr(Callback, hook):
            skip_hook(callback, hook)
