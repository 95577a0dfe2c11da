"""Shared fixtures and helpers: tiny synthetic Parquet, fake raw idx files, the real datasets when present, a stage
config run in-process or as a fresh process, a command that fails in one line, and a foreign LightningModule fitted
with a plain Trainer."""

from __future__ import annotations

import builtins
import dataclasses
import gzip
import hashlib
import json
import os
import shutil
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from lightning import Callback, LightningModule, Trainer

from mnistperf.cli import main
from mnistperf.data import schema
from mnistperf.data.ingest import sources
from mnistperf.diagnosis import EpochTimer

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
# The official .gz files (mnist/ and fashion-mnist/), for the realdata tests: MNISTPERF_SHARED_DATASETS, else
# ../shared/datasets beside the checkout.
SHARED_DATASETS = Path(os.environ.get("MNISTPERF_SHARED_DATASETS", REPO.parent / "shared" / "datasets"))
LITDATA_MISSING = (
    "needs the litdata package: . .venv/bin/activate && pip install torch torchvision && pip install -e '.[litdata]'"
)
TRAIN_ROWS, TEST_ROWS = 96, 40
# A fit that prints only its own lines: no progress bar, no model summary.
QUIET = ("--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false")
# Batches loaded in the main process: no worker to start, nothing to keep between epochs.
NO_WORKERS = ("--data.num_workers", "0", "--data.persistent_workers", "false")


def stage_marks(stage: str) -> list[pytest.MarkDecorator]:
    """The marks a test of a stage config takes: ``litdata`` where the stage reads through litdata."""
    pipeline = yaml.safe_load((CONFIGS / f"{stage}.yaml").read_text())["data"]["pipeline"]
    return [pytest.mark.litdata] if pipeline == "litdata" else []


def stage_params(slow: Sequence[str] = ()) -> list:
    """Every stage config's file name as a test parameter, marked as :func:`stage_marks` says, and ``slow`` for the
    stages named in ``slow``."""
    return [
        pytest.param(path.name, marks=stage_marks(path.stem) + ([pytest.mark.slow] if path.stem in slow else []))
        for path in sorted(CONFIGS.glob("*.yaml"))
    ]


def free_port() -> int:
    """A TCP port on 127.0.0.1 no one listens on now: for a server or a process group the test starts."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def random_split(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (rows, 28, 28), dtype=np.uint8), rng.integers(0, 10, rows)


def write_parquet(path: Path, table: pa.Table, row_group_size: int | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


@pytest.fixture(scope="session")
def _tiny_parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`tiny_data`'s files, written once a session (784 columns in six row groups take a while each time)."""
    data_dir = tmp_path_factory.mktemp("tiny") / "data"
    for split, rows, seed in (("train", TRAIN_ROWS, 1), ("test", TEST_ROWS, 2)):
        write_parquet(data_dir / "FashionMNIST" / f"{split}.parquet", schema.build_table(*random_split(rows, seed)), 16)
    return data_dir


@pytest.fixture
def tiny_data(tmp_path: Path, _tiny_parquet: Path) -> Path:
    """data/FashionMNIST/{train,test}.parquet with 96 and 40 random rows, in row groups of 16: the test's own copy,
    new files it may change or damage."""
    return Path(shutil.copytree(_tiny_parquet, tmp_path / "data", copy_function=shutil.copyfile))


@pytest.fixture
def workdir(tiny_data: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's working folder, whose data/ holds tiny FashionMNIST Parquet: the stage configs run there unchanged."""
    monkeypatch.chdir(tiny_data.parent)
    return tiny_data.parent


@pytest.fixture
def without_litdata(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import litdata`` fails in this test, as where the package is not installed."""
    real_import = builtins.__import__

    def no_litdata(name: str, *args, **kwargs):
        if name == "litdata" or name.startswith("litdata."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_litdata)


@pytest.fixture
def phases_undecided(monkeypatch: pytest.MonkeyPatch) -> None:
    """The step's measured phases decide no verdict: without a profiled window a test's verdict is then undetermined
    on any machine (where its phases would read overhead-bound on some, which is right without a window)."""
    monkeypatch.setattr("mnistperf.diagnosis.record.verdict.step_share", lambda figures: None)


def stage_argv(
    config: str | Path, *overrides: str, command: str = "fit", epochs: int | None = None, quiet: bool = True
) -> list[str]:
    """The command line of ``mnistperf COMMAND`` on a stage config, as ``main`` takes it.

    Args:
        config: a stage's name (its YAML in configs/), or the path of any config.
        overrides: options after the defaults below, so they win over them.
        command: fit, validate, test or predict.
        epochs: ``--trainer.max_epochs`` (None: the config's).
        quiet: QUIET first (no progress bar, no model summary).
    """
    path = CONFIGS / f"{config}.yaml" if isinstance(config, str) and not config.endswith(".yaml") else Path(config)
    max_epochs = ("--trainer.max_epochs", str(epochs)) if epochs is not None else ()
    return [command, "--config", str(path), *max_epochs, *(QUIET if quiet else ()), *overrides]


# ``python -m mnistperf`` as a fresh process runs it, with this interpreter.
MNISTPERF = (sys.executable, "-m", "mnistperf")


def stage_process(
    config: str | Path, *overrides: str, command: str = "fit", epochs: int | None = None, quiet: bool = True
) -> list[str]:
    """:func:`stage_argv`'s command line for a fresh process: ``python -m mnistperf fit --config ...``."""
    return [*MNISTPERF, *stage_argv(config, *overrides, command=command, epochs=epochs, quiet=quiet)]


def _timing_files() -> dict[Path, int]:
    return {path: path.stat().st_mtime_ns for path in Path.cwd().glob("lightning_logs/*/version_*/timing.json")}


def run_stage(
    config: str | Path, *overrides: str, command: str = "fit", epochs: int | None = None, quiet: bool = True
) -> dict | None:
    """Run :func:`stage_argv`'s command in this process through ``mnistperf.cli.main``, as torchgeo's tests run
    tiny configs through ``main([...])``; return the timing.json it wrote under lightning_logs/ (None where it
    wrote none: validate, test, predict)."""
    before = _timing_files()
    main(stage_argv(config, *overrides, command=command, epochs=epochs, quiet=quiet))
    written = [path for path, mtime in _timing_files().items() if before.get(path) != mtime]
    return json.loads(max(written, key=lambda p: p.stat().st_mtime_ns).read_text()) if written else None


def ends_in_one_line(status: int | str | None, err: str, *expected: str) -> None:
    """A command ended as every mistake should: exit status 2 and one line, ``mnistperf: error: ...``, holding each of
    ``expected`` (so no traceback, no usage)."""
    assert status == 2, err
    assert err.startswith("mnistperf: error: ") and err.strip().count("\n") == 0, err
    assert all(text in err for text in expected), err


def fails_in_one_line(
    capsys: pytest.CaptureFixture[str], argv: Sequence[str], *expected: str
) -> pytest.CaptureResult[str]:
    """Run ``mnistperf ARGV`` in this process and check that it fails in one line, as :func:`ends_in_one_line` says;
    what it printed (``.out``, ``.err``)."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    printed = capsys.readouterr()
    ends_in_one_line(exit_info.value.code, printed.err, *expected)
    return printed


def newest_checkpoint(workdir: Path, run_name: str) -> Path:
    """The newest checkpoint of the runs logged as ``run_name`` (a stage config's logger name)."""
    found = (workdir / "lightning_logs" / run_name).glob("version_*/checkpoints/*.ckpt")
    return max(found, key=lambda p: p.stat().st_mtime)


class FailAt(Callback):
    """Raises inside the fit after its ``step``-th training step, as an error in a step would."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            raise RuntimeError("a step failed")


def fit_module(
    module: LightningModule, *loaders, callbacks=(), datamodule=None, ckpt_path=None, **trainer_options
) -> Trainer:
    """Fit a LightningModule (any project's) with a plain Trainer and return the trainer.

    Args:
        module: the module to fit.
        loaders: the training loader (or a DataModule), then the validation loader, as ``Trainer.fit`` takes them.
        callbacks: the trainer's callbacks.
        datamodule: a DataModule instead of loaders.
        ckpt_path: the checkpoint to resume from.
        trainer_options: over the defaults: on the CPU, 2 epochs, no logger, checkpoints, progress bar or model
            summary.
    """
    options = {
        "accelerator": "cpu",
        "max_epochs": 2,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }
    trainer = Trainer(callbacks=list(callbacks), **{**options, **trainer_options})
    trainer.fit(module, *loaders, datamodule=datamodule, ckpt_path=ckpt_path)
    return trainer


def idx_bytes(array: np.ndarray, magic: int) -> bytes:
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


@dataclasses.dataclass
class FakeRaw:
    """Raw .gz files of a small fake 'mnist', registered in sources.DATASETS with their own checksums."""

    root: Path  # laid out as root/mnist/*.gz, like ../shared/datasets
    arrays: dict[str, tuple[np.ndarray, np.ndarray]]

    @property
    def folder(self) -> Path:
        return self.root / "mnist"


@pytest.fixture
def fake_raw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeRaw:
    spec = sources.DATASETS["mnist"]
    root = tmp_path / "raw_root"
    (root / "mnist").mkdir(parents=True)
    splits, arrays = {}, {}
    for i, (split, (image_file, label_file)) in enumerate(spec.splits.items()):
        images, labels = random_split(30 + 10 * i, seed=10 + i)
        arrays[split] = (images, labels)
        files = []
        for raw, content in (
            (image_file, idx_bytes(images, sources.IDX_IMAGES_MAGIC)),
            (label_file, idx_bytes(labels, sources.IDX_LABELS_MAGIC)),
        ):
            (root / "mnist" / raw.name).write_bytes(gzip.compress(content, mtime=0))
            files.append(sources.RawFile(raw.name, hashlib.md5(content).hexdigest()))
        splits[split] = tuple(files)
    fake = dataclasses.replace(spec, splits=splits, mirrors=("file:///nonexistent/mirror/",))
    monkeypatch.setitem(sources.DATASETS, "mnist", fake)
    monkeypatch.setattr(sources, "SYSTEM_DATASETS_DIR", tmp_path / "no_system_datasets")
    monkeypatch.delenv(sources.SOURCE_ROOT_ENV, raising=False)
    return FakeRaw(root, arrays)


@pytest.fixture
def shared_datasets() -> Path:
    if not (SHARED_DATASETS / "fashion-mnist" / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip(
            f"real datasets not found in {SHARED_DATASETS}: MNISTPERF_SHARED_DATASETS=DIR names a folder of "
            "DIR/fashion-mnist/ and DIR/mnist/ holding the official .gz files"
        )
    return SHARED_DATASETS


@pytest.fixture(autouse=True)
def _run_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs in its own temporary folder: the logs, timing.json and results a command writes
    to relative paths (``lightning_logs/...``) land there, never in the checkout."""
    monkeypatch.chdir(tmp_path)


# Folders a test run may write (bytecode, pytest's cache, the venvs and the install metadata).
NOT_GUARDED = {".git", ".venv", "venv", "__pycache__", ".pytest_cache", ".ruff_cache"}


def guarded_away(folder: str) -> bool:
    """A folder the suite may write in: bytecode, caches, install metadata, the venvs (.venv-compat-* too)."""
    return folder in NOT_GUARDED or folder.endswith(".egg-info") or folder.startswith(".venv")


def _checkout_state() -> dict[str, int]:
    """Every file in the checkout, ignored ones included (lightning_logs/, timing.json, data/), with its mtime."""
    state = {}
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if not guarded_away(d)]
        for name in files:
            if name.startswith(".venv"):  # the compatibility environments' build logs and lock, written meanwhile
                continue
            path = Path(folder, name)
            state[str(path.relative_to(REPO))] = path.stat().st_mtime_ns
    return state


def pytest_sessionstart(session):
    session.config._checkout_before = _checkout_state()


def pytest_sessionfinish(session, exitstatus):
    """The suite leaves the checkout as it found it: a test that writes into it fails the run."""
    before = getattr(session.config, "_checkout_before", None)
    if before is None:
        return
    after = _checkout_state()
    added = sorted(path for path, mtime in after.items() if before.get(path) != mtime)
    if added:
        print("\nthe test suite changed the checkout (tests must write under tmp_path):\n  " + "\n  ".join(added))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def litdata_importable() -> bool:
    try:
        import litdata  # noqa: F401
    except ImportError:
        return False
    return True


def named_tests(config) -> set[str]:
    """The tests the command line names by id (``tests/test_x.py::test_y``), as ids relative to the root folder."""
    named = set()
    for arg in config.args:
        path, by_id, name = arg.partition("::")
        where = (config.invocation_params.dir / path).resolve()
        if by_id and where.is_relative_to(config.rootpath):
            named.add(f"{where.relative_to(config.rootpath).as_posix()}::{name}")
    return named


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` run only where CUDA is (``pytest -m cuda`` runs them alone, as scripts/gpu-check does);
    tests marked ``litdata`` only where the litdata extra is installed (``pytest -m litdata`` runs them alone);
    tests marked ``slow`` only when asked for, by ``-m`` (``pytest -m slow`` runs them alone) or by their id."""
    cuda = torch.cuda.is_available()
    litdata = not any(item.get_closest_marker("litdata") for item in items) or litdata_importable()
    for item in items:
        if "cuda" in item.keywords and not cuda:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))
        if item.get_closest_marker("litdata") and not litdata:
            item.add_marker(pytest.mark.skip(reason=LITDATA_MISSING))
    if not config.option.markexpr:
        named = named_tests(config)
        slow = {
            item.nodeid
            for item in items
            if item.get_closest_marker("slow")
            and not any(item.nodeid == n or item.nodeid.startswith((f"{n}[", f"{n}::")) for n in named)
        }
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid in slow])
        items[:] = [item for item in items if item.nodeid not in slow]


class ForbidSyncs(EpochTimer):
    """EpochTimer that makes any host-device sync between the second and the second-to-last step an error."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        super().on_train_batch_start(trainer, pl_module, batch, batch_idx)
        if batch_idx == 1:
            torch.cuda.set_sync_debug_mode("error")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx + 2 == trainer.num_training_batches:
            torch.cuda.set_sync_debug_mode("default")
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)


def damage(path: Path, place: str) -> None:
    """Overwrite 8 bytes at the start, in the middle of the pages, or inside the footer; or cut the file in half."""
    data = bytearray(path.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")  # the footer's length, before the closing magic bytes
    if place == "truncated":
        path.write_bytes(data[: len(data) // 2])
        return
    at = {"start": 0, "middle": (4 + len(data) - 8 - footer) // 2, "footer": len(data) - 8 - footer // 2}[place]
    data[at : at + 8] = bytes(b ^ 0xFF for b in data[at : at + 8])
    path.write_bytes(data)
