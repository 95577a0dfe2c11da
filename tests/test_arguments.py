"""Both callbacks check every argument when made: a nonsense value fails at once, naming the argument, what it got
and the range it takes, before any fit starts."""

from __future__ import annotations

import math

import pytest
import torch

from mnistperf.diagnosis import EpochTimer, SampleAudit
from mnistperf.lab_hints import LAB_HINTS

TIMER_BAD = [
    ("input_bound_share", 1.5, ValueError, "a share above 0 and at most 1"),
    ("input_bound_share", 0, ValueError, "a share above 0 and at most 1"),
    ("input_bound_share", -0.2, ValueError, "a share above 0 and at most 1"),
    ("input_bound_share", math.nan, ValueError, "a share above 0 and at most 1"),
    ("input_bound_share", None, TypeError, "a share above 0 and at most 1"),
    ("input_bound_share", "0.3", TypeError, "a share above 0 and at most 1"),
    ("summary_file", "", ValueError, "a file name"),
    ("summary_file", 3, TypeError, "a file name"),
    ("busy_window_steps", -1, ValueError, "a count of steps, 0 or more"),
    ("busy_window_steps", 2.5, TypeError, "a count of steps, 0 or more"),
    ("busy_window_steps", True, TypeError, "a count of steps, 0 or more"),
    ("hints", ["more workers"], TypeError, "a mapping of verdicts (input-bound, overhead-bound, compute-bound"),
    ("hints", {"input bound": ["more workers"]}, ValueError, "'input bound' is no verdict"),
    ("hints", {"input-bound": "more workers"}, TypeError, "'input-bound' maps to no list of strings"),
    ("hints", {"input-bound": [3]}, TypeError, "'input-bound' maps to no list of strings"),
    ("trace_limit", -5, ValueError, "a count of 0 or more, or None"),
    ("trace_limit", 1e4, TypeError, "a count of 0 or more, or None"),
    ("window_share", 2, ValueError, "a share above 0 and at most 1, or None"),
    ("window_share", 0.0, ValueError, "a share above 0 and at most 1, or None"),
    ("window_share", math.inf, ValueError, "a share above 0 and at most 1, or None"),
    ("samples_in_batch", "n", TypeError, "a function batch -> int, or None"),
    ("monitor", "", ValueError, "a logged metric's name, or None"),
    ("monitor", 1, TypeError, "a logged metric's name, or None"),
    ("flops_per_batch", -1, ValueError, "a number of FLOPs above 0, or None"),
    ("flops_per_batch", 0, ValueError, "a number of FLOPs above 0, or None"),
    ("flops_per_batch", math.nan, ValueError, "a number of FLOPs above 0, or None"),
    ("flops_per_batch", "1e9", TypeError, "a number of FLOPs above 0, or None"),
]

AUDIT_BAD = [
    ("dataset_size", 0, ValueError, "a count, 1 or more, or None"),
    ("dataset_size", 60_000.0, TypeError, "a count, 1 or more, or None"),
    ("sample_id", 1.0, TypeError, "a key (str) or a position (int) of the batch, or None"),
    ("sample_id", True, TypeError, "a key (str) or a position (int) of the batch, or None"),
    ("fingerprint", "hash", TypeError, "a function batch -> int64 tensor [N], or None"),
    ("sample_dims", 0, ValueError, "a count of leading dimensions, 1 or more"),
    ("sample_dims", 1.0, TypeError, "a count of leading dimensions, 1 or more"),
    ("strict", "yes", TypeError, "True or False"),
    ("strict", 1, TypeError, "True or False"),
    ("max_words", 0, ValueError, "a count of 16-bit words, 1 or more"),
    ("max_words", None, TypeError, "a count of 16-bit words, 1 or more"),
    ("seed", -1, ValueError, "a whole number from 0 to 2**32 - 1"),
    ("seed", 2**40, ValueError, "a whole number from 0 to 2**32 - 1"),
    ("seed", 0.5, TypeError, "a whole number from 0 to 2**32 - 1"),
]


def cases(bad: list) -> list:
    return [pytest.param(*case, id=f"{case[0]}={case[1]!r}") for case in bad]


@pytest.mark.parametrize(("name", "value", "error", "takes"), cases(TIMER_BAD))
def test_epoch_timer_refuses_a_nonsense_argument_at_once(name, value, error, takes):
    with pytest.raises(error) as raised:
        EpochTimer(**{name: value})
    message = str(raised.value)
    assert message.startswith(f"EpochTimer({name}={value!r}): {name} takes ")
    assert takes in message


@pytest.mark.parametrize(("name", "value", "error", "takes"), cases(AUDIT_BAD))
def test_sample_audit_refuses_a_nonsense_argument_at_once(name, value, error, takes):
    with pytest.raises(error) as raised:
        SampleAudit(**{name: value})
    message = str(raised.value)
    assert message.startswith(f"SampleAudit({name}={value!r}): {name} takes ")
    assert takes in message


def test_an_imported_mapping_of_hints_is_checked_too(monkeypatch):
    monkeypatch.setattr("mnistperf.lab_hints.LAB_HINTS", {"slow": ["anything"]})
    with pytest.raises(ValueError, match=r"'slow' is no verdict"):
        EpochTimer(hints="mnistperf.lab_hints.LAB_HINTS")


def test_every_value_in_range_is_taken():
    timer = EpochTimer(
        input_bound_share=1,
        summary_file="timing.json",
        busy_window_steps=0,
        hints="mnistperf.lab_hints.LAB_HINTS",
        trace_limit=0,
        window_share=None,
        samples_in_batch=len,
        monitor="val/acc",
        flops_per_batch=1e9,
    )
    assert timer.hints == LAB_HINTS and timer.window_share is None and timer.flops_per_batch == 1e9
    assert EpochTimer(hints={"input-bound": ("more workers",)}, trace_limit=None, window_share=0.05).trace_limit is None
    audit = SampleAudit(
        dataset_size=60_000,
        sample_id="index",
        fingerprint=lambda batch: torch.zeros(len(batch), dtype=torch.int64),
        sample_dims=2,
        strict=True,
        max_words=1,
        seed=2**32 - 1,
    )
    assert audit.sample_dims == 2 and audit.strict and audit.dataset_size == 60_000
    assert SampleAudit(sample_id=0).sample_id == 0
