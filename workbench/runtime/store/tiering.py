"""Object state on memory tiers: where a stored object's numpy attributes live.

An object in a backend's table is on one tier (thesis ch. 6):

* ``dram``: its arrays are in the worker's memory (the default, what ``memory_limit`` counts);
* ``mapped``: each numpy attribute is a file of the tier directory mapped into the worker, and
  active methods run on the mapping in place (read-only at rest, writeable during a writing
  method, ``msync``-ed after it);
* ``cached``: the same files, used through the backend's DRAM cache (a byte budget; Memory Mode
  in software): a call swaps in the cached DRAM copies, and a writing call writes through;
* ``disk``: the object is evicted to the store's disk tier (issue 6's pickle per version) and
  staged back into DRAM when used: one tier among these, through the same ``place`` call;
* ``gpu``: each numeric attribute is a device array (:mod:`workbench.memory.gpu`), at rest and in
  calls: an active method hands it to device kernels and the data never crosses the bus; a copy of
  the object (a non-active fetch, a replica, a disk copy) takes host copies, counted;
* ``dynamic``: not a place but a manager: the backend's
  :class:`~workbench.memory.placement.DynamicPolicy` moves the object between ``mapped`` and
  ``dram`` by its measured use, under a DRAM budget per backend, each move explained in the trace.

Files are named ``<oid>-v<version>-<attribute>`` in ``<store>/tiers/mapped`` (or
``$WORKBENCH_PMEM_DIR``), made and checked by :mod:`workbench.memory.tiers` (and so by
``workbench.memory.shm``'s file code): no second copy of that code here. What is done with an object
depends on its tier's flags (:class:`~workbench.memory.tier_base.Tier`), never on the tier's name: a
``counts_transfers`` tier (``gpu``) holds device arrays, a ``file_backed`` one (``mapped``, ``cached``)
files used in place, any other (``dram``) the arrays as Python made them; a ``staged`` one (``disk``)
is the placing's (:mod:`~workbench.runtime.store.placing`). Each file ends with an owner
record naming the worker process that wrote it, so the files of a killed kernel's backends are freed
(``tiers.reclaim_store_files``: every new backend, ``workbench.start()``, ``workbench shm clean``).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workbench.memory import gpu, owners, tiers
from workbench.settings import now as settings_now

DYNAMIC = "dynamic"  # not a tier: the placement policy that moves objects between the tiers by their reads


@dataclass
class Placement:
    """The tier of one object version here, and the tier files of its numpy attributes (attributes
    that are one array share one handle, and so one file)."""

    tier: str = tiers.HOME  # a new object's arrays are where Python made them: in process memory
    arrays: dict[str, tiers.TierArray] = field(default_factory=dict)
    stem: str = ""  # what its files (or device arrays) are named after

    @property
    def kind(self) -> tiers.Tier:
        """The tier itself (its flags: what the store does with the object)."""
        return tiers.lookup(self.tier)

    @property
    def handles(self) -> list[tiers.TierArray]:
        """Each tier file's handle once (aliased attributes share one)."""
        return list({id(h): h for h in self.arrays.values()}.values())

    @property
    def tier_bytes(self) -> int:
        """Bytes of the object's arrays held in tier files (not counted against DRAM)."""
        return sum(h.file_bytes for h in self.handles)

    @property
    def device_bytes(self) -> int:
        """Bytes of the object's arrays held in device memory (the ``gpu`` tier)."""
        return sum(h.device_bytes for h in self.handles)


def check_tier(tier: object) -> str:
    """``tier`` if the store can place objects there (a tier, or the dynamic policy); a clear error
    (:class:`workbench.memory.tiers.UnknownTier`, a ``ValueError``) otherwise."""
    return tiers.check_tier(tier, policies=(DYNAMIC,))


def placed_when_new(tier: str) -> bool:
    """Whether a new object (its arrays in process memory, where Python made them) is placed to be on
    ``tier`` (a tier's name, or the dynamic policy): on any but ``tiers.HOME`` (dram)."""
    return tier != tiers.HOME


def evicts(tier: str) -> bool:
    """Whether placing an object on ``tier`` (a tier's name, or the dynamic policy) evicts it to the
    store's disk tier, from where it is staged back when used: a ``staged`` tier (``disk``)."""
    return tier != DYNAMIC and tiers.lookup(tier).staged


def tier_directory(store_directory: str) -> Path:
    """Where this store's mapped (and cached) files live: ``$WORKBENCH_PMEM_DIR/<store name>`` when set,
    else ``<store>/tiers/mapped``; a directory of this user's only, 0700 (see :func:`tiers.private_directory`)."""
    path = tiers.store_tier_path(store_directory)
    if not settings_now(tiers.PMEM_ENV):
        tiers.private_directory(path.parent)
    return tiers.private_directory(path)


def _storable(value: object) -> bool:
    """Whether ``value`` is an attribute the tiers hold in a file: a plain, non-empty numpy array of
    fixed-size items (anything else, a subclass such as a masked array too, stays in DRAM)."""
    return type(value) in tiers.PLAIN_TYPES and value.size > 0 and not value.dtype.hasobject  # type: ignore[union-attr]


def _arrays(obj: Any) -> dict[str, np.ndarray]:
    state = getattr(obj, "__dict__", None) or {}
    return {
        k: v for k, v in state.items() if isinstance(v, np.ndarray) and v.size and not v.dtype.hasobject
    }  # subclasses too: place_state refuses them on a file tier


def file_name(stem: str, attr: str) -> str:
    """The tier file name of attribute ``attr``: ``<stem>-<attr>``, a character a file name may not hold
    written as ``.<hex code>.``, a long name as a hash of it (any attribute name gives a valid, distinct
    file name)."""
    safe = "".join(c if c.isascii() and (c.isalnum() or c == "_") else f".{ord(c):x}." for c in str(attr))
    name = f"{stem}-{safe}"
    if len(name) > 200:
        digest = hashlib.sha256(str(attr).encode("utf-8", "surrogatepass")).hexdigest()[:32]
        name = f"{stem}-h.{digest}"
    return name


def _unused(name: str, taken: set[str]) -> str:
    """``name``, or ``name+2``, ``name+3`` ... : the first not in ``taken``."""
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}+{n}"
    return candidate


def _same_array(value: np.ndarray) -> tuple[Any, ...]:
    """What makes two arrays the same array: their memory, shape, strides and dtype."""
    return (value.__array_interface__["data"][0], value.shape, value.strides, value.dtype.str)


def _check_arrays(arrays: dict[str, np.ndarray], tier: str) -> None:
    """A ``TierError`` before any file is made if an attribute cannot be a tier file: an array
    subclass, or two attributes that overlap without being the same array (a view of part of
    another: two files would split them). Attributes that are one array become one file."""
    for attr, value in arrays.items():
        tiers.check_plain(value, f"attribute {attr!r}", tier)
    firsts: dict[tuple[Any, ...], str] = {}
    for attr, value in arrays.items():
        firsts.setdefault(_same_array(value), attr)
    distinct = [(attr, arrays[attr]) for attr in firsts.values()]
    for i, (a, x) in enumerate(distinct):
        for b, y in distinct[i + 1 :]:
            if np.may_share_memory(x, y) and np.shares_memory(x, y):
                raise tiers.TierError(
                    f"attributes {a!r} and {b!r} overlap in memory (one is a view of part of the other): on the "
                    f"{tier} tier each array is a file of its own, which would split them. Give one its own "
                    f"copy (self.{b} = self.{b}.copy()), or keep the object on dram"
                )


def _file_handle(tier: str, name: str, directory: Path, cache: tiers.DramCache) -> tiers.TierArray:
    """The handle of the store's file ``name`` as file tier ``tier`` uses it (nothing read)."""
    kind = tiers.lookup(tier)
    assert isinstance(kind, tiers.FileTier), kind  # place_state and _keep_writes call this for file tiers only
    return kind.handle(name, directory, cache)


def _free(handle: tiers.TierArray) -> None:
    """Free a handle's file (or its device array)."""
    tiers.free(handle.name, handle.tier, directory=handle.directory)


def _free_unused(old: list[tiers.TierArray], kept: dict[str, tiers.TierArray]) -> None:
    """Free the files of ``old`` handles that no attribute in ``kept`` uses any more (a file is its
    name in its directory, whatever tier uses it; a device array has none: it and a file may share a name)."""
    names = {(h.directory, h.name) for h in kept.values()}
    for handle in old:
        if (handle.directory, handle.name) not in names:
            _free(handle)


def place_state(
    obj: Any, placement: Placement, tier: str, directory: Path, stem: str, cache: tiers.DramCache
) -> Placement:
    """Move ``obj``'s numpy attributes to ``tier`` (any but a ``staged`` one: ``dram``, ``mapped``, ``cached``
    or ``gpu``); the caller holds the object's exclusive lock. Returns the new placement; files the object
    no longer uses are freed.
    ``stem`` names the files: unique per object version *and* backend (two backends of one node
    holding replicas must never share a file: dropping one would delete the other's data).

    All or nothing: an attribute that cannot go on a file tier (see :func:`_check_arrays`) is refused
    before any file is made, and any failure on the way frees the files made so far and leaves the
    object as it was, on its old placement. Attributes that are one array stay one array (one file).
    On ``gpu`` the numeric attributes go to the device (others stay in DRAM); off ``gpu`` each device
    array comes back as one host copy first (counted)."""
    kind = tiers.lookup(tier)
    if kind.staged:
        raise tiers.TierError(f"the {tier} tier stages objects: the placing evicts them there, not place_state")
    if tier == placement.tier and kind.counts_transfers:
        return placement
    state = obj.__dict__
    before = {attr: state[attr] for attr in placement.arrays}
    if placement.kind.counts_transfers:
        state.update(_host_copies(placement))
    arrays = _arrays(obj)
    before.update({attr: state[attr] for attr in arrays if attr not in before})
    if kind.counts_transfers:
        return _to_device(obj, placement, tier, {a: v for a, v in arrays.items() if _numeric(v)}, stem, before)
    if kind.file_backed:
        _check_arrays(arrays, tier)
    old_names = {h.name for h in placement.handles}
    new = Placement(tier, stem=stem)
    made: list[str] = []
    try:
        for handle in placement.handles:  # cache copies are stale once the object changes tier
            tiers.forget_cached(handle.path)
        if not kind.file_backed:  # the arrays in process memory, as Python made them
            copies: dict[tuple[Any, ...], np.ndarray] = {}
            for attr, value in arrays.items():
                if any(h.is_mapping(value) for h in placement.handles):  # promoted: a DRAM copy of the mapping
                    key = _same_array(value)
                    if key not in copies:
                        copies[key] = np.array(value, copy=True)
                    state[attr] = copies[key]
            _free_unused(placement.handles, {})
            return new
        groups: dict[tuple[Any, ...], tiers.TierArray] = {}
        reused = {
            h.name: h for attr, v in arrays.items() if (h := placement.arrays.get(attr)) is not None and h.is_mapping(v)
        }
        taken = set(reused)
        for attr, value in arrays.items():
            key = _same_array(value)
            if key not in groups:
                old = placement.arrays.get(attr)
                if old is not None and old.name in reused and old.is_mapping(value):
                    name = old.name  # already this array's file
                    groups[key] = _file_handle(tier, name, directory, cache)
                else:  # not in a file yet: a new one
                    name = _unused(file_name(stem, attr), taken)
                    groups[key] = tiers.place(
                        name, value, tier, directory=directory, cache=cache, replace=True, owner=owners.this_process()
                    )
                    if name not in old_names:
                        made.append(name)
                taken.add(name)
            new.arrays[attr] = groups[key]
        for attr, handle in new.arrays.items():
            mapping = handle.mapping
            mapping.flags.writeable = False
            state[attr] = mapping
    except BaseException:
        state.update(before)
        for name in made:
            tiers.free(name, tier, directory=directory)  # DRAM cache copies of it dropped too
        raise
    _free_unused(placement.handles, new.arrays)
    return new


def _numeric(value: np.ndarray) -> bool:
    """Whether the gpu tier takes ``value`` (numbers of a fixed size; see :func:`gpu.check_numbers`)."""
    return value.dtype.kind in gpu.NUMBER_KINDS and value.dtype.fields is None


def _host_copies(placement: Placement) -> dict[str, np.ndarray]:
    """One host copy (counted) of each device array of a ``gpu`` placement, by attribute (attributes
    that are one device array get one host array)."""
    copies: dict[int, np.ndarray] = {}
    for handle in placement.handles:
        copies[id(handle)] = handle.array
    return {attr: copies[id(handle)] for attr, handle in placement.arrays.items()}


def _to_device(
    obj: Any, placement: Placement, tier: str, arrays: dict[str, np.ndarray], stem: str, before: dict[str, Any]
) -> Placement:
    """:func:`place_state` onto device tier ``tier`` (``gpu``): each distinct numeric array a device array
    named after its attribute; all or nothing (a full device frees what was placed and leaves the object
    as it was)."""
    state = obj.__dict__
    new = Placement(tier, stem=stem)
    made: list[str] = []
    try:
        _check_arrays(arrays, tier)
        groups: dict[tuple[Any, ...], tiers.TierArray] = {}
        taken = {h.name for h in placement.handles}
        for attr, value in arrays.items():
            key = _same_array(value)
            if key not in groups:
                name = _unused(file_name(stem, attr), taken)
                groups[key] = tiers.place(name, value, tier, replace=True)
                made.append(name)
                taken.add(name)
            new.arrays[attr] = groups[key]
        for attr, handle in new.arrays.items():
            state[attr] = handle.device  # type: ignore[attr-defined]
    except BaseException:
        state.update(before)
        for name in made:
            tiers.free(name, tier)
        raise
    _free_unused(placement.handles, new.arrays)
    return new


def on_host(obj: Any, placement: Placement) -> Any:
    """``obj`` as it may leave this process (pickled for a client, another backend or the disk): the
    object itself, or for a ``gpu`` placement a shallow copy whose device arrays are host copies
    (the bytes cross the bus here, counted in :attr:`gpu.DeviceMemory.transfers`)."""
    if not placement.kind.counts_transfers or not placement.arrays:
        return obj
    leaving = copy.copy(obj)
    leaving.__dict__.update(_host_copies(placement))
    return leaving


def release(placement: Placement) -> None:
    """Free the tier files of ``placement`` (views still held stay valid until dropped)."""
    for handle in placement.handles:
        _free(handle)
    placement.arrays.clear()


@contextmanager
def in_use(obj: Any, placement: Placement, writes: bool) -> Iterator[None]:
    """For one call: a ``cached`` object's attributes are its DRAM cache copies (hits or misses; one
    copy per file, so aliased attributes stay one array), pinned in the cache until the call ends,
    then its mappings again; a ``mapped`` object's mappings are used as they are. After a writing
    call the changes are made durable (``msync``, or written through from the cache); an attribute
    the method bound to a *new* array (``self.data = self.data * 2``) is written as a new version of
    its file (a file of its own if it shared one), so the change is kept whatever the tier; one
    bound to an array another attribute was given becomes an alias of it; one bound to anything
    else (``None``, a list) or deleted keeps that value, and its file is freed. A ``gpu`` object's
    attributes are its device arrays throughout; after a writing call see :func:`_keep_device_writes`."""
    given: dict[str, np.ndarray] = {}
    kind = placement.kind
    if kind.counts_transfers:
        given = {attr: obj.__dict__.get(attr) for attr in placement.arrays}
        try:
            yield
        finally:
            if writes:
                _keep_device_writes(obj, placement, given)
        return
    if kind.file_backed:
        state = obj.__dict__
        copies: dict[int, np.ndarray | None] = {}
        for attr, handle in placement.arrays.items():
            if id(handle) not in copies:
                copies[id(handle)] = handle.in_call(writes)  # a cached file's DRAM copy; None: the mapping
            copy = copies[id(handle)]
            if copy is not None:
                state[attr] = copy
            given[attr] = state[attr]
    try:
        yield
    finally:
        if kind.file_backed:
            _after_call(obj, placement, writes, given)


def _after_call(obj: Any, placement: Placement, writes: bool, given: dict[str, np.ndarray]) -> None:
    state = obj.__dict__
    if writes:
        _keep_writes(obj, placement, given)
    for attr, handle in placement.arrays.items():
        mapping = handle.mapping
        mapping.flags.writeable = False
        state[attr] = mapping


def _keep_writes(obj: Any, placement: Placement, given: dict[str, np.ndarray]) -> None:
    """After a writing call: ``placement.arrays`` made to match what the attributes hold now, each
    file durable, the files no attribute holds any more freed."""
    state = obj.__dict__
    old = placement.handles
    owner = {id(array): placement.arrays[attr] for attr, array in given.items()}  # given array -> its file
    kept: dict[str, tiers.TierArray] = {}
    rebound: dict[str, np.ndarray] = {}
    fresh: dict[int, list[str]] = {}  # new attributes (no file), by the array they hold
    for attr, value in state.items():
        if attr in placement.arrays or (isinstance(value, np.ndarray) and id(value) in owner):
            if not _storable(value):
                continue  # None, a list, a masked array ...: it stays what the method made it, in DRAM
            handle = owner.get(id(value))
            if handle is not None and any(value is a for a in given.values()):
                kept[attr] = handle  # still (or now) the array of one of the object's files
            elif attr in placement.arrays:
                rebound[attr] = value
        elif isinstance(value, np.ndarray):
            fresh.setdefault(id(value), []).append(attr)
    for handle in {id(h): h for h in kept.values()}.values():
        handle.sync()  # msync a mapping; write a cached copy through (then out of the cache)
    taken = {h.name for h in kept.values()}
    groups: dict[int, tiers.TierArray] = {}
    for attr, value in rebound.items():  # new arrays: their bytes become a file's new version
        if id(value) not in groups:
            previous = placement.arrays[attr]
            name = previous.name if previous.name not in taken else _unused(previous.name, taken)
            groups[id(value)] = tiers.place(
                name,
                value,
                placement.tier,
                directory=previous.directory,
                cache=previous.cache,
                replace=True,
                owner=owners.this_process(),
            )
            taken.add(name)
        kept[attr] = groups[id(value)]
        for alias in fresh.pop(id(value), ()):  # a new attribute bound to the same array stays its alias
            kept[alias] = groups[id(value)]
    placement.arrays.clear()
    placement.arrays.update(kept)
    _free_unused(old, kept)


def _keep_device_writes(obj: Any, placement: Placement, given: dict[str, Any]) -> None:
    """After a writing call on a ``gpu`` object: an attribute still holding its device array keeps it
    (a kernel changed it in place: nothing to do); one bound to another of the object's device arrays
    becomes its alias; one bound to a new device array (a kernel's result) or a new numeric host
    array keeps its name on the device (the host array copied in, counted), and so does a new
    attribute (the object is on the device: its numeric arrays are); anything else (``None``, a list,
    a string array) stays as the method left it, in DRAM. Device arrays no attribute holds any more
    are freed."""
    state = obj.__dict__
    owner = {id(array): placement.arrays[attr] for attr, array in given.items() if array is not None}
    kept: dict[str, tiers.TierArray] = {}
    taken = {h.name for h in placement.handles}
    made: dict[int, tiers.TierArray] = {}
    for attr, value in state.items():  # first the attributes that hold one of the object's device arrays
        if (handle := owner.get(id(value))) is not None:
            kept[attr] = handle
    for attr, value in list(state.items()):
        if attr in kept:
            continue
        if id(value) in made:
            kept[attr] = made[id(value)]
            continue
        previous = placement.arrays.get(attr)
        on_device = gpu.is_device_array(value)
        if not on_device and not (_storable(value) and _numeric(value)):
            continue  # stays what the method made it, in DRAM
        if previous is not None and previous.name not in {h.name for h in kept.values()}:
            name = previous.name
        else:
            name = _unused(file_name(placement.stem, attr), taken)
        taken.add(name)
        if on_device:
            handle = tiers.adopt(name, value, placement.tier)
        else:
            handle = tiers.place(name, value, placement.tier, replace=True)
            state[attr] = handle.device  # type: ignore[attr-defined]
        made[id(value)] = kept[attr] = handle
    old = placement.handles
    placement.arrays.clear()
    placement.arrays.update(kept)
    _free_unused(old, kept)


def cool(obj: Any, placement: Placement) -> list[tiers.Eviction]:
    """Make the object's files cold: out of the DRAM cache and the page cache. Each attribute is
    swapped for a fresh mapping of its file (mapping reads nothing: no page comes back until a call
    touches it) *before* the pages are evicted, so the old mapping goes with its last view and the
    attribute always holds its array (copies of the object hold its shared lock and cannot overlap
    this, which holds it exclusive; a view taken without the lock, ``local_object``, sees the old
    mapping or the new one, never a missing array). A mapping still held elsewhere keeps its pages:
    the eviction then says so."""
    evictions = []
    if not placement.kind.file_backed:
        return evictions  # device memory (or process memory) has no page cache to drop
    for handle in placement.handles:
        mapping = handle.remap()  # out of the DRAM cache, synced, mapped again (on failure the attribute keeps its own)
        mapping.flags.writeable = False
        for attr, h in placement.arrays.items():
            if h is handle:
                obj.__dict__[attr] = mapping
        evictions.append(tiers.evict_pages(handle.path))  # type: ignore[arg-type]
    return evictions
