"""The mpi4py peer of ``workbench bench channels``: ping-pong between ranks 0 and 1, run under ``mpiexec``.

``mpiexec -n 2 python -m workbench.bench.mpi_pingpong --payloads 8 1048576 --iterations 100`` prints
one JSON object: seconds per round trip for each payload (buffers allocated once, ``Send``/``Recv``
of numpy arrays: mpi4py's fast path). ``--wait-seconds S``: then rank 1 waits in ``Recv`` while rank 0
works S seconds, and the object gives the share of a core the waiting rank used meanwhile.
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
    parser.add_argument("--wait-seconds", type=float, default=0.0)
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
    report = {"library": MPI.Get_library_version().splitlines()[0], "round_trip_s": out}
    if args.wait_seconds > 0:
        report["wait_cpu_share"] = comm.bcast(_wait_cpu_share(comm, args.wait_seconds), root=1)
    if rank == 0:
        print(json.dumps(report))
    return 0


def _wait_cpu_share(comm: object, seconds: float) -> float | None:
    """Rank 0 works ``seconds`` (sleeps), then sends; rank 1 waits in ``Recv``: its CPU seconds per
    second waited (None on rank 0)."""
    buffer = np.zeros(8, dtype=np.uint8)
    comm.Barrier()
    if comm.Get_rank() == 0:
        time.sleep(seconds)
        comm.Send(buffer, 1)
        return None
    cpu, wall = time.process_time(), time.perf_counter()
    comm.Recv(buffer, 0)
    return (time.process_time() - cpu) / (time.perf_counter() - wall)


if __name__ == "__main__":
    raise SystemExit(main())
