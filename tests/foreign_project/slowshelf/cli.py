"""The project's own entry point: ``python -m slowshelf.cli fit --config shelf.yaml``."""

from __future__ import annotations

from lightning.pytorch.cli import LightningCLI


def main(args=None) -> None:
    """Train as the config says; any LightningModule and LightningDataModule, named by class_path."""
    LightningCLI(args=args)


if __name__ == "__main__":
    main()
