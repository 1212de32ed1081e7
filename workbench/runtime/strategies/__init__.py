"""Locality strategies: the same block work, run with different locality (see :mod:`.base`).

Built in: ``blocks``, ``fetch``, ``rechunk``, ``split``, ``split-materialized``, ``split-balanced``,
``split-balanced-replicas`` (Dask; the last two rebalance partitions by stealing chunks: :mod:`.balance`),
``active``, ``non-active``, ``active-split`` (the active store), ``files``, ``dask``, ``rro``
(PyCOMPSs-style tasks, the RRO argument modes), and the memory-tier configurations ``dram``,
``mapped[-cold]``, ``cached[-cold]``, ``disk``, ``dynamic`` with the peers ``dask-spill[-lz4]`` and
``memmap`` (:mod:`.tiers`), and ``channels`` / ``eager`` (SPMD ranks over array channels:
:mod:`.channels`). Each lives in one module of this package and
registers itself; ``docs/architecture.md`` has the one-file recipe for adding one.
"""

from workbench.runtime.strategies import balance, blocks, channels, fetch, modes, rechunk, split, store, tiers
from workbench.runtime.strategies.base import BlockWork, Broadcast, Plan, Strategy, get, names, register, unregister

BUILTIN = (blocks, fetch, rechunk, split, balance, store, modes, tiers, channels)

__all__ = ["BUILTIN", "BlockWork", "Broadcast", "Plan", "Strategy", "get", "names", "register", "unregister"]
