"""A callback pays Lightning only for the per-batch hooks it uses.

Lightning calls each per-batch hook of every callback, an override or not, inside the trainer's profiler: six hooks a
training step under automatic optimization, about 2 µs each on a 2-core CPU
(docs/results/cpu-2core-diagnosis-cost/dispatch.py). It skips a hook that is not callable, so
:func:`skip_unused_batch_hooks` sets those a callback's class leaves as ``Callback``'s no-ops to None on the instance.
Such a hook is then not a method: code that calls it directly on the callback (a wrapper forwarding hooks to it) must
check it is callable first, as Lightning does.
"""

from __future__ import annotations

from lightning.pytorch import Callback

from mnistperf.upstream import skip_hook

# Those called for every batch: each loop's batch hooks, and those around the backward and the optimizer's step.
BATCH_HOOKS = tuple(
    hook for hook in vars(Callback) if "_batch_" in hook or hook.startswith(("on_before_", "on_after_"))
)


def skip_unused_batch_hooks(callback: Callback) -> None:
    """Set each per-batch hook that ``callback``'s class does not override to None, so Lightning skips it.

    A hook already set on the instance is left as it is.
    """
    for hook in BATCH_HOOKS:
        if hook not in vars(callback) and getattr(type(callback), hook) is getattr(Callback, hook):
            skip_hook(callback, hook)
