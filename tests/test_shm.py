import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from shm_helpers import hang_in_fill, race, write_forever

import workbench
from workbench.memory import shm

ARRAYS = {
    "float64": np.random.default_rng(1).random((100, 7)),
    "structured": np.array([(1, 2.5, b"ab"), (3, 4.5, b"cd")], dtype=[("i", ">i4"), ("x", "<f8"), ("s", "S2")]),
    "fortran": np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    "empty": np.zeros((0, 5), np.float32),
    "big-endian": np.arange(10, dtype=">f8"),
    "scalar": np.array(3.5),
    "unicode": np.array(["ab", "cde"]),
    "complex": np.array([1 + 2j, 3 - 4j]),
    "bool-3d": np.random.default_rng(2).random((3, 4, 5)) > 0.5,
    "datetime64": np.array(["2026-11-22T10:00", "1970-01-01T00:00"], dtype="datetime64[m]"),
    "timedelta64": np.array([1, -2, 3], dtype="timedelta64[us]"),
    "bytes": np.array([b"x", b"yz"], dtype="S3"),
    "non-contiguous": np.arange(60.0).reshape(6, 10)[::2, 1::3],
    "big-endian-uint16": np.arange(7, dtype=">u2"),
    "record-of-arrays": np.zeros(3, dtype=[("xy", "<f4", (2,)), ("when", "M8[s]")]),
    "zero-size-3d": np.zeros((2, 0, 3)),
    "datetime64-ns-big-endian": np.array([0, 1, -1], dtype=">M8[ns]"),
    "datetime64-generic-nat": np.array(["NaT", "NaT"], dtype="M8"),
    "timedelta64-0d": np.array(5, dtype="m8[h]"),
    "float16": np.array([0.5, -2.0, np.inf], dtype=np.float16),
    "longdouble": np.array([1, 2, 3], dtype=np.longdouble) / 3,
    "clongdouble": np.array([1 + 1j, 2], dtype=np.clongdouble) / 3,
    "unicode-big-endian": np.array(["é€", "x"], dtype=">U3"),
    "void": np.array([b"\x00\x01\x02\x03"] * 2, dtype="V4"),
    "aligned-struct": np.array([(1, 2.0), (3, 4.0)], dtype=np.dtype([("a", "u1"), ("b", "<f8")], align=True)),
    "struct-with-gaps": np.zeros(
        2, dtype={"names": ["a", "b"], "formats": ["<i4", ">i4"], "offsets": [0, 8], "itemsize": 16}
    ),
    "struct-with-titles": np.zeros(2, dtype=[(("a title", "a"), "<i4")]),
    "nested-struct": np.array([((1.5, 2), 3)], dtype=[("p", [("x", ">f4"), ("y", "<i2")]), ("t", "m8[D]")]),
    "latin1-field-name": np.zeros(2, dtype=[("café", "<f8")]),
    "struct-0d": np.array((1, b"z"), dtype=[("i", "<i8"), ("s", "S1")]),
    "struct-zero-size": np.zeros((0, 2), dtype=[("i", "<i8")]),
    "fortran-3d": np.asfortranarray(np.arange(24, dtype=">i4").reshape(2, 3, 4)),
    "negative-strides": np.arange(10.0)[::-1],
    "fortran-struct": np.asfortranarray(np.zeros((3, 2), dtype=[("a", "<u2"), ("b", "?")])),
}


@pytest.fixture(params=["shm", "file"])
def where(request, tmp_path):
    """Both backings: /dev/shm (POSIX shared memory) and files in a directory."""
    return None if request.param == "shm" else tmp_path


@pytest.fixture
def name(request):
    """A unique segment name per test, deleted afterwards wherever it was made."""
    base = re.sub(r"[^A-Za-z0-9_.=+-]", "-", f"test-{os.getpid()}-{request.node.name}")[:150]
    yield base
    shm.delete_prefix(base)


@pytest.mark.parametrize("kind", list(ARRAYS))
def test_dtype_fidelity(kind, where, name):
    original = ARRAYS[kind]
    shared = shm.share(name, original, directory=where)
    again = shm.attach(name, directory=where)
    for view in (shared, again):
        assert view.dtype == original.dtype and view.shape == original.shape
        assert view.tobytes() == original.tobytes()  # exact: every bit, NaT and padding included
        assert not view.flags.writeable
        if original.ndim > 1 and original.size:
            assert view.flags.f_contiguous == original.flags.f_contiguous


def test_create_attach_writable_and_readonly(where, name):
    array = shm.create(name, (4, 3), np.int32, directory=where)
    assert array.flags.writeable and not array.any()
    array[1, 2] = 7
    reader = shm.attach(name, directory=where)
    assert reader[1, 2] == 7
    with pytest.raises(ValueError, match="read-only"):
        reader[0, 0] = 1
    shm.attach(name, directory=where, writable=True)[0, 0] = 5
    assert reader[0, 0] == 5  # one copy: every view sees every write
    with pytest.raises(FileExistsError, match="attach\\(\\) to it, or delete\\(\\) it first"):
        shm.create(name, (4, 3), np.int32, directory=where)


def test_views_outlive_delete_and_their_creator(where, name):
    view = shm.share(name, np.arange(1000.0), directory=where)
    assert shm.delete(name, directory=where)
    assert not shm.exists(name, directory=where)
    assert view.sum() == np.arange(1000.0).sum()  # the mapping belongs to the view: still valid
    del view


def test_populate_prefaults(name):
    view = shm.share(name, np.ones(1 << 20), populate=True)
    assert view.sum() == 1 << 20


def test_bad_requests_are_clear(where, name):
    with pytest.raises(TypeError, match="Python object pointers"):
        shm.share(name, np.array([object(), 1]), directory=where)
    with pytest.raises(ValueError, match="segment name must be"):
        shm.create("has/slash", 3, directory=where)
    with pytest.raises(ValueError, match="negative"):
        shm.create(name, (-1, 2), directory=where)
    shm.share(name, np.zeros(3), directory=where)
    with pytest.raises(FileNotFoundError, match="did you mean"):
        shm.attach(name + "x", directory=where)
    with pytest.raises(shm.SharedMemoryError, match="exists with shape \\(3,\\)"):
        shm.attach_or_create(name, (4,), np.float64, lambda out: None, directory=where)
    with pytest.raises(shm.SharedMemoryError, match="directory .* does not exist"):
        shm.create(name, 3, directory="/nonexistent/dir")


def test_sixteen_processes_race_and_one_writes(tmp_path, name):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(16) as pool:
        outcomes = pool.starmap(race, [(name, str(tmp_path))] * 16, chunksize=1)
    assert len({pid for pid, _, _ in outcomes}) == 16
    assert sum(created for _, created, _ in outcomes) == 1  # exactly one writer
    expected = float(np.arange(10_000, dtype=np.float64).sum())
    assert {total for _, _, total in outcomes} == {expected}
    assert [p.name for p in tmp_path.iterdir()] == [f"{shm.PREFIX}{name}"]  # no partial, no lock left


def test_writer_killed_mid_write_is_taken_over_and_cleaned(tmp_path, name):
    ready = tmp_path / "ready"
    child = multiprocessing.get_context("spawn").Process(target=hang_in_fill, args=(name, str(tmp_path), str(ready)))
    child.start()
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert time.monotonic() < deadline, "the child never started writing"
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.join(timeout=30)
    states = {i.state for i in shm.list_segments(tmp_path)}
    assert states == {"partial", "lock"}  # the dead writer could not tidy up
    view, created = shm.attach_or_create(
        name, (100,), np.float64, lambda out: out.fill(2.0), directory=tmp_path, timeout=10
    )
    assert created and view.sum() == 200.0  # the kernel released the dead writer's lock
    removed = shm.clean(tmp_path)
    assert any(shm.PARTIAL_SUFFIX in r for r in removed)
    assert {i.state for i in shm.list_segments(tmp_path)} == {"complete"}


def test_worker_killed_while_attached_leaves_nothing_clean_cannot_remove(name):
    with workbench.start(n_workers=1, timeout=60) as session:
        ready = Path(f"/tmp/{name}.ready")
        ready.unlink(missing_ok=True)
        session.client.submit(write_forever, name, None, str(ready), pure=False)
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert time.monotonic() < deadline, "the task never shared its array"
            time.sleep(0.05)
        (pid,) = session.run(os.getpid).values()
        segment = next(i for i in shm.list_segments() if i.name == name)
        assert pid in segment.mapped_by
        os.kill(pid, signal.SIGKILL)
        ready.unlink()
    leftovers = [i.name for i in shm.list_segments() if i.name.startswith(name)]
    assert leftovers == [name]  # a complete segment nobody maps any more
    result = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "shm", "clean", "--all", "--prefix", name],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and f"removed {name}" in result.stdout
    assert not [i for i in shm.list_segments() if i.name.startswith(name)]


def test_shm_list_command_shows_owner_and_size(name):
    view = shm.share(name, np.zeros((512, 512)))
    result = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "shm", "list"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0
    line = next(line for line in result.stdout.splitlines() if line.startswith(name))
    assert "complete" in line and "2.00 MiB" in line and str(os.getpid()) in line
    del view


def test_small_dev_shm_gives_a_clear_error(name, monkeypatch):
    monkeypatch.setattr(shm, "free_bytes", lambda directory=None: 64 * 2**20)
    with pytest.raises(shm.SharedMemoryError) as info:
        shm.create(name, (100, 2**20), np.float64)  # 800 MiB
    text = str(info.value)
    assert "800 MiB does not fit" in text and "64 MiB free" in text and "--shm-size" in text
    assert not shm.exists(name)


def test_a_really_full_tmpfs_fails_cleanly(tmp_path, name):
    mount = tmp_path / "small-shm"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("mounting a 1 MiB tmpfs needs root: run as root to test a really full /dev/shm")
    try:
        shm.share(name + "-a", np.zeros(100_000), directory=mount)  # 0.8 MB of 1 MB
        with pytest.raises(shm.SharedMemoryError, match="does not fit|no space"):
            shm.share(name + "-b", np.zeros(100_000), directory=mount)
        assert sorted(p.name for p in mount.iterdir()) == [f"{shm.PREFIX}{name}-a"]  # no partial left
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_mapping_limit_is_known():
    used, limit = shm.mapping_limit()
    assert 0 < used < limit


# -- every fixed-size dtype round-trips; anything else is refused up front -------------------------
@pytest.mark.parametrize(
    "dtype, shape, stored_shape",
    [
        ("<f8", (3, 2), (3, 2)),
        (">M8[ms]", (4,), (4,)),
        ("m8[D]", (), ()),
        ("U5", (2,), (2,)),
        ([("x", "<f4", (2,)), ("y", ">i2")], (3,), (3,)),
        ("(2,)f8", (3,), (3, 2)),  # a subarray dtype's dimensions join the shape, as numpy does
        ((("<i2", (2,)), (3,)), (4,), (4, 3, 2)),
    ],
)
def test_create_takes_every_fixed_size_dtype(tmp_path, dtype, shape, stored_shape):
    made = shm.create("made", shape, dtype, directory=tmp_path)
    again = shm.attach("made", directory=tmp_path)
    expected = np.zeros(shape, dtype)
    for view in (made, again):
        assert view.shape == stored_shape and view.dtype == expected.dtype
        assert view.tobytes() == expected.tobytes()
    view, created = shm.attach_or_create("made", shape, dtype, None, directory=tmp_path)
    assert not created and view.shape == stored_shape


REFUSED_DTYPES = {
    "object": (np.dtype(object), "object pointers"),
    "struct-with-object": (np.dtype([("a", "<i8"), ("b", object)]), "object pointers"),
    "subarray-of-objects": (np.dtype([("s", object, (2,))]), "object pointers"),
    "variable-width-string": (np.dtypes.StringDType(), "pointers"),
    "overlapping-fields": (
        np.dtype({"names": ["a", "b"], "formats": ["<i4", "<i4"], "offsets": [0, 0]}),
        "cannot be described",
    ),
    "union": (np.dtype(("<i4", [("lo", "<i2"), ("hi", "<i2")])), "would come back"),
    "non-latin1-field-names": (np.dtype([("名前", "<f8")]), "Latin-1"),
    "header-too-long": (np.dtype([(f"field_with_a_long_name_{i:04d}", "<f8") for i in range(400)]), "header"),
    "no-bytes": (np.dtype([]), "holds no bytes"),
}


@pytest.mark.parametrize("kind", list(REFUSED_DTYPES))
def test_dtypes_that_cannot_round_trip_are_refused_and_leave_nothing(tmp_path, kind):
    dtype, message = REFUSED_DTYPES[kind]
    with pytest.raises((TypeError, ValueError), match=message):
        shm.create("refused", 2, dtype, directory=tmp_path)
    with pytest.raises((TypeError, ValueError), match=message):
        shm.share("refused", np.zeros(2, dtype=dtype), directory=tmp_path)
    assert list(tmp_path.iterdir()) == []


def _record(fields: int) -> np.dtype:
    return np.dtype([(f"f{i:04d}", "<f8") for i in range(fields)])


def test_the_longest_header_allowed_is_still_readable_by_numpy_load(tmp_path):
    fields = 1
    while True:  # grow the record to the largest header the workbench accepts
        try:
            shm._header((2,), _record(fields + 1), False)
        except ValueError as error:
            assert "header" in str(error) and "fields)" in str(error)  # a short message, not 450 fields
            break
        fields += 1
    assert len(shm._header((2,), _record(fields), False)) == 8192  # two pages
    data = np.arange(2 * fields, dtype="<f8").view(_record(fields))
    shm.share("wide", data, directory=tmp_path)
    loaded = np.load(tmp_path / f"{shm.PREFIX}wide", mmap_mode="r")  # numpy's own reader, its default limits
    assert loaded.dtype == data.dtype and loaded.tobytes() == data.tobytes()
    del loaded
    with pytest.raises(ValueError, match="header"):
        shm.create("wider", 2, _record(fields + 1), directory=tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [f"{shm.PREFIX}wide"]


# -- a failed create or share leaves nothing behind ------------------------------------------------
def _raise_in_fill(out):
    raise RuntimeError("the fill failed")


def _no_mapping_slot():
    raise shm.SharedMemoryError("no mapping slot (simulated)")


FAILURES = {
    "fill-raises": (
        lambda d: shm.attach_or_create("f", (4,), np.float64, _raise_in_fill, directory=d),
        RuntimeError,
        "fill failed",
    ),
    "fill-of-wrong-shape": (
        lambda d: shm.attach_or_create("f", (4,), np.float64, np.zeros(5), directory=d),
        ValueError,
        "fill array has shape",
    ),
    "fill-of-wrong-dtype": (
        lambda d: shm.attach_or_create("f", (4,), np.float64, np.zeros(4, np.float32), directory=d),
        ValueError,
        "dtype float32",
    ),
    "fill-in-wrong-order": (
        lambda d: shm.attach_or_create("f", (3, 4), np.float64, np.zeros((3, 4), order="F"), directory=d),
        ValueError,
        "C-contiguous",
    ),
    "fill-not-an-array": (
        lambda d: shm.attach_or_create("f", (4,), np.float64, [1, 2, 3, 4], directory=d),
        TypeError,
        "fill must be",
    ),
    "bad-timeout": (lambda d: shm.share("f", np.zeros(3), directory=d, timeout=float("nan")), ValueError, "timeout"),
    "float-shape": (lambda d: shm.create("f", (2.5,), directory=d), TypeError, "shape must be"),
    "bad-order": (lambda d: shm.create("f", 3, order="K", directory=d), ValueError, "order"),
    "not-a-dtype": (lambda d: shm.create("f", 3, "nonsense", directory=d), TypeError, "not a numpy dtype"),
    "too-many-elements": (lambda d: shm.create("f", (2**40, 2**40), np.uint8, directory=d), ValueError, "more bytes"),
    "too-many-bytes": (lambda d: shm.create("f", (2**61,), np.float64, directory=d), ValueError, "more bytes"),
    "huge-beside-a-zero": (lambda d: shm.create("f", (0, 2**62), np.float64, directory=d), ValueError, "more bytes"),
    "65-dimensions": (lambda d: shm.create("f", (1,) * 65, directory=d), ValueError, "65 dimensions"),
    "no-space": (lambda d: shm.create("f", (2**20,), directory=d), shm.SharedMemoryError, "does not fit"),
}


@pytest.mark.parametrize("kind", list(FAILURES))
def test_a_failed_create_leaves_no_file(tmp_path, monkeypatch, kind):
    monkeypatch.setattr(shm, "free_bytes", lambda directory=None: 2**20)  # 1 MiB: "no-space" asks for 8
    call, error, message = FAILURES[kind]
    with pytest.raises(error, match=message):
        call(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_segment_that_cannot_be_mapped_after_writing_is_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(shm, "_require_mapping_slot", _no_mapping_slot)
    with pytest.raises(shm.SharedMemoryError, match="simulated"):
        shm.create("c", 3, directory=tmp_path)
    with pytest.raises(shm.SharedMemoryError, match="simulated"):
        shm.share("s", np.arange(3.0), directory=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_stale_partial_file_with_our_pid_is_replaced(tmp_path):
    stale = tmp_path / f"{shm.PREFIX}p{shm.PARTIAL_SUFFIX}{os.getpid()}"  # an earlier process with our pid died
    stale.write_bytes(b"half-written")
    view = shm.share("p", np.arange(4.0), directory=tmp_path)
    assert view.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert [p.name for p in tmp_path.iterdir()] == [f"{shm.PREFIX}p"]


KEEP_THE_VIEW = """
import numpy as np, sys
from workbench.memory import shm
kept = []
def fill(out):
    out[:] = 7.0
    kept.extend([out, out[1:]])  # the view, and a slice of it (whose base is the mapping itself)
made, created = shm.attach_or_create("kept", (4,), np.float64, fill, directory=sys.argv[1])
kept[0][0] = 1.0  # a view closed under it would crash here (SIGSEGV)
kept[1][-1] = 2.0
print(made.tolist(), shm.attach("kept", directory=sys.argv[1]).tolist())
"""


def test_a_fill_that_keeps_its_view_still_has_valid_memory(tmp_path):
    # in a child process: if the mapping were closed under the kept view, the crash must not take pytest down
    result = subprocess.run(
        [sys.executable, "-c", KEEP_THE_VIEW, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr}"
    assert result.stdout.split() == ["[1.0,", "7.0,", "7.0,", "2.0]"] * 2  # the kept view writes into the segment
    assert [p.name for p in tmp_path.iterdir()] == [f"{shm.PREFIX}kept"]


# -- untrusted files in the segment directory ---------------------------------------------------
def _plant(tmp_path, name: str, array: np.ndarray) -> Path:
    """A file a stranger could write: a valid .npy header of the workbench's layout, then the bytes."""
    path = tmp_path / f"{shm.PREFIX}{name}"
    path.write_bytes(shm._header(array.shape, array.dtype, False) + array.tobytes())
    return path


def _plant_header(tmp_path, name: str, text: str, data: bytes = b"\0" * 64, version: bytes = b"\x02\x00") -> Path:
    """A file with any header text, padded like the workbench's (data on a page boundary)."""
    body = text.encode("latin1").ljust(4096 - 12 - 1) + b"\n"
    path = tmp_path / f"{shm.PREFIX}{name}"
    path.write_bytes(b"\x93NUMPY" + version + len(body).to_bytes(4, "little") + body + data)
    return path


def _header_text(descr: str, shape: str, fortran: str = "False") -> str:
    return f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, }}"


PLANTED = {
    "object": (_header_text("'|O'", "(8,)"), "object pointers"),
    "struct-with-object": (_header_text("[('a', '<i8'), ('b', '|O')]", "(4,)"), "object pointers"),
    "subarray-of-objects": (_header_text("[('s', '|O', (2,))]", "(4,)"), "object pointers"),
    "variable-width-string": (_header_text("'T'", "(4,)"), "pointers"),
    "subarray-dtype": (_header_text("('<f8', (2,))", "(4,)"), "subarray dtype"),
    "no-bytes-huge-shape": (_header_text("[]", "(4611686018427387904, 4611686018427387904)"), "holds no bytes"),
    "too-many-elements": (_header_text("'|u1'", "(4611686018427387904, 4611686018427387904)"), "more bytes"),
    "huge-beside-a-zero": (_header_text("'<f8'", "(0, 4611686018427387904)"), "more bytes"),
    "huger-beside-a-zero": (_header_text("'|u1'", "(0, 1208925819614629174706176)"), "more bytes"),
    "fortran-not-a-bool": (_header_text("'<f8'", "(4,)", fortran="1"), "cannot be read"),
    "shape-not-a-tuple": (_header_text("'<f8'", "[4]"), "cannot be read"),
    "65-dimensions": (_header_text("'|u1'", "(" + "1, " * 65 + ")"), "65 dimensions"),
    "negative-size": (_header_text("'<f8'", "(-4,)"), "negative"),
    "lying-size": (_header_text("'<f8'", "(100000,)"), "truncated"),
    "code-not-data": (_header_text("__import__('os').getcwd()", "(4,)"), "cannot be read"),
    "deep-nesting": (_header_text("[" * 1900 + "]" * 1900, "(4,)"), "cannot be read"),
    "not-a-dict": ("[1, 2, 3]", "cannot be read"),
}


@pytest.mark.parametrize("kind", list(PLANTED))
def test_a_planted_header_is_refused_and_never_mapped(tmp_path, kind):
    text, message = PLANTED[kind]
    path = _plant_header(tmp_path, "planted", text)
    before = path.read_bytes()
    for writable in (False, True):
        with pytest.raises(shm.SharedMemoryError, match=message):
            shm.attach("planted", directory=tmp_path, writable=writable)
    with pytest.raises(shm.SharedMemoryError, match=message):
        shm.attach_or_create("planted", 8, np.float64, None, directory=tmp_path)
    assert [(i.name, i.state) for i in shm.list_segments(tmp_path)] == [("planted", "unreadable")]
    assert shm.clean(tmp_path) == []  # not a helper file: kept without --all
    assert [p.name for p in tmp_path.iterdir()] == [path.name] and path.read_bytes() == before


def test_headers_the_workbench_does_not_write_are_refused(tmp_path):
    _plant_header(tmp_path, "v1", _header_text("'<f8'", "(4,)"), version=b"\x01\x00")
    _plant_header(tmp_path, "v3", _header_text("'<f8'", "(4,)"), version=b"\x03\x00")
    huge = tmp_path / f"{shm.PREFIX}huge-length"  # a length field of 4 GiB: refused before anything is read
    huge.write_bytes(b"\x93NUMPY\x02\x00" + (0xFFFFF000 - 12).to_bytes(4, "little") + b"{" * 100)
    (tmp_path / f"{shm.PREFIX}empty").write_bytes(b"")
    (tmp_path / f"{shm.PREFIX}garbage").write_bytes(b"\x93NUMPY garbage" * 10)
    np.save(tmp_path / f"{shm.PREFIX}saved", np.zeros(3), allow_pickle=False)  # numpy's default: version 1.0
    os.rename(tmp_path / f"{shm.PREFIX}saved.npy", tmp_path / f"{shm.PREFIX}saved")
    with open(tmp_path / f"{shm.PREFIX}plain", "wb") as plain:  # version 2.0, but numpy's 64-byte alignment
        np.lib.format.write_array(plain, np.zeros(3), version=(2, 0))
    for name, message in [
        ("v1", "version is 1.0"),
        ("v3", "version is 3.0"),
        ("huge-length", "page boundary"),
        ("empty", "does not start"),
        ("garbage", "version"),
        ("saved", "version is 1.0"),
        ("plain", "page boundary"),
    ]:
        with pytest.raises(shm.SharedMemoryError, match=message):
            shm.attach(name, directory=tmp_path)
    assert {i.state for i in shm.list_segments(tmp_path)} == {"unreadable"}


def test_a_truncated_segment_is_refused_before_mapping(tmp_path):
    path = _plant(tmp_path, "short", np.zeros(1000))
    os.truncate(path, path.stat().st_size - 8)  # one element short: reading the last page would SIGBUS
    with pytest.raises(shm.SharedMemoryError, match="truncated"):
        shm.attach("short", directory=tmp_path)


def test_symlinks_are_never_followed_nor_their_targets_removed(tmp_path):
    target_dir = tmp_path / "elsewhere"
    target_dir.mkdir()
    target = target_dir / "precious"
    target.write_bytes(shm._header((3,), np.dtype(np.float64), False) + np.ones(3).tobytes())
    before = target.read_bytes()
    segments = tmp_path / "segments"
    segments.mkdir()
    (segments / f"{shm.PREFIX}link").symlink_to(target)
    (segments / f"{shm.PREFIX}dangling").symlink_to(target_dir / "nothing")
    (segments / f"{shm.PREFIX}lock-link{shm.LOCK_SUFFIX}").symlink_to(target)
    (segments / f"{shm.PREFIX}part-link{shm.PARTIAL_SUFFIX}{os.getpid()}").symlink_to(target)
    for name in ("link", "dangling"):
        for writable in (False, True):
            with pytest.raises(shm.SharedMemoryError, match="symbolic link"):
                shm.attach(name, directory=segments, writable=writable)
        with pytest.raises(shm.SharedMemoryError, match="symbolic link"):
            shm.share(name, np.zeros(3), directory=segments)
        assert shm.exists(name, directory=segments)  # the name is taken
    with pytest.raises(shm.SharedMemoryError, match="symbolic link"):
        shm.create("lock-link", 3, directory=segments)  # its lock file is a planted link
    with pytest.raises(shm.SharedMemoryError, match="symbolic link"):
        shm.create("part-link", 3, directory=segments)  # its partial file is a planted link
    states = {i.name: i.state for i in shm.list_segments(segments)}
    assert set(states.values()) == {"foreign"} and len(states) == 4
    assert shm.clean(segments, everything=True) == []
    assert shm.delete_prefix("l", directory=segments) == []
    assert len(list(segments.iterdir())) == 4 and target.read_bytes() == before
    assert shm.delete("link", directory=segments)  # by name: the link goes, its target stays
    assert target.read_bytes() == before and sorted(p.name for p in target_dir.iterdir()) == ["precious"]


@pytest.mark.timeout(120)  # a FIFO opened for reading without O_NONBLOCK would block here forever
def test_a_fifo_or_directory_in_place_of_a_segment_is_refused_without_hanging(tmp_path):
    os.mkfifo(tmp_path / f"{shm.PREFIX}fifo")
    (tmp_path / f"{shm.PREFIX}dir").mkdir()
    os.mkfifo(tmp_path / f"{shm.PREFIX}fifo-lock{shm.LOCK_SUFFIX}")
    (tmp_path / f"{shm.PREFIX}dir-lock{shm.LOCK_SUFFIX}").mkdir()
    for name, message in [("fifo", "not a regular file"), ("dir", "directory|not a regular file")]:
        for writable in (False, True):
            with pytest.raises(shm.SharedMemoryError, match=message):
                shm.attach(name, directory=tmp_path, writable=writable)
    for name, message in [("fifo-lock", "not a regular file"), ("dir-lock", "directory")]:
        with pytest.raises(shm.SharedMemoryError, match=message):
            shm.create(name, 3, directory=tmp_path)
    assert {i.state for i in shm.list_segments(tmp_path)} == {"foreign"}
    assert shm.clean(tmp_path, everything=True) == []
    with pytest.raises(shm.SharedMemoryError, match="is a directory, not a shared array"):
        shm.delete("dir", directory=tmp_path)
    assert len(list(tmp_path.iterdir())) == 4


def test_files_of_another_user_are_refused(tmp_path):
    if os.getuid() != 0:
        pytest.skip("changing a file's owner needs root")
    path = _plant(tmp_path, "theirs", np.zeros(4))
    lock = _plant(tmp_path, f"their-lock{shm.LOCK_SUFFIX}", np.zeros(1))
    partial = _plant(tmp_path, f"their-part{shm.PARTIAL_SUFFIX}{os.getpid()}", np.zeros(1))
    for planted in (path, lock, partial):
        os.chown(planted, 12345, 12345)
    with pytest.raises(shm.SharedMemoryError, match="belongs to user 12345.*ask its owner"):
        shm.attach("theirs", directory=tmp_path)
    with pytest.raises(shm.SharedMemoryError, match="belongs to user 12345"):
        shm.create("their-lock", 3, directory=tmp_path)  # its lock file is someone else's
    with pytest.raises(shm.SharedMemoryError, match="belongs to user 12345"):
        shm.create("their-part", 3, directory=tmp_path)  # its partial file (this pid's) is someone else's
    assert [i.state for i in shm.list_segments(tmp_path)] == ["foreign"] * 3
    assert shm.clean(tmp_path, everything=True) == []
    assert shm.delete_prefix("the", directory=tmp_path) == []
    assert sorted(tmp_path.iterdir()) == sorted([path, lock, partial])  # and no lock of "their-part" left


def test_files_of_another_user_are_refused_as_any_user(tmp_path, monkeypatch):
    path = _plant(tmp_path, "theirs", np.zeros(4))
    lock = _plant(tmp_path, f"their-lock{shm.LOCK_SUFFIX}", np.zeros(1))
    monkeypatch.setattr(shm, "_this_user", lambda: os.geteuid() + 1)  # every file here is now another user's
    with pytest.raises(shm.SharedMemoryError, match=f"belongs to user {os.geteuid()}, not to this user"):
        shm.attach("theirs", directory=tmp_path)
    with pytest.raises(shm.SharedMemoryError, match="belongs to user"):
        shm.create("their-lock", 3, directory=tmp_path)
    assert {i.state for i in shm.list_segments(tmp_path)} == {"foreign"}
    assert shm.clean(tmp_path, everything=True) == []
    assert shm.delete_prefix("the", directory=tmp_path) == []
    # a directory that gives new files another owner (a root-squashed mount): the new lock file is removed again
    with pytest.raises(shm.SharedMemoryError, match="has just created it"):
        shm.share("fresh", np.zeros(3), directory=tmp_path)
    assert sorted(tmp_path.iterdir()) == sorted([path, lock])


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_a_segment_other_users_may_write_is_refused(tmp_path, mode):
    path = _plant(tmp_path, "open", np.arange(4.0))  # they could truncate it under the mapping: SIGBUS
    path.chmod(mode)
    for writable in (False, True):
        with pytest.raises(shm.SharedMemoryError, match="writable by other users.*chmod go-w"):
            shm.attach("open", directory=tmp_path, writable=writable)
    path.chmod(0o600)
    assert shm.attach("open", directory=tmp_path).tolist() == [0.0, 1.0, 2.0, 3.0]


def _plant_name(directory: Path, raw_name: bytes) -> None:
    fd = os.open(os.fsencode(directory) + b"/" + raw_name, os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)


def test_planted_names_neither_crash_nor_fool_list_and_clean(tmp_path):
    shm.share("ok", np.zeros(2), directory=tmp_path)
    prefix = shm.PREFIX.encode()
    planted = [
        prefix + b"abc\n",
        prefix + b"x~lock\n",
        prefix + b"\xff\xfe",
        prefix + b"\x1b[31mred",
        prefix,
        prefix + b"a~partial-0",
        prefix + b"a~partial-99999999999",
        prefix + b"a~b",
        prefix + b"sp ace~lock",
    ]
    for raw in planted:
        _plant_name(tmp_path, raw)
    _plant_name(tmp_path, prefix + b"gone~partial-9999999999")  # a valid partial name: its writer id cannot exist
    _plant_name(tmp_path, f"{shm.FAMILY_PREFIX}{os.geteuid() + 1}-theirs".encode())  # another user's: not even listed
    states = {i.name: i.state for i in shm.list_segments(tmp_path)}
    assert states.pop("ok") == "complete" and states.pop("gone~partial-9999999999") == "partial"
    assert set(states.values()) == {"foreign"} and len(states) == len(planted)
    assert all(name.isprintable() and name.isascii() for name in states)  # escaped: safe to print
    assert sorted(shm.clean(tmp_path, everything=True)) == ["gone~partial-9999999999", "ok"]
    assert len(list(tmp_path.iterdir())) == len(planted) + 1  # the other user's file too
    for action in ("list", "clean"):
        result = subprocess.run(
            [sys.executable, "-m", "workbench.cli", "shm", action, "--dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
    assert "abc\\n" in result.stdout or "nothing to remove" in result.stdout
    assert len(list(tmp_path.iterdir())) == len(planted) + 1


@pytest.mark.parametrize(
    "bad",
    [
        "abc\n",
        "a\nb",
        "tab\t",
        "cr\r",
        "\x1b[31m",
        "nul\x00",
        "tilde~lock",
        "x~partial-12",
        "a~b",
        "",
        "a" * 201,
        "spa ce",
        "é",
        "sl/ash",
        "\u2028",
    ],
)
def test_names_are_checked_whole(tmp_path, bad):
    with pytest.raises(ValueError, match="segment name"):
        shm.create(bad, 3, directory=tmp_path)
    with pytest.raises(ValueError, match="segment name"):
        shm.share(bad, np.zeros(3), directory=tmp_path)
    with pytest.raises(ValueError, match="segment name"):
        shm.attach(bad, directory=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_names_must_be_strings(tmp_path):
    for bad in (None, b"bytes", 3):
        with pytest.raises(TypeError, match="segment name must be a str"):
            shm.create(bad, 3, directory=tmp_path)
    for bad in ("", "*", "a/b", "x\n"):
        with pytest.raises(ValueError, match="prefix"):
            shm.delete_prefix(bad, directory=tmp_path)


def test_segment_names_that_look_like_helper_files_are_ordinary_segments(tmp_path):
    keep = {
        n: shm.share(n, np.arange(3.0), directory=tmp_path) for n in ("keep.lock", "keep.partial-4000000", "y.lock")
    }
    shm.create("y", 2, directory=tmp_path)  # must not remove segment "y.lock"
    del keep
    assert shm.clean(tmp_path) == []  # complete segments are kept: none is taken for a lock or partial file
    assert {i.name: i.state for i in shm.list_segments(tmp_path)} == {
        "keep.lock": "complete",
        "keep.partial-4000000": "complete",
        "y": "complete",
        "y.lock": "complete",
    }
    shm.delete("y", directory=tmp_path)
    assert shm.attach("y.lock", directory=tmp_path).tolist() == [0.0, 1.0, 2.0]


def test_delete_prefix_removes_a_sessions_files_only(tmp_path):
    shm.share("run1-a", np.zeros(2), directory=tmp_path)
    shm.share("run1-b", np.zeros(2), directory=tmp_path)
    shm.share("run2-a", np.zeros(2), directory=tmp_path)
    (tmp_path / f"{shm.PREFIX}run1-c{shm.LOCK_SUFFIX}").write_bytes(b"")
    assert sorted(shm.delete_prefix("run1-", directory=tmp_path)) == ["run1-a", "run1-b", f"run1-c{shm.LOCK_SUFFIX}"]
    assert [p.name for p in tmp_path.iterdir()] == [f"{shm.PREFIX}run2-a"]


def test_a_lock_a_writer_holds_is_never_removed(tmp_path):
    lock = tmp_path / f"{shm.PREFIX}busy{shm.LOCK_SUFFIX}"
    with shm._writer_lock(tmp_path / f"{shm.PREFIX}busy", timeout=10):
        assert lock.exists()
        assert not shm.delete("busy", directory=tmp_path)
        assert shm.delete_prefix("bu", directory=tmp_path) == []
        assert not shm._remove_free_lock(lock)
        assert lock.exists()  # removed, it would let a second writer start beside this one
        with pytest.raises(TimeoutError, match="still writing"):
            shm.attach_or_create("busy", 3, np.float64, None, directory=tmp_path, timeout=0)
    assert list(tmp_path.iterdir()) == []  # the holder removed it on leaving
    for remove in (
        lambda: shm.delete("busy", directory=tmp_path),
        lambda: shm.delete_prefix("bu", directory=tmp_path),
        lambda: shm.clean(tmp_path),
    ):
        lock.write_bytes(b"")  # a lock file nobody holds: a dead writer's
        remove()
        assert list(tmp_path.iterdir()) == []


def test_a_file_in_place_of_the_directory_says_so(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    with pytest.raises(shm.SharedMemoryError, match="is not a directory"):
        shm.list_segments(a_file)
    with pytest.raises(shm.SharedMemoryError, match="is not a directory"):
        shm.create("x", 3, directory=a_file)
    with pytest.raises(shm.SharedMemoryError, match="does not exist"):
        shm.list_segments(tmp_path / "missing")
    result = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "shm", "list", "--dir", str(a_file)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "is not a directory" in result.stderr and "does not exist" not in result.stderr
    assert a_file.read_text() == "x"


def test_a_header_parse_that_meets_another_threads_ast_build_is_retried(tmp_path, monkeypatch):
    """CPython 3.11 (gh-106905): ast.literal_eval fails spuriously while another thread builds an AST."""
    shm.share("race", np.arange(3.0), directory=tmp_path)
    np.save(tmp_path / "plain.npy", np.arange(4.0))
    real = shm.npy.read_array_header_2_0
    clash = SystemError("AST constructor recursion depth mismatch (before=69, after=95)")
    calls = []

    def clashing_once(stream, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise clash
        return real(stream, *args, **kwargs)

    monkeypatch.setattr(shm.npy, "read_array_header_2_0", clashing_once)
    view = shm.attach("race", directory=tmp_path)
    assert view.tolist() == [0.0, 1.0, 2.0] and len(calls) == 2
    del view
    real_load = np.load
    loads = []

    def load_clashing_once(*args, **kwargs):
        loads.append(1)
        if len(loads) == 1:
            raise clash
        return real_load(*args, **kwargs)

    monkeypatch.setattr(shm.np, "load", load_clashing_once)
    assert shm.load_npy(tmp_path / "plain.npy").tolist() == [0.0, 1.0, 2.0, 3.0] and len(loads) == 2

    def always(stream, *args, **kwargs):
        raise SystemError("something else entirely")

    monkeypatch.setattr(shm.npy, "read_array_header_2_0", always)  # any other SystemError is reported
    with pytest.raises(shm.SharedMemoryError, match="header cannot be read .SystemError: something else"):
        shm.attach("race", directory=tmp_path)
    assert shm.delete("race", directory=tmp_path)


def test_clean_removes_a_dead_groups_mailboxes_and_keeps_other_unused_segments(tmp_path):
    # A channel mailbox (``ch-``) never outlives the rank that made it: once nothing maps it, it is
    # left over from a killed worker, and clean removes it without everything=True.
    for name in ("ch-gdead-0-r1", "kept-data"):
        view = shm.create(name, 16, np.uint8, directory=tmp_path)
        del view  # unmapped: as after its process died
    assert shm.clean(tmp_path) == ["ch-gdead-0-r1"]
    assert [s.name for s in shm.list_segments(tmp_path)] == ["kept-data"]
    mapped = shm.create("ch-glive-0-r0", 16, np.uint8, directory=tmp_path)  # a running group's: mapped
    assert shm.clean(tmp_path) == []
    del mapped
    shm.delete("kept-data", directory=tmp_path)
    assert shm.clean(tmp_path) == ["ch-glive-0-r0"]


def test_names_carry_the_user_so_learners_sharing_a_machine_never_meet(tmp_path):
    assert shm.PREFIX == f"lwb-{os.geteuid()}-"
    theirs = tmp_path / f"{shm.FAMILY_PREFIX}{os.geteuid() + 1}-lesson02-readings"  # the same name, another user
    theirs.write_bytes(b"not ours")
    view = shm.share("lesson02-readings", np.arange(3.0), directory=tmp_path)  # no collision
    assert view.tolist() == [0.0, 1.0, 2.0]
    assert [i.name for i in shm.list_segments(tmp_path)] == ["lesson02-readings"]  # theirs is not listed
    assert shm.clean(tmp_path, everything=True) == []  # ours is mapped; theirs is never touched
    del view
    assert shm.clean(tmp_path, everything=True) == ["lesson02-readings"]
    assert sorted(tmp_path.iterdir()) == [theirs]


def test_replace_refuses_another_users_file_before_writing(tmp_path, monkeypatch):
    shm.share("kept", np.zeros(2), directory=tmp_path)
    monkeypatch.setattr(shm, "_this_user", lambda: os.geteuid() + 1)
    with pytest.raises(shm.SharedMemoryError, match="belongs to user"):
        shm.replace("kept", np.ones(2), directory=tmp_path)
    monkeypatch.undo()
    assert shm.attach("kept", directory=tmp_path).tolist() == [0.0, 0.0]
    assert [p.name for p in tmp_path.iterdir()] == [f"{shm.PREFIX}kept"]
