"""In-place array channels (ArrayChannels.jl in Python) on a Dask cluster.

``run_group(session, fn)`` runs ``fn(rank, ...)`` on one long-running rank per worker;
``rank.channel(name, shape, dtype)`` makes a channel whose persistent buffer lives on every rank;
``put``/``take`` move a buffer with rendezvous semantics (shared memory on one node, a socket
between nodes, one copy, no allocation per message); ``reduce``, ``allreduce``, ``broadcast``,
``scatter`` and ``gather`` are built on them. ``eager=True`` gives the same API through Dask
(a new array per message, serialized and sent worker to worker by a Dask actor call): the baseline.
"""

from workbench.runtime.channels.channel import ArrayChannel, EagerChannel
from workbench.runtime.channels.group import GroupResult, Rank, run_group
from workbench.runtime.channels.transport import ChannelError

__all__ = ["ArrayChannel", "ChannelError", "EagerChannel", "GroupResult", "Rank", "run_group"]
