"""The callbacks' arguments checked when a callback is made, each error naming the argument, its value and its range."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from mnistperf.diagnosis.record.advice import USER_HINTS, WORKERS
from mnistperf.errors import ConfigError


class Takes(NamedTuple):
    """What an argument takes, as ``text`` says in the error: a value of ``kinds`` from ``low`` to ``high``."""

    text: str
    kinds: tuple[Any, ...]  # a bool only where named (True is an int to Python); a str not blank
    low: float = -math.inf
    high: float = math.inf
    above: bool = False  # low excluded
    optional: bool = False  # None taken too


REAL, COUNT, FUNCTION = (numbers.Real,), (numbers.Integral,), (Callable,)
SHARE = Takes("a share above 0 and at most 1", REAL, 0, 1, above=True)

ARGUMENTS = {
    "EpochTimer": {
        "input_bound_share": SHARE,
        "summary_file": Takes("a file name (a non-empty string)", (str,)),
        "busy_window_steps": Takes("a count of steps, 0 or more", COUNT, 0),
        "trace_limit": Takes("a count of 0 or more", COUNT, 0, optional=True),
        "window_share": SHARE._replace(optional=True),
        "samples_in_batch": Takes("a function batch -> int", FUNCTION, optional=True),
        "monitor": Takes("a logged metric's name", (str,), optional=True),
        "flops_per_batch": Takes("a number of FLOPs above 0", REAL, 0, above=True, optional=True),
        "log_all": Takes("True or False", (bool,)),
    },
    "SampleAudit": {
        "dataset_size": Takes("a count, 1 or more", COUNT, 1, optional=True),
        "sample_id": Takes("a key (str) or a position (int) of the batch", (str, int), optional=True),
        "fingerprint": Takes("a function batch -> int64 tensor [N]", FUNCTION, optional=True),
        "sample_dims": Takes("a count of leading dimensions, 1 or more", COUNT, 1),
        "strict": Takes("True or False", (bool,)),
        "max_words": Takes("a count of 16-bit words, 1 or more", COUNT, 1),
        "seed": Takes("a whole number from 0 to 2**32 - 1", COUNT, 0, 2**32 - 1),
        "log_all": Takes("True or False", (bool,)),
    },
}


def check(owner: str, values: Mapping[str, Any]) -> None:
    """Check callback ``owner``'s arguments in ``values``: of another kind a TypeError, out of range a ConfigError.

    Called as the callback is made: a nonsense argument would otherwise fail late in the fit, or never.
    """
    for name, takes in ARGUMENTS[owner].items():
        value = values[name]
        if value is None and takes.optional:
            continue
        fail = f"{owner}({name}={value!r}): {name} takes {takes.text}{', or None' if takes.optional else ''}"
        if not isinstance(value, takes.kinds) or (isinstance(value, bool) and bool not in takes.kinds):
            raise TypeError(fail)
        if isinstance(value, str) and not value.strip():
            raise ConfigError(fail)
        number = float(value) if isinstance(value, numbers.Real) else 0.0
        if not ((number > takes.low if takes.above else number >= takes.low) and number <= takes.high):  # NaN too
            raise ConfigError(fail)


def check_hints(value: Any) -> None:
    """EpochTimer's ``hints`` (once imported) map some verdicts each to a list of strings, or are None."""
    verdicts = ", ".join(key for key in USER_HINTS if key != WORKERS)
    takes = f"a mapping of verdicts ({verdicts}) or {WORKERS!r} to lists of hints, an import path to one, or None"
    fail = f"EpochTimer(hints={value!r}): hints takes {takes}"
    if not isinstance(value, (Mapping, type(None))):
        raise TypeError(fail)
    for verdict, said in (value or {}).items():
        if verdict not in USER_HINTS:
            raise ConfigError(f"{fail}; {verdict!r} is no verdict")
        if isinstance(said, str) or not isinstance(said, Sequence) or not all(isinstance(s, str) for s in said):
            raise TypeError(f"{fail}; {verdict!r} maps to no list of strings")
