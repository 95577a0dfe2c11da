"""How often a two-process gloo run aborts at exit, with its process group left to the interpreter and destroyed first.

``python exits.py ROUNDS`` alternates the two, one fresh pair of processes each; an abort prints "terminate called
without an active exception".

Each rank all-gathers with autograd (as Lightning's ``all_gather`` does), all-reduces, and waits on an asynchronous
all-reduce, 20 times; rank 0 is this process, rank 1 a child process started with the same script, as Lightning's
launcher starts ranks. Prints one JSON object: the rounds, and for each arm the runs in which either rank aborted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.distributed.nn


def rank_body(rank: int, destroy: bool, port: int) -> None:
    """One rank's collectives; ``destroy``: the group destroyed before the process ends."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    x = torch.ones(1000, requires_grad=True) * rank
    for _ in range(20):
        torch.distributed.nn.functional.all_gather(x)
        dist.all_reduce(torch.ones(10))
        dist.all_reduce(torch.ones(100), async_op=True).wait()
    if destroy:
        dist.destroy_process_group()


def pair(destroy: bool, port: int) -> bool:
    """One run of two ranks; True where either aborted."""
    run = subprocess.run(
        [sys.executable, __file__, "rank", str(int(destroy)), str(port)], capture_output=True, text=True, timeout=120
    )
    return "terminate called" in run.stdout + run.stderr or run.returncode != 0


if __name__ == "__main__":
    if sys.argv[1] == "rank":  # rank 0 here, rank 1 in a child
        destroy, port = sys.argv[2] == "1", int(sys.argv[3])
        child = subprocess.Popen([sys.executable, __file__, "child", sys.argv[2], sys.argv[3]])
        rank_body(0, destroy, port)
        sys.exit(child.wait())
    if sys.argv[1] == "child":
        rank_body(1, sys.argv[2] == "1", int(sys.argv[3]))
        sys.exit(0)
    rounds = int(sys.argv[1])
    aborted = {"left to exit": 0, "destroyed": 0}
    for i in range(rounds):
        aborted["left to exit"] += pair(False, 29500 + 2 * (i % 200))
        aborted["destroyed"] += pair(True, 29501 + 2 * (i % 200))
    load = os.getloadavg()[0]
    print(json.dumps({"rounds": rounds, "aborted": aborted, "torch": torch.__version__, "load_1min_after": load}))
