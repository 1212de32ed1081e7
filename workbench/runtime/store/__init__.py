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
    store.close()          # takes the store off the cluster again (flushed objects stay on disk)

Trust model. The store directory holds the SQLite catalogue and the disk tier: pickles, which the
workers load, and loading a pickle runs code. So whoever can write the store directory can run
code in every worker, as with any pickle-based store (Dask's own spill directory included). The
store creates its directory 0700 and its files 0600, refuses a directory another user owns or may
write, or that sits in one (``workbench.memory.tiers.others_could_swap``), loads a disk copy only
from its own ``objects`` directory (a catalogue path elsewhere, a symlink, or a file owned by
another user is refused), deletes no file outside it, and reports a catalogue that is not SQLite
as such. A directory shared by several nodes must be writable only by the user
running the cluster.
"""

from workbench.runtime.store.client import Store, default_directory, registered_directory, store_for
from workbench.runtime.store.current import current_store
from workbench.runtime.store.errors import BackendUnreachable, NotHere, ObjectLost, StoreError, UnknownAlias
from workbench.runtime.store.handles import ActiveMethod, ArrayBlock, BlockCollection, Proxy, persist_here
from workbench.runtime.store.local import local_object
from workbench.runtime.store.model import PersistentObject, active

__all__ = [
    "ActiveMethod",
    "ArrayBlock",
    "BackendUnreachable",
    "BlockCollection",
    "NotHere",
    "ObjectLost",
    "PersistentObject",
    "Proxy",
    "Store",
    "StoreError",
    "UnknownAlias",
    "active",
    "current_store",
    "default_directory",
    "local_object",
    "persist_here",
    "registered_directory",
    "store_for",
]
