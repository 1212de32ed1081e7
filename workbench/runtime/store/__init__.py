"""Active object store on Dask workers: objects live on backends and their methods run there.

dataClay-style (Barceló-Cuerda, *Bridging the Gap Between Object Stores and HPC*, ch. 3-4), built on
Dask: a backend is a worker plugin holding an object table, the catalogue is a scheduler plugin
persisted in SQLite. See ``docs/architecture.md`` and ``notebooks/04-active-store.ipynb``.

    from workbench.runtime.store import Store, PersistentObject, active

    class Block(PersistentObject):
        def __init__(self, data): self.data = data
        @active
        def total(self): return self.data.sum()

    store = Store(session)
    block = store.make_persistent(Block(x), alias="b0")
    block.total()          # a Dask future: ran on the backend holding the block
    block.total.value()    # the value, one direct round trip to that backend
    block.total.local()    # non-active: the block is fetched here and summed here
"""
from workbench.runtime.store.client import (
    ActiveMethod,
    ArrayBlock,
    BlockCollection,
    Proxy,
    Store,
    current_store,
    default_directory,
    store_for,
)
from workbench.runtime.store.errors import BackendUnreachable, NotHere, ObjectLost, StoreError, UnknownAlias
from workbench.runtime.store.model import PersistentObject, active

__all__ = [
    "ActiveMethod", "ArrayBlock", "BackendUnreachable", "BlockCollection", "NotHere", "ObjectLost", "PersistentObject", "Proxy", "Store",
    "StoreError", "UnknownAlias", "active", "current_store", "default_directory", "store_for",
]
