"""Turn the official idx files into the Parquet (and optionally CSV) files every stage reads.

Writes ``<data_dir>/<Folder>/{train,test}.parquet`` once; a second run finds them ready.
The synthetic dataset, which exists to be larger than memory, is written as folders of shards
``<data_dir>/Synthetic/{train,test}/part-NNNNN.parquet`` instead, which the ``stream`` pipeline
(:mod:`mnistperf.data.pipelines.stream`) reads shard by shard.
Each file is written to a temporary name beside its target and renamed into place, so an
interrupted run never leaves a file a later run would trust, and two runs at once both end
with complete files. While writing, it measures size and write/read time per format: the
published experiment's CSV-against-Parquet comparison, reproduced on the user's machine.
"""

from __future__ import annotations

import math
import os
import shlex
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from mnistperf.atomic import atomic_write, atomic_write_dir, place_taken, removing_new_folders
from mnistperf.close_names import closest
from mnistperf.data import schema
from mnistperf.data.ingest import sources
from mnistperf.errors import ConfigError, DataError

FORMATS = ("parquet", "csv")
SPLITS = ("train", "test")
SYNTHETIC_FOLDER = "Synthetic"
SYNTHETIC_ROWS = 2_000_000  # the synthetic training split's rows, where --rows does not say
SYNTHETIC_ROW_GROUP_ROWS = 10_000
SYNTHETIC_SHARD_ROWS = 100_000  # about 88 MB per shard; a reader holds one shard's footer (~7.5 MB parsed)


@dataclass
class FormatReport:
    """Size and timing of one split written in one format."""

    dataset: str
    split: str
    rows: int
    format: str
    size_mb: float
    write_s: float
    read_s: float


BUILT_IN = [*sources.DATASETS, "synthetic"]  # the datasets mnistperf makes: the official ones and synthetic


def is_builtin(dataset: str) -> bool:
    """Whether mnistperf knows how to make this dataset (the official ones and synthetic)."""
    return dataset in BUILT_IN


def dataset_folder(dataset: str) -> str:
    """The folder under data_dir: the built-in datasets' own names, or a dataset of the user's own by its name."""
    if dataset == "synthetic":
        return SYNTHETIC_FOLDER
    if dataset in sources.DATASETS:
        return sources.DATASETS[dataset].folder
    return dataset


def split_path(data_dir: str | os.PathLike, dataset: str, split: str, fmt: str = "parquet") -> Path:
    """Where a split lives: <data_dir>/<Folder>/<split>.<fmt>, or a folder of shards <split>/.

    Shards are used always for synthetic, and for a dataset of the user's own when there is no single file.
    """
    folder = Path(data_dir) / dataset_folder(dataset)
    if fmt == "parquet" and (
        dataset == "synthetic"
        or (not is_builtin(dataset) and (folder / split).is_dir() and not (folder / f"{split}.parquet").exists())
    ):
        return folder / split
    return folder / f"{split}.{fmt}"


def is_ready(path: Path, expected_rows: int | None = None, read_pages: bool = False) -> bool:
    """Whether path is a complete prepared split, one file or shards (footers readable, layout right).

    ``read_pages`` also reads every page against its checksum, one row group at a time, which finds damage
    inside the data that a footer does not show (a whole pass: meant for the official datasets' files, tens of
    MB).
    """
    if not path.exists():
        return False
    rows = 0
    try:
        for file in schema.parquet_files(path):
            meta = pq.read_metadata(file)
            names = set(meta.schema.to_arrow_schema().names)
            if schema.LABEL_COLUMN not in names or not set(schema.PIXEL_COLUMNS) <= names:
                return False
            rows += meta.num_rows
            if read_pages:
                schema.verify_pages(schema.open_parquet(file), file)
    except (OSError, pa.ArrowException, DataError):
        return False
    return expected_rows is None or rows == expected_rows


def require_writable(data_dir: str | os.PathLike, folder: str, option: str = "--data-dir") -> None:
    """Refuse, naming ``option``, a dataset ``folder`` under ``data_dir`` this process may not write.

    Said before the files are read and converted, not as the first is written.
    """
    taken = place_taken(Path(data_dir) / folder, folder=True, written=True)
    if taken is not None:
        raise ConfigError(f"{option} {data_dir}: {taken}; give a folder you may write in, e.g. {option} data")


def shard_name(index: int) -> str:
    """The file name of a split's ``index``-th shard, in its folder of shards."""
    return f"part-{index:05d}.parquet"


def write_split(table: pa.Table, dataset: str, split: str, data_dir, formats: Iterable[str]) -> list[FormatReport]:
    """Write a split in every format asked, atomically, and report each file's size, write and read time."""
    reports = []
    for fmt in formats:
        path = split_path(data_dir, dataset, split, fmt)
        start = time.perf_counter()
        if fmt == "parquet" and path.suffix != ".parquet":  # a folder of shards: replaced whole, by one shard
            atomic_write_dir(path, lambda tmp: pq.write_table(table, tmp / shard_name(0), **schema.WRITE_OPTIONS))
        elif fmt == "parquet":
            atomic_write(path, lambda tmp: pq.write_table(table, tmp, **schema.WRITE_OPTIONS))
        else:
            atomic_write(path, lambda tmp: pacsv.write_csv(table, tmp))
        write_s = time.perf_counter() - start
        start = time.perf_counter()
        (pq.read_table if fmt == "parquet" else pacsv.read_csv)(path)
        read_s = time.perf_counter() - start
        reports.append(FormatReport(dataset, split, table.num_rows, fmt, size_mb(path), write_s, read_s))
    return reports


def size_mb(path: Path) -> float:
    """A split's size in MB: its file's, or its folder of shards' files together."""
    return sum(f.stat().st_size for f in path.iterdir()) / 1e6 if path.is_dir() else path.stat().st_size / 1e6


def prepare_dataset(
    dataset: str,
    data_dir: str | os.PathLike = "data",
    source_root: str | os.PathLike | None = None,
    formats: Iterable[str] = ("parquet",),
    force: bool = False,
    log: Callable[[str], None] = print,
    source_option: str = sources.PREPARE_OPTION,
    litdata: bool = False,
) -> list[FormatReport]:
    """Prepare one official dataset; return a report per split and format written (empty if ready).

    ``source_option`` is how the calling command takes ``source_root``, for the advice in its errors, and ``litdata``
    whether it also writes litdata's copies (its fix commands keep ``--formats`` and ``--litdata``). A preparation
    that fails leaves no folder behind that it created.
    """
    if dataset not in sources.DATASETS:
        raise ConfigError(f"unknown dataset {dataset!r}: choose one of {', '.join(sources.DATASETS)}.")
    formats = check_formats(formats)
    spec = sources.DATASETS[dataset]
    wanted = [split_path(data_dir, dataset, s, f) for s in SPLITS for f in formats]
    if not force and all(p.is_file() if p.suffix == ".csv" else is_ready(p, read_pages=True) for p in wanted):
        log(f"{spec.folder}: ready in {Path(data_dir) / spec.folder} (use --force to rebuild)")
        return []
    require_writable(
        data_dir, spec.folder, "--data-dir" if source_option == sources.PREPARE_OPTION else "--data.data_dir"
    )
    cache_dir = Path(data_dir) / spec.folder / "raw"
    reports, splits = [], {}
    with removing_new_folders(cache_dir):
        for split in SPLITS:  # every split verified before any is written: a damaged one leaves no file behind
            start = time.perf_counter()
            try:
                splits[split] = sources.load_split(spec, split, source_root, cache_dir, log, source_option)
            except sources.DamagedSource as error:
                again = recreate_command(dataset, data_dir, source_root, force, formats)
                raise DataError(damaged_source(error, cache_dir, again + (" --litdata" if litdata else ""))) from error
            decode_s = time.perf_counter() - start
            log(f"{spec.folder} {split}: {len(splits[split][0]):,} images verified and decoded in {decode_s:.2f} s")
        for split, (images, labels) in splits.items():
            reports += write_split(schema.build_table(images, labels), dataset, split, data_dir, formats)
    return reports


def damaged_source(error: sources.DamagedSource, cache_dir: Path, command: str) -> str:
    """What to do about a damaged official file: one this command downloaded is removed, another person's replaced."""
    if error.path.parent == cache_dir:
        return f"{error} Remove it and prepare again, downloading it: `rm {shlex.quote(str(error.path))} && {command}`"
    return f"{error} Replace it with the official file ({error.url}), then prepare again: `{command}`"


def prepare_synthetic(
    rows: int,
    data_dir: str | os.PathLike = "data",
    seed: int = 0,
    test_rows: int = 10_000,
    force: bool = False,
    log: Callable[[str], None] = print,
) -> list[FormatReport]:
    """Write a large random dataset of the same layout, in shards of row groups, without holding it in memory."""
    if rows < 1:
        raise ConfigError(f"--rows must be at least 1 (got {rows}): give --rows 60000, for instance.")
    if test_rows < 1:
        raise ConfigError(f"test_rows must be at least 1 (got {test_rows}).")
    reports = []
    with removing_new_folders(Path(data_dir) / SYNTHETIC_FOLDER):  # (stopped before a split: none)
        for index, (split, count) in enumerate((("train", rows), ("test", test_rows))):
            # each split its own stream: one written again alone (the other ready) draws what it drew, not the other's
            rng = np.random.default_rng([seed, index])
            reports += synthetic_split(split, count, data_dir, rng, force, log)
    return reports


def synthetic_split(
    split: str,
    count: int,
    data_dir: str | os.PathLike,
    rng: np.random.Generator,
    force: bool,
    log: Callable[[str], None],
) -> list[FormatReport]:
    """One split of :func:`prepare_synthetic`, written as shards (none where it is ready)."""
    path = split_path(data_dir, "synthetic", split)
    if not force and is_ready(path, count):
        log(f"{path}: ready ({count:,} rows; use --force to rebuild)")
        return []
    start = time.perf_counter()

    def write(folder: Path) -> None:
        for index, offset in enumerate(range(0, count, SYNTHETIC_SHARD_ROWS)):
            n = min(SYNTHETIC_SHARD_ROWS, count - offset)
            images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
            labels = rng.integers(0, schema.NUM_CLASSES, size=n)
            table = schema.build_table(images, labels)
            pq.write_table(
                table, folder / shard_name(index), row_group_size=SYNTHETIC_ROW_GROUP_ROWS, **schema.WRITE_OPTIONS
            )

    atomic_write_dir(path, write)
    write_s = time.perf_counter() - start
    shards = math.ceil(count / SYNTHETIC_SHARD_ROWS)
    log(f"{path}: {count:,} random rows written as {shards} shard{'s' if shards > 1 else ''} in {write_s:.1f} s")
    return [FormatReport("synthetic", split, count, "parquet", size_mb(path), write_s, float("nan"))]


def check_formats(formats: Iterable[str]) -> list[str]:
    """The formats to write: those asked, checked, with Parquet always first."""
    formats = [f.strip() for f in formats if f.strip()]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ConfigError(f"--formats: unknown format {unknown[0]!r}; choose from {', '.join(FORMATS)}.")
    # Parquet is what training reads, so it is always written.
    return ["parquet"] + [f for f in formats if f != "parquet"]


def format_reports(reports: list[FormatReport]) -> str:
    """The published experiment's CSV-vs-Parquet table: size, write and read time, size relative to Parquet."""
    if not reports:
        return ""
    lines = [
        f"{'dataset':<14}{'split':<7}{'rows':>10}  {'format':<8}"
        f"{'size MB':>9}{'write s':>9}{'read s':>8}{'x parquet':>11}",
    ]
    parquet_size = {(r.dataset, r.split): r.size_mb for r in reports if r.format == "parquet"}
    for r in reports:
        ratio = r.size_mb / parquet_size[(r.dataset, r.split)]
        read = "" if math.isnan(r.read_s) else f"{r.read_s:.2f}"
        lines.append(
            f"{dataset_folder(r.dataset):<14}{r.split:<7}{r.rows:>10,}  {r.format:<8}{r.size_mb:>9.1f}"
            f"{r.write_s:>9.2f}{read:>8}{ratio:>10.1f}x"
        )
    return "\n".join(lines)


def require_prepared(dataset: str, data_dir, split: str) -> Path:
    """The path of a prepared split, or a DataError saying how to prepare it."""
    path = split_path(data_dir, dataset, split)
    if path.exists():
        return path
    if dataset == "synthetic":
        how = (
            f"`python -m mnistperf prepare --dataset synthetic{_data_dir_option(data_dir)}` "
            f"(add --rows N for another size than {SYNTHETIC_ROWS:,} rows)"
        )
    elif not is_builtin(dataset):
        _require_own(dataset, Path(data_dir), path)
    else:
        how = (
            f"`python -m mnistperf prepare --dataset {dataset}{_data_dir_option(data_dir)}`, which needs the raw "
            "files: " + sources.how_to_get(sources.DATASETS[dataset])
        )
    raise DataError(f"{path} not found. Create it with {how}.")


def require_preparable(dataset: str, data_dir: str | os.PathLike, source_root: str | os.PathLike | None = None) -> None:
    """Refuse, in one line, a run whose official dataset is not prepared in data_dir and cannot be made here.

    Where a split is missing, its raw files are in no local folder and no mirror answers, the error says that
    the folder holds no prepared data and gives the command that prepares it there. A data_dir that cannot be a
    folder (a file, or below one), or one this process may not write in, is left to the data module's own check.
    """
    spec = sources.DATASETS[dataset]
    missing = [split_path(data_dir, dataset, s) for s in SPLITS if not split_path(data_dir, dataset, s).exists()]
    if not missing or place_taken(Path(data_dir) / spec.folder, folder=True, written=True) is not None:
        return  # (a folder it may not write in is said by prepare_dataset, with its fix, before any file is read)
    cache_dir = Path(data_dir) / spec.folder / "raw"
    if sources.found_locally(spec, source_root, cache_dir, "--data.source_root") or sources.mirror_answers(spec):
        return
    lacks = (
        f"holds no prepared {spec.folder}"
        if len(missing) == len(SPLITS)
        else "lacks " + ", ".join(str(path.relative_to(data_dir)) for path in missing)
    )
    raise DataError(
        f"data.data_dir {data_dir} {lacks}, and its official files are in no local folder searched "
        f"({', '.join(str(d) for d in sources.candidate_dirs(spec, source_root, cache_dir, '--data.source_root'))}) "
        "and cannot be downloaded "
        f"here. Prepare it there with `{recreate_command(dataset, data_dir, 'DIR', force=False)}`, where "
        f"DIR/{spec.source_folder}/ holds the four official .gz files; or pass --data.source_root DIR to this command."
    )


def recreate_command(
    dataset: str,
    data_dir: str | os.PathLike,
    source_root: str | os.PathLike | None = None,
    force: bool = True,
    formats: Sequence[str] = ("parquet",),
) -> str:
    """The command that re-creates a dataset's prepared files in data_dir, and only that dataset's.

    An official dataset is converted again from its raw files (from ``source_root`` when the run had one);
    synthetic is written again with as many rows as its readable footers hold; a dataset of the user's own
    is imported again from the folder it came from, which only the user knows (``DIR``). Without ``force``
    the command keeps the files that are ready, for an option added to it (``--litdata``) to write the rest.
    """
    prepare = f"python -m mnistperf prepare{' --force' if force else ''}"
    where = _data_dir_option(data_dir)
    if dataset in sources.DATASETS:
        source = f" --source-root {shlex.quote(str(source_root))}" if source_root is not None else ""
        more = f" --formats {','.join(formats)}" if list(formats) != ["parquet"] else ""
        return f"{prepare} --dataset {dataset}{where}{source}{more}"
    if dataset == "synthetic":
        rows = _readable_rows(split_path(data_dir, dataset, "train"))
        return f"{prepare} --dataset synthetic{f' --rows {rows}' if rows else ''}{where}"
    return f"{prepare} --from DIR --name {shlex.quote(dataset)}{where}"


def _data_dir_option(data_dir: str | os.PathLike) -> str:
    """`` --data-dir DIR`` for a command line, or nothing for the default ``data``."""
    return "" if Path(data_dir) == Path("data") else f" --data-dir {shlex.quote(str(data_dir))}"


def _readable_rows(path: Path) -> int | None:
    """The rows a split's footers declare, or None when one does not read."""
    try:
        return sum(pq.read_metadata(file).num_rows for file in schema.parquet_files(path))
    except (OSError, pa.ArrowException, DataError):
        return None


def own_datasets(data_dir: Path) -> list[str]:
    """The datasets of the user's own under ``data_dir``: its folders holding a train split, the built-in ones apart."""
    built_in = {dataset_folder(name) for name in BUILT_IN}
    try:
        folders = [path.name for path in data_dir.iterdir() if path.is_dir() and path.name not in built_in]
    except OSError:  # no such folder, or none to read: none of them
        return []
    return [name for name in folders if split_path(data_dir, name, "train").exists()]


def _require_own(dataset: str, data_dir: Path, path: Path) -> NoReturn:
    """Raise the DataError for a missing split of a dataset of the user's own, saying where it is read from.

    A name like a built-in dataset's (``fashion``) is answered with that one too.
    """
    alike = {name.lower(): name for name in [*BUILT_IN, *own_datasets(data_dir)] if name != dataset}
    folded = closest(dataset.lower(), alike)  # (Fashion_MNIST is fashion_mnist)
    meant = alike[folded] if folded else None
    own = "a dataset of your own" + (f" (did you mean {meant}, beside it?)" if meant else "")
    if meant in BUILT_IN:
        own = f"no built-in dataset (did you mean {meant}?), so a dataset of your own"
    raise DataError(
        f"{path} not found: data.dataset {dataset!r} is {own}, read from {data_dir / dataset}/ "
        f"(train.parquet and test.parquet, or train/ and test/ folders of shards). Put them there, or convert a "
        f"folder of CSV or Hugging Face Parquet files with "
        f"`python -m mnistperf prepare --from DIR --name {dataset}{_data_dir_option(data_dir)}`."
    )
