"""Where the official MNIST / FashionMNIST idx files come from, and proof that they are intact.

Looked for in order: ``--source-root`` (or ``MNISTPERF_SOURCE_ROOT``), Debian's
``/usr/share/datasets/<name>/``, ``<data_dir>/<Folder>/raw/``, then the public mirrors. Every file is
verified by the MD5 of its decompressed content. See docs/data.md.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import urllib.error
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mnistperf.atomic import atomic_write
from mnistperf.errors import DataError

SOURCE_ROOT_ENV = "MNISTPERF_SOURCE_ROOT"
#: the name of a dataset of one's own: its folder under data_dir (letters, digits, '_', '-', '.', not first)
OWN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*$")
SYSTEM_DATASETS_DIR = Path("/usr/share/datasets")
IMAGE_SIDE = 28
IDX_IMAGES_MAGIC = 2051
IDX_LABELS_MAGIC = 2049


@dataclass(frozen=True)
class RawFile:
    """One official .gz file and the MD5 of its decompressed idx content."""

    name: str
    content_md5: str


@dataclass(frozen=True)
class DatasetSpec:
    """Everything needed to find, verify and name one dataset."""

    name: str  # the option value, e.g. "fashion_mnist"
    folder: str  # the prepared folder under data_dir, e.g. "FashionMNIST"
    source_folder: str  # the raw folder name, e.g. "fashion-mnist"
    mirrors: tuple[str, ...]
    splits: dict[str, tuple[RawFile, RawFile]]  # split -> (images, labels)
    debian_package: str | None = None  # the Debian package that installs the files, where there is one

    @property
    def raw_files(self) -> list[RawFile]:
        """Its official files, every split's images and labels."""
        return [raw for pair in self.splits.values() for raw in pair]


DATASETS: dict[str, DatasetSpec] = {
    "mnist": DatasetSpec(
        name="mnist",
        folder="MNIST",
        source_folder="mnist",
        mirrors=(
            "https://ossci-datasets.s3.amazonaws.com/mnist/",
            "https://storage.googleapis.com/cvdf-datasets/mnist/",
        ),
        splits={
            "train": (
                RawFile("train-images-idx3-ubyte.gz", "6bbc9ace898e44ae57da46a324031adb"),
                RawFile("train-labels-idx1-ubyte.gz", "a25bea736e30d166cdddb491f175f624"),
            ),
            "test": (
                RawFile("t10k-images-idx3-ubyte.gz", "2646ac647ad5339dbf082846283269ea"),
                RawFile("t10k-labels-idx1-ubyte.gz", "27ae3e4e09519cfbb04c329615203637"),
            ),
        },
    ),
    "fashion_mnist": DatasetSpec(
        name="fashion_mnist",
        folder="FashionMNIST",
        source_folder="fashion-mnist",
        debian_package="dataset-fashion-mnist",
        mirrors=("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",),
        splits={
            "train": (
                RawFile("train-images-idx3-ubyte.gz", "f4a8712d7a061bf5bd6d2ca38dc4d50a"),
                RawFile("train-labels-idx1-ubyte.gz", "9018921c3c673c538a1fc5bad174d6f9"),
            ),
            "test": (
                RawFile("t10k-images-idx3-ubyte.gz", "8181f5470baa50b63fa0f6fddb340f0a"),
                RawFile("t10k-labels-idx1-ubyte.gz", "15d484375f8d13e6eb1aabb0c3f46965"),
            ),
        },
    ),
}


#: how the command that prepares names the source folder: ``prepare`` has --source-root, ``fit`` --data.source_root
PREPARE_OPTION = "--source-root"


def how_to_get(spec: DatasetSpec, option: str = PREPARE_OPTION) -> str:
    """The ways a user can make the raw files reachable, for error messages.

    Args:
        spec: the dataset whose raw files are missing.
        option: how the command that failed takes the source folder.
    """
    package, into = spec.debian_package, SYSTEM_DATASETS_DIR / spec.source_folder
    installed = f"or install Debian's package {package} (into {into}); " if package else ""
    return (
        f"pass {option} DIR (or set {SOURCE_ROOT_ENV}) where DIR/{spec.source_folder}/ holds the "
        f"four official .gz files; {installed}or allow network access to {spec.mirrors[0]}"
    )


def asked_root(source_root: str | os.PathLike | None) -> str | os.PathLike | None:
    """The source folder the run asked for: the option's, else the environment's (None: neither)."""
    return source_root if source_root is not None else os.environ.get(SOURCE_ROOT_ENV)


def candidate_dirs(
    spec: DatasetSpec, source_root: str | os.PathLike | None, cache_dir: Path, option: str = PREPARE_OPTION
) -> list[Path]:
    """Local folders to search, in order of preference."""
    dirs = []
    named, root = option if source_root is not None else SOURCE_ROOT_ENV, asked_root(source_root)
    if root:
        if not Path(root).is_dir():  # named on purpose: passing it over would hide a typo
            raise DataError(
                f"{named} {root}: {'a file, not a folder' if Path(root).exists() else 'no such folder'}; give the "
                "folder that holds "
                f"{spec.source_folder}/ with the official .gz files."
            )
        folder = Path(root) / spec.source_folder
        if not folder.is_dir() and any((Path(root) / raw.name).is_file() for raw in spec.raw_files):  # their folder
            if Path(root).name != spec.source_folder:
                raise DataError(
                    f"{named} {root} holds the .gz files itself: give a folder that holds them in "
                    f"{spec.source_folder}/ (DIR/{spec.source_folder}/{spec.raw_files[0].name})."
                )
            parent = Path(root).resolve().parent
            give = f"{named}={parent}" if named == SOURCE_ROOT_ENV else f"{named} {parent}"
            raise DataError(f"{named} {root} is the {spec.source_folder}/ folder itself: give the one above it, {give}")
        dirs.append(folder)
    dirs.append(SYSTEM_DATASETS_DIR / spec.source_folder)
    dirs.append(cache_dir)
    return dirs


def found_locally(spec: DatasetSpec, source_root, cache_dir: Path, option: str = PREPARE_OPTION) -> bool:
    """Whether every raw file of the dataset lies in one of the local folders searched, so nothing is downloaded."""
    dirs = candidate_dirs(spec, source_root, cache_dir, option)
    return all(any((d / raw.name).is_file() for d in dirs) for raw in spec.raw_files)


def mirror_answers(spec: DatasetSpec, timeout: float = 5.0) -> bool:
    """Whether a mirror of the dataset answers at all (any HTTP status counts), so a download can be tried."""
    for mirror in spec.mirrors:
        url = mirror + spec.splits["train"][0].name
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
                return True
        except urllib.error.HTTPError:
            return True
        except (urllib.error.URLError, OSError, ValueError):
            continue
    return False


class DamagedSource(DataError):
    """A local official file that is not intact: its ``path`` and the ``url`` of the official one."""

    def __init__(self, problem: str, path: Path, url: str):
        super().__init__(problem)
        self.path, self.url = path, url


def decompress_verified(path: Path, raw: RawFile) -> bytes:
    """Decompress one .gz file and check its content MD5; raise DataError naming the file if not intact."""
    try:
        with gzip.open(path, "rb") as handle:
            content = handle.read()
    except PermissionError:  # intact, maybe, but not ours to read: the path is said as such
        raise
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path} is corrupt or truncated ({exc}).") from exc
    if not content:  # (an empty file reads as an empty .gz)
        raise DataError(f"{path} is empty: the file is damaged or is not the official {raw.name}.")
    digest = hashlib.md5(content, usedforsecurity=False).hexdigest()
    if digest != raw.content_md5:
        raise DataError(
            f"{path} decompresses to content with MD5 {digest}, but the official {raw.name} has "
            f"{raw.content_md5}: the file is damaged or is not the official one."
        )
    return content


def decode_idx(content: bytes, magic: int, path: Path) -> np.ndarray:
    """Decode verified idx bytes into uint8 images [N, 28, 28] or labels [N]."""
    found = int.from_bytes(content[0:4], "big")
    if found != magic:
        raise DataError(f"{path}: idx magic number is {found}, expected {magic}.")
    count = int.from_bytes(content[4:8], "big")
    if magic == IDX_IMAGES_MAGIC:
        return np.frombuffer(content, dtype=np.uint8, offset=16).reshape(count, IMAGE_SIDE, IMAGE_SIDE)
    return np.frombuffer(content, dtype=np.uint8, offset=8).reshape(count)


def download(url: str, target: Path, raw: RawFile) -> bytes:
    """Download url into target, verify it, and return its decompressed content."""
    content = b""

    def fetch(tmp: Path) -> None:
        nonlocal content
        with open(tmp, "wb") as out, urllib.request.urlopen(url, timeout=60) as response:
            shutil.copyfileobj(response, out)
        content = decompress_verified(tmp, raw)

    atomic_write(target, fetch)
    return content


def read_raw(
    spec: DatasetSpec, raw: RawFile, source_root, cache_dir: Path, log=print, option: str = PREPARE_OPTION
) -> bytes:
    """Return the verified decompressed content of one raw file from the first place that has it."""
    for folder in candidate_dirs(spec, source_root, cache_dir, option):
        path = folder / raw.name
        if path.is_file():
            try:
                return decompress_verified(path, raw)
            except DataError as error:  # a local copy: the caller, which knows the command, says the fix
                raise DamagedSource(str(error), path, spec.mirrors[0] + raw.name) from error
    failures = []
    for mirror in spec.mirrors:
        url = mirror + raw.name
        log(f"downloading {url}")
        try:
            return download(url, cache_dir / raw.name, raw)
        except (urllib.error.URLError, OSError, DataError) as exc:
            failures.append(f"{url}: {exc}")
    searched = ", ".join(str(d) for d in candidate_dirs(spec, source_root, cache_dir, option))
    root = asked_root(source_root)
    fix = (  # the folder named already: what it lacks
        f"put {raw.name} (with the other official .gz files) in {Path(root) / spec.source_folder}/, or allow network "
        f"access to {spec.mirrors[0]}"
        if root
        else how_to_get(spec, option)
    )
    raise DataError(
        f"{raw.name} of {spec.folder} was not found in {searched} and could not be downloaded "
        f"({'; '.join(failures)}). To fix: {fix}."
    )


def load_split(
    spec: DatasetSpec, split: str, source_root, cache_dir: Path, log=print, option: str = PREPARE_OPTION
) -> tuple[np.ndarray, np.ndarray]:
    """Verified uint8 images [N, 28, 28] and labels [N] of one split, in the official order."""
    image_file, label_file = spec.splits[split]
    images = decode_idx(
        read_raw(spec, image_file, source_root, cache_dir, log, option), IDX_IMAGES_MAGIC, Path(image_file.name)
    )
    labels = decode_idx(
        read_raw(spec, label_file, source_root, cache_dir, log, option), IDX_LABELS_MAGIC, Path(label_file.name)
    )
    if len(images) != len(labels):
        raise DataError(f"{spec.folder} {split}: {len(images)} images but {len(labels)} labels.")
    return images, labels
