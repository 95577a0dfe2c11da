"""The sample fingerprints SampleAudit counts: a 62-bit modular hash of each sample's bits, on the device.

Two sums of each 16-bit word times a fixed pseudo-random weight, modulo the prime 2**31 - 1, make a fingerprint; its
odds of a false duplicate and its cost: docs/diagnose.md, "How samples are identified" and "Cost".
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from mnistperf.diagnosis.measure import bags as bag_batches
from mnistperf.diagnosis.measure.graph_batches import Graphs
from mnistperf.diagnosis.measure.held_steps import Rows, joined_bags, joined_columns, joined_graphs

PRIME = 2**31 - 1
LANES = 2  # independent hashes of 31 bits each: a 62-bit fingerprint
CHUNK_ELEMENTS = 1 << 22  # elements of the temporary (samples x words x lanes) product per chunk of words
# Words per float64 matmul: a word (|v| < 2**16) times a weight's 16-bit half is below 2**32, so these sum below 2**52,
# exact in float64.
FLOAT_CHUNK_WORDS = 1 << 20
# Float64 words made at once on a CPU: a block that stays in the core's cache (a larger one's pages, faulting in, made a
# fresh process's first hash 0.5-2 ms dearer). Wide samples get BLOCK_ROWS rows all the same, up to four times the
# bytes, so that each product is long enough to be cheap (MNIST's 784 floats: 64 rows, not 20).
BLOCK_BYTES = 1 << 18
BLOCK_ROWS = 64
PADDING = -1  # fingerprints are non-negative
PLACES = 4096  # a graph's node places with weights of their own
# On a CPU, held steps of this many bytes each (as the first of a run of one layout), or more, are hashed straight from
# each step's tensors (joining them would copy them all); smaller ones are joined first (a copy is cheaper than a call)
STREAMED_BYTES = 64 * 2**10
DISTINCT_DRAWS = 16  # beyond this many times max_words, a sample's hashed positions are drawn with replacement
LAYOUTS_KEPT = 16  # layouts (and sampled lengths) of a sample's tensors whose weights (positions) stay made, at most


def halves(weights: torch.Tensor) -> np.ndarray:
    """The weights' 16-bit halves as float64, [words, 2 * LANES]: what :func:`cpu_lane_sums` multiplies by."""
    return torch.cat([weights & 0xFFFF, weights >> 16], dim=1).cpu().numpy().astype(np.float64)


def lane_sums(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``values @ weights`` modulo PRIME, exact: [samples, words] x [words, LANES] -> [samples, LANES] int64."""
    total = torch.zeros(len(values), LANES, dtype=torch.int64, device=values.device)
    # Products stay below 2**47, so a chunk of up to 2**15 words sums without overflowing int64.
    step = max(1, min(1 << 15, CHUNK_ELEMENTS // max(1, len(values) * LANES)))
    for start in range(0, values.shape[1], step):
        part, factors = values[:, start : start + step].to(torch.int64), weights[start : start + step]
        total = (total + (part[:, :, None] * factors).sum(dim=1)) % PRIME
    return total


def block_rows(samples: int, words: int) -> int:
    """How many samples of ``words`` words :func:`cpu_lane_sums` makes float64 at once (1 to ``samples``)."""
    row_bytes = 8 * max(1, words)
    return max(1, min(samples, max(BLOCK_BYTES // row_bytes, min(BLOCK_ROWS, 4 * BLOCK_BYTES // row_bytes))))


def cpu_lane_sums(steps: Sequence[Sequence[np.ndarray]], split: np.ndarray) -> torch.Tensor:
    """:func:`lane_sums` of the samples of ``steps``, each step its words side by side, by float64 matmuls.

    ``steps``: each a list of word arrays with the step's samples as rows; ``split``: the weights' :func:`halves`. In
    NumPy, not torch's OpenMP threads (docs/diagnose.md, "Cost"); made float64 a block of samples at a time.
    """
    samples, words = sum(len(step[0]) for step in steps), sum(part.shape[1] for part in steps[0])
    rows = block_rows(samples, words)
    block = np.empty((rows, words), dtype=np.float64)
    total = np.zeros((samples, LANES), dtype=np.int64)
    one_chunk = words <= FLOAT_CHUNK_WORDS  # then each sample's sums are whole after one product, reduced at the end
    sums = np.empty((samples if one_chunk else rows, 2 * LANES), dtype=np.float64)
    done = filled = 0  # samples summed into total; rows of the block filled

    def add(count: int) -> None:  # the block's first ``count`` rows, summed into the next rows of total
        if one_chunk:
            np.matmul(block[:count], split, out=sums[done : done + count])
            return
        ahead = total[done : done + count]
        for start in range(0, words, FLOAT_CHUNK_WORDS):
            end = start + FLOAT_CHUNK_WORDS
            np.matmul(block[:count, start:end], split[start:end], out=sums[:count])
            ahead[:] = reduced(ahead, sums[:count])

    for step in steps:
        first = 0
        while first < len(step[0]):
            taken = min(rows - filled, len(step[0]) - first)
            at = 0
            for part in step:
                np.copyto(block[filled : filled + taken, at : at + part.shape[1]], part[first : first + taken])
                at += part.shape[1]
            filled, first = filled + taken, first + taken
            if filled == rows:
                add(filled)
                done, filled = done + filled, 0
    if filled:
        add(filled)
    return torch.from_numpy(reduced(total, sums) if one_chunk else total)


def reduced(ahead: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """``ahead`` plus the lanes whose weights' halves summed to ``sums`` (float64, exact), modulo the prime."""
    whole = sums.astype(np.int64)
    return (ahead + (whole[:, LANES:] % PRIME) * (1 << 16) + whole[:, :LANES]) % PRIME


def text_digests(texts: Sequence[Sequence[str | bytes]]) -> torch.Tensor:
    """[samples, strings] int64: each sample's strings as 63-bit digests, the same in every process (rows to hash)."""
    return torch.tensor([[digest(text) for text in strings] for strings in texts], dtype=torch.int64)


def digest(text: str | bytes) -> int:
    """A string's 63-bit BLAKE2 digest (Python's own hash of it differs from process to process)."""
    data = text.encode() if isinstance(text, str) else text
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") >> 1


def row_words(tensor: torch.Tensor) -> int:
    """The words of a row of ``tensor`` (past its first dimension), as :meth:`Fingerprinter.words` makes them."""
    return math.prod(tensor.shape[1:]) * max(1, tensor.element_size() // 2)


def to_device(made: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``made`` (a CPU tensor) on ``device``; to a GPU from pinned memory: the copy does not wait for the device."""
    return made.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else made.to(device)


def combined(lanes: torch.Tensor) -> torch.Tensor:
    """One non-negative int64 per sample from its lanes [samples, LANES] (on a CPU in NumPy, as the sums are)."""
    found = lanes.numpy() if lanes.device.type == "cpu" else lanes
    return torch.as_tensor(found[:, 0] * PRIME + found[:, 1])


class Fingerprinter:
    """Hashes the bits of each sample's tensors to one non-negative int64, on the tensors' device.

    ``seed``: of the fixed weights, the same on every rank and epoch; ``max_words``: 16-bit words of a tensor's sample
    hashed at most (fixed positions beyond that).
    """

    def __init__(self, seed: int = 0, max_words: int = 4096):
        self.seed, self.max_words = seed, max_words
        self._weights: dict[tuple[int, torch.device], torch.Tensor] = {}
        self._positions: dict[tuple[int, torch.device], torch.Tensor] = {}
        # per layout of a sample's tensors: their weights one after the other, and on a CPU those split in halves
        self._combined: dict[tuple[Any, ...], tuple[torch.Tensor, np.ndarray | None]] = {}
        self.widths: dict[tuple[int, int], set[int]] = {}  # per loader and tensor of the sample rows: its widths

    def weights(self, offset: int, words: int, device: torch.device, drawn: int | None = None) -> torch.Tensor:
        """Weights [words, LANES] for the tensor at ``offset`` among a sample's, of ``drawn`` (by default max_words)."""
        key = (offset, device)
        if key not in self._weights:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + offset)
            made = torch.randint(1, PRIME, (drawn or self.max_words, LANES), generator=generator, dtype=torch.int64)
            self._weights[key] = to_device(made, device)
        return self._weights[key][:words]

    def words(self, tensor: torch.Tensor, samples: int) -> torch.Tensor:
        """The tensor's bits as [samples, words], int16 words (uint8 for 1-byte types, bool's too)."""
        flat = tensor.detach().reshape(samples, -1).contiguous()
        if flat.numel() and flat.stride(-1) != 1:  # a column of a transposed row: "contiguous", but not for a view
            flat = flat.clone(memory_format=torch.contiguous_format)
        words = flat.view(torch.uint8) if flat.element_size() == 1 else flat.view(torch.int16)
        count = words.shape[1]
        if count > self.max_words:
            key = (count, words.device)
            if key not in self._positions:
                if len(self._positions) >= LAYOUTS_KEPT:  # samples of a length of their own: not kept for ever
                    self._positions.clear()
                generator = torch.Generator().manual_seed(self.seed + count)
                if count <= DISTINCT_DRAWS * self.max_words:
                    chosen = torch.randperm(count, generator=generator)[: self.max_words]
                else:  # a permutation of them all costs its length (67 ms for an image's 1.9 M words, each new size)
                    chosen = torch.randint(count, (self.max_words,), generator=generator)  # as good as distinct here
                self._positions[key] = to_device(chosen.sort().values, words.device)
            # index_select, not indexing: at these sizes it runs on this thread, where indexing runs on torch's
            # OpenMP threads and waits for a busy machine's cores (docs/results/cpu-2core-busy-hash/results.md)
            words = words.index_select(1, self._positions[key])
        return words  # int16 words are signed: the sums' remainder is non-negative anyway

    def steps_lanes(self, steps: Sequence[tuple[Sequence[torch.Tensor], int]], offset: int = 0) -> torch.Tensor:
        """The lanes [samples, LANES] of steps' samples, their tensors of one layout from ``offset`` among theirs."""
        kept = [(tensors, samples) for tensors, samples in steps if samples]  # an empty batch (a filtering collate's)
        if not kept:  # has no words to read, nor a width to read them by
            return torch.zeros(0, LANES, dtype=torch.int64, device=steps[0][0][0].device)
        first = kept[0][0]  # the first step's with samples: its device, an accelerator's where it holds one
        steps, device = kept, next((t.device for t in first if t.device.type != "cpu"), first[0].device)
        if len(steps) > 1 and (device.type != "cpu" or sum(t.nbytes for t in steps[0][0]) < STREAMED_BYTES):  # joined
            steps = [(joined_columns(tensors for tensors, _ in steps), sum(samples for _, samples in steps))]
        words = [[self.words(tensor.to(device), samples) for tensor in tensors] for tensors, samples in steps]
        key = (offset, tuple(part.shape[1] for part in words[0]), device)  # the same every epoch of a fit: made once
        if key not in self._combined:
            if len(self._combined) >= LAYOUTS_KEPT:  # batches padded to a length of their own: not kept for ever
                self._combined.clear()
            weights = torch.cat([self.weights(offset + at, part.shape[1], device) for at, part in enumerate(words[0])])
            self._combined[key] = weights, halves(weights) if device.type == "cpu" else None
        weights, split = self._combined[key]
        if split is not None:  # the hash is a sum over words: one product over all of them
            return cpu_lane_sums([[part.numpy() for part in step] for step in words], split)
        columns = words[0]  # (one step: joined; 1-byte words as int16 beside others)
        values = torch.cat([part.to(torch.int16) for part in columns], dim=1) if len(columns) > 1 else columns[0]
        return lane_sums(values, weights)

    def __call__(self, tensors: Sequence[torch.Tensor], samples: int) -> torch.Tensor:
        """Fingerprints [samples] of the samples spread over ``tensors`` (each with ``samples`` leading rows)."""
        return combined(self.steps_lanes([(tensors, samples)]))

    def widest_sampled(self) -> int | None:
        """The widest tensor of sample rows (in words) read at ``max_words`` of its positions; None where none was."""
        widest = max((max(w) for w in self.widths.values()), default=0)
        return widest if widest > self.max_words else None

    def widths_vary(self) -> list[int] | None:
        """Widths (in words) of a loader's tensor of sample rows, where several, one past ``max_words``; else None."""
        return next((sorted(w) for w in self.widths.values() if len(w) > 1 and max(w) > self.max_words), None)

    def graphs(self, graphs: Graphs, rows: Sequence[torch.Tensor]) -> torch.Tensor:
        """Fingerprints [graphs] of a graph batch's samples, each graph's from its own node rows and rows.

        Its node rows' lanes, weighted by their place in the graph, summed, with its own ``rows`` (leading with the
        graph count): the same whatever else the batch holds.
        """
        count, device = graphs.total, graphs.sets[0].of_node.device
        total = torch.zeros(count, LANES, dtype=torch.int64, device=device)
        offset = 0  # where the kind's tensors stand among a graph's
        for index, tensors in graphs.sets:
            if tensors:
                nodes = self.steps_lanes([(tensors, len(index))], offset)  # [nodes, LANES]
                order = torch.arange(len(index), device=device)
                first = torch.full((count,), len(index), dtype=torch.int64, device=device)
                first.scatter_reduce_(0, index.long(), order, "amin")
                place = order - first.index_select(0, index.long())  # each node's place in its graph
                # weights by place, the same whatever the batch; repeating every PLACES: no need to know the largest
                by_place = self.weights(-1, PLACES, device, PLACES).index_select(0, place % PLACES)
                total.index_add_(0, index.long(), nodes * by_place % PRIME)
            offset += len(tensors)
        if rows:
            total += self.steps_lanes([(rows, count)], offset)
        return combined(total % PRIME)

    def bags(self, bags: bag_batches.Bags, rows: Sequence[torch.Tensor]) -> torch.Tensor:
        """Fingerprints [bags] of a batch's bags, each from its own flat rows, its length and its ``rows``.

        A bag's rows as a row of its own, padded to its width (``by_width``); past ``max_words``, as a graph's.
        """
        lengths = bag_batches.sizes(bags)
        widest = self.max_words // max(map(row_words, bags.flat))  # rows a bag hashed in full holds at most
        found = torch.empty(len(lengths), dtype=torch.int64)
        for width, picked, dense in bag_batches.by_width(bags, lengths, widest):
            own = [*(t.index_select(0, picked) for t in rows), lengths.index_select(0, picked)]
            if width:
                found[picked] = self([*own, *dense], len(picked))
            else:
                found[picked] = self.graphs(Graphs(len(picked), [bag_batches.segments(bags, picked)]), own)
        return found

    def fingerprints(self, steps: Sequence[Rows], loader: int = 0) -> torch.Tensor:
        """Fingerprints [samples] of several steps' samples, their tensors of one layout; widths kept by ``loader``."""
        if steps[0].bags is not None:
            return self.bags(*joined_bags(steps))
        if steps[0].graph_nodes is None:
            for at, tensor in enumerate(steps[0].tensors):
                self.widths.setdefault((loader, at), set()).add(row_words(tensor))
            return combined(self.steps_lanes([(step.tensors, step.samples) for step in steps]))
        return self.graphs(*joined_graphs(steps))

    def items(
        self, items: Sequence[Sequence[torch.Tensor]], texts: Sequence[Sequence[str | bytes]] | None = None
    ) -> torch.Tensor:
        """Fingerprints [samples] of a batch of one item a sample, each from its tensors, their shapes and ``texts``."""
        found = []
        for at, tensors in enumerate(items):
            told = [dim for tensor in tensors for dim in (tensor.ndim, *tensor.shape)]
            told += [digest(text) for text in texts[at]] if texts is not None else []
            shapes_and_texts = to_device(torch.tensor([told], dtype=torch.int64), tensors[0].device)
            found.append(self([*(tensor.reshape(1, -1) for tensor in tensors), shapes_and_texts], 1))
        return torch.cat(found)
