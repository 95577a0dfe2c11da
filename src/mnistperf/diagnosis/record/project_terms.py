"""The input-bound advice in the run's project's terms: its DataModule's loader options, tune for it, pinning on CUDA.

How each is named: docs/timing.md, "The verdict".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class LoaderFacts:
    """What the advice knows of the run's one training loader: what it is, and what it already sets."""

    kind: str  # its class's name
    data_loader: bool  # a torch DataLoader (else any other iterable: no DataLoader option applies)
    map_style: bool = True  # its dataset is read item by item (``__getitem__``), not streamed (``__iter__``)
    persistent: bool = False  # persistent_workers already set
    pinned: bool = False  # pin_memory already set
    tensors: bool = False  # its dataset a TensorDataset (or a Subset of one): its items already tensors in memory
    sliced: bool = False  # its batches already fetched in one call each (batch_size=None, a sampler of batches)

    @property
    def gathers_tensors(self) -> bool:
        """Whether its batches are tensors in memory gathered item by item: one call slicing them would do."""
        return self.tensors and not self.sliced


@dataclass(frozen=True)
class ProjectTerms:
    """What the advice names of the run's project; each part None where the run does not show it."""

    model: str | None = None  # the LightningModule's class name
    datamodule: str | None = None  # the DataModule's class name
    options: Mapping[str, str] = field(default_factory=dict)  # a DataLoader setting -> the DataModule's argument
    prefix: str | None = None  # the key of the DataModule's arguments in a LightningCLI config ("data.init_args.")
    config: str | None = None  # a config naming the classes, which `mnistperf tune --config` reads
    in_main: bool = False  # a class is defined in __main__, which tune's fresh processes cannot import
    loader: LoaderFacts | None = None  # the one training loader, where the run has one and it was read
    step_from: str | None = None  # an installed package's module whose training_step the run's module runs

    def named(self, setting: str, value: Any = None) -> str:
        """A loader setting (set to ``value``, where given) as the user changes it in this project."""
        name = self.options.get(setting)
        if name is None or self.datamodule is None:
            return setting if value is None else f"{setting}={value!r} on the DataLoader"
        if self.prefix is not None:  # as a config or the command line writes it
            shown = "" if value is None else " " + (str(value).lower() if isinstance(value, bool) else str(value))
            return f"{self.prefix}{name}{shown}"
        return f"{self.datamodule}({name}={'...' if value is None else repr(value)})"

    def tune(self) -> str | None:
        """How ``mnistperf tune`` tunes this project: by its config, else in Python; None without a model to rebuild."""
        if self.config is not None:
            return f"`mnistperf tune --config {self.config}`"
        if self.model is None:
            return None
        data = f"{self.datamodule}(...)" if self.datamodule is not None else "None"
        moved = " (its classes moved out of __main__ into a module first)" if self.in_main else ""
        return f"`mnistperf.tune.tune_loaders({self.model}(...), {data}, trainer_kwargs)`{moved}"


ONCE = "the per-item work of __getitem__ (decoding, conversion to tensors) done once before training"
# Where the items are already tensors in memory, what a batch costs is gathering them one by one and stacking them:
# workers would add the copy between processes to that; one call slicing the tensors removes it.
SLICED = (
    "batches sliced from the dataset's tensors in one call, not gathered item by item and stacked: "
    "DataLoader(dataset, sampler=BatchSampler(sampler, batch_size, drop_last), batch_size=None), the loader's own "
    "sampler in it (RandomSampler(dataset) for shuffle=True) (more workers would add a copy between processes)"
)


def library_log_hint(terms: ProjectTerms) -> list[str]:
    """Where the step is an installed package's: its self.log calls are changed there, not in the project's code."""
    if terms.step_from is None:
        return []
    return [
        f"less logged each step by {terms.step_from}.training_step, an installed package's: its own options for what "
        "it logs, or a subclass whose training_step logs less"
    ]


def tune_hint(terms: ProjectTerms, what: str) -> list[str]:
    """The hint to have ``mnistperf tune`` measure ``what`` on this machine, where it can rebuild the project."""
    tune = terms.tune()
    if tune is None:
        return []
    return [f"{what} measured on this machine instead of guessed: {tune} trains short fits with each"]


def input_hints(terms: ProjectTerms, cuda: bool) -> list[str]:
    """What usually removes an input bound, in the project's terms: only what its loader is and has not already set.

    Pinning (a faster copy to a GPU) on CUDA only; a loader that is not a DataLoader is told no DataLoader option, one
    whose items are already tensors in memory no option for workers (:data:`SLICED`).
    """
    loader = terms.loader
    kept = "the dataset kept on the device as tensors, batches sliced there"
    if loader is not None and not loader.data_loader:
        return [
            f"a loader that reads ahead in parallel: the training loader is a {loader.kind}, not a torch DataLoader, "
            "so its own options set that (or a DataLoader with workers over its data)",
            kept,
        ]
    if loader is not None and loader.tensors:  # nothing per item to do ahead in parallel
        return [SLICED, kept] if loader.gathers_tensors else [kept]
    hints = [f"more DataLoader workers ({terms.named('num_workers')})"]
    if loader is None or not loader.persistent:
        hints.append(f"workers kept alive between epochs ({terms.named('persistent_workers', True)})")
    if cuda and (loader is None or not loader.pinned):
        hints.append(f"batches pinned for the copy to the GPU ({terms.named('pin_memory', True)})")
    once = ONCE if loader is None or loader.map_style else ONCE.replace("__getitem__", "the dataset's __iter__")
    return [*hints, *tune_hint(terms, "those settings"), once, kept]


KEEPS_PACE = "where the loader still keeps pace"  # the condition of fewer workers: never an input-bound run's


def workers_hints(terms: ProjectTerms) -> list[str]:
    """What usually frees the cores a run's own DataLoader workers hold from its step, in the project's terms."""
    gathered = terms.loader is not None and terms.loader.gathers_tensors  # nothing per item but the gathering
    return [
        SLICED if gathered else f"cheaper batches: {ONCE}",
        f"fewer DataLoader workers ({terms.named('num_workers')}), {KEEPS_PACE}",
        *tune_hint(terms, "the number of workers"),
    ]
