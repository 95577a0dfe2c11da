"""Time inside tensor operations as Python sees it: every top-level torch call of a few steps timed, as two bounds.

For a CPU fit that cannot pay for the profiled window; its bounds and its cost: docs/timing.md, "The operator clock".
"""

from __future__ import annotations

import sys
import time
import warnings
from typing import Any, TextIO

import torch
from torch.overrides import TorchFunctionMode

# Calls that run a whole backward pass: its graph's nodes each cost at least a bare call's dispatch.
BACKWARD = (torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad)


class OperatorClock(TorchFunctionMode):
    """Times each top-level torch call made while it is entered, calls inside a call left to their caller.

    ``floor_s``: a bare tiny operator's time (:func:`.window_price.operator_s`); ``nodes``: a training step's
    autograd graph nodes, the calls its backward runs (inf: not counted). :attr:`inside` is every call's time;
    :attr:`beyond` what each took past its floor, so the time tensor operations ran lies between them.

    A warning a timed call raises is shown where it would be without the clock: at the line that made the call, under
    the filters and once-only registry of that line's module.
    """

    def __init__(self, floor_s: float = 0.0, nodes: float = 1) -> None:
        super().__init__()
        self.floor_s, self.backward_floor_s = floor_s, floor_s * nodes
        self.inside = self.beyond = 0.0
        self.calls = 0
        self._shown: Any = None  # warnings.showwarning while the clock is entered

    def __enter__(self) -> OperatorClock:
        self._shown, warnings.showwarning = warnings.showwarning, self._show_where_called
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        if warnings.showwarning == self._show_where_called:  # not replaced meanwhile by someone else
            warnings.showwarning = self._shown

    def _show_where_called(
        self,
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        """A warning located in this module's call of a timed function is warned again from the line that made it."""
        caller = sys._getframe(1) if filename == __file__ else None
        while caller is not None and caller.f_code is not _TIMED_CALL:
            caller = caller.f_back
        if caller is None or caller.f_back is None:
            self._shown(message, category, filename, lineno, file, line)
            return
        caller = caller.f_back
        if caller.f_code is _HANDED_OVER and caller.f_back is not None and caller.f_back.f_back is not None:
            caller = caller.f_back.f_back  # a function written in Python handed its call over: its caller's line
        names = caller.f_globals
        warnings.showwarning = self._shown
        try:
            warnings.warn_explicit(
                message,
                category,
                caller.f_code.co_filename,
                caller.f_lineno,
                module=names.get("__name__"),
                registry=names.setdefault("__warningregistry__", {}),
                module_globals=names,
            )
        finally:
            warnings.showwarning = self._show_where_called

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        start = time.perf_counter()
        try:
            return func(*args, **(kwargs or {}))
        finally:
            took = time.perf_counter() - start
            self.inside += took
            self.beyond += max(took - (self.backward_floor_s if func in BACKWARD else self.floor_s), 0.0)
            self.calls += 1

    def bounds(self, span_s: float) -> tuple[float, float] | None:
        """(least, most) share of ``span_s`` spent inside tensor operations; None where nothing was timed."""
        if self.calls == 0 or span_s <= 0:
            return None
        return min(self.beyond / span_s, 1.0), min(self.inside / span_s, 1.0)


_TIMED_CALL = OperatorClock.__torch_function__.__code__
_HANDED_OVER = torch.overrides.handle_torch_function.__code__  # how a torch function written in Python reaches a mode
