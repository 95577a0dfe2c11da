"""Checks of the install that run before Lightning is imported, so that a broken one ends in one line.

Lightning imports torchmetrics, which imports torchvision whenever it is installed. A torchvision built
for another torch (PyPI's CUDA build beside a CPU torch, or an older release) then fails deep inside
that import with a long traceback. Nothing in this project uses torchvision, so the fix is to remove
it, or to install the build that matches torch.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util

from mnistperf.errors import MnistperfError

CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # torch's own index of its CPU builds, torchvision's too


class InstallError(MnistperfError):
    """A package installed beside torch cannot work with it; the message says which and how to fix it."""


def check_torchvision() -> None:
    """Raise an InstallError naming the fix when an installed torchvision cannot load beside this torch."""
    if importlib.util.find_spec("torchvision") is None:
        return
    try:
        importlib.import_module("torchvision")  # as torchmetrics would import it
    except Exception as exc:  # a mismatched build fails in many ways: RuntimeError, ImportError, OSError
        import torch

        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        reason = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
        raise InstallError(
            f"{_named('torchvision')} does not load beside torch {torch.__version__} ({reason}); "
            "nothing here uses it, and Lightning imports it when it is there: remove it with "
            "`pip uninstall -y torchvision` (or install the torchvision built for this torch)."
        ) from exc


def _named(name: str) -> str:
    """The package's name with its installed version, when its metadata has one."""
    try:
        return f"{name} {importlib.metadata.version(name)}"
    except importlib.metadata.PackageNotFoundError:
        return name


def litdata_install() -> str:
    """The command that installs litdata and keeps this torch: litdata's torchvision would otherwise bring another.

    torch pinned to its release brings the torchvision made for it: beside a CPU build, torch's own CPU build of it.
    """
    try:
        release, _, build = importlib.metadata.version("torch").partition("+")
    except importlib.metadata.PackageNotFoundError:
        return "pip install litdata"
    cpu = f" torchvision --extra-index-url {CPU_INDEX}" if build == "cpu" else ""  # (PyPI's is built for CUDA)
    kept = "the pin keeps your torch: litdata's torchvision would replace it"
    return f"pip install litdata 'torch=={release}'{cpu} ({kept})"
