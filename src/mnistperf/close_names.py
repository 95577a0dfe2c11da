"""The valid name nearest to a mistyped one, for errors that say what was meant.

``closest("data.num_worker", names)`` is ``"data.num_workers"``; a name close to none of them gets
``None``, so an error never suggests something unrelated. ``OneLineArgumentParser`` is argparse answering
with the option or value meant, in one line, for ``prepare``, ``bench`` and ``tune``; an option must be spelt
whole there, as in ``fit``: a prefix of one is answered like a typo.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Iterable
from typing import NoReturn

from mnistperf.errors import DEBUG_ENV
from mnistperf.upstream import INVALID_CHOICE, UNRECOGNIZED, PlainHelpFormatter, long_options

#: how alike two names must be (difflib's ratio) for one to be suggested for the other
CUTOFF = 0.6


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like ``name``, or None when none is alike enough."""
    matches = difflib.get_close_matches(name, list(candidates), n=1, cutoff=CUTOFF)
    return matches[0] if matches else None


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """``"; did you mean NAME?"`` with the closest candidate, or an empty string when none is close."""
    match = closest(name, candidates)
    return f"; did you mean {match}?" if match else ""


def closest_key(name: str, names: list[str]) -> str | None:
    """:func:`closest` for a dotted name: its section's key nearest its last part, else that key in another section.

    ``data.batch_sise`` is ``data.batch_size`` and ``model.batch_size`` too; ``data.foo`` is near none of the keys:
    neither ``data`` (its own section) nor ``data.shuffle`` (alike by the section alone) answers it. A name whose first
    section no option has is read whole (``trainr.max_epoch``).
    """
    section, _, key = name.rpartition(".")
    if not section:
        return closest(name, names)
    own: dict[str, str] = {}
    elsewhere: dict[str, str] = {}
    for other in names:
        where, _, last = other.rpartition(".")
        if where:
            (own if where == section else elsewhere).setdefault(last, other)
    meant = closest(key, own)
    if meant is not None:
        return own[meant]
    if key in elsewhere:  # the very key, in another section
        return elsewhere[key]
    first = name.split(".")[0]
    if any(other.split(".")[0] == first for other in names):  # a known section: a whole name alike only by it
        return None
    return closest(name, names)  # a misspelt first section, the rest maybe too


def with_options_meant(text: str, options: Iterable[str]) -> str:
    """An argparse ``unrecognized arguments: ...`` message, with the valid option nearest to each unknown one.

    ``options`` are the valid names without their dashes (``data.batch_size``); other messages come back as they are.
    """
    unrecognized = UNRECOGNIZED.search(text)
    if not unrecognized:
        return text
    names = list(options)
    words = unrecognized.group(1).split()
    hints = []
    for at, word in enumerate(words):
        if not word.startswith("--"):
            continue
        name, _, value = word[2:].partition("=")
        value = value or (words[at + 1] if at + 1 < len(words) and not words[at + 1].startswith("--") else "")
        if (match := closest_key(name, names)) is not None:
            hints.append(f"--{match} for --{name}")
        elif "." in name and "set" in names and value:  # a fit's override, which these commands take by --set
            hints.append(f"--set {name}={value}")
    return f"{text}; did you mean {', '.join(hints)}?" if hints else text


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse, answering a wrong option or value in one line with the option meant and the help command.

    A prefix of an option is not taken for it (``--epoch`` is not ``--epochs``): it is answered with the whole name.
    Its help is plain text (:class:`~mnistperf.upstream.PlainHelpFormatter`), docstrings given as descriptions too.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{"allow_abbrev": False, "formatter_class": PlainHelpFormatter, **kwargs})

    def add_repeated(self, flag: str, metavar: str, help: str, default: str = "none") -> None:
        """An option that may be given again and again, its values kept in order (``default``: what none means)."""
        self.add_argument(
            flag, action="append", default=[], metavar=metavar, help=f"{help}; may be repeated (default: {default})"
        )

    def parse_known_args(self, args=None, namespace=None):
        """argparse's, the arguments kept: a required option missing is said beside a misspelling of it."""
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        """Print the error in one line, pointing to ``--help``, and exit with status 2 (the full usage under debug)."""
        if os.environ.get(DEBUG_ENV):
            super().error(message)
        options = long_options(self)
        given = [word.split("=")[0] for word in getattr(self, "_given", []) if word.startswith("--")]
        unknown = [word for word in given if word[2:] not in options and word != "--help"]
        if message.startswith("the following arguments are required") and unknown:
            message = f"unrecognized arguments: {' '.join(unknown)}"  # (a misspelt required option, said as one)
        text = with_options_meant(message, options)
        choice = INVALID_CHOICE.search(text)
        if choice:
            text += did_you_mean(choice.group(1), (c.strip("' ") for c in choice.group(2).split(",")))
        print(f"mnistperf: error: {text} (`python -m {self.prog} --help` lists the options)", file=sys.stderr)
        raise SystemExit(2)
