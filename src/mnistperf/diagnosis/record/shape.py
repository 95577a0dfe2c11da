"""What a timing.json must hold for the summary, the report and ``compare`` to read it: its shape, and the check.

A shape is a type (``float``: any number, not a bool), a set of the words allowed, ``{key: shape}`` for an object
(``{str: shape}``: any keys), ``[shape]`` for a list, ``(shape, shape)`` for a list of just so many. A key may be
absent or null unless it is :class:`Needed`; a key the shape does not name may hold anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mnistperf.diagnosis import figures


@dataclass(frozen=True)
class Needed:
    """A key its object must hold, not null, with this shape."""

    shape: Any


SPAN = Needed((int, int))  # the first and the last epoch of a trend
GROWTH = {"figure": Needed(str), **dict.fromkeys(("per_epoch_mb", "from_mb", "to_mb"), Needed(float)), "epochs": SPAN}
SECONDS_BY_PART = {"parts": Needed({str: Needed(float)}), "syncs": {str: Needed(float)}}
EPOCH_ROW = {
    **{figure.name: float for figure in figures.FIGURES if figure.epoch},
    "epoch": Needed(int),
    "split_reason": str,
}
SUMMARY = {
    **{figure.name: float for figure in figures.FIGURES if figure.where == figure.name},
    figures.AVG_TRAIN_S.name: Needed(float),
    "epochs": [EPOCH_ROW],
    "steady_epochs": (int, int),
    "warmup": {"epoch": Needed(int), figures.TRAIN_S.name: Needed(float), figures.EVAL_S.name: Needed(float)},
    **dict.fromkeys(("verdict", "verdict_figure", "verdict_reason", "device", "precision", "config", "metric"), str),
    "final_metric": float,
    "data": dict,
    "model": dict,
    "module": {"class": str, "parameters": int},
    "trainer": dict,
    "fit": dict,
    "loader": dict,
    "peak": str,
    "flops_per_step": float,
    "stalls": {
        figures.SPIKES.name: Needed(int),
        "spikes_share": float,
        "worst_spikes": [{"epoch": Needed(int), "step": Needed(int), "s": Needed(float)}],
        "slow_first_step": Needed([int]),
        "slow_first_share": float,
        "slowest_first_s": float,
        "drift": {"per_epoch_share": Needed(float), "from_s": Needed(float), "to_s": Needed(float), "epochs": SPAN},
    },
    "memory": {"growth": Needed([GROWTH])},
    "step_parts": {"steps": Needed(int), "step_s": Needed(float), **SECONDS_BY_PART},
    "between_epochs": {"epochs": Needed(int), "epoch_s": Needed(float), **SECONDS_BY_PART},
    "ranks": [{"rank": Needed(int), **{figure.name: float for figure in figures.FIGURES if figure.per_rank}}],
    "slowest_rank": {"rank": Needed(int), "held_by": Needed(str), "behind_s": Needed(float)},
    "busy_window": {
        "device": Needed(frozenset(figures.BUSY)),
        **dict.fromkeys(("share", "margin", "waited_for_a_core", "cost_s"), float),
        **dict.fromkeys(("epoch", "first_step", "last_step", "kernels"), int),
        **dict.fromkeys(("reason", "trace", "trace_skipped"), str),
        "in_warmup": bool,
        "operator_clock": (float, float),
        "communication": {
            "backend": Needed(str),
            **dict.fromkeys(("world_size", "collectives"), Needed(int)),
            **dict.fromkeys(("share", "exposed_share"), Needed(float)),
        },
    },
    "advice": {
        "ceiling": Needed(str),
        "hints": [str],
        "at_most_s_less": float,
        "culprit": {
            "part": Needed(str),
            **dict.fromkeys(("s", "share"), Needed(float)),
            "per": frozenset(("step", "epoch", "rank")),
        },
    },
}
TYPE_SAID = {float: "a number", int: "a whole number", str: "text", bool: "true or false", dict: "an object"}


def misfit(value: Any, shape: Any, where: str = "") -> str | None:
    """Where ``value`` does not fit ``shape`` and how, in words (``epochs[2].train_s is "abc", not a number``).

    None where it fits. ``where``: the value's place in the file, '' for the whole.
    """
    if isinstance(shape, Needed):
        shape = shape.shape
    if isinstance(shape, dict) and isinstance(value, dict):
        items = [(key, shape[str]) for key in value] if list(shape) == [str] else list(shape.items())
        for key, inner in items:
            if value.get(key) is None and isinstance(inner, Needed):
                return f"{where}.{key}".lstrip(".") + (" is null" if key in value else " is missing")
        held = [(key, inner) for key, inner in items if value.get(key) is not None]  # null: as if absent
        places = [(value[key], inner, f"{where}.{key}".lstrip(".")) for key, inner in held]
    elif isinstance(shape, (list, tuple)) and isinstance(value, list):
        if isinstance(shape, tuple) and len(value) != len(shape):
            return f"{where} is {json_said(value)}, not a list of {len(shape)}"
        inners = shape if isinstance(shape, tuple) else shape * len(value)
        places = [(item, inner, f"{where}[{i}]") for i, (item, inner) in enumerate(zip(value, inners, strict=True))]
    else:
        return None if fits(value, shape) else f"{where or 'it'} is {json_said(value)}, not {shape_said(shape)}"
    return next((found for place in places if (found := misfit(*place))), None)


def fits(value: Any, shape: Any) -> bool:
    """Whether ``value`` fits a shape that is neither an object's nor a list's."""
    if isinstance(shape, frozenset):
        return isinstance(value, str) and value in shape
    if not isinstance(shape, type) or (isinstance(value, bool) and shape is not bool):
        return False
    return isinstance(value, (int, float) if shape is float else shape)


def shape_said(shape: Any) -> str:
    """What fits ``shape``, in words."""
    if isinstance(shape, frozenset):
        return "one of " + ", ".join(sorted(shape))
    if isinstance(shape, (list, tuple, dict)):
        return "a list" if isinstance(shape, (list, tuple)) else "an object"
    return TYPE_SAID[shape]


def json_said(value: Any) -> str:
    """A value as the file writes it, cut short."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
