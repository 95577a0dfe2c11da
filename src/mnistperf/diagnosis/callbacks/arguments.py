"""The callbacks' arguments checked when a callback is made, each error naming the argument, its value and its range."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any


class Arguments:
    """Checks callback ``owner``'s arguments: a value of another kind is a TypeError, out of range a ValueError."""

    def __init__(self, owner: str):
        self.owner = owner

    def _fail(self, error: type[Exception], name: str, value: Any, takes: str) -> Exception:
        return error(f"{self.owner}({name}={value!r}): {name} takes {takes}")

    def number(
        self,
        name: str,
        value: Any,
        low: float | None = None,
        high: float | None = None,
        *,
        above: bool = False,
        integer: bool = False,
        optional: bool = False,
        takes: str,
    ) -> None:
        """``value`` is a number (an integer with ``integer``) from ``low`` (excluded with ``above``) to ``high``."""
        if value is None and optional:
            return
        kind = numbers.Integral if integer else numbers.Real
        if isinstance(value, bool) or not isinstance(value, kind):  # True is an int to Python, never a count here
            raise self._fail(TypeError, name, value, takes)
        number = float(value)
        below = low is not None and (number <= low if above else number < low)
        if math.isnan(number) or below or (high is not None and number > high):
            raise self._fail(ValueError, name, value, takes)

    def share(self, name: str, value: Any, *, optional: bool = False) -> None:
        """``value`` is a share of time: above 0, at most 1."""
        takes = "a share above 0 and at most 1" + (", or None" if optional else "")
        self.number(name, value, 0.0, 1.0, above=True, optional=optional, takes=takes)

    def kind(self, name: str, value: Any, kinds: tuple[type, ...], *, optional: bool = False, takes: str) -> None:
        """``value`` is one of ``kinds`` (a bool only where named; a str not blank), or None with ``optional``."""
        if value is None and optional:
            return
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise self._fail(TypeError, name, value, takes)
        if isinstance(value, str) and not value.strip():
            raise self._fail(ValueError, name, value, takes)

    def function(self, name: str, value: Any, *, takes: str) -> None:
        """``value`` is callable, or None."""
        if value is not None and not callable(value):
            raise self._fail(TypeError, name, value, takes)

    def hints(self, value: Any, verdicts: Sequence[str]) -> None:
        """``value`` maps some of ``verdicts`` each to a list of strings (or is None)."""
        takes = f"a mapping of verdicts ({', '.join(verdicts)}) to lists of hints, an import path to one, or None"
        if value is None:
            return
        if not isinstance(value, Mapping):
            raise self._fail(TypeError, "hints", value, takes)
        for verdict, said in value.items():
            if verdict not in verdicts:
                raise self._fail(ValueError, "hints", value, f"{takes}; {verdict!r} is no verdict")
            if isinstance(said, str) or not isinstance(said, Sequence) or not all(isinstance(s, str) for s in said):
                raise self._fail(TypeError, "hints", value, f"{takes}; {verdict!r} maps to no list of strings")
