"""The two callbacks under a Trainer of the ``pytorch_lightning`` package, as libraries built on it make one.

The dev extra installs the package's last release before 2.6, whose Trainer refuses ``lightning.pytorch``'s callbacks,
so the main suite runs this; without the package it skips. The fits run in a process of their own
(pytorch_lightning_fits.py): importing the package here would spend what Lightning says once for every later test.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("pytorch_lightning") is None, reason="needs pytorch_lightning")

FITS = Path(__file__).with_name("pytorch_lightning_fits.py")
SAMPLES, EPOCHS = 96, 3  # pytorch_lightning_fits.py's


@pytest.fixture(scope="module")
def fits() -> dict:
    done = subprocess.run([sys.executable, str(FITS)], capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_its_trainer_before_2_6_refuses_lightnings_own_callbacks(fits):
    """Why mnistperf.diagnosis.pytorch_lightning exists: before 2.6 the older package's Trainer takes its own only."""
    major, minor = (int(part) for part in fits["version"].split(".")[:2])
    assert fits["refused"] == ("Expected a parent" if (major, minor) < (2, 6) else None)


def test_both_callbacks_count_and_audit_its_fit_and_leave_it_as_it_was(fits):
    assert fits["samples"] == [SAMPLES] * EPOCHS
    assert fits["audited"] == [[SAMPLES, SAMPLES, 0]] * EPOCHS
    assert fits["problems"] == [] and fits["headline"] and fits["timing_json"]
    assert fits["verdict"] in ("input-bound", "overhead-bound", "compute-bound", "undetermined")
    assert fits["unchanged"]  # the diagnosis changed nothing of the fit
