"""Lesson 09's measurements: the stride kernels and the PRK transpose against numpy, the sysfs and
/proc readers against fake trees (their files are untrusted: malformed ones are refused by name),
pinning that pins and gives the cores back, and the lesson's checks.

No test asserts a timing: the machine is shared. Where a measurement runs, the test checks what it
must hold whatever the load (results verified, pinned threads on their cores, counts consistent).
"""

from __future__ import annotations

import os
from pathlib import Path

import numba
import numpy as np
import pytest

from workbench.kernels import prk, strides
from workbench.lab import node_locality as nl
from workbench.teach import NOT_YET, check

CORES = sorted(os.sched_getaffinity(0))


# -- kernels ------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (64, 64), (100, 37)])
def test_both_walks_sum_every_element(shape, rng):
    a = rng.random(shape)
    assert strides.sum_by_rows(a) == pytest.approx(a.sum(), rel=1e-12)
    assert strides.sum_by_columns(a) == pytest.approx(a.sum(), rel=1e-12)
    single = a.astype(np.float32)
    assert strides.sum_by_rows(single) == pytest.approx(float(single.sum(dtype=np.float64)), rel=1e-5)


def test_sum_passes_reads_the_vector_passes_times(rng):
    x = rng.random(1001)
    assert strides.sum_passes(x, 3) == pytest.approx(3 * x.sum(), rel=1e-12)
    assert strides.sum_passes(x) == pytest.approx(x.sum(), rel=1e-12)


def test_the_stride_kernels_refuse_what_they_cannot_walk(rng):
    a = rng.random((8, 8))
    with pytest.raises(ValueError, match="C-ordered"):
        strides.sum_by_rows(np.asfortranarray(a))
    with pytest.raises(ValueError, match="C-ordered"):
        strides.sum_by_columns(a[:, ::2])
    with pytest.raises(TypeError, match="float32 or float64"):
        strides.sum_by_rows(np.ones((2, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="2-D"):
        strides.sum_by_columns(np.ones(4))
    with pytest.raises(ValueError, match="contiguous"):
        strides.sum_passes(np.ones(10)[::2], 1)
    with pytest.raises(ValueError, match="passes must be a positive integer"):
        strides.sum_passes(np.ones(10), 0)
    big_endian = a.astype(">f8")
    assert strides.sum_by_rows(big_endian) == pytest.approx(a.sum(), rel=1e-12)


@pytest.mark.parametrize("order,tile", [(37, 37), (37, 8), (64, 64), (64, 16), (100, 32)])
def test_one_prk_transpose_equals_numpys_transpose_tiled_or_not(order, tile, rng):
    a = rng.random((order, order))
    original = a.copy()
    b = np.zeros_like(a)
    with nl.one_numba_thread():
        prk.transpose(a, b, tile)
    np.testing.assert_array_equal(b, original.T)
    np.testing.assert_array_equal(a, original + 1.0)


def test_one_numba_thread_gives_the_threads_back():
    before = numba.get_num_threads()
    with pytest.raises(RuntimeError):
        with nl.one_numba_thread():
            assert numba.get_num_threads() == 1
            raise RuntimeError("inside")
    assert numba.get_num_threads() == before


# -- caches and strides ---------------------------------------------------------------------------
def test_traversal_measures_both_walks_and_they_agree(rng):
    records = nl.traversal((48, 64), repeats=2, sample_elements=10_000)
    assert [(r["order"], r["walk"]) for r in records] == [(48, "rows"), (48, "columns"), (64, "rows"), (64, "columns")]
    matrix = np.random.default_rng(0).random((64, 64))
    for r in records:
        assert r["stride_bytes"] == (8 if r["walk"] == "rows" else 8 * r["order"])
        assert r["calls"] == -(-10_000 // r["order"] ** 2) and len(r["runs"]) == 2
        assert r["seconds"] > 0 and r["ns_per_element"] == pytest.approx(r["seconds"] / r["order"] ** 2 * 1e9)
    assert records[3]["total"] == pytest.approx(matrix.sum(), rel=1e-12)
    assert records[2]["total"] == pytest.approx(records[3]["total"], rel=1e-12)
    assert set(nl.slowdowns(records)) == {48, 64}
    lines = nl.traversal_summary(records).splitlines()
    assert len(lines) == 2 and "at order 48" in lines[0] and "at order 64" in lines[1] and "2 runs each" in lines[1]
    assert nl.slowdowns(records)[64] == pytest.approx(records[3]["seconds"] / records[2]["seconds"])


def test_transposes_time_every_tile_below_the_order_and_verify_the_result():
    records = nl.transposes((40, 64), tiles=(8, 16, 64, 128), repeats=2, sample_elements=5_000)
    assert [(r["order"], r["tile"]) for r in records] == [(40, 40), (40, 8), (40, 16), (64, 64), (64, 8), (64, 16)]
    assert all(r["verified"] for r in records)
    assert [r["label"] for r in records[:2]] == ["untiled", "tile 8"]
    assert records[0]["vs_untiled"] == 1.0
    assert records[1]["vs_untiled"] == pytest.approx(records[0]["seconds"] / records[1]["seconds"])
    text = nl.tiling_summary(records, {"L1": 48 * 1024, "L2": 2**20})
    assert "order 64: fastest tile" in text and "a power of two" in text and "order 40" in text
    assert "than untiled" in text or "untiled is" in text or "the difference between tile" in text  # its claim
    slow = [{**r, "seconds": 2 * r["seconds"], "vs_untiled": 0.5} if r["tile"] < r["order"] else r for r in records]
    assert "no tile beat the untiled loop" in nl.tiling_summary(slow, {"L1": 48 * 1024})
    assert "beyond the caches listed" in nl.tiling_summary(records, {"L1": 1024})


def test_sweep_plan_sizes_each_level_and_a_memory_set_within_the_cap():
    levels = {"L1": 48 * 1024, "L2": 2**20, "L3": 32 * 2**20}
    plan = nl.sweep_plan(levels, elements=2**24, memory_cap=2**30)
    assert [p["where"] for p in plan] == ["in L1", "in L2", "in L3", "memory"]
    assert [p["bytes"] for p in plan] == [24 * 1024, 2**19, 16 * 2**20, 128 * 2**20]
    assert all(p["bytes"] % 4096 == 0 and p["passes"] >= 1 for p in plan)
    assert plan[0]["passes"] == 2**24 // (24 * 1024 // 8)
    huge = nl.sweep_plan({"L3": 480 * 2**20}, elements=2**20, memory_cap=2**30)
    assert huge[-1]["bytes"] == 2**30 and huge[-1]["vs_last_level"] == pytest.approx(2**30 / (480 * 2**20))
    small = nl.sweep_plan({"L2": 2**20}, elements=2**20, memory_cap=2**34)
    assert small[-1]["bytes"] == 64 * 2**20  # at least 64 MiB, however small the caches
    with pytest.raises(ValueError, match="memory_cap"):
        nl.sweep_plan(levels, 2**20, 0)


def test_cache_sweep_reads_every_planned_set():
    caches = [nl.Cache(1, "Data", 16 * 1024, 64, 8, (0,)), nl.Cache(2, "Unified", 256 * 1024, 64, 8, (0,))]
    records = nl.cache_sweep("ci", repeats=1, caches=caches)
    assert [r["where"] for r in records] == ["in L1", "in L2", "memory"]
    assert all(r["GB_per_s"] > 0 and r["caches"] == "sysfs" for r in records)
    assumed = nl.cache_sweep("ci", repeats=1, caches=[nl.Cache(1, "Instruction", 32 * 1024, 64, 8, (0,))])
    assert assumed[0]["caches"].startswith("assumed") and [r["where"] for r in assumed][-1] == "memory"
    with pytest.raises(ValueError, match="no size"):
        nl.cache_sweep("huge")
    assert "this run cannot say which is faster" in nl.sweep_summary(records)  # one run of each


def test_sweep_summary_compares_the_fastest_level_with_memory_per_element():
    rows = [
        {"where": "in L1", "GB_per_s": 40.0, "runs_ns_per_element": [0.2, 0.22, 0.2 / 1.1]},
        {"where": "memory", "GB_per_s": 8.0, "runs_ns_per_element": [1.0, 1.1, 1 / 1.1]},
    ]
    text = nl.sweep_summary(rows)
    assert text.startswith("reading from memory: 8.0 GB/s; per element read, reading in L1 is 5x faster")
    assert nl.sweep_summary(rows[1:]) == "reading from memory: 8.0 GB/s, the fastest of the working sets here"


# -- untrusted sysfs text ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text,cpus",
    [("0", [0]), ("0-3", [0, 1, 2, 3]), ("0-1,8,10-11\n", [0, 1, 8, 10, 11]), ("", []), ("\n", [])],
)
def test_parse_cpulist_reads_the_kernels_cpu_lists(text, cpus):
    assert nl.parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["0-", "-1", "a", "1,,2", "0 1", "3-1", "0-3,2", "0x1", "70000", "1-99999"])
def test_parse_cpulist_refuses_malformed_lists_naming_the_file(text):
    with pytest.raises(ValueError, match=r"node7/cpulist: .* (CPU list|range of CPU numbers|names a CPU twice)"):
        nl.parse_cpulist(text, "/sys/devices/system/node/node7/cpulist")


@pytest.mark.parametrize("text,size", [("48K", 48 * 1024), ("1024K\n", 2**20), ("32M", 32 * 2**20), ("512", 512)])
def test_parse_size_reads_sysfs_cache_sizes(text, size):
    assert nl.parse_size(text) == size


@pytest.mark.parametrize("text", ["", "K", "48Q", "-1K", "1.5M", "32 MiB please"])
def test_parse_size_refuses_what_is_not_a_size(text):
    with pytest.raises(ValueError, match="index2/size"):
        nl.parse_size(text, "index2/size")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _fake_cpu(root: Path, caches: list[tuple[str, str, str, str]]) -> Path:
    for index, (level, kind, size, shared) in enumerate(caches):
        base = root / "cpu0" / "cache" / f"index{index}"
        for name, text in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
            _write(base / name, text + "\n")
        _write(base / "coherency_line_size", "64\n")
        _write(base / "ways_of_associativity", "12\n")
    return root


def test_read_caches_from_a_fake_sysfs_tree(tmp_path):
    root = _fake_cpu(
        tmp_path,
        [
            ("1", "Data", "48K", "0"),
            ("1", "Instruction", "32K", "0"),
            ("2", "Unified", "1024K", "0"),
            ("3", "Unified", "32768K", "0-1"),
        ],
    )
    caches = nl.read_caches(0, root)
    assert [c.name for c in caches] == ["L1d", "L1i", "L2", "L3"]
    assert caches[3].shared_cpus == (0, 1) and caches[0].line_bytes == 64 and caches[0].ways == 12
    assert nl.cache_levels(caches) == {"L1": 48 * 1024, "L2": 2**20, "L3": 32 * 2**20}
    assert nl.read_caches(0, tmp_path / "absent") == []


@pytest.mark.parametrize(
    "field,text,match",
    [("size", "lots", "index0/size"), ("level", "one", "index0/level"), ("shared_cpu_list", "0-x", "shared_cpu_list")],
)
def test_read_caches_refuses_a_malformed_file_by_name(tmp_path, field, text, match):
    root = _fake_cpu(tmp_path, [("1", "Data", "48K", "0")])
    _write(root / "cpu0" / "cache" / "index0" / field, text)
    with pytest.raises(ValueError, match=match):
        nl.read_caches(0, root)


def _fake_nodes(root: Path) -> Path:
    for node, cpus, total, free, distance in (
        (0, "0-1", 4096000, 2048000, "10 21"),
        (1, "2,3", 4096000, 1024000, "21 10"),
    ):
        base = root / f"node{node}"
        _write(base / "cpulist", cpus + "\n")
        _write(
            base / "meminfo",
            f"Node {node} MemTotal:       {total} kB\nNode {node} MemFree:        {free} kB\n"
            f"Node {node} HugePages_Total:     0\n",
        )
        _write(base / "distance", distance + "\n")
    _write(root / "possible", "0-1\n")  # files and other names beside the node directories are not nodes
    (root / "nodeX").mkdir()
    (root / "power").mkdir()
    return root


def test_read_numa_nodes_from_a_fake_two_node_tree(tmp_path):
    nodes = nl.read_numa_nodes(_fake_nodes(tmp_path))
    assert [(n.node, n.cpus, n.distances) for n in nodes] == [(0, (0, 1), (10, 21)), (1, (2, 3), (21, 10))]
    assert nodes[0].mem_total_bytes == 4096000 * 1024 and nodes[1].mem_free_bytes == 1024000 * 1024
    text = nl.numactl_hardware(nodes)
    assert text.startswith("available: 2 nodes (0-1)\nnode 0 cpus: 0 1\nnode 0 size: 4000 MB\nnode 0 free: 2000 MB")
    assert "node 1 cpus: 2 3" in text and "node distances:" in text and "  1:  21  10" in text
    assert "lscpu: NUMA node1 CPU(s): 2-3" in text
    assert nl.read_numa_nodes(tmp_path / "absent") == []
    assert "no NUMA information" in nl.numactl_hardware([])


def test_a_node_with_memory_and_no_cpus_is_read(tmp_path):
    root = _fake_nodes(tmp_path)
    _write(root / "node2" / "cpulist", "\n")
    node = nl.read_numa_nodes(root)[2]
    assert node.cpus == () and node.mem_total_bytes is None
    assert "lscpu: NUMA node2 CPU(s): (none)" in nl.numactl_hardware(nl.read_numa_nodes(root))


@pytest.mark.parametrize(
    "name,text,match",
    [
        ("cpulist", "0-1,zz", "node1/cpulist"),
        ("cpulist", "5-2", "node1/cpulist"),
        ("meminfo", "Node 1 MemTotal: lots kB", "node1/meminfo line 1"),
        ("meminfo", "garbage", "node1/meminfo line 1"),
        ("distance", "21 ten", "node1/distance"),
    ],
)
def test_read_numa_nodes_refuses_a_malformed_file_by_name(tmp_path, name, text, match):
    root = _fake_nodes(tmp_path)
    _write(root / "node1" / name, text)
    with pytest.raises(ValueError, match=match):
        nl.read_numa_nodes(root)


def test_this_machines_topology_is_readable():
    nodes = nl.read_numa_nodes()
    if not Path("/sys/devices/system/node").is_dir():
        pytest.skip("no NUMA information in /sys on this machine")
    assert nodes and set(CORES) <= {c for n in nodes for c in n.cpus}
    assert f"available: {len(nodes)} nodes" in nl.numactl_hardware(nodes)


# -- first touch ------------------------------------------------------------------------------------
def test_numa_maps_pages_reads_the_mapping_that_holds_the_array(tmp_path):
    array = np.zeros(1024)
    address = array.__array_interface__["data"][0]
    start, end = address - address % 4096, address - address % 4096 + 3 * 4096
    _write(tmp_path / "maps", f"1000-2000 r--p 00000000 00:00 0\n{start:x}-{end:x} rw-p 00000000 00:00 0\n")
    _write(
        tmp_path / "numa_maps",
        f"1000 default\n{start:x} default anon=3 dirty=3 N0=2 N1=1 kernelpagesize_kB=4\n",
    )
    assert nl.numa_maps_pages(array, tmp_path) == {0: 2, 1: 1}
    _write(tmp_path / "numa_maps", f"{start:x} default\n")
    assert nl.numa_maps_pages(array, tmp_path) == {}
    (tmp_path / "numa_maps").unlink()
    assert nl.numa_maps_pages(array, tmp_path) is None
    _write(tmp_path / "numa_maps", "")
    _write(tmp_path / "maps", "1000-2000 r--p 00000000 00:00 0\n")
    with pytest.raises(ValueError, match="in no mapping"):
        nl.numa_maps_pages(array, tmp_path)


def test_first_touch_places_pages_only_when_written():
    buffer = nl.fresh_buffer(64 * 4096 + 1)
    assert buffer.nbytes == 65 * 4096 and buffer.__array_interface__["data"][0] % 4096 == 0
    before = nl.pages_by_node(buffer)
    if before is None:
        pytest.skip("this kernel cannot say where pages are")
    assert sum(before.values()) == 0
    buffer[: 10 * 512] = 1.0  # the first ten pages
    assert sum(nl.pages_by_node(buffer).values()) == 10
    nl.run_pinned({CORES[0]}, buffer.fill, 1.0)
    after = nl.pages_by_node(buffer)
    assert sum(after.values()) == 65 and buffer.sum() == buffer.size
    assert set(after) <= {n.node for n in nl.read_numa_nodes()} | {0}


def test_first_touch_measures_every_pair_of_nodes():
    # Each allowed core plays a node: the code path of a multi-node machine, on whatever machine runs this.
    fake = [nl.NumaNode(i, (core,), None, None, ()) for i, core in enumerate(CORES[:2])]
    records = nl.first_touch(fake, 2**20, repeats=1, passes=1)
    assert [(r["touched_on"], r["read_from"]) for r in records] == [(a.node, b.node) for a in fake for b in fake]
    assert all(r["local"] == (r["touched_on"] == r["read_from"]) for r in records)
    assert all(r["GB_per_s"] > 0 and r["bytes"] == 2**20 for r in records)
    if records[0]["pages_on"] is not None:
        assert all(r["pages_before"] == 0 and sum(r["pages_on"].values()) == 2**20 // 4096 for r in records)
    text = nl.numa_summary(fake, records)
    assert ("NUMA nodes" in text and "remote reads are" in text) if len(fake) > 1 else "One NUMA node" in text
    with pytest.raises(ValueError, match="no NUMA node has a CPU"):
        nl.first_touch([nl.NumaNode(0, (), None, None, ())], 4096)


def test_numa_summary_on_one_node_says_there_is_nothing_remote():
    node = nl.NumaNode(0, (0, 1), None, None, (10,))
    record = {"touched_on": 0, "read_from": 0, "local": True, "pages_before": 0, "pages_on": {0: 256}, "GB_per_s": 20.0}
    text = nl.numa_summary([node], [record])
    assert "One NUMA node (node 0, CPUs 0-1)" in text and "256 on node 0" in text and "no remote read" in text
    assert "cannot be read" in nl.numa_summary([node], [{**record, "pages_on": None, "pages_before": None}])


# -- pinning ----------------------------------------------------------------------------------------
def test_run_pinned_pins_only_its_thread_and_hands_back_errors():
    before = os.sched_getaffinity(0)
    assert nl.run_pinned({CORES[-1]}, os.sched_getaffinity, 0) == {CORES[-1]}
    assert nl.run_pinned(None, os.sched_getaffinity, 0) == before
    assert os.sched_getaffinity(0) == before
    with pytest.raises(ZeroDivisionError):
        nl.run_pinned({CORES[0]}, lambda: 1 / 0)


def test_thread_counters_read_this_thread():
    counters = nl.thread_counters()
    assert counters["cpu"] in CORES and counters["involuntary"] >= 0
    assert counters["migrations"] is None or counters["migrations"] >= 0


def test_a_pinned_thread_stays_on_its_core():
    result = nl.run_pinned({CORES[0]}, nl.busy_work, 4, 5)
    assert result["cores_seen"] == [CORES[0]] and result["seconds"] > 0
    assert result["migrations"] in (0, None) and 0 < result["core_share"] <= 1


def test_pinning_runs_each_condition_and_removes_its_busy_process():
    records = nl.pinning(seconds=0.02, repeats=1)
    expected = list(nl.CONDITIONS) if len(CORES) > 1 else [nl.CONDITIONS[0], nl.CONDITIONS[2]]
    assert [r["condition"] for r in records] == expected
    for r in records:
        assert set(r["cores_seen"]) <= set(r["cores"]) and r["seconds"] > 0
        if r["condition"] != nl.CONDITIONS[0]:
            assert len(r["cores"]) == 1 and r["migrations"] in (0, None)
    assert records[-1]["cores"] == [records[-1]["busy_core"]]
    assert "pinned onto the busy core" in nl.pinning_summary(records) or len(CORES) == 1


def test_busy_process_is_gone_after_the_block():
    with nl.busy_process(CORES[0]) as pid:
        assert os.sched_getaffinity(pid) == {CORES[0]}
    assert not Path(f"/proc/{pid}").exists()  # killed and reaped


def test_core_affinity_refuses_what_is_not_a_plan():
    with pytest.raises(TypeError, match="map worker addresses"):
        nl.CoreAffinity([0, 1])
    with pytest.raises(ValueError, match="at least one"):
        nl.CoreAffinity({"tcp://127.0.0.1:1": set()})


def test_core_affinity_pins_workers_and_gives_the_cores_back(session):
    workers = session.workers()
    before = nl.worker_affinity(session)
    plan = {worker: {CORES[i % len(CORES)]} for i, worker in enumerate(workers)}
    try:
        session.client.register_plugin(nl.CoreAffinity(plan))
        assert nl.worker_affinity(session) == plan
        runs = nl.worker_runs(session, passes=2, repeats=1)
        assert [r["worker"] for r in runs] == workers
        assert all(r["cores_seen"] == sorted(plan[r["worker"]]) and r["migrations"] in (0, None) for r in runs)
        assert check("09.3", worker_cores=nl.worker_affinity(session), session=session).passed or len(CORES) < 2
        shared = {worker: {CORES[0]} for worker in workers}
        session.client.register_plugin(nl.CoreAffinity(shared))  # replaces the plan: its teardown runs first
        assert nl.worker_affinity(session) == shared
        if len(CORES) > 1:
            feedback = check("09.3", worker_cores=shared, session=session)
            assert feedback.status == NOT_YET and "share one core" in feedback.message
    finally:
        session.client.unregister_worker_plugin(nl.CoreAffinity.name)
    assert nl.worker_affinity(session) == before
    if any(len(cores) > 1 for cores in before.values()):
        feedback = check("09.3", worker_cores=before, session=session)
        assert feedback.status == NOT_YET and "more than one core" in feedback.message
    typed = {worker: {CORES[i % len(CORES)]} for i, worker in enumerate(workers)}
    if typed != before:
        feedback = check("09.3", worker_cores=typed, session=session)
        assert feedback.status == NOT_YET and "reports other cores" in feedback.message
    assert check("09.3", worker_cores={"tcp://nowhere:1": {0}}, session=session).status == NOT_YET
    assert "should be a dict" in check("09.3", worker_cores=[0, 1], session=session).message


# -- the lesson's checks, on tables of known figures ------------------------------------------------
def _walks(rows_s=0.001, columns_s=0.007, power_rows_s=0.001, power_columns_s=0.05):
    return [
        {"order": 1000, "walk": "rows", "seconds": rows_s, "stride_bytes": 8},
        {"order": 1000, "walk": "columns", "seconds": columns_s, "stride_bytes": 8000},
        {"order": 1024, "walk": "rows", "seconds": power_rows_s, "stride_bytes": 8},
        {"order": 1024, "walk": "columns", "seconds": power_columns_s, "stride_bytes": 8192},
    ]


def test_check_09_1_passes_the_measured_ratio_and_says_what_is_wrong_without_the_answer():
    walks = _walks()
    assert check("09.1", column_slowdown=7.0, column_stride_bytes=8000, walks=walks).passed
    assert check("09.1", column_slowdown=7.04, column_stride_bytes=8000.0, walks=walks).passed  # rounded by hand
    cases = {
        (1 / 7, 8000): "upside down",
        (50.0, 8000): "ratio at order 1024",
        (3.0, 8000): "is not what the walks table gives",
        (7.0, 1000): "counts elements, not bytes",
        (7.0, 8): "the row walk's stride",
        (7.0, 4096): "is not the distance",
    }
    for (slowdown, stride), phrase in cases.items():
        feedback = check("09.1", column_slowdown=slowdown, column_stride_bytes=stride, walks=walks)
        assert feedback.status == NOT_YET and phrase in feedback.message, (slowdown, stride, feedback.message)
        assert "7.0" not in feedback.message and "8000 " not in feedback.message  # never the expected value
    assert "should be a number" in check("09.1", column_slowdown="7", column_stride_bytes=8000, walks=walks).message
    assert "whole number" in check("09.1", column_slowdown=7.0, column_stride_bytes=8000.5, walks=walks).message
    assert "run the lesson's cells" in check("09.1", column_slowdown=7.0, column_stride_bytes=8000, walks=[]).message


def _tiles():
    seconds = {1024: 0.004, 8: 0.0015, 16: 0.0025, 32: 0.002, 64: 0.0022}
    rows = [{"order": 1000, "tile": t, "seconds": 0.001} for t in (1000, 8, 16)]
    return rows + [{"order": 1024, "tile": t, "seconds": s} for t, s in seconds.items()]


def test_check_09_2_wants_the_fastest_tile_at_the_power_of_two_order():
    tiles = _tiles()
    assert check("09.2", best_tile=8, tiled_speedup=0.004 / 0.0015, tiles=tiles).passed
    assert check("09.2", best_tile=np.int64(8), tiled_speedup=2.7, tiles=tiles).passed
    cases = {
        (16, 2.67): "slower than another tile",
        (1024, 1.0): "that is the untiled transpose",
        (12, 2.67): "no run at order 1024 used tile 12",
        (8, 0.375): "upside down",
        (8, 1.6): "is not what the tiles table gives",
    }
    for (tile, speedup), phrase in cases.items():
        feedback = check("09.2", best_tile=tile, tiled_speedup=speedup, tiles=tiles)
        assert feedback.status == NOT_YET and phrase in feedback.message, (tile, speedup, feedback.message)
        assert "2.67" not in feedback.message  # never the expected value
        assert tile == 8 or "tile 8" not in feedback.message  # nor, for a wrong tile, the right one


def test_the_lessons_sizes_keep_one_plain_and_one_power_of_two_order():
    for size, knob in nl.SIZES.items():
        plain, power = knob["orders"]
        assert plain & (plain - 1) and not power & (power - 1), size
        assert 1.0 < power**2 / plain**2 < 1.1 and all(t < plain for t in knob["tiles"]), size
    with pytest.raises(ValueError, match="no size"):
        nl.knobs("tiny")


def _pinning_rows(own_share: float, busy_runs: tuple[float, ...] = (0.4, 0.44, 0.4 / 1.1)) -> list[dict]:
    loose, own, busy = nl.CONDITIONS
    own_runs = [0.2, 0.22, 0.2 / 1.1]
    return [
        {"condition": loose, "core_share": 0.98, "seconds": 0.2, "migrations": 3, "cores_seen": [0, 1]},
        {
            "condition": own,
            "core_share": own_share,
            "seconds": 0.2,
            "migrations": 0,
            "cores_seen": [1],
            "runs": own_runs,
        },
        {"condition": busy, "core_share": 0.5, "seconds": 0.4, "migrations": 0, "cores_seen": [0], "runs": busy_runs},
    ]


def test_pinning_summary_says_what_was_measured_and_when_the_machine_was_too_busy_to_say_more():
    quiet = nl.pinning_summary(_pinning_rows(0.99))
    assert (
        "got 0.50 of a core, and 0.99 pinned to a core of its own: pinned to a core of its own is 2x faster " in quiet
    )
    assert "moved it between cores 3 times" in quiet
    noisy = nl.pinning_summary(_pinning_rows(0.99, busy_runs=(0.1, 0.4, 0.2)))
    assert (
        "the difference between pinned onto the busy core and pinned to a core of its own is within the noise" in noisy
    )
    assert "pinned, it migrated 0 times" in quiet and "not free" not in quiet
    busy = nl.pinning_summary(_pinning_rows(0.3))
    assert "other programs took 70% of it" in busy and "the times say little" in busy


def test_pinning_without_sched_setaffinity_says_it_needs_linux(monkeypatch):
    monkeypatch.delattr(os, "sched_setaffinity")
    for attempt in (lambda: nl.pinning(0.01, 1), lambda: nl.run_pinned({0}, int), lambda: nl.CoreAffinity({})):
        with pytest.raises(RuntimeError, match="needs Linux's sched_setaffinity"):
            attempt()
    assert nl.run_pinned(None, int, "3") == 3  # nothing to pin: runs anywhere


def test_pages_by_node_falls_back_on_numa_maps_without_move_pages(monkeypatch):
    monkeypatch.setattr(nl, "MOVE_PAGES", {})
    buffer = nl.fresh_buffer(16 * 4096)
    buffer[: 10 * 512] = 1.0
    found = nl.pages_by_node(buffer)
    # numa_maps counts the whole mapping, which the kernel may have merged with a neighbour: at least ten
    assert found is None or sum(found.values()) >= 10
