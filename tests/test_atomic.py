"""Atomic writes: a reader sees the old file or the whole new one, never a part, and no temporary file stays."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mnistperf.atomic import atomic_write, atomic_write_text


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_text_is_written_whole_into_a_new_folder_with_the_mode_a_plain_write_gives(tmp_path):
    target = tmp_path / "new" / "folder" / "timing.json"
    atomic_write_text(target, '{\n  "café": 1\n}\n', encoding="utf-8")
    plain = tmp_path / "plain.json"
    plain.write_text("")
    assert target.read_text(encoding="utf-8") == '{\n  "café": 1\n}\n'
    assert mode(target) == mode(plain)  # the umask applies, as to any new file
    assert os.listdir(target.parent) == ["timing.json"]


def test_text_replaces_the_old_file_and_a_failed_write_leaves_the_old_one_and_nothing_else(tmp_path, monkeypatch):
    target = tmp_path / "timing.json"
    atomic_write(target, lambda tmp: tmp.write_text("old"))
    atomic_write_text(target, "new")
    assert target.read_text() == "new"

    def full_disk(source, destination):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)  # fails once the temporary file is written
    with pytest.raises(OSError, match="No space"):
        atomic_write_text(target, "half written")
    assert target.read_text() == "new" and os.listdir(tmp_path) == ["timing.json"]


def test_a_file_that_cannot_be_made_in_a_folder_that_exists_is_an_error_not_a_loop(tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()  # the working folder removed: "x.txt" cannot be made, though "." still answers as a folder
    with pytest.raises(FileNotFoundError):
        atomic_write_text(Path("x.txt"), "text")


def test_text_too_long_for_one_write_is_written_whole(tmp_path):
    text = "0123456789abcdef" * (1 << 18)  # 4 MiB: more than one write may take
    atomic_write_text(tmp_path / "big.txt", text)
    assert (tmp_path / "big.txt").read_text() == text


def test_a_result_meant_for_a_folder_this_process_may_not_write_in_is_refused_before_the_work(tmp_path, monkeypatch):
    from mnistperf.atomic import place_taken
    from mnistperf.errors import ConfigError
    from mnistperf.tune.options import check_out

    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != tmp_path)  # as a read-only mount answers
    said = f"{tmp_path} is a folder this process may not write in"
    assert place_taken(tmp_path / "tuned.yaml", written=True) == said
    assert place_taken(tmp_path / "runs" / "a", folder=True, written=True) == said  # made below it: the same
    assert place_taken(tmp_path / "tuned.yaml") is None  # a folder read from need not be written
    with pytest.raises(ConfigError, match=f"--out {tmp_path / 'tuned.yaml'}: {said}; give a file"):
        check_out(tmp_path / "tuned.yaml", tmp_path / "config.yaml")


def test_a_folder_the_system_will_not_make_is_refused_before_the_work_and_none_is_left(tmp_path, monkeypatch, capsys):
    """/proc lets root write and makes no folder: a folder is tried beside the one asked, said in one line, and
    nothing stays."""
    from conftest import fails_in_one_line

    from mnistperf.atomic import place_taken

    proc, made = tmp_path / "proc", os.mkdir
    proc.mkdir()

    def refused(path, *args, **kwargs):  # as /proc answers a folder made in it
        if Path(path).parent == proc:
            raise FileNotFoundError(2, "No such file or directory")
        return made(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", refused)
    said = f"{proc / 'nope'} cannot be made (No such file or directory)"
    assert place_taken(proc / "nope" / "x", folder=True, written=True) == said
    assert place_taken(proc / "nope" / "timing.json", written=True) == said
    assert place_taken(tmp_path / "data" / "fine", folder=True, written=True) is None
    argv = ["prepare", "--dataset", "synthetic", "--rows", "8", "--data-dir", str(proc / "nope")]
    fails_in_one_line(capsys, argv, f"--data-dir {proc / 'nope'}: {said}; give a folder")
    assert list(tmp_path.iterdir()) == [proc] and list(proc.iterdir()) == []  # the folder tried is gone


def test_a_file_the_system_refuses_is_named_as_asked_for_not_by_its_temporary_twin(tmp_path, monkeypatch):
    """/sys and read-only mounts refuse as the file is made, past any check: the error names the user's path."""
    from mnistperf.atomic import atomic_write_text

    def refused(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "open", refused)
    with pytest.raises(PermissionError) as raised:
        atomic_write_text(tmp_path / "tuned.yaml", "x")
    assert raised.value.filename == str(tmp_path / "tuned.yaml") and os.listdir(tmp_path) == []
