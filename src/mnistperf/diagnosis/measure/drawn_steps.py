"""Which steps of an epoch a sampler times: one in each block of EVERY, at a place drawn so none is favoured.

Work done every Nth step (the audit's hash every 16 batches of 256, logging every 50 steps, an image logged every 100
steps) falls on fixed places always or never; drawn, it is timed at the rate it runs (tests/test_step_parts.py).
"""

from __future__ import annotations

import functools

EVERY = 16  # one step in each block of this many is timed (a power of two: see drawn)
MASK = 2**64 - 1  # the draws' mix of numbers is kept to 64 bits
PARTS, SPLIT = 0, 1  # the samplers: the steps timed by their parts, the steps whose phases are stamped


def drawn(index: int, epoch: int = 0, sampler: int = PARTS, first: int | None = None) -> bool:
    """Whether step ``index`` of epoch ``epoch`` (from 0) is the one ``sampler`` times in its block.

    Each run of EVERY blocks times each place once, in an order drawn afresh (a fixed 64-bit mix of the sampler's,
    the epoch's and the run's numbers). Never an epoch's first step, which no step ends before (its block times the
    next place instead); ``first``: the first block's place, fixed.
    """
    block, place = divmod(index, EVERY)
    if block == 0 and first is not None:
        return place == first
    run, at = divmod(block, EVERY)
    odd, shift = order(sampler, epoch, run)
    return place == ((odd * at + shift) % EVERY or int(block == 0))


@functools.lru_cache(maxsize=4)  # asked every step: a run's order is mixed once
def order(sampler: int, epoch: int, run: int) -> tuple[int, int]:
    """The run's order of places: an odd multiplier and a shift (odd times the place, mod a power of two: each once)."""
    mixed = ((sampler << 62) + (epoch << 32) + run + 1) * 0x9E3779B97F4A7C15 & MASK
    mixed = (mixed ^ mixed >> 30) * 0xBF58476D1CE4E5B9 & MASK
    mixed ^= mixed >> 27
    return mixed % EVERY | 1, mixed // EVERY
