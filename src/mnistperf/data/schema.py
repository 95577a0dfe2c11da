"""The Parquet layout every pipeline reads, and the checks that keep bad files out of training.

One row per image: an integer label (0..9) and 784 integer pixels (0..255) in row-major order. ``prepare``
writes them as ``label`` and ``pixel0`` .. ``pixel783`` (uint8); :class:`Layout` maps a split's own names
onto these once, at no copy (accepted names: docs/data.md#your-own-data). A split is one Parquet file or a
folder of shards read in name order. Files are checked once, in the main process, when a pipeline is set
up, so a malformed file fails with a message naming the file and the fix. ``prepare`` writes a checksum
with every page and every read verifies those a file has, so a file damaged anywhere (its start, a page
in the middle, its footer) fails there too, as a :class:`PreparedFileError`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from mnistperf.errors import DataError, PreparedFileError

LABEL_COLUMN = "label"
LABEL_NAMES = ("label", "labels", "target", "class", "y")  # compared case-insensitively
NUM_PIXELS = 28 * 28
PIXEL_COLUMNS = [f"pixel{i}" for i in range(NUM_PIXELS)]
NUM_CLASSES = 10
NO_LABEL = -1
_PIXEL_NAME = re.compile(r"pixel\d+$")
_NUMBER = re.compile(r"(\d+)\D*$")

#: prepare writes a CRC with every page, and every read checks the CRCs a file has: damage inside a page is caught
WRITE_OPTIONS = {"write_page_checksum": True}


def canonical_schema() -> pa.Schema:
    """The types prepare writes: int64 label, uint8 pixel0..pixel783."""
    return pa.schema([(LABEL_COLUMN, pa.int64())] + [(name, pa.uint8()) for name in PIXEL_COLUMNS])


def build_table(images: np.ndarray, labels: np.ndarray | None) -> pa.Table:
    """An Arrow table in the project's layout from uint8 images [N, 28, 28] and labels [N]."""
    flat = np.ascontiguousarray(images.reshape(len(images), NUM_PIXELS), dtype=np.uint8)
    columns, names = [], []
    if labels is not None:
        columns.append(pa.array(labels.astype(np.int64)))
        names.append(LABEL_COLUMN)
    columns.extend(pa.array(flat[:, i]) for i in range(NUM_PIXELS))
    names.extend(PIXEL_COLUMNS)
    return pa.Table.from_arrays(columns, names=names)


def parquet_files(path: Path) -> list[Path]:
    """The files of a split: [path] for one file, the folder's ``*.parquet`` files in name order for shards."""
    if path.is_dir():
        files = sorted(path.glob("*.parquet"))
        if not files:
            raise PreparedFileError(f"{path} is a folder without .parquet files")
        return files
    return [path]


def open_parquet(path: Path) -> pq.ParquetFile:
    """Open a Parquet file, turning 'missing' and 'not Parquet' into errors that say what to do."""
    if not path.is_file():
        raise PreparedFileError(f"{path} not found")
    try:
        return pq.ParquetFile(path, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as exc:
        raise PreparedFileError(f"{path} is not a readable Parquet file ({_first_line(exc)})") from exc


def damaged(path: Path, exc: Exception) -> PreparedFileError:
    """The error for a file whose footer opened but whose pages do not read (damaged or cut short inside)."""
    return PreparedFileError(f"{path} is damaged: its data does not read ({_first_line(exc)})")


def verify_pages(parquet: pq.ParquetFile, path: Path) -> None:
    """Read every page of a file once, one row group at a time, checking the CRCs it has; a damaged file raises."""
    try:
        for group in range(parquet.metadata.num_row_groups):
            parquet.read_row_group(group)
    except (pa.ArrowException, OSError) as exc:
        raise damaged(path, exc) from exc


def _first_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


@dataclass(frozen=True)
class Layout:
    """Which columns of a file hold the label and the 784 pixels, in pixel order."""

    label: str | None
    pixels: tuple[str, ...]

    @property
    def has_labels(self) -> bool:
        """Whether the file has a label column."""
        return self.label is not None

    @property
    def is_canonical(self) -> bool:
        """Whether the columns are already named and ordered as the canonical schema's."""
        return self.label in (None, LABEL_COLUMN) and self.pixels == tuple(PIXEL_COLUMNS)

    def told(self) -> dict[str, str]:
        """How the file names each column of the canonical layout, in its order."""
        pixels = dict(zip(PIXEL_COLUMNS, self.pixels, strict=True))
        return {LABEL_COLUMN: self.label, **pixels} if self.label else pixels

    def canonical(self, data: pa.Table | pa.RecordBatch) -> pa.Table | pa.RecordBatch:
        """The same data with only the label and pixel columns, named ``label`` and ``pixel0..783`` (no copy)."""
        if self.is_canonical and data.num_columns == len(self.pixels) + self.has_labels:
            return data
        told = self.told()
        return data.select(list(told.values())).rename_columns(list(told))


def find_layout(names: list[str], path: Path) -> Layout:
    """The layout of a file with these column names, or a DataError saying what was found and what is expected."""
    labels = [n for n in names if n.lower() in LABEL_NAMES]
    if len(labels) > 1:
        raise DataError(
            f"{path} has {len(labels)} label-like columns ({', '.join(labels)}); keep exactly one, "
            f"named {LABEL_COLUMN!r}, beside the {NUM_PIXELS} pixel columns."
        )
    label = labels[0] if labels else None
    pixels = [n for n in names if n != label]
    if len(pixels) != NUM_PIXELS:
        what = (
            f"{len(pixels)} columns besides the label {label!r}"
            if label
            else f"{len(pixels)} columns and no label column"
        )
        raise DataError(
            f"{path} has {what}; expected a label column ({' or '.join(LABEL_NAMES)}) and exactly "
            f"{NUM_PIXELS} pixel columns (28x28 images) in pixel order."
        )
    numbers = [_NUMBER.search(n) for n in pixels]
    if all(numbers):
        values = [int(m.group(1)) for m in numbers if m]
        if sorted(values) == list(range(min(values), min(values) + NUM_PIXELS)):  # 0..783 or 1..784: by number
            pixels = [n for _, n in sorted(zip(values, pixels, strict=True))]
    return Layout(label, tuple(pixels))


def check_schema(
    schema: pa.Schema, num_rows: int, path: Path, require_labels: bool, allow_float: bool = True
) -> Layout:
    """Check column names and types; return the file's layout.

    Float columns pass only with ``allow_float``, for a caller that reads the values next: check_values
    rejects them too, and can say whether they hold NaN.
    """
    if num_rows == 0:
        raise PreparedFileError(f"{path} is empty (0 rows)")
    layout = find_layout(schema.names, path)
    if require_labels and not layout.has_labels:
        raise DataError(
            f"{path} has no '{LABEL_COLUMN}' column, which training, validation and testing need; "
            f"add the labels or use the file only with `predict`."
        )
    for name in list(layout.pixels) + ([layout.label] if layout.has_labels else []):
        dtype = schema.field(name).type
        if not (pa.types.is_integer(dtype) or (allow_float and pa.types.is_floating(dtype))):
            raise PreparedFileError(f"{path}: column {name} has type {dtype}, expected integers")
    return layout


def check_values(table: pa.Table | pa.RecordBatch, path: Path, told: Mapping[str, str] | None = None) -> None:
    """Check for NaN or nulls, non-integer values and out-of-range pixels and labels.

    ``told``: how the file names each column of the canonical layout, where it names them otherwise.
    """
    bounds = {LABEL_COLUMN: (0, NUM_CLASSES - 1)}
    for column_name in table.schema.names:
        if column_name != LABEL_COLUMN and not _PIXEL_NAME.match(column_name):
            continue
        column, name = table.column(column_name), (told or {}).get(column_name, column_name)
        low, high = bounds.get(column_name, (0, 255))
        what = "labels" if column_name == LABEL_COLUMN else "pixels"
        nan_count = column.null_count
        if pa.types.is_floating(column.type):
            nan_count += pc.sum(pc.is_nan(column)).as_py() or 0
        if nan_count:
            raise DataError(f"{path}: column {name} holds {nan_count} NaN or missing values; {what} must all be set.")
        if pa.types.is_floating(column.type):
            raise PreparedFileError(
                f"{path}: column {name} has type {column.type}; {what} must be stored as integers {low}..{high}"
            )
        extremes = pc.min_max(column).as_py()
        if extremes["min"] < low or extremes["max"] > high:
            raise DataError(
                f"{path}: column {name} has values {extremes['min']}..{extremes['max']}; "
                f"{what} must lie in {low}..{high}."
            )


def checked_files(
    path: Path, require_labels: bool, allow_float: bool = True
) -> Iterator[tuple[Path, pq.ParquetFile, Layout]]:
    """Open the files of a split one by one, each schema checked, all with labels or all without.

    A footer can be large, so the caller drops each ParquetFile before asking for the next.
    """
    has_labels = None
    for file in parquet_files(path):
        parquet = open_parquet(file)
        layout = check_schema(parquet.schema_arrow, parquet.metadata.num_rows, file, require_labels, allow_float)
        labelled = layout.has_labels
        if has_labels is not None and labelled != has_labels:
            state = "has" if labelled else "lacks"
            raise PreparedFileError(f"{file} {state} a '{LABEL_COLUMN}' column, unlike the shards before it")
        has_labels = labelled
        yield file, parquet, layout
        del parquet


def checked_tables(path: Path, require_labels: bool) -> Iterator[tuple[Path, pa.Table]]:
    """Each file of a split read whole, checked, in the canonical layout: one file's table in memory at a time."""
    for file, parquet, layout in checked_files(path, require_labels):
        try:
            table = layout.canonical(parquet.read(columns=[c for c in (layout.label,) if c] + list(layout.pixels)))
        except (pa.ArrowException, OSError) as exc:
            raise damaged(file, exc) from exc
        check_values(table, file, layout.told())
        yield file, table


def read_checked(path: Path, require_labels: bool) -> pa.Table:
    """Read a whole split (file or shards) and check it; the table, in the canonical layout, suits any pipeline."""
    tables = [table for _, table in checked_tables(path, require_labels)]
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")


def to_tensors(table: pa.Table | pa.RecordBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 pixels [N, 784] and int64 labels [N] (NO_LABEL where the file has no label column)."""
    # Column by column into [784, N] (contiguous copies), then one transpose: far faster
    # than filling [N, 784] column by column with strided writes.
    by_column = np.stack([table.column(name).to_numpy() for name in PIXEL_COLUMNS]).astype(np.uint8, copy=False)
    pixels = torch.from_numpy(by_column).T.contiguous()
    if LABEL_COLUMN in table.schema.names:
        labels = torch.from_numpy(table.column(LABEL_COLUMN).to_numpy().astype(np.int64))
    else:
        labels = torch.full((table.num_rows,), NO_LABEL, dtype=torch.int64)
    return pixels, labels
