"""The machine a run is on: the CPUs this process may use and a readable name for the device.

Every report names where its figures came from; these two functions are that name's one source.
"""

from __future__ import annotations

import os
import platform

import torch


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity, which containers and ``taskset`` narrow), not the machine's count."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def describe_device(device: torch.device) -> str:
    """A human-readable name of the device that ran, e.g. 'cuda:0 (NVIDIA H100 80GB HBM3)'."""
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return f"{device.type} ({platform.machine()}, {os.cpu_count()} logical cores)"


def run_device(accelerator: str) -> torch.device:
    """The device Lightning will pick for ``trainer.accelerator`` on this machine (its first device)."""
    accelerator = str(accelerator)
    if accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    if (
        accelerator in ("auto", "gpu", "mps")
        and getattr(torch.backends, "mps", None)
        and torch.backends.mps.is_available()
    ):
        return torch.device("mps")
    return torch.device("cpu")


def has_tf32_tensor_cores(device: torch.device) -> bool:
    """Whether float32 matrix products could run as TF32 on this device's tensor cores (CUDA, Ampere or later)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8
