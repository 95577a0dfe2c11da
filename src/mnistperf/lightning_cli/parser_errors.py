"""LightningCLI's parser answering a wrong option or value in one line: the option meant, what a value should be."""

from __future__ import annotations

import ast
import inspect
import os
import sys
from pathlib import Path
from typing import Any

from jsonargparse.typing import import_object
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from mnistperf.close_names import closest, closest_key, did_you_mean, with_options_meant
from mnistperf.errors import DEBUG_ENV
from mnistperf.lightning_cli.configs import missing_config
from mnistperf.upstream import (
    CLASS_ARGUMENT,
    KEY_GROUP,
    MISSING_CONFIG,
    NOT_ACCEPTED,
    SUBCOMMAND,
    SUBTYPE,
    UNKNOWN_KEY,
    WRONG_TYPE,
    WRONG_UNION,
    long_options,
    parser_message,
    subcommand_parser,
)


class OneLineErrorParser(LightningArgumentParser):
    """LightningCLI's parser, answering a wrong option or value in one line instead of the whole usage.

    The line names the command whose ``--help`` lists the options, the valid option nearest to an
    unknown one (on the command line or in a config file), what a value of the wrong type should be,
    and, for a config file that does not exist, the configs that do. An option is spelt whole: a prefix
    of one (``--trainer.max_epoch``) is unknown, and answered with the option meant.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})
        self.configs: dict[Path, dict] = {}  # the --config files given, as read: a refused key is named by its file

    def error(self, message: str, ex: Exception | None = None):
        """Print the error in one line, pointing to ``--help``, and exit with status 2 (the full usage under debug)."""
        if os.environ.get(DEBUG_ENV) or not self.exit_on_error:  # a nested parser's (a class's init_args) raises
            super().error(message, ex)  # to the parser above it, which says it with the whole key
        text = parser_message(message)
        command = self._command(text)
        help_command = " ".join(["python -m mnistperf", *([command] if command else []), "--help"])
        refused = class_argument(text)
        if refused is not None:  # a class's argument: the help of that class's arguments
            text, key, path = refused
            help_command = help_command.replace("--help", f"--{key}.help {path}")
        else:
            text = explain_parser_error(text, option_names(self._command_parser(command)), self.configs)
        print(f"mnistperf: error: {text} (`{help_command}` lists the options)", file=sys.stderr)
        raise SystemExit(2)

    def _command(self, text: str) -> str | None:
        """The subcommand the error is about: named in the message (a config key), else this parser's own.

        A parser without subcommands (``run=False``: tune's and the bench's reading of a stage) parses fit's options.
        """
        named = SUBCOMMAND.search(text)
        command = named.group(1) if named else self.prog.split()[-1]
        if getattr(self, "_subcommands_action", None) is None and command not in LightningCLI.subcommands():
            return "fit"
        return command if command in LightningCLI.subcommands() else None

    def _command_parser(self, command: str | None) -> LightningArgumentParser:
        """The parser holding the subcommand's options: this one, or the subcommand's below the root."""
        return self if command is None else subcommand_parser(self, command)


def option_names(parser) -> set[str]:
    """Every option of a parser without its dashes (``data.batch_size``), and each section (``data``)."""
    names = set(long_options(parser))
    return names | {name.rsplit(".", depth)[0] for name in names for depth in range(1, name.count(".") + 1)}


def explain_parser_error(text: str, options: set[str], configs: dict[Path, dict] | None = None) -> str:
    """The parser's message, with the option meant, the configs that exist, or what a value should be.

    ``configs``: the config files given, as read; a key one of them holds and the parser refuses is named by its file.
    """
    missing = MISSING_CONFIG.search(text)
    if missing:
        return missing_config(Path(missing.group(1)))
    unknown = UNKNOWN_KEY.search(text)
    if unknown:
        key, group = unknown.group(1), KEY_GROUP.search(text)
        whole = f"{group.group(1)}.{key}" if group else key
        return held_in(configs, whole) + text + key_meant(key, list(options))
    refused = WRONG_TYPE.match(text) or WRONG_UNION.match(text)
    said = wrong_type(text)
    if refused and said:  # a value from a file: the file too, where it holds that value (not one the command line set)
        return held_in(configs, refused.group(1), refused.group(3)) + said
    return said or with_options_meant(text, options)


def held_in(configs: dict[Path, dict] | None, key: str, value: str | None = None) -> str:
    """``FILE: `` for each config file holding the dotted ``key`` (as ``value``, where given), in the order given."""
    found = {path: value_at(config, key.split(".")) for path, config in (configs or {}).items()}
    held = [str(path) for path, at in found.items() if at is not NOT_HELD and (value is None or str(at) == value)]
    return f"{', '.join(held)}: " if held else ""


def key_meant(key: str, options: list[str]) -> str:
    """``; did you mean NAME?`` for a dotted key: the option nearest it, or else for its first section no option has.

    ``trainr.logger.init_args.save_dir`` is near no option: its ``trainr`` is near ``trainer``. A section is set
    beside its siblings alone (``trainer.foo`` is not near ``trainer.logger``).
    """
    near = closest_key(key, options)
    if near:
        return f"; did you mean {near}?"
    sections = key.split(".")
    for depth in range(1, len(sections)):
        parent = sections[: depth - 1]
        siblings = {
            option.split(".")[depth - 1]
            for option in options
            if option.count(".") >= depth and option.split(".")[: depth - 1] == parent
        }
        if sections[depth - 1] not in siblings:
            meant = closest(sections[depth - 1], siblings)
            return f"; did you mean {'.'.join([*parent, meant])}?" if meant else ""
    return ""


NOT_HELD = object()  # what value_at finds where a config does not hold the key


def value_at(config: Any, keys: list[str]) -> Any:
    """The value a config's mapping holds at the dotted key ``keys``, section by section; NOT_HELD where it has none."""
    if not keys:
        return config
    return value_at(config[keys[0]], keys[1:]) if isinstance(config, dict) and keys[0] in config else NOT_HELD


def class_argument(text: str) -> tuple[str, str, str] | None:
    """A class's argument refused (a callback's init_args): what is wrong with it, the key and the class; else None.

    ``trainer.callbacks mnistperf.diagnosis.EpochTimer: input_bound_share takes a number, not 'abc'``, or for an
    argument the class has not, the one meant.
    """
    refused = CLASS_ARGUMENT.match(text)
    if not refused:
        return None
    key, path, said = refused.groups()
    unknown = NOT_ACCEPTED.match(said)
    if unknown:
        try:
            arguments = set(inspect.signature(import_object(path)).parameters)
        except (ImportError, AttributeError, ValueError, TypeError):
            arguments = set()
        said = f"it has no argument {unknown.group(1)!r}{did_you_mean(unknown.group(1), arguments)}"
    return f"{key} {path}: {wrong_type(said) or said}", key, path


_TYPE_WORDS = {"int": ["a whole number"], "float": ["a number"], "bool": ["true", "false"], "NoneType": ["null"]}


def wrong_type(text: str) -> str | None:
    """``data.num_workers takes a whole number, not 'abc'`` for a value of the wrong type, else None.

    None too where a type has no plain words (a class path, a path type): the parser's message stays.
    """
    match = WRONG_TYPE.match(text) or WRONG_UNION.match(text)
    if not match:
        return None
    key, subtypes, value = match.groups()
    words: list[str] = []
    literals: list[str] = []
    for subtype in SUBTYPE.finditer(subtypes):
        name, choices, other = subtype.groups()
        if other or (name and name not in _TYPE_WORDS):
            return None
        try:
            said = _TYPE_WORDS[name] if name else [str(choice) for choice in ast.literal_eval(f"[{choices}]")]
        except (ValueError, SyntaxError):  # choices that are not plain values (enum members)
            return None
        for word in said:
            if word not in words:
                words.append(word)
                literals += [] if name else [word]
    if "a number" in words and "a whole number" in words:
        words.remove("a whole number")
    either = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
    return f"{key} takes {either}, not {value!r}{did_you_mean(value, literals)}"
