"""The checkpoint an evaluation or a resumed fit uses: one given, checked readable, or the newest of its config."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path

import torch
from lightning.pytorch.utilities import rank_zero_only

from mnistperf.diagnosis.record.run import SUMMARY_FILE
from mnistperf.errors import ConfigError


def check_checkpoint(path, picked: bool = False) -> None:
    """An explicit checkpoint path (not 'last', 'best', ...), or the config's newest one picked, must be readable."""
    if path is None or str(path) in ("last", "best", "hpc", "registry"):
        return
    said = f"the newest checkpoint {path}" if picked else f"--ckpt_path {path}"
    fix = "delete it, or pass --ckpt_path FILE" if picked else "use another one"
    if not Path(path).is_file():
        raise ConfigError(
            f"--ckpt_path {path}: no such file; give a checkpoint written by fit "
            "(lightning_logs/<config>/version_N/checkpoints/*.ckpt), or 'last'."
        )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated zip, pickle garbage, ...: torch raises many kinds
        raise ConfigError(
            f"{said} is not a readable checkpoint ({type(exc).__name__}); "
            f"it may be truncated or not a checkpoint: {fix}."
        ) from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ConfigError(f"{said} holds no model state_dict; give a checkpoint written by fit.")


def runs_folder(config) -> Path:
    """Where fit with this config writes its runs: the logger's save_dir/name, as in the stage configs."""
    logger = config.trainer.get("logger")
    init = logger.get("init_args") if hasattr(logger, "get") else None
    if init is not None and init.get("save_dir") is not None:
        return Path(init.save_dir) / str(init.get("name") or "lightning_logs")
    return Path(config.trainer.get("default_root_dir") or ".") / "lightning_logs"


def newest_checkpoint(command: str, config, given: Sequence[str] = (), best: bool = False) -> Path:
    """The most recent checkpoint fit wrote with this config, announced; a ConfigError naming the fix if none.

    ``given``: the command's own arguments, which the fix's ``fit`` keeps (but those fit does not take). ``best``: the
    best one its ModelCheckpoint had kept by then (``--ckpt_path best``), which a fresh process cannot know otherwise.
    """
    folder, found, where = config_checkpoints(config)
    if not found:
        kept, skip = [], False
        for arg in given:  # --ckpt_path, validate's and test's --verbose, predict's --return_predictions, and values
            evaluation_only = arg.split("=")[0] in ("--ckpt_path", "--verbose", "--return_predictions")
            kept += [] if skip or evaluation_only else [arg]
            skip = evaluation_only and "=" not in arg
        configs = " ".join(f"--config {c}" for c in (config.get("config") or []))
        config_args = shlex.join(kept) if kept else configs or "--config configs/STAGE.yaml"
        raise ConfigError(
            f"{command}: no trained model to evaluate: no checkpoint in {where}/. "
            f"Train one with `python -m mnistperf fit {config_args}`, or pass --ckpt_path FILE."
        )
    if best:
        return best_of(command, found[-1], folder)
    return newest_checked(f"{command} with", found[-1], folder)


def folder_checkpoint(command: str, folder: Path) -> Path:
    """``--ckpt_path FOLDER`` (a run's log folder, or its checkpoints folder): the newest checkpoint under it, named."""
    found = written_checkpoints(folder, "**/*.ckpt")
    if not found:
        raise ConfigError(
            f"--ckpt_path {folder}: a folder holding no checkpoint (*.ckpt); give a checkpoint written by fit, or the "
            "log folder of a run that wrote one (lightning_logs/<config>/version_N)."
        )
    return newest_checked(f"{command} with" if command != "fit" else "fit resumes from", found[-1], folder)


def config_checkpoints(config) -> tuple[Path, list[Path], Path]:
    """Where this config's fits keep checkpoints, those there (the newest last), and the pattern they are found by.

    A ModelCheckpoint of a folder of its own (``dirpath``): its checkpoints; else those of the config's runs.
    """
    own = declared_folders(config)
    if own:
        return own[0], written_checkpoints(own, "*.ckpt"), own[0]
    folder = runs_folder(config)
    return folder, written_checkpoints(folder), folder / "version_*" / "checkpoints"


def declared_folders(config) -> list[Path]:
    """The folders the config's checkpoint callbacks save in, where given one (a ModelCheckpoint's ``dirpath``)."""
    callbacks = config.trainer.get("callbacks") or []
    found = [getattr(getattr(c, "init_args", None), "dirpath", None) for c in callbacks if hasattr(c, "init_args")]
    return [Path(str(folder)) for folder in found if folder]


def best_of(command: str, newest: Path, folder: Path) -> Path:
    """The best checkpoint the ModelCheckpoint that wrote ``newest`` kept, checked readable, then named on rank 0.

    Its path as that fit saved it is relative to where the fit ran: the checkpoint of that name beside ``newest``.
    """
    check_checkpoint(newest, picked=True)
    states = torch.load(newest, map_location="cpu", weights_only=True).get("callbacks") or {}
    kept = [
        newest.parent / Path(s["best_model_path"]).name
        for s in states.values()
        if isinstance(s, dict) and s.get("best_model_path")
    ]
    best = next((path for path in kept if path.is_file()), None)
    if best is None:
        raise ConfigError(
            f"--ckpt_path best: the newest checkpoint {newest} names no best one that is still there; "
            "give --ckpt_path last (the newest) or a FILE."
        )
    check_checkpoint(best, picked=True)
    if rank_zero_only.rank == 0:  # type: ignore[attr-defined]
        print(f"mnistperf: {command} with {best} (the best its fit had kept, of {folder})", flush=True)
    return best


def resumed_checkpoint(config) -> str:
    """``fit --ckpt_path last``: the most recent checkpoint fit wrote with this config, announced.

    Lightning's own ``last`` searches the checkpoint folder of the fit starting, a new version_N with none in it yet.
    Where the config's checkpoints (:func:`config_checkpoints`) are none, ``last`` is left to Lightning (its warning
    and a fit from the start).
    """
    folder, found, where = config_checkpoints(config)
    if found:
        return str(newest_checked("fit resumes from", found[-1], folder))
    if rank_zero_only.rank == 0:  # type: ignore[attr-defined]
        print(
            f"mnistperf: no checkpoint of this config's runs in {where} to resume: the fit starts from its first epoch",
            flush=True,
        )
    return "last"


def written_checkpoints(folders: Path | list[Path], pattern: str = "version_*/checkpoints/*.ckpt") -> list[Path]:
    """The checkpoints ``pattern`` finds under ``folders`` (by default a config's runs folder), the newest last."""
    found = [path for folder in ([folders] if isinstance(folders, Path) else folders) for path in folder.glob(pattern)]
    return sorted(found, key=lambda p: p.stat().st_mtime)


def newest_checked(what: str, checkpoint: Path, folder: Path) -> Path:
    """``checkpoint``, the newest in ``folder``, checked readable, then named on rank 0 with how its fit ended.

    ``what``: the words before its name (``mnistperf: test with ...``). How its fit ended is read in the run's log
    folder, where the checkpoint lies in its ``checkpoints/`` (a ModelCheckpoint's folder of its own: not known).
    """
    check_checkpoint(checkpoint, picked=True)
    ended = how_its_fit_ended(checkpoint.parent.parent) if checkpoint.parent.name == "checkpoints" else ""
    if rank_zero_only.rank == 0:  # type: ignore[attr-defined]
        print(
            f"mnistperf: {what} {checkpoint} (the newest checkpoint in {folder}{ended}; "
            "--ckpt_path FILE picks another)",
            flush=True,
        )
    return checkpoint


def how_its_fit_ended(run: Path) -> str:
    """A clause where a run's fit did not finish: interrupted (its timing.json says so), or no timing.json at all."""
    summary = run / SUMMARY_FILE
    try:
        found = json.loads(summary.read_text())
    except OSError:
        return f", from a fit that wrote no {SUMMARY_FILE}: it may have stopped before its end"
    except ValueError:
        return ""
    if isinstance(found, dict) and found.get("interrupted"):
        epochs = sum("partial" not in row for row in found.get("epochs") or [])  # (the one it stopped inside: not)
        return f", from a fit interrupted after {epochs} finished epoch{'s' if epochs != 1 else ''}"
    return ""
