"""What ran a run: its device, CPUs, versions and the host's peak memory."""

from __future__ import annotations

import os
import platform
import resource
import sys
from typing import Any

import lightning
import torch

from mnistperf.diagnosis.figures import PEAK_RSS_MB
from mnistperf.machine import describe_device, usable_cpus


def environment(device: torch.device) -> dict[str, Any]:
    """What ran: device, CPU count, versions and the host's peak memory (the GPU's is the epochs', in the run)."""
    versions = {"python": platform.python_version(), "torch": torch.__version__, "lightning": lightning.__version__}
    scale = 1 / 1024 if sys.platform != "darwin" else 1 / 2**20  # ru_maxrss: KiB on Linux, bytes on macOS
    return {
        "device": describe_device(device),
        "accelerator": device.type,
        "cpu_count": os.cpu_count(),
        "cpu_affinity": usable_cpus(),
        "versions": versions | ({"cuda": torch.version.cuda} if device.type == "cuda" else {}),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        PEAK_RSS_MB: {  # of this process and of its largest finished child (a worker)
            "main_process": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale,
            "largest_child": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * scale,
        },
    }
