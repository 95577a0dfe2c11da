"""``tune_loaders`` on chemprop's MPNN as its notebook trains it, then the untouched and the tuned loader side by side.

tests/compat/chemprop_project.py makes the model and a DataModule around the library's own ``build_dataloader``,
which the DataModule gives no loader setting, so every trial rebuilds its DataLoader. The settings tune returns go
back into the library's entry point, ``build_dataloader(**loader_args)``, which must accept them. Then PAIRS pairs
of whole fits (EPOCHS epochs over every training molecule, EpochTimer attached), each a fresh process, one with the
untouched loader and one with ``build_dataloader(**loader_args)``, their order alternating from pair to pair.
Writes chemprop-results.json beside this file. Run in the library's environment, which .ci/run builds, on a quiet
machine, from the checkout's root:

    .venv-compat-chemprop/bin/python docs/results/cpu-2core-tune-any-project/chemprop_mpnn.py [PAIRS] [EPOCHS]
"""

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "tests" / "compat"))
sys.path.insert(0, str(HERE.parent))

from bootstrap import median_interval  # noqa: E402  # docs/results/bootstrap.py


def fit(loader_args: dict, epochs: int, root: Path) -> dict:
    """One whole fit of the notebook's model on ``build_dataloader(**loader_args)``: its timing.json's figures."""
    from chemprop import data
    from chemprop_project import BATCH, datasets, make_model
    from lightning import pytorch as pl

    from mnistperf.diagnosis import EpochTimer

    timer = EpochTimer()
    trainer = pl.Trainer(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        max_epochs=epochs,
        default_root_dir=root,
        callbacks=[timer],
    )
    trainer.fit(make_model(), data.build_dataloader(datasets()[0], batch_size=BATCH, **loader_args))
    summary = json.loads(timer.summary_path.read_text())
    return {
        "train_s": summary["total_train_s"],
        "samples_per_s": summary["samples_per_s"],
        "input_wait_share": summary["input_wait_share"],
    }


def fitted(loader_args: dict, epochs: int, root: Path) -> dict:
    """:func:`fit` in a fresh process."""
    done = subprocess.run(
        [sys.executable, __file__, "--fit", json.dumps(loader_args), str(epochs), str(root)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(pairs: int, epochs: int) -> None:
    """Tune, then the pairs of fits; print and write chemprop-results.json."""
    from chemprop import data
    from chemprop_project import BATCH, MoleculeData, datasets, make_model

    from mnistperf.tune import tune_loaders

    began = time.perf_counter()
    result = tune_loaders(make_model, MoleculeData, {"accelerator": "cpu"}, budget_s=240, steps=20, epochs=3)
    tune_s = time.perf_counter() - began
    print(f"tune_loaders took {tune_s:.1f} s of wall time")
    print(result.table)
    print("settings:", result.settings, "loader arguments:", result.loader_args)
    loader = data.build_dataloader(datasets()[0], batch_size=BATCH, **result.loader_args)
    print(f"build_dataloader accepts them: num_workers={loader.num_workers}, persistent={loader.persistent_workers}")
    fits = []
    with tempfile.TemporaryDirectory(prefix="tune-chemprop-") as work:
        for pair in range(pairs):
            arms = [("untouched", {}), ("tuned", result.loader_args)]
            row = {}
            for name, loader_args in arms if pair % 2 == 0 else arms[::-1]:
                row[name] = fitted(loader_args, epochs, Path(work) / f"pair-{pair}-{name}")
            fits.append(row)
            before, after = row["untouched"]["train_s"], row["tuned"]["train_s"]
            print(f"pair {pair + 1}: untouched {before:.2f} s, tuned {after:.2f} s of training: {before / after:.2f}x")
    ratios = [f["untouched"]["train_s"] / f["tuned"]["train_s"] for f in fits]
    low, high = median_interval(ratios)
    results = {
        "tune_wall_s": tune_s,
        "loader_args": result.loader_args,
        "tune_speedup": result.speedup,
        "settings": {"pairs": pairs, "epochs": epochs},
        "fits": fits,
        "speedup_train_s": {"median": statistics.median(ratios), "low": low, "high": high, "ratios": ratios},
    }
    (HERE / "chemprop-results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"speed-up by train seconds: {statistics.median(ratios):.2f}x (95 % interval {low:.2f}-{high:.2f}x)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--fit"]:
        print(json.dumps(fit(json.loads(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))))
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 6, int(sys.argv[2]) if len(sys.argv) > 2 else 3)
