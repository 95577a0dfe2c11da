"""The one error type that the command line turns into a short message instead of a traceback.

Anything the user can fix (a missing or malformed file, a bad option) raises a subclass of
:class:`MnistperfError` whose message names the file or option and says what to do.
"""


class MnistperfError(Exception):
    """An error caused by the user's input, with the fix in its message."""


class ConfigError(MnistperfError, ValueError):
    """An option has a value that cannot work."""


class DataError(MnistperfError):
    """A data file is missing, unreadable or does not hold what the pipeline needs."""


#: set to 1 to see the traceback behind a one-line error
DEBUG_ENV = "MNISTPERF_DEBUG"
