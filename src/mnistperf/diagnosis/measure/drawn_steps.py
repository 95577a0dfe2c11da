"""Which steps of an epoch a sampler times: one in each block of EVERY, at a place drawn so none is favoured.

Why drawn: docs/timing.md, "Where a step goes".
"""

from __future__ import annotations

import functools

EVERY = 16  # one step in each block of this many is timed (a power of two: see drawn)
MASK = 2**64 - 1  # the draws' mix of numbers is kept to 64 bits
PARTS, SPLIT = 0, 1  # the samplers: the steps timed by their parts, the steps whose phases are stamped


def drawn(index: int, epoch: int = 0, sampler: int = PARTS, first: int | None = None) -> bool:
    """Whether step ``index`` of epoch ``epoch`` (from 0) is the one ``sampler`` times in its block.

    Each run of EVERY blocks times each place once, in an order shuffled afresh (:func:`order`). The first block times
    ``first`` where given, else its drawn place but never an epoch's first step, which no step ends before (place 1
    instead); the block of the first run that drew that place takes the one the first block gave up, so that the
    first run too times each place once.
    """
    block, place = divmod(index, EVERY)
    run, at = divmod(block, EVERY)
    places = order(sampler, epoch, run)
    chosen = places[at]
    if run == 0:
        wanted = first if first is not None else (places[0] or 1)
        if at == 0:
            return place == wanted
        if chosen == wanted:
            chosen = places[0]
    return place == chosen


@functools.lru_cache(maxsize=4)  # asked every step: a run's order is shuffled once
def order(sampler: int, epoch: int, run: int) -> tuple[int, ...]:
    """The run's order of the EVERY places, shuffled by a fixed 64-bit mix of the three numbers (the same anywhere).

    A shuffle, not a stride through the places: work done every 15 or 17 steps falls on a stride's places all at once
    or not at all, which leaves a short fit's rate of it far from its average.
    """
    state, places = (epoch << 33) + (run << 1) + sampler, list(range(EVERY))
    for last in range(EVERY - 1, 0, -1):
        state = (state + 0x9E3779B97F4A7C15) & MASK
        mixed = (state ^ state >> 30) * 0xBF58476D1CE4E5B9 & MASK
        mixed = (mixed ^ mixed >> 27) * 0x94D049BB133111EB & MASK
        pick = (mixed ^ mixed >> 31) % (last + 1)
        places[last], places[pick] = places[pick], places[last]
    return tuple(places)
