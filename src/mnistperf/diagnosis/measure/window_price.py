"""What a profiled window costs a fit on a CPU, and how many steps the fit can pay for it to record.

A recorded step is priced by its autograd graph's nodes in a bare tiny operator's time, each figure with a margin over
what was measured: docs/timing.md, "What the window may cost" and "The operator clock".
"""

from __future__ import annotations

import math
import time
from typing import Any, NamedTuple

import torch

WINDOW_FIT_SHARE = 0.004  # of the whole fit's time (None: no limit)
CPU_WINDOW_COST = 4.0  # one recorded step, in unprofiled steps, at its worst (its graph unread)
EVENTS_PER_NODE = 24  # operator events the profiler records per node of a step's autograd graph
EVENT_COST = 8.0  # recording, reading and writing one, in bare tiny operators' time (operator_s)
NODE_COST = EVENTS_PER_NODE * EVENT_COST  # a graph node's price under the profiler, in the same
START_COST = 1_000.0  # the profiler's start, stop and reading, in the same
GRAPH_LIMIT = 5_000  # a graph past this many nodes is priced at the worst
CLOCK_NODE_COST = 12 * 2.5  # the operator clock's: 12 torch calls per node, each 2.5 tiny operators' time
CLOCK_WORST = 3.0  # the operator clock's price of a step at its worst
# One recorded step (clocked where the clock may run), the least that reads a share, may cost this many times the
# window's share of the fit (2 % at the default): a fit of a few tens of steps pays it once where the share pays none,
# N-BEATS' first fit in a process 1.1 % (docs/results/cpu-2core-operator-clock).
ONE_STEP_FACTOR = 5.0


def affordable_steps(fit_s: float, step_s: float, share: float | None, price: float, start_s: float = 0.0) -> float:
    """The steps of ``step_s`` costing ``price`` each a window may record in ``share`` of ``fit_s`` past ``start_s``."""
    return math.inf if share is None else (share * fit_s - start_s) / (price * step_s)


def fit_estimate(
    ran: tuple[int, float, float], steady: tuple[float, float | None] | None, left: float, expected: float
) -> tuple[float, float, bool] | None:
    """As a window opens: (a step's time, the whole fit's as far as known, whether its length was not known).

    ``ran``: the epoch's steps done, their train time and the fit's time so far; ``steady``: the last steady epoch's
    time a step and its whole period (train, eval and what lies between epochs), for a window opening at an epoch's only
    step, where each step left counts at that period. ``left``: the fit's steps left, this epoch's included (NaN: not
    known; then this epoch's ``expected`` steps, where known, stand for it). None where nothing ran to price it by.
    """
    done, train_s, elapsed_s = ran
    if done >= 1:
        step_s = pace = train_s / done
    elif steady is not None:
        step_s, period_s = steady
        pace = max(step_s, period_s or 0.0)
    else:
        return None
    left -= done
    unknown = math.isnan(left)
    if unknown:
        left = expected - done if math.isfinite(expected) else 0.0
    return step_s, elapsed_s + left * pace, unknown


def graph_nodes(loss: Any, limit: int = GRAPH_LIMIT) -> int | None:
    """The nodes of ``loss``'s autograd graph, counted up to ``limit``; None where it has none."""
    seen: set[Any] = set()
    todo = [getattr(loss, "grad_fn", None)]
    while todo and len(seen) < limit:
        node = todo.pop()
        if node is not None and node not in seen:
            seen.add(node)
            todo.extend(child for child, _ in node.next_functions)
    return len(seen) or None


def operator_s(ops: int = 32, repeats: int = 3) -> float:
    """A bare tiny operator's time on this thread, with no profiler: the least over a few short loops."""
    tiny, best = torch.zeros(1), math.inf
    with torch.no_grad():
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(ops):
                torch.neg(tiny)
            best = min(best, (time.perf_counter() - start) / ops)
    return best


def step_price(
    nodes: int | None, op_s: float, step_s: float, node_cost: float = NODE_COST, worst: float = CPU_WINDOW_COST
) -> float:
    """A recorded step's cost in steps of ``step_s``: ``node_cost`` times ``op_s`` per graph node, at most ``worst``."""
    if nodes is None or nodes >= GRAPH_LIMIT or not (op_s > 0 and step_s > 0):  # not read: the worst
        return worst
    return min(nodes * node_cost * op_s / step_s, worst)


class Weighed(NamedTuple):
    """What a window may record of a fit: its steps (below 1, or NaN: none), and what decided it."""

    steps: float
    clocked: bool  # its torch calls timed by the operator clock, where the profiler's price pays for no step
    share: float  # the share of the fit it may cost: the larger one where one step is all it affords
    price: float  # a recorded step's cost, in unrecorded steps
    start_s: float  # the profiler's start, stop and reading (none for the clock)


def weigh(fit_s: float, step_s: float, share: float, nodes: int | None, op_s: float, clock_may: bool) -> Weighed:
    """The steps of ``step_s`` a window may record in ``share`` of ``fit_s``, a step's graph ``nodes`` at ``op_s`` each.

    Recorded by the profiler where that pays for one step; else timed by the operator clock where it ``clock_may``;
    where neither pays for one step, one step at :data:`ONE_STEP_FACTOR` times the share.
    """
    price, start_s = step_price(nodes, op_s, step_s), START_COST * op_s
    affordable = affordable_steps(fit_s, step_s, share, price, start_s)
    clocked = not affordable >= 1 and clock_may
    if clocked:
        price, start_s = step_price(nodes, op_s, step_s, CLOCK_NODE_COST, CLOCK_WORST), 0.0
        affordable = affordable_steps(fit_s, step_s, share, price)
    if not affordable >= 1:  # one step, the least that reads a share, at a larger share
        share *= ONE_STEP_FACTOR
        affordable = min(affordable_steps(fit_s, step_s, share, price, start_s), 1.0)
    return Weighed(affordable, clocked, share, price, start_s)
