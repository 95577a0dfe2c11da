"""The one tuning policy, by DataLoader setting, that a lab stage's probes and any project's whole fits both follow.

Worker counts, settings without workers, variants around the best, bigger batches, the closing choice; docs/tune.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mnistperf.tune.search import Search, Trial, beats

NOISY_SPREAD = 0.25  # repeats further apart than this: the machine is busy (a lab probe is repeated once more)
BATCH_MULTIPLES = (2, 4)  # the bigger batches --tune-batch-size tries, as multiples of the one started from
WITHOUT_WORKERS = {"persistent_workers": False, "prefetch_factor": None}  # what a DataLoader without workers takes
OWN_NAMES = {name: name for name in ("num_workers", *WITHOUT_WORKERS)}


def worker_counts(cpus: int) -> list[int]:
    """The worker counts tried, fewest first: 0, then the powers of two up to ``cpus``."""
    return [0, *(2**power for power in range(cpus.bit_length()))]


def without_workers(settings: dict[str, Any], keys: Mapping[str, str] = OWN_NAMES) -> dict[str, Any]:
    """The settings as a DataLoader without workers takes them, where they have none (``keys``: a project's own)."""
    if "num_workers" not in keys or settings.get(keys["num_workers"]) != 0:
        return settings
    return {**settings, **{keys[s]: v for s, v in WITHOUT_WORKERS.items() if keys.get(s) in settings}}


def variants_around(settings: Mapping[str, Any], on_gpu: bool) -> list[tuple[dict[str, Any], str]]:
    """What is tried around the best settings, each as (changes, label), of those they hold.

    With workers: their keeping between epochs the other way, and a prefetch factor of 4 (2 where it is 4);
    ``on_gpu``: pinned memory the other way; with a batch size, the bigger batches (BATCH_MULTIPLES).
    """
    tried: list[tuple[dict[str, Any], str]] = []
    workers = bool(settings.get("num_workers"))
    if workers and "persistent_workers" in settings:
        kept = settings["persistent_workers"]
        tried.append(({"persistent_workers": not kept}, "workers not kept" if kept else "workers kept between epochs"))
    if workers and "prefetch_factor" in settings:
        factor = 2 if settings["prefetch_factor"] == 4 else 4
        tried.append(({"prefetch_factor": factor}, f"prefetch factor {factor}"))
    if on_gpu and "pin_memory" in settings:
        pinned = settings["pin_memory"]
        tried.append(({"pin_memory": not pinned}, "memory not pinned" if pinned else "pinned memory"))
    if isinstance(size := settings.get("batch_size"), int):
        tried += [({"batch_size": size * m}, f"batch {size * m}: changes the training") for m in BATCH_MULTIPLES]
    return tried


def settled(search: Search, best: Trial, start: Trial, noise: float, name: str, cheaper: bool) -> tuple[Trial, float]:
    """Which of the best and the settings started from (``name``) stays after the closing check, and the noise then.

    Those started from stay, and the search's reason to stop says so, unless the best beats them by more than the
    noise, their spread included, or, being ``cheaper``, is as fast within it.
    """
    noise = max(noise, start.spread)
    if beats(best.rate, start.rate, noise, cheaper):
        return best, noise
    search.stopped += f"; measured again, the best did not beat {name} by more than the noise"
    return start, noise
