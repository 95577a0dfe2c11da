"""Every private part of Lightning, litdata, torch and the parsers that mnistperf relies on, and nowhere else.

That includes the libraries' messages it reads or calms by their text. Each is one small definition here, with why
it is needed and the public API that would replace it.
``tests/test_upstream.py`` checks each against the installed version, so that a release that changes
one fails there, naming the release, rather than somewhere far from here.
"""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # Lightning loads only where it is used: the commands check the install before importing it
    from lightning.pytorch import Callback, Trainer
    from torch.utils._python_dispatch import TorchDispatchMode as TorchDispatchMode  # loaded where used: the end
    from torch.utils._pytree import tree_leaves as tree_leaves

# ---------------------------------------------------------------- Lightning: hooks Lightning skips
# Why: Lightning calls every per-batch hook of every callback inside the trainer's profiler, overridden or not
# (about 2 µs each); ``_call_callback_hooks`` skips a hook that is not callable, so a callback pays only for the
# hooks it sets. Public replacement: Lightning skipping hooks a callback does not override.


def skip_hook(callback: Callback, hook: str) -> None:
    """Make Lightning skip ``callback``'s ``hook`` (it is then None on the instance, not a method)."""
    setattr(callback, hook, None)


def restore_hook(callback: Callback, hook: str) -> None:
    """Let Lightning call ``callback``'s own ``hook`` again, after :func:`skip_hook`."""
    vars(callback).pop(hook, None)


# ---------------------------------------------------------------- Lightning: whether a begun step ran
# Why: a module's ``on_train_batch_start`` returning -1 ends the epoch after the callbacks' batch start, with no batch
# end; the training epoch loop's progress counts a step as started only once it runs. Public replacement: none.
def steps_started(trainer: Trainer) -> int:
    """The training steps of this epoch that began to run (after every batch-start hook, none declined)."""
    progress: Any = trainer.fit_loop.epoch_loop.batch_progress.current  # a started tracker, typed as its base
    return progress.started


# ---------------------------------------------------------------- Lightning: whether the training loader ran out
# Why: a loader of no length ends its epoch by running out, or is cut (max_steps, a stop); only the fit loop's fetcher,
# which looks one batch ahead to know, tells them apart. Public replacement: none.
def loader_ran_out(trainer: Trainer) -> bool | None:
    """Whether this epoch's training batches ran out (None: not known)."""
    done = getattr(getattr(trainer.fit_loop, "_data_fetcher", None), "done", None)
    return done if isinstance(done, bool) else None


# Why: a training_step that takes ``dataloader_iter`` fetches its own batches; Lightning then hands the batch hooks the
# batch fetched last (the step before's, None at an epoch's first), which its fetcher keeps. Public replacement: none.
def fetched_by_step(trainer: Trainer) -> tuple[bool, Any]:
    """Whether the training step fetches its own batches (``dataloader_iter``), and the batch it fetched last."""
    from lightning.pytorch.loops.fetchers import _DataLoaderIterDataFetcher

    fetcher = getattr(trainer.fit_loop, "_data_fetcher", None)
    return isinstance(fetcher, _DataLoaderIterDataFetcher), getattr(fetcher, "_batch", None)


# Why: a step that raises leaves its batch-end hooks uncalled, whether it raised inside its training or in a hook
# after it (a callback listed before, Ctrl-C); the epoch loop's progress counts a step processed once it trained.
def step_unfinished(trainer: Trainer) -> bool:
    """Whether the training step begun last stopped before it trained (begun, not processed)."""
    progress: Any = trainer.fit_loop.epoch_loop.batch_progress.current
    return progress.processed < progress.started


# ---------------------------------------------------------------- Lightning: the step an epoch's metrics are logged at
# Why: Lightning logs an epoch's metrics at its last batch's step: its fit loop steps the count of batches back by one
# around ``update_train_epoch_metrics`` (the global step counts optimizer steps, several a batch with several
# optimizers). A logger that keeps its steps in order (one that drops a step below its last) keeps both only where they
# sit together. Public replacement: the logging step on the trainer.
def epoch_log_step(trainer: Trainer) -> int:
    """The step Lightning logs the epoch now ending at: its last batch's."""
    return max(trainer.fit_loop.epoch_loop._batches_that_stepped - 1, 0)


# ---------------------------------------------------------------- Lightning: a training step's logging
# Why: what a step logs reaches the loggers through the logger connector's ``update_train_step_metrics`` (what
# self.log kept, turned into numbers, then each logger's ``log_metrics`` and ``save``), which no profiler action
# holds; shadowed on the connector for one step, it times what logging costs that step. Public replacement: a
# profiler action around it.
TRAIN_STEP_LOGS = "update_train_step_metrics"
TRAIN_EPOCH_LOGS = "update_train_epoch_metrics"  # the same at an epoch's end, after its callbacks' and module's hooks


def step_logs_owner(trainer: Trainer) -> Any:
    """What hands a training step's metrics to the loggers, through :data:`TRAIN_STEP_LOGS` (an epoch's: the other)."""
    return trainer._logger_connector


# ---------------------------------------------------------------- Lightning: the training fetch
# Why: the one place the host waits for data is Lightning's ``next()`` on the training data, which its training
# loop reports to the trainer's profiler as an action whose name ends with this; standing in for the trainer's
# profiler times it.
# Public replacement: a hook around the training fetch (Lightning has none; ``on_train_batch_start`` comes after
# the fetch and the copy to the device).
TRAIN_FETCH_ACTION = "train_dataloader_next"


def swap_profiler(trainer: Trainer, profiler: Any) -> Any:
    """Put ``profiler`` in the trainer's place (its loops read ``trainer.profiler`` on every use); return the old."""
    previous = getattr(trainer, "profiler")  # noqa: B009  (assigned by Lightning outside the class: undeclared)
    setattr(trainer, "profiler", profiler)  # noqa: B010
    return previous


# ---------------------------------------------------------------- Lightning: the batch size it reads
# Why: ``self.log`` weighs an epoch's mean by the samples Lightning reads in each batch, and the timer says where that
# reading differs from its own count. Lightning's public ``extract_batch_size`` warns through a cache that shows each
# warning once a process, so calling it would spend the warning the user's own ``self.log`` would give; its generator
# reads the same without warning. Public replacement: ``extract_batch_size`` with its warning optional.


def lightning_batch_size(batch: Any) -> int | None:
    """The samples Lightning reads in ``batch`` (the first tensor it meets: its leading length), None where none."""
    from lightning.pytorch.utilities.data import _extract_batch_size

    try:
        return next((size for size in _extract_batch_size(batch) if size is not None), None)
    except Exception:  # a batch nested past Python's limit, or one whose iteration fails: Lightning reads none either
        return None


# Why: a module may give ``self.log`` its own batch size (a library whose step trains on more rows than its batch
# holds: windows drawn from series), and the epoch's means are weighed by the sizes it gave; Lightning keeps their sum
# per value logged, in the training loop's private result collection. Public replacement: the logged batch sizes read
# from the trainer.


def logged_samples(trainer: Any) -> list[int] | None:
    """The samples ``self.log`` weighed each value logged from ``training_step`` by over the epoch so far.

    Of every epoch mean (``on_epoch=True``, averaged); this rank's; None where they cannot be read.
    """
    try:
        results = trainer.fit_loop.epoch_loop._results.values()
        sizes = [
            int(result.cumulated_batch_size)
            for result in results
            if result.meta.fx == "training_step" and result.meta.on_epoch and hasattr(result, "cumulated_batch_size")
        ]
    except Exception:  # another Lightning's private layout: nothing read
        return None
    return sizes


# ---------------------------------------------------------------- Lightning: LightningCLI and checkpoints
class KeepRunHyperparameters:
    """A LightningCLI mixin: the model's settings come from the config and the command line, not the checkpoint.

    Why: LightningCLI's ``_parse_ckpt_path`` replaces the parsed model arguments with a checkpoint's saved
    hyperparameters. Public replacement: a LightningCLI switch to keep the parsed ones.
    """

    def _parse_ckpt_path(self) -> None:
        """Keep the parsed model arguments (LightningCLI's own would take the checkpoint's)."""


# Why: a checkpoint's optimizer steps are counted in one of two places of the fit loop's state, by whether the
# module optimizes automatically or manually; a run of the other kind would resume at global step 0 unless they
# are carried over. Public replacement: Lightning counting optimizer steps in one place.
OPTIMIZER_STEP_PROGRESS = {
    "automatic": "epoch_loop.automatic_optimization.optim_progress",
    "manual": "epoch_loop.manual_optimization.optim_step_progress",
}


# ---------------------------------------------------------------- argparse and jsonargparse (LightningCLI's parser)
def long_options(parser: Any) -> list[str]:
    """Every ``--option`` a parser (argparse's, or jsonargparse's below LightningCLI) shows, without its dashes.

    Why: an unknown option is answered with the nearest valid one, never with a hidden one (``help=SUPPRESS``,
    an old name kept working). Public replacement: argparse listing its options (``_actions`` is its own
    attribute, unchanged since Python 3.2).
    """
    return [
        option[2:]
        for action in parser._actions
        if action.help != argparse.SUPPRESS
        for option in action.option_strings
        if option.startswith("--")
    ]


def subcommand_parser(parser: Any, name: str) -> Any:
    """The parser of subcommand ``name`` below a jsonargparse root parser (the root itself where there is none).

    Why: an error in a config file is raised by the root parser, whose options are not the subcommand's.
    Public replacement: jsonargparse handing out a subcommand's parser.
    """
    subcommands = getattr(parser, "_subcommands_action", None)
    return parser if subcommands is None else subcommands._name_parser_map.get(name, parser)


# reST in docstrings that help shows: a role (:class:`~a.B`, :paramref:`x <a.x>`), a literal (``x``), a link
ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`(~?)([^`<]*?)\s*(?:<[^`>]*>)?`")
LITERAL = re.compile(r"``(.+?)``", re.DOTALL)
LINK = re.compile(r"`([^`<]+?)\s*<([^`>]+)>`_")


def plain_text(text: str) -> str:
    """Docstring text as a reader of plain text reads it: ``x`` is x, :class:`~a.B` is B, a link is its words (url).

    Single backticks stay: they quote a command, as the one-line errors do.
    """
    text = ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2), text)
    return LINK.sub(r"\1 (\2)", LITERAL.sub(r"\1", text))


class PlainHelpFormatter(argparse.HelpFormatter):
    """argparse's (or, mixed in first, jsonargparse's) help formatter, each help text and description plain text.

    Why: the help of LightningCLI's options is the Trainer's and the classes' docstrings, written in reST; it is
    made plain before it is wrapped, as argparse expands and fills each text in these two methods. Public
    replacement: argparse taking a function over each help text.
    """

    def _expand_help(self, action: argparse.Action) -> str:
        return plain_text(super()._expand_help(action))

    def _format_text(self, text: str) -> str:
        return super()._format_text(plain_text(text))


Raised = TypeVar("Raised", bound=BaseException)


def raised_inside(error: BaseException, kind: type[Raised]) -> Raised | None:
    """The error of ``kind`` that ``error`` was raised from, if any: one raised while jsonargparse built a class.

    Why: jsonargparse reports an error raised in a callback's ``__init__`` as a ValueError of its own, listing every
    type of the ``trainer.callbacks`` union it tried, raised from the first type's error. Public replacement:
    jsonargparse letting a class's own error through. Written against jsonargparse 4.53.0.
    """
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, kind):
        cause = cause.__cause__
    return cause


# ---------------------------------------------------------------- argparse and jsonargparse: their messages
# Why: a wrong option or value is answered in one line with the option meant and the value's type in words, read
# from the parser's message; neither parser hands out what it rejected any other way. Public replacement: a parser
# error carrying the option, the value and the types expected. Written against jsonargparse 4.53.0 and Python
# 3.11's argparse.


def parser_message(message: object) -> str:
    """A parser's message on one line (jsonargparse gives a union's subtypes and their errors a line each)."""
    return " ".join(line.strip() for line in str(message).splitlines() if line.strip())


#: argparse's and jsonargparse's ``unrecognized arguments: --epoch 2``: the words given
UNRECOGNIZED = re.compile(r"unrecognized arguments: (.*)$")
#: argparse's ``invalid choice: 'x' (choose from 'a', 'b')``: the value and the choices (quoted or not, as Python
#: 3.12.8 and later write them)
INVALID_CHOICE = re.compile(r"invalid choice: '?([^' ]+)'? \(choose from (.*)\)")
#: jsonargparse's ``Subcommand 'fit' does not accept option 'data.x'``, for a config file's unknown key: the subcommand
SUBCOMMAND = re.compile(r"Subcommand '(\w+)'")
#: the key a config file or group does not accept
UNKNOWN_KEY = re.compile(r"does not accept options? '([^']+)'")
# ... a parser of no subcommand (tune's and the bench's reading of a stage) names the key below its group
KEY_GROUP = re.compile(r"^Group '([^']+)' does not accept")
#: ``Parser key "config": File does not exist: '/abs/path.yaml'``: the config file given
MISSING_CONFIG = re.compile(r"Parser key \"config\": File does not exist: '?([^']+)'?")
#: ``Parser key "data.batch_size": Expected a <class 'int'>. Got value: abc``: the key, the type and the value
WRONG_TYPE = re.compile(r'^Parser key "([^"]+)": Expected a (.+?)\. Got value: (.*)$')
#: a value that none of a union's types takes: the key, the list of subtypes and the value
WRONG_UNION = re.compile(
    r'^Parser key "([^"]+)": Does not validate .*? Subtypes: \[(.*?)\] Errors: .* Given value: (.*)$'
)
#: a class's argument refused where a union holds the class (a callback's init_args): the key, the class, its message
CLASS_ARGUMENT = re.compile(
    r'^Parser key "([^"]+)": Does not validate .*? Errors: - Problem with given class_path \'([^\']+)\': (.*?)(?: - |$)'
)
#: a class's argument that it has not: its name
NOT_ACCEPTED = re.compile(r"^Option '([^']+)' is not accepted")
#: one type of such a list: a class (``<class 'int'>``), a Literal's choices, or anything else
SUBTYPE = re.compile(r"<class '(\w+)'>|typing\.Literal\[([^\]]*)\]|([^,\s][^,]*)")


# ---------------------------------------------------------------- torch and Lightning: messages calmed by their text
# Why: messages that are true but not the user's to act on, or that the lab answers in its own line, are known only
# by their text: neither library gives them a category or a switch of their own. Public replacement: a category per
# message, or a switch. Each names the release it was written against.

#: (category, message regex) of warnings ignored
CALMED_WARNINGS = (
    # torch 2.13's DataLoader with more workers than usable cores: the DataModule says so in one line of its own
    (UserWarning, r"This DataLoader will create \d+ worker processes in total"),
    # Lightning 2.6.6's fit loop, on an epoch shorter than log_every_n_steps: the lab logs once an epoch
    (UserWarning, r"The number of training batches \(\d+\) is smaller than the logging interval"),
    # torch 2.13 deprecating the LeafSpec that Lightning 2.6.6's CombinedLoader still makes
    (Warning, r"`isinstance\(treespec, LeafSpec\)` is deprecated"),
    # torch 2.13 deprecating the collective Lightning 2.6.6's all_gather calls under DDP
    (FutureWarning, r"torch\.distributed\.nn\.functional\.all_gather is deprecated"),
    # Lightning 2.6.6 under DDP, on the lab's epoch metrics, which its module logs already gathered over the ranks
    (Warning, r"It is recommended to use `self\.log\('(train|val|test)/(loss|acc)', \.\.\., sync_dist=True\)`"),
    # Lightning 2.6.6 on the stream pipeline's IterableDataset, whose length counts each worker's and rank's rows
    (Warning, r"Your `IterableDataset` has `__len__` defined"),
    # Lightning 2.6.6's prediction loop on an IterableDataset: the stream's batches carry their rows' indices instead
    (Warning, r"Couldn't infer the batch indices fetched from your dataloader"),
)
#: the loggers Lightning 2.6.6's rank-zero messages go to
LIGHTNING_RANK_ZERO_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")
#: fragments of Lightning 2.6.6's rank-zero messages that are dropped: its tips, and its Tensor Cores hint (the
#: device line names the float32 matmul option itself)
DROPPED_LIGHTNING_INFO = ("Tip:", "that has Tensor Cores. To properly utilize them")
#: Lightning 2.6.6's ModelCheckpoint, given a training run's state in another folder (an evaluation's): the start of
#: its warning
CHECKPOINT_FOLDER_CHANGED = "The dirpath has changed from"
#: Lightning 2.6.6's LightningCLI, given ``args`` in a process with command-line arguments of its own: the start of its
#: warning
CLI_ARGS_BESIDE_ARGV = "LightningCLI's args parameter"


# ---------------------------------------------------------------- litdata
def merge_index_alone(writer: Any) -> None:
    """Write a litdata copy's index from this process's chunks alone.

    Why: ``BinaryWriter.merge()`` waits for an index from every DDP rank, but ``prepare_data`` runs on one
    process only. Public replacement: ``merge()`` with a single-process mode.
    """
    writer._merge_no_wait()


def distributed_env(world_size: int, rank: int) -> Any:
    """Litdata's description of the ranks a dataset is split over, as one node.

    Why: a StreamingDataset made before Lightning starts its processes reads the topology from the environment;
    the pipeline hands it Lightning's. Public replacement: a world-size and rank argument on StreamingDataset.
    """
    from litdata.utilities.env import _DistributedEnv

    return _DistributedEnv(world_size=world_size, global_rank=rank, num_nodes=1)


# ---------------------------------------------------------------- torch's profiler
def kineto_results(profiler: Any) -> Any:
    """A stopped profiler's raw results (each event with its device, kind and own interval), or None.

    ``profiler``: ``torch.profiler.profile``, or the autograd profiler it wraps (which holds them itself).
    Why: the processed ``events()`` nest device work under the operators that launched it and lose the
    activity kind. Public replacement: the raw events on ``torch.profiler.profile``.
    """
    return getattr(getattr(profiler, "profiler", profiler), "kineto_results", None)


def profiler_running() -> bool:
    """Whether a torch profiler records in this process now (the user's own, or any other).

    Why: a second profiler started inside it does not fail; stopping that one ends the user's session too. Public
    replacement: none; torch.autograd.profiler's flag of the running session.
    """
    import torch

    return bool(torch.autograd.profiler._is_profiler_enabled)


def dynamo_compiled() -> bool:
    """Whether torch.compile has compiled any frame in this process (a module, a function, anything it traced).

    Why: a torch function mode around compiled code makes it recompile, and a compiled function called inside a
    step cannot be seen from the module. Public replacement: none; dynamo's own count of the frames it compiled.
    """
    from torch._dynamo.utils import counters

    return counters["frames"]["ok"] > 0


def top_function_mode() -> Any:
    """The torch function mode on top of this thread's stack (None: none).

    Why: a mode entered in one hook and left in another must be the one it leaves. Public replacement: none;
    torch.overrides' own reading of the stack.
    """
    from torch.overrides import _get_current_function_mode

    return _get_current_function_mode()


# ---------------------------------------------------------------- Lightning: a DataLoader made again
def rebuilt_dataloader(dataloader: Any, settings: dict[str, Any]) -> Any:
    """The same DataLoader made again with ``settings`` (``num_workers=2``, ...) in place of its own.

    Why: tune changes the loader of a DataModule that takes no argument for it; only Lightning's re-creation of a
    loader for a distributed sampler recovers everything else it was made with (dataset, sampler or batch sampler,
    collate_fn, drop_last, a subclass's own arguments, given by name or position). Public replacement: that
    re-creation taking other settings than the sampler.
    """
    from lightning.fabric.utilities.data import _reinstantiate_wrapped_cls
    from lightning.pytorch.utilities.data import _get_dataloader_init_args_and_kwargs

    saved, kwargs = _get_dataloader_init_args_and_kwargs(dataloader, dataloader.sampler)
    kwargs = {**kwargs, **settings}
    names = list(getattr(dataloader, "__pl_saved_arg_names", ()))  # the arguments given by position, in order
    args = [kwargs.pop(names[i]) if i < len(names) and names[i] in kwargs else arg for i, arg in enumerate(saved)]
    return _reinstantiate_wrapped_cls(dataloader, *args, **kwargs)


# ---------------------------------------------------------------- LightningCLI: whether jsonargparse reads signatures
def jsonargparse_signatures_available() -> Any:
    """LightningCLI's own check that jsonargparse can read signatures: truthy, or what it lacks (falsy, said as text).

    Why: the preflight names what to install before a part trains through LightningCLI, by the check LightningCLI
    itself makes as it starts. Public replacement: none (LightningCLI raises its own error, later).
    """
    from lightning.pytorch.cli import _JSONARGPARSE_SIGNATURES_AVAILABLE

    return _JSONARGPARSE_SIGNATURES_AVAILABLE


# ---------------------------------------------------------------- torch: a dispatch mode, and a pytree's leaves
# Why: the bench's step floor counts the bytes each aten call reads and writes by seeing every call
# (TorchDispatchMode) and the tensors among its arguments (tree_leaves); torch keeps both in private modules, and
# documents TorchDispatchMode at that path. Public replacement: none yet. Loaded only where used (torch is heavy), so
# the type checker sees them as imported at the top and no other name as lazily made.
if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name == "TorchDispatchMode":
            from torch.utils._python_dispatch import TorchDispatchMode

            return TorchDispatchMode
        if name == "tree_leaves":
            from torch.utils._pytree import tree_leaves

            return tree_leaves
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
