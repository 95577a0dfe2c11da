"""The one error type that the command line turns into a short message instead of a traceback.

Anything the user can fix (a missing or malformed file, a bad option) raises a subclass of
:class:`MnistperfError` whose message names the file or option and says what to do.
"""

from __future__ import annotations


class MnistperfError(Exception):
    """An error caused by the user's input, with the fix in its message."""


class ConfigError(MnistperfError, ValueError):
    """An option has a value that cannot work."""


class DataError(MnistperfError):
    """A data file is missing, unreadable or does not hold what the pipeline needs."""


class PreparedFileError(DataError):
    """A prepared file is damaged or malformed, so re-creating it is the fix: the message ends with the command.

    Code that knows only the file raises it with a general command; the caller that knows the dataset and
    its folder replaces that with the exact one (:meth:`with_fix`).

    Args:
        problem: what is wrong, naming the file.
        fix: the command that re-creates the file.
    """

    def __init__(self, problem: str, fix: str = "python -m mnistperf prepare --force", own: bool = False):
        super().__init__(problem, fix)
        self.problem, self.fix, self.own = problem, fix, own

    def __str__(self) -> str:
        if self.own:  # a dataset of the user's own: made by hand, or imported from a folder only the user knows
            again = f"import it again: `{self.fix}`"
            return f"{self.problem}; put a good copy in its place, or, where it was imported, {again}."
        return f"{self.problem}; re-create it with `{self.fix}`."

    def with_fix(self, fix: str, own: bool = False) -> PreparedFileError:
        """The same problem with the command that re-creates this very file (``own``: a dataset of the user's own)."""
        return PreparedFileError(self.problem, fix, own)


#: set to 1 to see the traceback behind a one-line error
DEBUG_ENV = "MNISTPERF_DEBUG"
