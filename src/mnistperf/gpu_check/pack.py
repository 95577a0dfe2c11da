"""The carry folder: what the device lacks (wheels, FashionMNIST's official files), packed on the CPU."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from mnistperf import gpu_preflight

CARRY = Path(".gpu-carry")  # git ignores it; the device call names it in carry
WHEELS = CARRY / "wheels"
SOURCES = CARRY / "datasets"
# What the device's image lacks (docs/gpu.md): LightningCLI's signatures, litdata and what litdata imports.
CARRIED_WHEELS = (
    "jsonargparse",
    "docstring-parser",
    "typeshed-client",
    "litdata",
    "obstore",
    "boto3",
    "botocore",
    "s3transfer",
    "jmespath",
)
DEVICE_PYTHON = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any")


def pack(source_root: Path) -> list[str]:
    """Fill .gpu-carry/ with the wheels the device lacks and FashionMNIST's official files; the lines to print."""
    from mnistperf.data.ingest import sources

    spec = sources.DATASETS[gpu_preflight.DATASET]
    names = [raw.name for raw in spec.raw_files]
    origin = source_root / spec.source_folder
    missing = [name for name in names if not (origin / name).is_file()]
    if missing:
        raise SystemExit(
            f"gpu-check --pack: {origin / missing[0]} is not there; pass --source-root DIR, the folder holding "
            f"{spec.source_folder}/ with the official .gz files (e.g. --source-root ../shared/datasets)."
        )
    target = SOURCES / spec.source_folder
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copyfile(origin / name, target / name)
    WHEELS.mkdir(parents=True, exist_ok=True)
    platform_args = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
         DEVICE_PYTHON, "--implementation", "cp", *platform_args, "-d", str(WHEELS), *CARRIED_WHEELS],
        check=True,
    )  # fmt: skip
    return [f"packed: {path} ({size_mb(path):.1f} MB)" for path in (WHEELS, target)]


def size_mb(path: Path) -> float:
    """Megabytes in a file or under a folder."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 1e6
