"""A new user's install: the README's line brings no torchvision, and a torchvision that cannot load is one line."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys

import pytest
from conftest import CONFIGS, REPO
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib")


def readme_install_line() -> str:
    return next(line.strip() for line in (REPO / "README.md").read_text().splitlines() if "pip install -e" in line)


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


def test_a_torchvision_that_does_not_load_is_one_line_naming_the_fix(tmp_path):
    broken = tmp_path / "site" / "torchvision"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])}
    env.pop("MNISTPERF_DEBUG", None)
    for args in (["fit", "--config", str(CONFIGS / "v2_pinned.yaml")], ["prepare", "--help"]):
        run = subprocess.run(
            [sys.executable, "-m", "mnistperf", *args], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert run.returncode == 2, run.stderr
        assert run.stderr.startswith("mnistperf: error: torchvision") and run.stderr.strip().count("\n") == 0
        assert "`pip uninstall -y torchvision`" in run.stderr and "Traceback" not in run.stderr
