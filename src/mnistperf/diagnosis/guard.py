"""A diagnostic never breaks the run it watches: its own failures become one warning line each.

:class:`Problems` is what a callback keeps of what went wrong inside it: each problem is said once, as one
line on the ``mnistperf.diagnosis`` logger (a warning), and kept for the callback's report; the fit goes on.
Per-step hooks catch with a plain ``try``/``except`` (free when nothing is raised) and hand the error to
:meth:`Problems.note`; hooks that run once an epoch or once a fit can use :meth:`Problems.guard`.

:func:`jsonable` turns any value into one JSON can hold, so that a report is written whatever it carries
(a hyperparameter that is a normalizer, a loss module or a class is written as its ``repr``).
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from mnistperf.console import say

if TYPE_CHECKING:
    from lightning.pytorch import Trainer

LOG = logging.getLogger("mnistperf.diagnosis")


class Problems:
    """What went wrong inside one callback during a fit, each said once.

    Args:
        owner: the callback's name, which starts every line.
    """

    def __init__(self, owner: str):
        self.owner = owner
        self.lines: list[str] = []

    def note(self, what: str, error: BaseException) -> str:
        """Say (once) that ``what`` failed with ``error`` and that the fit goes on; return the line."""
        line = f"{self.owner}: {what} failed ({type(error).__name__}: {error}); the fit goes on without it"
        if line not in self.lines:
            self.lines.append(line)
            LOG.warning(line)
        return line

    @contextmanager
    def guard(self, what: str) -> Iterator[None]:
        """Run the block; an ``Exception`` inside it is noted (see :meth:`note`) instead of raised."""
        try:
            yield
        except Exception as error:
            self.note(what, error)


class Reporter(Problems):
    """What one callback tells the user: its lines and its loggers' scalars, from rank zero, and its problems.

    Each part is guarded: a printer or a logger that fails is one problem line, and the fit goes on.
    """

    def __init__(self, owner: str):
        super().__init__(owner)
        self._said: set[str] = set()

    def say(self, trainer: Trainer, line: str) -> None:
        """Print ``line`` on rank zero without tearing a progress bar."""
        if trainer.is_global_zero:
            with self.guard("printing its line"):
                say(trainer, line)

    def say_once(self, trainer: Trainer, message: str) -> None:
        """Say ``message`` once a fit, after the callback's name."""
        if message not in self._said:
            self._said.add(message)
            self.say(trainer, f"{self.owner}: {message}")

    def log(self, trainer: Trainer, scalars: Mapping[str, float], what: str) -> None:
        """Log ``scalars`` (``what`` they are) to every logger of the trainer at its global step, from rank zero."""
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                with self.guard(f"logging {what} to {type(logger).__name__}"):
                    logger.log_metrics(dict(scalars), step=trainer.global_step)


JSON_SCALARS = (str, int, float, bool, type(None))


def jsonable(value: Any) -> Any:
    """``value`` as JSON holds it: mappings and sequences item by item, numbers as numbers, anything else its repr."""
    if isinstance(value, JSON_SCALARS):
        return value
    if isinstance(value, Mapping):
        return {(k if isinstance(k, JSON_SCALARS) else repr(k)): jsonable(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        return [jsonable(v) for v in value]
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return repr(value)
