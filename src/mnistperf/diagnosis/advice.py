"""What a fix could buy: from a run's own figures, a measured ceiling on the gain, and what usually brings it.

The ceiling is arithmetic on what was measured, never a promise: an input-bound epoch cannot get
shorter than by the time the host waited for data, and an overhead-bound step cannot get faster
than by the share of time the GPU sat idle. Each hint names the lab stage that demonstrates it, where one does.
"""

from __future__ import annotations

from typing import Any

# verdict -> (what usually removes the bound, the stage that demonstrates it)
HINTS: dict[str, list[tuple[str, str | None]]] = {
    "input-bound": [
        ("more loader workers (data.num_workers)", "v1_workers4"),
        ("the per-item work done once in setup instead of per item", "v2_pinned"),
        ("the data resident on the device", "v3_resident"),
        ("`mnistperf tune`, which measures the lab's pipelines on this machine", None),
    ],
    "overhead-bound": [
        ("the whole step as one CUDA graph", "v4_graphed"),
        ("a larger batch", "v1_bs512"),
        ("no per-step self.log or .item(): sums kept on the device, logged once per epoch", "every stage"),
    ],
    "compute-bound": [
        ("bf16 mixed precision and channels_last", "v3_compiled"),
        ("a larger GPU", None),
    ],
    "compute-bound on a CPU": [
        ("a GPU (trainer.accelerator cuda)", None),
    ],
}


def advice(summary: dict[str, Any]) -> dict[str, Any] | None:
    """What fixing the run's bound could buy, or None where the verdict is undetermined.

    Args:
        summary: the run's steady-state figures (``verdict``, ``avg_train_s``, ``input_wait_share`` and,
            on CUDA, ``device_busy_share``), as :func:`~mnistperf.diagnosis.summary.aggregate` makes them.

    Returns:
        ``{"verdict", "ceiling", "hints": [{"try", "stage"}]}``, plus ``at_most_s_less`` (train seconds per
        epoch) where the figures bound the gain and ``speed_up_at_most`` for an overhead-bound step.
    """
    verdict, train_s = summary["verdict"], summary["avg_train_s"]
    found: dict[str, Any] = {"verdict": verdict}
    if verdict == "input-bound":
        wait = summary["input_wait_share"]
        less = found["at_most_s_less"] = wait * train_s
        found["ceiling"] = (
            f"with input free, an epoch's training would take at most {less:.2f} s "
            f"({wait:.0%}) less: the time the host was measured waiting for data"
        )
    elif verdict == "overhead-bound":
        busy = summary["device_busy_share"]
        less = found["at_most_s_less"] = (1 - busy) * train_s
        faster = found["speed_up_at_most"] = 1 / busy
        found["ceiling"] = (
            f"the GPU was busy {busy:.0%} of the time, so fewer launches could make the step up to "
            f"{faster:.1f}x faster (at most {less:.2f} s less per epoch)"
        )
    elif verdict == "compute-bound" and "device_busy_share" in summary:
        found["ceiling"] = "what remains is the GPU's arithmetic"
    elif verdict == "compute-bound":
        verdict = "compute-bound on a CPU"
        found["ceiling"] = "what remains is the CPU's arithmetic"
    else:
        return None
    found["hints"] = [{"try": what, "stage": stage} for what, stage in HINTS[verdict]]
    return found


def format_advice(found: dict[str, Any]) -> str:
    """The advice as printed at the end of fit: the ceiling, then what usually brings it."""
    hints = "; ".join(hint["try"] + (f" ({hint['stage']})" if hint["stage"] else "") for hint in found["hints"])
    return f"What a fix could buy (a measured ceiling, not a promise): {found['ceiling']}. Usually: {hints}."
