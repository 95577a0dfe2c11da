"""Import MNIST-style data in the layouts people have into the project's layout.

    python -m mnistperf prepare --from DIR --name NAME [--data-dir data]

DIR holds CSV (Kaggle's layout), Hugging Face Parquet (PNG bytes) or Parquet with any column names. A file
belongs to the split (``train``/``test``) named as a word in its file name or a folder above it. The result is
``DATA_DIR/NAME/{train,test}.parquet``, written atomically and checked as every prepared split is.
Layouts and rejections: docs/data.md#your-own-data.
"""

from __future__ import annotations

import io
import re
import shlex
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from mnistperf.atomic import removing_new_folders
from mnistperf.data import schema
from mnistperf.data.ingest import prepare, sources
from mnistperf.errors import ConfigError, DataError, PreparedFileError

SPLIT_WORD = {split: re.compile(rf"(^|[^a-z]){split}([^a-z]|$)") for split in prepare.SPLITS}
SUFFIXES = (".csv", ".parquet")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
EXAMPLES = "{split}.csv, mnist_{split}.csv or {split}-00000-of-00001.parquet"  # each split's file names, for example


def find_splits(folder: Path) -> dict[str, list[Path]]:
    """The CSV or Parquet files of each split under folder, in name order; a DataError if a split is missing."""
    if not folder.is_dir():
        what = "a file, not a folder" if folder.exists() else "no such folder"
        raise DataError(f"--from {folder}: {what}; give the folder that holds the train and test files.")
    found: dict[str, list[Path]] = {split: [] for split in prepare.SPLITS}
    images = 0  # loose image files, which no layout it reads holds
    for file in sorted(folder.rglob("*")):
        images += file.suffix.lower() in IMAGE_SUFFIXES
        if not file.is_file() or file.suffix.lower() not in SUFFIXES or file.name.startswith("."):
            continue
        words = [part.lower() for part in file.relative_to(folder).parts]
        splits = {s for s, word in SPLIT_WORD.items() if any(word.search(part) for part in words)}
        if len(splits) == 1:
            found[splits.pop()].append(file)
        else:  # a validation split, a file of both names: not a split it imports, said
            print(f"{file}: left out (its name says no split, or both: {' or '.join(prepare.SPLITS)})", flush=True)
    for split, files in found.items():
        if not files:
            loose = (
                f"; its {images:,} loose image files are not read (a file per image is no layout it imports): put "
                "them in Parquet in Hugging Face's image layout, an image column of PNG bytes beside a label column"
                if images
                else ""
            )
            raise DataError(
                f"{folder} has no {split} split: expected CSV or Parquet files named like "
                f"{EXAMPLES.format(split=split)} "
                f"(or inside a folder named {split}/){loose}."
            )
        kinds = {f.suffix.lower() for f in files}
        if len(kinds) > 1:
            raise DataError(
                f"{folder}: the {split} split mixes CSV and Parquet files ({', '.join(map(str, files[:3]))}"
                "...); keep one format per split."
            )
    return found


def _has_header(file: Path) -> bool:
    with open(file, encoding="utf-8", errors="replace") as handle:
        first = handle.readline().split(",")[0].strip().strip('"')
    return not first.lstrip("-").isdigit()


GIVE_ROWS = "give it the images' rows (or take it out of the folder) and import again."


def read_csv(file: Path) -> pa.Table:
    """A CSV file in the canonical layout: header or not, label column first where there is no header."""
    header = _has_header(file)
    options = pacsv.ReadOptions(autogenerate_column_names=not header)
    try:
        table = pacsv.read_csv(file, read_options=options)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(f"{file} is not a readable CSV file ({exc}).") from exc
    if header:
        layout = schema.find_layout(table.column_names, file)
        if not layout.has_labels:
            raise DataError(f"{file} has a header without a label column; name the label column 'label'.")
    else:
        if table.num_columns != schema.NUM_PIXELS + 1:
            raise DataError(
                f"{file} has {table.num_columns} columns and no header; expected "
                f"{schema.NUM_PIXELS + 1}: the label, then {schema.NUM_PIXELS} pixels."
            )
        layout = schema.Layout(table.column_names[0], tuple(table.column_names[1:]))
    if table.num_rows == 0:  # (its columns read as nulls: no values to be whole numbers)
        raise DataError(f"{file} has a header and no rows of data; {GIVE_ROWS}")
    for position, name in enumerate(table.column_names, 1):
        if name in (layout.label, *layout.pixels) and not pa.types.is_integer(table.schema.field(name).type):
            said, kind = name if header else f"{position}", table.schema.field(name).type
            fractions = pa.types.is_floating(kind) and name in layout.pixels and (pc.max(table[name]).as_py() or 0) <= 1
            scaled = " (pixels scaled to 0..1: times 255, rounded)" if fractions else ""
            raise DataError(
                f"{file}: column {said} holds {kind} values, not whole numbers; "
                f"labels must be 0..9 and pixels 0..255{scaled}: correct the file and import again."
            )
    table = layout.canonical(table)
    # each column named as the file names it (by its place where it has no header), not by the canonical name
    told = (
        layout.told() if header else {name: f"{place} (no header)" for place, name in enumerate(table.column_names, 1)}
    )
    schema.check_values(table, file, told)
    return table


def _image_column(table_schema: pa.Schema) -> str | None:
    """The column holding encoded images: a struct with a 'bytes' field, or a binary column."""
    for field in table_schema:
        if pa.types.is_struct(field.type) and field.type.get_field_index("bytes") >= 0:
            return field.name
        if pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type):
            return field.name
    return None


def decode_images(file: Path, column: pa.ChunkedArray) -> np.ndarray:
    """PNG (or any Pillow-readable) bytes to uint8 [N, 28, 28]; one line naming the file and row on a bad image."""
    try:
        from PIL import Image
    except ImportError:
        raise ConfigError(
            f"{file} holds encoded images; decoding them needs Pillow: "
            "pip install 'mnistperf[import]' (or pip install pillow)."
        ) from None
    if pa.types.is_struct(column.type):
        column = column.combine_chunks().field("bytes")
    images = np.empty((len(column), 28, 28), dtype=np.uint8)
    for row, encoded in enumerate(column.to_pylist()):
        try:
            image = Image.open(io.BytesIO(encoded))
            image.load()
        except Exception as exc:  # Pillow raises many kinds for a broken image
            said = "no image format Pillow reads" if isinstance(exc, Image.UnidentifiedImageError) else exc
            raise DataError(
                f"{file}: the image in row {row} does not decode ({type(exc).__name__}: {said}); "
                "re-export it as a 28x28 grayscale PNG."
            ) from None
        if image.mode != "L" or image.size != (28, 28):
            raise DataError(
                f"{file}: the image in row {row} is {image.size[0]}x{image.size[1]} {image.mode}; "
                "expected 28x28 grayscale (mode L), as MNIST-style data is."
            )
        images[row] = np.asarray(image)
    return images


def read_parquet(file: Path) -> pa.Table:
    """A Parquet file, Hugging Face's image layout or pixel columns, in the canonical layout.

    A file that does not read is the user's to replace: prepare cannot re-create it.
    """
    try:
        parquet = schema.open_parquet(file)
        if parquet.metadata.num_rows == 0:
            raise DataError(f"{file} holds no rows; {GIVE_ROWS}")
        image_column = _image_column(parquet.schema_arrow)
        if image_column is None:
            return schema.read_checked(file, require_labels=True)
        try:
            table = parquet.read()
        except (pa.ArrowException, OSError) as exc:
            raise schema.damaged(file, exc) from exc
    except PreparedFileError as exc:
        raise DataError(f"{exc.problem}; replace it with a good copy and import again.") from exc
    labels = [n for n in table.column_names if n.lower() in schema.LABEL_NAMES]
    if len(labels) != 1:
        raise DataError(
            f"{file} has an image column {image_column!r} and {len(labels)} label columns; "
            f"expected one, named {schema.LABEL_COLUMN!r}."
        )
    images = decode_images(file, table.column(image_column))
    return schema.build_table(images, table.column(labels[0]).to_numpy())


def read_split(files: Iterable[Path]) -> pa.Table:
    """Every file of one split, checked, as one table in the canonical layout."""
    tables = []
    for file in files:
        if file.suffix.lower() == ".csv":
            table = read_csv(file)  # checked as it is read, each column named as the file names it
        else:
            table = read_parquet(file)
            schema.check_values(table, file)
        tables.append(table.cast(schema.canonical_schema()))  # values checked: the narrowing cast is exact
    return pa.concat_tables(tables)


def refused_name(name: str) -> str | None:
    """Why ``name`` cannot name a dataset of the user's own (a built-in's folder, or one outside data_dir), or None."""
    builtin = {prepare.dataset_folder(d).lower(): d for d in prepare.BUILT_IN}
    if prepare.is_builtin(name):
        return "is a built-in dataset"
    if name.lower() in builtin:
        return f"is the folder of the built-in dataset {builtin[name.lower()]}, whose files the import would replace"
    if not sources.OWN_NAME.match(name):  # as data.dataset takes it
        return "is not a folder name of letters, digits, '_', '-' and '.' (not first)"
    return None


def own_name(name: str) -> str:
    """A name like ``name`` that :func:`refused_name` takes."""
    plain = re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_") or "data"
    return plain if refused_name(plain) is None else f"my_{plain}"


def import_folder(folder: Path, name: str, data_dir: Path, formats: list[str], force: bool = False) -> list:
    """Convert folder's train and test splits into data_dir/name/; return the size/time reports."""
    refused = refused_name(name)
    if refused is not None:  # said before anything is read: the import would write in another dataset's place
        command = f"python -m mnistperf prepare --from {shlex.quote(str(folder))} --name {own_name(name)}"
        raise ConfigError(
            f"--name {name!r} {refused}; give your data a name of its own, e.g. "
            f"`{command} --data-dir {shlex.quote(str(data_dir))}`"
        )
    targets = {split: prepare.split_path(data_dir, name, split) for split in prepare.SPLITS}
    if not force and all(prepare.is_ready(path) for path in targets.values()):
        print(f"{name}: ready in {data_dir / name} (use --force to rebuild)", flush=True)
        return []
    prepare.require_writable(data_dir, name)
    splits = find_splits(folder)
    tables = {split: read_split(files) for split, files in splits.items()}  # all checked before anything is written
    reports = []
    with removing_new_folders(data_dir / name):  # (stopped before a split was written: no folder stays)
        for split, table in tables.items():
            files = len(splits[split])
            print(f"{name} {split}: {table.num_rows:,} images from {files} file(s) in {folder}", flush=True)
            reports += prepare.write_split(table, name, split, data_dir, formats)
    return reports
