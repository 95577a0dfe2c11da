"""A diagnostic never breaks the run it watches (:class:`Reporter`), and its report holds whatever it carries."""

from __future__ import annotations

import logging
import numbers
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from mnistperf.console import say
from mnistperf.upstream import epoch_log_step

if TYPE_CHECKING:
    from lightning.pytorch import Trainer

LOG = logging.getLogger("mnistperf.diagnosis")


class Reporter:
    """What callback ``owner`` (which starts every line) tells the user from rank zero, and what went wrong inside it.

    A problem, a failing printer or logger too, is warned once on the ``mnistperf.diagnosis`` logger and kept in
    :attr:`lines`; the fit goes on. Per-step hooks hand it to :meth:`note` (a ``try`` costs nothing until it raises).
    """

    def __init__(self, owner: str):
        self.owner = owner
        self.lines: list[str] = []
        self._said: set[str] = set()

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
        """Log an epoch's ``scalars`` (``what`` they are) to every logger, from rank zero, as Lightning logs an epoch's.

        At the step and with the epoch that Lightning's own epoch metrics have (:func:`.epoch_log_step`).
        """
        if trainer.is_global_zero and trainer.loggers:
            step, epoch = 0, {"epoch": trainer.current_epoch}
            with self.guard(f"reading the step to log {what} at"):
                step = epoch_log_step(trainer)
                taken = sorted(set(scalars) & set(trainer.logged_metrics))  # the module's own, under the same names
                if taken:  # each its own series: the module's kept, the callback's left out, said once
                    scalars = {key: value for key, value in scalars.items() if key not in taken}
                    plural = "s" if len(taken) > 1 else ""
                    mine = f"from now on logs its own figure{plural} of that name to timing.json alone"
                    self.say_once(trainer, f"the module logs {', '.join(taken)} itself, so {self.owner} {mine}")
            for logger in trainer.loggers:
                with self.guard(f"logging {what} to {type(logger).__name__}"):
                    logger.log_metrics({**scalars, **epoch}, step=step)


JSON_SCALARS = (str, int, float, bool, type(None))


def jsonable(value: Any) -> Any:
    """``value`` as JSON holds it: mappings and sequences item by item, numbers as numbers, anything else its repr."""
    if isinstance(value, JSON_SCALARS):
        return value
    if isinstance(value, Mapping):
        return {(k if isinstance(k, JSON_SCALARS) else repr(k)): jsonable(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        return [jsonable(v) for v in value]
    if isinstance(value, numbers.Real):
        return int(value) if isinstance(value, numbers.Integral) else float(value)
    return repr(value)
