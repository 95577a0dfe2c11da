"""The two callbacks on PyTorch Geometric (graph learning), a GCN trained as its introduction trains one.

The dev extra installs the library, so the main suite runs it; without the library the module skips.
The graphs are the library's own FakeDataset (random graphs of some 20 nodes, seeded): a fit takes a second on a CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch_geometric")

import torch
from lightning import pytorch as pl
from torch_geometric.datasets import FakeDataset
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GCNConv, global_mean_pool

from mnistperf.diagnosis import EpochTimer, SampleAudit

EPOCHS, GRAPHS, BATCH, REPEATED = 2, 90, 16, 7


class GCN(pl.LightningModule):
    """Two graph convolutions and a mean pool over each graph's nodes: a class per graph."""

    def __init__(self, channels: int = 8, classes: int = 3):
        super().__init__()
        self.first, self.second = GCNConv(channels, 16), GCNConv(16, 16)
        self.out = torch.nn.Linear(16, classes)

    def training_step(self, data, batch_idx):
        x = self.second(self.first(data.x, data.edge_index).relu(), data.edge_index).relu()
        loss = torch.nn.functional.cross_entropy(self.out(global_mean_pool(x, data.batch)), data.y)
        self.log("train_loss", loss, batch_size=data.num_graphs)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.01)


def graphs() -> list:
    """FakeDataset's graphs, seeded; its three classes shared among them, so only their nodes tell them apart."""
    torch.manual_seed(0)
    return list(FakeDataset(num_graphs=GRAPHS, avg_num_nodes=20, num_channels=8, num_classes=3))


def fit(
    root: Path, dataset: list, module: pl.LightningModule | None = None
) -> tuple[pl.Trainer, EpochTimer, SampleAudit]:
    timer, audit = EpochTimer(), SampleAudit(dataset_size=len(dataset))
    trainer = pl.Trainer(
        default_root_dir=root,
        enable_progress_bar=False,
        enable_checkpointing=False,
        accelerator="cpu",
        devices=1,
        max_epochs=EPOCHS,
        callbacks=[timer, audit],
    )
    trainer.fit(module or GCN(), DataLoader(dataset, batch_size=BATCH, shuffle=True))
    return trainer, timer, audit


def graphs_per_epoch(dataset: list) -> int:
    """An independent pass over the library's loader: the graphs its batches hold, by the batch's own count."""
    return sum(batch.num_graphs for batch in DataLoader(dataset, batch_size=BATCH, shuffle=True))


@pytest.fixture(scope="module")
def gcn_fit(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("geometric")
    return (root, *fit(root, graphs()))


def test_fit_finishes_and_writes_timing_json(gcn_fit):
    root, trainer, timer, _ = gcn_fit
    assert trainer.state.finished and trainer.current_epoch == EPOCHS
    (summary_path,) = root.glob("lightning_logs/version_*/timing.json")
    summary = json.loads(summary_path.read_text())
    assert summary["problems"] == [] and summary["interrupted"] is False
    assert summary["epochs"] == json.loads(json.dumps(timer.epochs))


def test_both_callbacks_count_graphs_and_the_audit_tells_every_graph_apart(gcn_fit):
    """A PyG Batch stacks its graphs' nodes, names each node's graph (``batch``) and counts its graphs: a sample is a
    graph, to the timer as to the audit, and graphs that share a class differ by their nodes."""
    _, _, timer, audit = gcn_fit
    assert graphs_per_epoch(graphs()) == GRAPHS
    assert [row["samples"] for row in timer.epochs] == [GRAPHS] * EPOCHS
    for row in audit.epochs:
        assert row["audited"]
        assert (row["seen"], row["distinct"], row["duplicates"], row["missing"]) == (GRAPHS, GRAPHS, 0, 0)


def test_the_audit_finds_graphs_a_dataset_holds_twice(tmp_path: Path):
    dataset = graphs()
    _, timer, audit = fit(tmp_path, dataset + dataset[:REPEATED])
    assert [row["samples"] for row in timer.epochs] == [GRAPHS + REPEATED] * EPOCHS
    for row in audit.epochs:
        assert (row["seen"], row["distinct"], row["duplicates"]) == (GRAPHS + REPEATED, GRAPHS, REPEATED)


class PaperClassifier(pl.LightningModule):
    """A class per heterogeneous graph from the mean of its paper nodes (its authors ride along)."""

    def __init__(self):
        super().__init__()
        self.out = torch.nn.Linear(4, 2)

    def training_step(self, data, batch_idx):
        pooled = global_mean_pool(data["paper"].x, data["paper"].batch)
        loss = torch.nn.functional.cross_entropy(self.out(pooled), data.y)
        self.log("train_loss", loss, batch_size=data.num_graphs)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def hetero_graphs(count: int) -> list:
    """Small HeteroData graphs of papers and authors, seeded; two classes, so the targets alone would tell 2 apart."""
    from torch_geometric.data import HeteroData

    generator = torch.Generator().manual_seed(0)
    made = []
    for i in range(count):
        graph, papers, authors = HeteroData(), 2 + i % 3, 1 + i % 2
        graph["paper"].x = torch.randn(papers, 4, generator=generator)
        graph["author"].x = torch.randn(authors, 3, generator=generator)
        writes = [torch.randint(0, n, (3,), generator=generator) for n in (authors, papers)]
        graph["author", "writes", "paper"].edge_index = torch.stack(writes)
        graph.y = torch.tensor([i % 2])
        made.append(graph)
    return made


def test_heterogeneous_graph_batches_are_counted_and_every_graph_told_apart_by_its_nodes(tmp_path: Path):
    """A batch of HeteroData keeps each kind of node in a store of its own, with its own ``batch`` and ``ptr``."""
    _, timer, audit = fit(tmp_path, hetero_graphs(GRAPHS), PaperClassifier())
    assert [row["samples"] for row in timer.epochs] == [GRAPHS] * EPOCHS
    for row in audit.epochs:
        assert (row["seen"], row["distinct"], row["duplicates"], row["missing"]) == (GRAPHS, GRAPHS, 0, 0)
    assert not timer.problems.lines and not audit.problems.lines
