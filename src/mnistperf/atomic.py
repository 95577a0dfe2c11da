"""Write files so that readers only ever see a complete one.

Everything mnistperf writes (Parquet, CSV, downloads, summaries, bench results) goes
through :func:`atomic_write`: the content lands in a temporary file beside the target and is
renamed over it, so an interrupted run leaves no partial file that a later run would trust,
and two runs writing the same file at once both end with a complete one. Text goes through
:func:`atomic_write_text`, the same in fewer system calls; a folder of shards through
:func:`atomic_write_dir`.
"""

from __future__ import annotations

import contextlib
import errno
import locale
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def atomic_write(target: Path, write: Callable[[Path], object]) -> None:
    """Call write(tmp) on a temporary file beside target, then rename it over target."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes files private; give them the usual mode
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(target: Path, text: str, encoding: str | None = None) -> None:
    """Write ``text`` to ``target`` as :func:`atomic_write` does, in five system calls where it makes seventeen.

    ``encoding``: by default the locale's, as ``Path.write_text``'s. The temporary file is made with the usual mode (the
    umask applies) and written through its descriptor; its folder is made only where it is missing. A fit's end writes
    its summary and report so: each call into the kernel there costs some tens of microseconds on the lab's CPU.
    """
    data, made_folder = text.encode(encoding or locale.getpreferredencoding(False)), False
    while True:
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
        try:
            descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
            break
        except FileExistsError:  # another writer's name: draw again
            continue
        except FileNotFoundError:  # no folder yet: made once, else the error stands
            if made_folder:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(target)) from None
            target.parent.mkdir(parents=True, exist_ok=True)
            made_folder = True
        except OSError as exc:  # named by the file asked for, not by its temporary twin
            raise type(exc)(exc.errno, exc.strerror, str(target)) from exc
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view) :]
        finally:
            os.close(descriptor)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_dir(target: Path, write: Callable[[Path], object]) -> None:
    """Call write(tmp) on a temporary folder beside target, then swap it in for target (and its old content)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    old = tmp.with_suffix(".old")
    try:
        write(tmp)
        for file in tmp.iterdir():
            os.chmod(file, 0o666 & ~_umask())
        os.chmod(tmp, 0o777 & ~_umask())
        if target.exists():  # a folder cannot be renamed over a non-empty one: move the old one aside first
            os.replace(target, old)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def removing_new_folders(folder: Path) -> Iterator[None]:
    """If the block fails, remove the still-empty folders on the way to ``folder`` that it created.

    A failed preparation so leaves the disk as it found it.
    """
    new = []
    for path in (folder, *folder.parents):
        if path.exists():
            break
        new.append(path)
    try:
        yield
    except BaseException:
        for path in new:  # deepest first
            with contextlib.suppress(OSError):  # not empty (something finished there) or already gone: keep it
                path.rmdir()
        raise


def place_taken(target: Path, folder: bool = False, written: bool = False) -> str | None:
    """What stops ``target`` from being written as a file (made as a folder where ``folder``), else None.

    Said before the work whose result goes there, so that a wrong path is said at once, not after it. ``written``:
    the folder it goes in must also let this process write there (a folder that may hold what is read only need not).
    """
    if target.exists() and target.is_dir() != folder:
        return "a folder" if target.is_dir() else "a file"
    blocking = next((parent for parent in target.parents if parent.exists()), None)
    if blocking is not None and not blocking.is_dir():
        return f"{blocking} is a file, not a folder"
    inside = target if folder and target.is_dir() else blocking
    if written and inside is not None and not os.access(inside, os.W_OK):  # (a read-only file system too)
        return f"{inside} is a folder this process may not write in"
    if written:  # a folder that lets this process write, and yet makes none (/proc): tried, then undone
        return unmakeable(target if folder else target.parent)
    return None


def unmakeable(folder: Path) -> str | None:
    """Why ``folder`` (or the first folder missing above it) cannot be made, else None.

    Tried with a folder of a name of its own beside it, made and removed, so that no other process meets a folder made
    and removed under it.
    """
    missing = [path for path in (folder, *folder.parents) if not path.exists()]
    if not missing:
        return None
    first = missing[-1]
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".mnistperf-", dir=first.parent))
    except OSError as error:
        return f"{first} cannot be made ({error.strerror or error})"
    return None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
