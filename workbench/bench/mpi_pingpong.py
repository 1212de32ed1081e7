"""The mpi4py peer of ``workbench bench channels``: ping-pong between ranks 0 and 1, run under ``mpiexec``.

``mpiexec -n 2 python -m workbench.bench.mpi_pingpong --payloads 8 1048576 --iterations 100`` prints
one JSON object: seconds per round trip for each payload (buffers allocated once, ``Send``/``Recv``
of numpy arrays: mpi4py's fast path).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> int:
    """Run the ping-pong; rank 0 prints the JSON."""
    from mpi4py import MPI

    parser = argparse.ArgumentParser()
    parser.add_argument("--payloads", type=int, nargs="+", required=True)
    parser.add_argument("--iterations", type=int, nargs="+", required=True)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    if comm.Get_size() != 2:
        raise SystemExit("run with exactly 2 ranks: mpiexec -n 2 ...")
    out = {}
    for nbytes, iterations in zip(args.payloads, args.iterations):
        buffer = np.zeros(nbytes, dtype=np.uint8)
        for warm in (True, False):
            count = max(1, iterations // 10) if warm else iterations
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(count):
                if rank == 0:
                    comm.Send(buffer, 1)
                    comm.Recv(buffer, 1)
                else:
                    comm.Recv(buffer, 0)
                    comm.Send(buffer, 0)
            seconds = time.perf_counter() - start
        out[str(nbytes)] = seconds / iterations
    if rank == 0:
        print(json.dumps({"library": MPI.Get_library_version().splitlines()[0], "round_trip_s": out}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
