"""The single entry point: ``mnistperf {fit,validate,test,predict,prepare,bench,tune,compare,report}``.

``fit``/``validate``/``test``/``predict`` are LightningCLI's own subcommands, configured by the
YAML files in ``configs/``; ``prepare``, ``bench``, ``tune``, ``compare`` and ``report`` sit beside them.
``main(args)`` takes the arguments as a list so that tests drive the whole CLI in-process. Errors the user can
fix are printed as one line naming the file or option, with exit status 2; so are the trainer
settings Lightning rejects (an accelerator this machine lacks, an impossible device count), and a
torchvision that cannot load beside torch, checked before anything imports Lightning.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from mnistperf.atomic import place_taken
from mnistperf.close_names import OneLineArgumentParser, did_you_mean
from mnistperf.errors import DEBUG_ENV, ConfigError, MnistperfError
from mnistperf.install_check import check_torchvision

LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")
OWN_COMMANDS = ("prepare", "bench", "tune", "compare", "report")
REFUSED = (errno.EACCES, errno.EPERM, errno.EROFS)  # the system's refusals of a path, as opposed to its faults
REFUSED_FIX = (
    "give a path you may read and write in the option that named it (--data-dir, --source-root, --from, --out, "
    "--data.data_dir, a logger's save_dir)"
)
OVERVIEW = """\
usage: mnistperf COMMAND [options]

commands:
  prepare    convert the official MNIST/FashionMNIST files to Parquet (and CSV), with a size/time table
  fit        train a stage:        mnistperf fit --config configs/v2_pinned.yaml
  validate   evaluate on the validation data
  test       evaluate on the test split
  predict    predict the test split's labels, written to predictions.csv in the run's log folder
  bench      run the whole ladder (or a sweep) in fresh processes and print the table
  tune       find the fastest input pipeline for this machine by measuring, and write a config
  compare    what a change bought: two runs' timing.json side by side
  report     a run's summary, or its report as one HTML file (--html)

`mnistperf COMMAND --help` shows each command's options.
"""


def prepare_command(argv: Sequence[str]) -> None:
    """``mnistperf prepare``: convert the datasets to Parquet (and the formats or copies asked for)."""
    from mnistperf.data.ingest import prepare, sources

    parser = OneLineArgumentParser(prog="mnistperf prepare", description=prepare.__doc__.splitlines()[0])
    parser.add_argument(
        "--dataset",
        default=None,
        choices=["all", *prepare.BUILT_IN],
        help=f"the dataset to write: {', '.join(sources.DATASETS)} (all: both), or synthetic, random rows "
        "(default: all)",
    )
    parser.add_argument(
        "--data-dir",
        default="data",
        metavar="DIR",
        help="where <Folder>/{train,test}.parquet are written (default: %(default)s)",
    )
    parser.add_argument(
        "--source-root",
        default=None,
        metavar="DIR",
        help="offline: the folder holding mnist/ and fashion-mnist/ with the official .gz files "
        f"(default: {sources.SOURCE_ROOT_ENV}, else {sources.SYSTEM_DATASETS_DIR}, else a download)",
    )
    parser.add_argument(
        "--formats", default="parquet", help="comma-separated: parquet (always) and csv (default: %(default)s)"
    )
    parser.add_argument("--force", action="store_true", help="rebuild files that are already there (default: off)")
    parser.add_argument(
        "--rows",
        type=int,
        default=None,
        help=f"training rows of --dataset synthetic (default: {prepare.SYNTHETIC_ROWS:,})",
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of --dataset synthetic (default: 0)")
    parser.add_argument(
        "--litdata",
        action="store_true",
        help="also write the litdata copy each split needs for data.pipeline litdata (default: off)",
    )
    parser.add_argument(
        "--from",
        dest="source",
        type=Path,
        default=None,
        metavar="DIR",
        help="import your own data: a folder with train and test splits as CSV (Kaggle's layout) "
        "or Parquet (Hugging Face's image layout, or pixel columns) (default: none)",
    )
    parser.add_argument(
        "--name",
        default=None,
        help="with --from: the dataset's name, its folder under --data-dir; use it as --data.dataset NAME "
        "(default: the folder's name)",
    )
    opts = parser.parse_args(argv)
    if opts.name is not None and opts.source is None:
        parser.error("--name goes with --from DIR, the folder to import")
    if opts.dataset is not None and opts.source is not None:  # one or the other: an official dataset, or your own
        parser.error(f"--dataset {opts.dataset} prepares an official dataset, --from imports your own: give one")
    opts.dataset = opts.dataset or "all"
    if opts.dataset != "synthetic":  # the random rows' options, said where they would do nothing
        given = next((option for option in ("rows", "seed") if getattr(opts, option) is not None), None)
        if given is not None:
            what = "an import" if opts.source else "the official datasets" if opts.dataset == "all" else opts.dataset
            parser.error(f"--{given} goes with --dataset synthetic, the random rows; leave it out for {what}")
    elif set(prepare.check_formats(opts.formats.split(","))) != {"parquet"}:
        parser.error(
            "--dataset synthetic is written as Parquet shards alone (it is made to outgrow memory): leave out "
            f"--formats {opts.formats}"
        )
    taken = place_taken(Path(opts.data_dir), folder=True, written=True)
    if taken is not None:  # said before the files are read and converted
        raise ConfigError(f"--data-dir {opts.data_dir}: {taken}; give a folder you may write in, e.g. --data-dir data")
    if opts.litdata:  # before any file is prepared: the copies it asks for need the package
        from mnistperf.data.pipelines.litdata import require_litdata

        require_litdata("prepare --litdata")
    if opts.source is not None:
        from mnistperf.data.ingest import importer

        opts.dataset = opts.name or opts.source.resolve().name
        reports = importer.import_folder(
            opts.source,
            opts.dataset,
            Path(opts.data_dir),
            prepare.check_formats(opts.formats.split(",")),
            force=opts.force,
        )
    elif opts.dataset == "synthetic":
        rows, seed = prepare.SYNTHETIC_ROWS if opts.rows is None else opts.rows, opts.seed or 0
        reports = prepare.prepare_synthetic(rows, opts.data_dir, seed=seed, force=opts.force)
    else:
        names = list(sources.DATASETS) if opts.dataset == "all" else [opts.dataset]
        reports = []
        for name in names:
            reports += prepare.prepare_dataset(
                name, opts.data_dir, opts.source_root, opts.formats.split(","), force=opts.force, litdata=opts.litdata
            )
    if reports:
        print(prepare.format_reports(reports))
    if opts.litdata:
        from mnistperf.data.pipelines.litdata import prepare_copies

        names = list(sources.DATASETS) if opts.dataset == "all" else [opts.dataset]
        prepare_copies(
            [prepare.split_path(opts.data_dir, name, split) for name in names for split in prepare.SPLITS],
            force=opts.force,
        )


def main(args: Sequence[str] | None = None) -> None:
    """Run one mnistperf command; ``args`` defaults to the process's command line."""
    argv = list(sys.argv[1:] if args is None else args)
    command = argv[0] if argv else None
    try:
        run_command(command, argv, args is None)
        sys.stdout.flush()  # here, where a reader that went away is answered below, not at the interpreter's exit
    except BrokenPipeError:  # the reader took what it wanted and went (``| head``): the rest has nowhere to go
        if os.environ.get(DEBUG_ENV) or not reader_gone():  # another pipe's (a worker's, a child's): not ours to calm
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that no flush at exit meets the pipe
        raise SystemExit(1) from None
    except MnistperfError as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        print(f"mnistperf: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except OSError as exc:  # a folder the system refuses (read-only, not the user's): one line, no traceback
        if os.environ.get(DEBUG_ENV) or exc.errno not in REFUSED or exc.filename is None:
            raise
        print(f"mnistperf: error: {exc.filename}: {exc.strerror}; {REFUSED_FIX}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:  # Ctrl-C where nothing caught it (fit, bench and tune do): every write is atomic
        if os.environ.get(DEBUG_ENV):
            raise
        print(f"mnistperf: interrupted; {NOT_KEPT[command == 'prepare']}", file=sys.stderr)
        raise SystemExit(130) from None


# What an interrupted command leaves: the file under way never; prepare's finished ones, which a second run keeps
NOT_KEPT = {
    False: "what was being written is not kept",
    True: "the file being written is not kept, those finished are: the same command again writes the rest",
}


def terminated(signum: int, frame: object) -> None:
    """SIGTERM during ``prepare``: every write under way is let go (its temporary file removed), then the exit."""
    print(f"mnistperf: terminated; {NOT_KEPT[True]}", file=sys.stderr)
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def killed_as_interrupted() -> Iterator[None]:
    """Inside the block a SIGTERM lets go of what is being written, as Ctrl-C does; the handler before, after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def reader_gone() -> bool:
    """Whether standard output is a pipe its reader has closed."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & select.POLLERR for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll here, or no descriptor behind stdout
        return False


def end_process_group() -> None:
    """Destroy the run's process group, if it made one, while the interpreter is whole.

    Lightning destroys it at exit only for NCCL; gloo's threads left to the interpreter's end abort the process now and
    then ("terminate called without an active exception", status -6) after a fit that succeeded.
    """
    import torch.distributed

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


@contextlib.contextmanager
def interrupted_at_the_end() -> Iterator[None]:
    """A Ctrl-C inside the block, taken at its end: the libraries it imports import whole.

    A KeyboardInterrupt halfway through an import can be caught inside a library (under torch's, numpy's) and leave
    a module half made, which fails later with a traceback of its own. A Ctrl-C ignored (a background job) stays so.
    """
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda number, frame: caught.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if caught:
        raise KeyboardInterrupt


def run_command(command: str | None, argv: list[str], from_process: bool) -> None:
    """Run one command; Lightning's refusals of trainer settings become ConfigErrors (one line, status 2).

    The overview (no command, ``--help``, an unknown one) is printed before anything is imported: at once.
    """
    if command not in (*LIGHTNING_COMMANDS, *OWN_COMMANDS):
        print(OVERVIEW, end="")
        if command not in (None, "-h", "--help"):
            meant = did_you_mean(command, (*LIGHTNING_COMMANDS, *OWN_COMMANDS))
            print(f"mnistperf: error: unknown command {command!r}{meant}", file=sys.stderr)
            raise SystemExit(2)
        return
    with interrupted_at_the_end():
        check_torchvision()  # before anything imports Lightning, which imports torchvision when it is there
        from lightning.pytorch.utilities.exceptions import MisconfigurationException

        from mnistperf.console import calm_library_noise
        from mnistperf.lightning_cli.mnistperf_cli import MnistperfCLI

    calm_library_noise()
    try:
        if command == "prepare":
            with killed_as_interrupted():
                prepare_command(argv[1:])
        elif command == "bench":
            from mnistperf.bench.runner import bench_command

            bench_command(argv[1:])
        elif command == "tune":
            from mnistperf.tune.command import tune_command
            from mnistperf.tune.search import INTERRUPTED

            if tune_command(argv[1:]).stopped.startswith(INTERRUPTED):  # the best so far written; status: cut short
                raise SystemExit(130)
        elif command == "compare":
            from mnistperf.diagnosis.show.commands import compare_command

            compare_command(argv[1:])
        elif command == "report":
            from mnistperf.diagnosis.show.commands import report_command

            report_command(argv[1:])
        else:
            try:
                MnistperfCLI(args=None if from_process else argv)
            finally:
                end_process_group()
    except MisconfigurationException as exc:
        raise ConfigError(str(exc)) from exc
