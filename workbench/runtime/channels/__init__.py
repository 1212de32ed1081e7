"""In-place array channels (ArrayChannels.jl in Python) on a Dask cluster.

``run_group(session, fn)`` runs ``fn(rank, ...)`` on one long-running rank per worker;
``rank.channel(name, shape, dtype)`` makes a channel whose persistent buffer lives on every rank;
``put``/``take`` move a buffer with rendezvous semantics (shared memory on one node, a socket
between nodes, one copy, no allocation per message); ``reduce``, ``allreduce``, ``broadcast``,
``scatter`` and ``gather`` are built on them. ``eager=True`` gives the same API through Dask
(a new array per message, serialized and sent worker to worker by a Dask actor call): the baseline.

A failure is a ``ChannelError`` whose class says what happened: ``ChannelMismatch`` (the ranks
disagree on a channel or an operation), ``ChannelTimeout``, ``RankGone`` (another rank died, closed
its connection or returned), ``GroupAborted`` (another rank failed) and ``LinkRefused`` (a link
between two nodes did not prove it belongs to the group); ``RankGone`` and ``GroupAborted`` are
consequences, so ``run_group`` reports the error that caused them first.
"""

from workbench.runtime.channels.channel import ArrayChannel, EagerChannel
from workbench.runtime.channels.group import GroupResult, Rank, run_group
from workbench.runtime.channels.transport import (
    ChannelError,
    ChannelMismatch,
    ChannelTimeout,
    GroupAborted,
    LinkRefused,
    RankGone,
)

__all__ = [
    "ArrayChannel",
    "ChannelError",
    "ChannelMismatch",
    "ChannelTimeout",
    "EagerChannel",
    "GroupAborted",
    "GroupResult",
    "LinkRefused",
    "Rank",
    "RankGone",
    "run_group",
]
