"""One rank raises while the others wait in a collective: guard must end the whole job."""

from __future__ import annotations

import sys

import numpy as np

from ddops.distributed import guard, world

comm = world()
failing = int(sys.argv[1])
with guard(comm):
    if comm.Get_rank() == failing:
        raise ValueError(f"deliberate failure on rank {failing}")
    total = np.zeros(1)
    comm.Allreduce(np.ones(1), total)  # never completes: the failing rank never joins
    print("unreachable: the collective completed", flush=True)
