"""Each call of a class's own methods timed in place: how the cost scripts see where the callbacks' time goes.

cpu-2core-compat-cost/hooks.py (in one warm process) and cpu-2core-fresh-cost/first_fit.py (in a process's first
fit) import it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any


def time_calls(cls: type, name: str, calls: dict[str, list[float]]) -> None:
    """Replace ``cls.name`` with a wrapper that appends each call's seconds to ``calls["Class.name"]``."""
    call = getattr(cls, name)
    key = f"{cls.__name__}.{name}"

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            calls.setdefault(key, []).append(time.perf_counter() - start)

    setattr(cls, name, timed)


def time_hooks(classes: Iterable[type], calls: dict[str, list[float]]) -> None:
    """:func:`time_calls` on every Callback hook each of ``classes`` defines itself."""
    from lightning.pytorch import Callback

    for cls in classes:
        for hook in vars(Callback):
            if hook.startswith(("on_", "setup", "teardown")) and hook in vars(cls):
                time_calls(cls, hook, calls)
