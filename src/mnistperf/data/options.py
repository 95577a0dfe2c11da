"""The DataModule's options as one typed, checked record: the one list the rest of the lab reads them from.

:class:`~mnistperf.data.datamodule.MNISTDataModule` takes them one by one, because LightningCLI reads its
``__init__``'s signature and docstring for a config's ``data:`` section (each option's meaning is written there), and
makes a :class:`LoaderOptions` of them. From this record come the checks (made when it is made), what a pipeline
reads, the options that describe a run in its timing summary, and the DataModule's lines of ``fit --help``. The
pipelines import it; the name of a pipeline is checked where the registry makes it
(:func:`~mnistperf.data.pipelines.registry.pipeline_for`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from mnistperf.atomic import place_taken
from mnistperf.data.ingest.sources import DATASETS, OWN_NAME
from mnistperf.errors import ConfigError


def is_uri(location: object) -> bool:
    """Whether a data location is a URI (s3://, gs://, ...) rather than a local path."""
    return "://" in str(location)


def option(default: Any, describes: bool = False, fit_help: tuple[str, str] | None = None) -> Any:
    """One option's default, with what else the lab says of it.

    Args:
        default: its value when a config does not set it.
        describes: whether it is one of the settings that describe how a run's batches are made
            (:meth:`LoaderOptions.described`).
        fit_help: (metavar, one line) for ``fit --help``'s first lines, for the options a user of this lab changes.
    """
    return field(default=default, metadata={"describes": describes, "fit_help": fit_help})


@dataclass(frozen=True)
class LoaderOptions:
    """The options of :class:`~mnistperf.data.datamodule.MNISTDataModule`, checked when made.

    An option's value that cannot work raises a :class:`~mnistperf.errors.ConfigError` naming the option and the fix;
    what one pipeline alone cannot honour, that pipeline's ``check`` rejects.
    """

    dataset: str = option(
        "fashion_mnist",
        describes=True,
        fit_help=("NAME", "fashion_mnist (default), mnist, synthetic or your own folder"),
    )
    data_dir: str = option("data")
    pipeline: str = option("v2", describes=True, fit_help=("NAME", "the input pipeline, one of those listed below"))
    batch_size: int = option(64, describes=True, fit_help=("N", "samples per step"))
    num_workers: int = option(
        0, describes=True, fit_help=("N", "loader worker processes (0: load in the main process)")
    )
    persistent_workers: bool = option(False, describes=True, fit_help=("BOOL", "keep workers alive between epochs"))
    pin_memory: bool = option(
        False, describes=True, fit_help=("BOOL", "page-locked batches for faster copies to a GPU")
    )
    prefetch_factor: int | None = option(None, describes=True)
    shuffle: bool = option(True, describes=True)
    drop_last: bool = option(False, describes=True)
    val_source: Literal["test"] | float = option("test", describes=True)
    seed: int = option(42)
    source_root: str | None = option(
        None, fit_help=("DIR", "offline: the folder holding mnist/ and fashion-mnist/ .gz files")
    )
    stream_buffer_rows: int = option(10_000)
    batches_per_step: int = option(1, describes=True)

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> LoaderOptions:
        """The options among ``values`` (a DataModule's hyperparameters, which may hold more), checked."""
        return cls(**{each.name: values[each.name] for each in fields(cls)})

    def described(self) -> dict[str, Any]:
        """The options that describe how the run's batches are made, for timing summaries and reports."""
        return {each.name: getattr(self, each.name) for each in fields(self) if each.metadata["describes"]}

    def __post_init__(self) -> None:
        """Reject option values that cannot work, naming the option and the fix."""
        taken = None if is_uri(self.data_dir) else place_taken(Path(self.data_dir), folder=True)
        if taken is not None:
            raise ConfigError(
                f"data.data_dir {self.data_dir}: {taken}; give the folder that holds the datasets (data/ by default)."
            )
        if not OWN_NAME.match(str(self.dataset)):
            names = ", ".join([*DATASETS, "synthetic"])
            raise ConfigError(
                f"data.dataset {self.dataset!r} is neither a built-in dataset ({names}) nor a folder name "
                "of your own (letters, digits, '_', '-', '.'); use the folder's name under data_dir."
            )
        built_in = next((name for name, spec in DATASETS.items() if spec.folder == self.dataset), None)
        if built_in is not None:  # read as data of one's own, it would be the same files under another name
            raise ConfigError(
                f"data.dataset {self.dataset!r} is the folder the built-in {built_in} is prepared into; "
                f"give --data.dataset {built_in}."
            )
        if self.batch_size < 1:
            raise ConfigError(f"data.batch_size must be at least 1 (got {self.batch_size}): give --data.batch_size 64.")
        if self.num_workers < 0:
            raise ConfigError(
                f"data.num_workers cannot be negative (got {self.num_workers}); use 0 to load in the main process."
            )
        if self.persistent_workers and self.num_workers == 0:
            raise ConfigError(
                "data.persistent_workers needs worker processes: give --data.num_workers 2 (or more), or "
                "--data.persistent_workers false."
            )
        if self.prefetch_factor is not None and self.num_workers == 0:
            raise ConfigError(
                "data.prefetch_factor needs worker processes: give --data.num_workers 2 (or more), or "
                "--data.prefetch_factor null."
            )
        if self.prefetch_factor is not None and self.prefetch_factor < 1:
            raise ConfigError(
                f"data.prefetch_factor must be at least 1 batch a worker (got {self.prefetch_factor}); "
                "or null for the DataLoader's default, 2."
            )
        val_source = self.val_source
        if val_source != "test" and not (isinstance(val_source, (int, float)) and 0 < float(val_source) < 1):
            raise ConfigError(f"data.val_source must be 'test' or a fraction between 0 and 1 (got {val_source!r}).")
        if self.batches_per_step < 1:
            raise ConfigError(
                f"data.batches_per_step must be at least 1 (got {self.batches_per_step}): it is how many "
                "training batches one Lightning step runs."
            )
        if self.stream_buffer_rows < 1:
            raise ConfigError(
                f"data.stream_buffer_rows must be at least 1 (got {self.stream_buffer_rows}): it is how many rows "
                "the stream pipeline holds for shuffling."
            )


def fit_help_lines(indent: int = 2, width: int = 34) -> list[str]:
    """``fit --help``'s lines for the DataModule's options a user of this lab changes, in their order here."""
    return [
        f"{' ' * indent}{f'--data.{each.name} {metavar}':<{width}}{line}"
        for each in fields(LoaderOptions)
        if each.metadata["fit_help"]
        for metavar, line in [each.metadata["fit_help"]]
    ]
