"""The one registry of input pipelines: a config's ``data.pipeline`` name -> its class.

A new pipeline is a module with a :class:`~mnistperf.data.pipelines.base.Pipeline` subclass and
one line in ``PIPELINES``. Everything else reads this dict: the names ``fit`` accepts, the list in
``fit --help``, the order ``tune`` tries them in (each class's ``tune_rank``) and the docs table
(:func:`pipelines_table`).
"""

from __future__ import annotations

import inspect

from mnistperf.data.options import LoaderOptions
from mnistperf.data.pipelines.base import Pipeline
from mnistperf.data.pipelines.litdata import LitdataPipeline
from mnistperf.data.pipelines.resident import ResidentPipeline
from mnistperf.data.pipelines.stream import StreamPipeline
from mnistperf.data.pipelines.v1 import V1Pipeline
from mnistperf.data.pipelines.v2 import V2Pipeline
from mnistperf.errors import ConfigError
from mnistperf.tables import markdown_table

PIPELINES: dict[str, type[Pipeline]] = {
    "v1": V1Pipeline,
    "v2": V2Pipeline,
    "resident": ResidentPipeline,
    "stream": StreamPipeline,
    "litdata": LitdataPipeline,
}


def pipeline_for(options: LoaderOptions) -> Pipeline:
    """The pipeline ``options`` name, made with them; a name not registered is one line naming the choices."""
    if options.pipeline not in PIPELINES:
        raise ConfigError(
            f"data.pipeline: unknown pipeline {options.pipeline!r}; choose one of {', '.join(PIPELINES)}."
        )
    return PIPELINES[options.pipeline](options)


def summary(name: str) -> str:
    """The first line of a registered pipeline's class docstring, without its full stop.

    Args:
        name: the pipeline's name in ``PIPELINES``.
    """
    return (inspect.getdoc(PIPELINES[name]) or name).splitlines()[0].rstrip(".")


def tune_order() -> list[str]:
    """The registered pipelines ``tune`` tries, by ``tune_rank`` (cheapest to feed first)."""
    ranked = [(cls.tune_rank, name) for name, cls in PIPELINES.items() if cls.tune_rank is not None]
    return [name for _, name in sorted(ranked, key=lambda pair: pair[0])]


def help_lines(indent: int = 2, width: int = 10) -> list[str]:
    """One line per registered pipeline, name then summary, for ``fit --help``.

    Args:
        indent: spaces before each name.
        width: the column the names are padded to.
    """
    return [f"{' ' * indent}{name:<{width}} {summary(name)}" for name in PIPELINES]


def pipelines_table() -> str:
    """The registry as a Markdown table: each pipeline's module, what it does and what it supports."""
    order = tune_order()

    def yes(flag: bool) -> str:
        return "yes" if flag else "-"

    header = ["data.pipeline", "module", "what it does", "DataLoader workers", "val_source fraction"]
    header += ["remote data_dir", "batches_per_step > 1", "tune's order"]
    rows = [
        [f"`{name}`", cls.__module__.rpartition(".")[2] + ".py", summary(name), yes(cls.uses_workers)]
        + [yes(cls.can_split_off), yes(cls.reads_uris), yes(cls.groups_batches)]
        + [str(order.index(name) + 1) if name in order else "-"]
        for name, cls in PIPELINES.items()
    ]
    return markdown_table(header, rows)
