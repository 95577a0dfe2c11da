"""The project's own entry points: ``python -m slowshelf.cli fit --config shelf.yaml``, and its CLI subclass."""

from __future__ import annotations

from lightning.pytorch.cli import LightningCLI


class ShelfCLI(LightningCLI):
    """The project's CLI: the model's width of input comes from the data, so a config does not give it."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("data.features", "model.init_args.features", apply_on="instantiate")


class FixedCLI(LightningCLI):
    """A CLI whose ``__init__`` takes none of LightningCLI's arguments: it reads the process's own command line."""

    def __init__(self) -> None:
        super().__init__(run=False)


def main(args=None) -> None:
    """Train as the config says; any LightningModule and LightningDataModule, named by class_path."""
    LightningCLI(args=args)


def linked_main(args=None) -> None:
    """Train through the project's own CLI (linked.yaml: the model's features linked from the data)."""
    ShelfCLI(args=args)


if __name__ == "__main__":
    main()
