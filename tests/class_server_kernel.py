"""One learner's notebook kernel on a class server, for tests/test_class_server_kills.py (run as a
process of its own, never imported by pytest).

``python class_server_kernel.py READY FAR``: start a session whose two workers are on this node and
on a simulated node ``FAR``, publish a lesson's lookup table as an RRO argument (this node's copy made
by the kernel itself, ``FAR``'s by a worker), write ``READY`` (JSON: the segments, the runtime's
prefix, the kernel's and workers' pids), then sit mid-lesson until stdin closes (the test kills it
with SIGKILL first, as a Jupyter restart, an OOM kill or a cell timeout does) and close properly.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

import workbench
from workbench.runtime import tasks
from workbench.runtime.session import node_id

TABLE_BYTES = 4 << 20  # a lesson's lookup table (the probe's were 64 MiB per kernel)


def main(ready: Path, far: str) -> None:
    session = workbench.start(nodes=[node_id(), far], timeout=120)
    runtime = tasks.TaskRuntime(session, "rro")
    with runtime:
        table = np.arange(TABLE_BYTES // 8, dtype=np.float64)
        segments, running = runtime.convert(tasks.RRO, table)[tasks._RRO_MARK]
        session.wait(running)
        record = {
            "segments": sorted(segments.values()),
            "prefix": runtime.segment_prefix,
            "kernel": os.getpid(),
            "workers": sorted(session.run(os.getpid).values()),
        }
        ready.with_suffix(".partial").write_text(json.dumps(record))
        ready.with_suffix(".partial").rename(ready)
        sys.stdin.read()  # mid-lesson
    session.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
