"""A new user's install: the README's setup lines are what CI runs, the install brings no torchvision, the tests
that need the litdata extra skip without it, the offline route is said up front, and a torchvision that cannot load
is one line."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys

import pytest
from conftest import LITDATA_MISSING, MNISTPERF, NO_WORKERS, REPO, ends_in_one_line, fails_in_one_line, stage_argv
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib")


def readme_install_line() -> str:
    return next(line.strip() for line in (REPO / "README.md").read_text().splitlines() if "pip install -e" in line)


def readme_setup() -> str:
    """The README's "Set up and run" section."""
    return (REPO / "README.md").read_text().split("## Set up and run\n", 1)[1].split("\n## ", 1)[0]


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pulled_by(requirements: list[str]) -> set[str]:
    """Every distribution these requirements bring, following the metadata of those installed here."""
    seen: set[str] = set()
    todo = [Requirement(text) for text in requirements]
    while todo:
        requirement = todo.pop()
        name = normalized(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            declared = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue  # not installed here, so its own requirements cannot be followed
        for text in declared:
            dependency = Requirement(text)
            extras = {""} | requirement.extras
            if dependency.marker is None or any(dependency.marker.evaluate({"extra": e}) for e in extras):
                todo.append(dependency)
    return seen


def test_the_readme_install_line_brings_no_torchvision():
    line = readme_install_line()
    assert "torchvision" not in line
    extras = re.search(r"-e '\.\[([^\]]*)\]'", line).group(1).split(",")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [r for extra in extras for r in project["optional-dependencies"][extra]]
    assert "torchvision" not in pulled_by(requirements)


def test_the_readme_gives_a_cpu_line_and_what_to_do_without_its_index():
    readme = (REPO / "README.md").read_text()
    cpu = re.search(r"`(pip install torch --index-url https://download\.pytorch\.org/whl/cpu)`", readme)
    assert cpu, "no CPU variant of `pip install torch`"
    assert "pip install torch &&" in readme_install_line()
    assert re.search(r"Where that index cannot be reached, [^\n]*\n[^\n]*pip install torch", readme)


def test_a_torchvision_that_does_not_load_is_one_line_naming_the_fix(tmp_path, monkeypatch, capsys):
    """fit as a fresh process, where nothing has imported Lightning yet, and ``prepare --help`` in this process: the
    same line, before either command does anything."""
    broken = tmp_path / "site" / "torchvision"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])}
    env.pop("MNISTPERF_DEBUG", None)
    run = subprocess.run(
        [*MNISTPERF, *stage_argv("v2_pinned", quiet=False)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    ends_in_one_line(run.returncode, run.stderr, "mnistperf: error: torchvision", "`pip uninstall -y torchvision`")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "torchvision", raising=False)
    monkeypatch.delenv("MNISTPERF_DEBUG", raising=False)
    fails_in_one_line(capsys, ["prepare", "--help"], "mnistperf: error: torchvision", "`pip uninstall -y torchvision`")


def test_ci_runs_the_readme_setup_lines_as_written():
    """.ci/run takes the install and test lines from the README itself, so CI fails where a newcomer would."""
    lines = subprocess.run(["bash", str(REPO / ".ci" / "readme-setup")], capture_output=True, text=True, check=True)
    install, tests = lines.stdout.splitlines()
    assert install == readme_install_line() and install.startswith("python3 -m venv .venv && ")
    assert tests == ". .venv/bin/activate && python -m pytest -q"
    assert "litdata" not in install  # so the suite a newcomer runs is the one without the extra, and CI runs it
    ci = (REPO / ".ci" / "run").read_text()
    assert "mapfile -t setup < <(bash .ci/readme-setup)" in ci
    assert 'bash -c "${setup[0]}"' in ci and '\nbash -c "${setup[1]}"\n' in ci
    # The slow tier the test line leaves out: the setup says how to run it, and CI runs it.
    assert "`python -m pytest -q -m slow`" in readme_setup()
    assert '\npython -m pytest -q -m "slow or litdata"\n' in ci


def test_without_litdata_the_tests_that_need_it_skip_saying_why_and_the_others_run(tmp_path):
    hidden = tmp_path / "site" / "litdata"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'litdata\'", name="litdata")\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])}
    selected = [
        "tests/test_training.py::test_every_stage_config_trains_and_writes_its_timing_summary[streaming_litdata.yaml]",
        "tests/test_tune.py::test_tune_writes_a_config_that_fit_runs_as_is[streaming_litdata.yaml]",
        "tests/test_gpu_check.py::test_every_run_of_the_check_is_one_fit_would_build[OUT/streams:streaming_litdata]",
        "tests/test_gpu_check.py::test_every_run_of_the_check_is_one_fit_would_build[OUT/streams:streaming]",
        "tests/test_litdata.py",
    ]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *selected],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-3000:]
    summary = run.stdout.strip().splitlines()[-1]
    assert re.match(r"1 passed, \d+ skipped", summary), summary
    assert run.stdout.count(LITDATA_MISSING) >= 4 and "failed" not in summary


def test_the_setup_names_the_offline_route_and_following_it_trains(fake_raw, tmp_path, monkeypatch):
    """The setup section names fit's source option and variable for a machine that cannot download; the variable,
    set as it says, lets a fit prepare its data offline."""
    setup = readme_setup()
    assert "`--data.source_root DIR`" in setup and "`prepare` takes `--source-root DIR`" in setup
    variable = re.search(r"`(MNISTPERF_\w+)=DIR`", setup).group(1)
    monkeypatch.setenv(variable, str(fake_raw.root))
    monkeypatch.chdir(tmp_path)
    from mnistperf.cli import main

    main(
        stage_argv(
            "v2_pinned",
            *NO_WORKERS,
            "--data.dataset",
            "mnist",
            "--data.batch_size",
            "8",
            "--trainer.limit_val_batches",
            "1",
            epochs=1,
        )
    )
    assert (tmp_path / "data" / "MNIST" / "train.parquet").is_file()


def test_the_tests_find_the_official_files_through_the_variable_the_setup_names(tmp_path, monkeypatch):
    """tests/conftest.py, read again with the variable set, finds the official files there."""
    variable = re.search(r"`(MNISTPERF_SHARED_DATASETS)=DIR`", readme_setup()).group(1)
    monkeypatch.setenv(variable, str(tmp_path))
    spec = importlib.util.spec_from_file_location("conftest_read_again", REPO / "tests" / "conftest.py")
    assert spec is not None and spec.loader is not None
    conftest_again = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, conftest_again)  # its dataclasses look their module up there
    spec.loader.exec_module(conftest_again)
    assert tmp_path == conftest_again.SHARED_DATASETS
