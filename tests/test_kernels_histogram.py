import subprocess
import sys
import textwrap

import numpy as np
import pytest

from workbench import kernels
from workbench.kernels import histogram
from workbench.kernels.histogram import _grid, _line
from workbench.kernels.testing import LAYOUTS, read_only, refused_dtypes

PARALLEL = [False, True]
EPS = np.finfo(np.float64).eps


@pytest.fixture
def many_chunks(monkeypatch):
    """Let parallel calls split even small inputs, so the chunked paths run in these tests."""
    monkeypatch.setattr(histogram, "MIN_CHUNK", 1)


def _around(edges: np.ndarray, dtype, ulps: int = 4) -> np.ndarray:
    """Every edge and its neighbours up to ``ulps`` ULPs either side, in ``dtype``."""
    values = [edges.astype(dtype)]
    for direction in (-np.inf, np.inf):
        step = values[0]
        for _ in range(ulps):
            step = np.nextafter(step, np.array(direction, dtype))
            values.append(step)
    return np.concatenate(values)


@pytest.mark.parametrize("parallel", PARALLEL)
@pytest.mark.parametrize("bins,low,high", [(1, 0.0, 1.0), (10, 0.0, 1.0), (37, -1.5, 2.25), (1000, 0.1, 0.3)])
def test_histogram1d_equals_numpy_on_random_values(rng, many_chunks, parallel, bins, low, high):
    x = rng.normal(0.5, 1.0, 100_003)  # many values outside every range tried
    got = kernels.histogram1d(x, bins, (low, high), parallel=parallel)
    assert got.dtype == np.int64
    assert np.array_equal(got, kernels.histogram1d_reference(x, bins, (low, high)))


@pytest.mark.parametrize("parallel", PARALLEL)
def test_histogram1d_edges_nan_and_inf(parallel):
    bins, rng_ = 7, (0.1, 0.8)
    edges = np.linspace(*rng_, bins + 1)
    x = np.concatenate([edges, np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf), [np.nan, np.inf, -np.inf]])
    got = kernels.histogram1d(x, bins, rng_, parallel=parallel)
    assert np.array_equal(got, np.histogram(x[np.isfinite(x)], bins, rng_)[0])
    # numpy puts the right edge into the last bin
    assert kernels.histogram1d(np.array([0.8]), bins, rng_)[-1] == 1


def test_histogram1d_float32_int_and_empty(rng):
    x32 = rng.random(50_000).astype(np.float32)
    assert np.array_equal(kernels.histogram1d(x32, 13, (0.05, 0.95)), np.histogram(x32, 13, (0.05, 0.95))[0])
    ints = rng.integers(-5, 20, 10_000)
    assert np.array_equal(kernels.histogram1d(ints, 5, (0, 10)), np.histogram(ints, 5, (0, 10))[0])
    assert np.array_equal(kernels.histogram1d(np.empty(0), 4, (0, 1)), np.zeros(4, np.int64))


def _range_of_type(kind: int, low: float, high: float) -> tuple:
    """The same range as numpy sees it through different scalar types (its edges depend on them)."""
    return [
        (float(low), float(high)),
        (np.float64(low), np.float64(high)),
        (np.float32(low), np.float32(high)),
        (float(low), np.float64(high)),
    ][kind]


def test_histogram1d_follows_numpy_dtype_rules_over_many_random_ranges(rng):
    """float32 data with Python-float ends bins in float32 (numpy 2), with numpy float64 ends in
    float64, float32 ends in float32: every case compared with numpy, values at the edges included."""
    compared = 0
    for case in range(160):
        dtype = (np.float32, np.float64)[case % 2]
        bins = int(rng.choice([1, 3, 7, 10, 64, 1000]))
        centre, width = rng.uniform(-100, 100), 10.0 ** rng.uniform(-6, 2)
        limits = _range_of_type(case // 2 % 4, centre, centre + width)
        try:
            edges = np.histogram_bin_edges(np.zeros(0, dtype), bins, limits)
        except ValueError:  # too many bins for a float32 range: refused alike, tested below
            continue
        x = np.concatenate([rng.uniform(centre - width, centre + 2 * width, 300), _around(edges, dtype)]).astype(dtype)
        try:
            expected = np.histogram(x, bins, limits)[0]
        except ValueError:  # mixed end types: numpy's own indexing fails on a value near the low end
            with pytest.raises(ValueError, match="numpy.histogram fails too"):
                kernels.histogram1d(x, bins, limits)
            continue
        assert np.array_equal(kernels.histogram1d(x, bins, limits), expected), (dtype, bins, limits)
        compared += 1
    assert compared > 100


def test_histogram1d_float32_data_with_python_and_numpy_float64_ends():
    """The adversarial case: the same numbers as Python floats and as numpy float64 scalars bin
    differently in numpy (float32 vs float64 edges); the kernel follows both."""
    x = np.linspace(0.0, 1.0, 100_001, dtype=np.float32)
    x = np.concatenate([x, _around(np.linspace(0.1, 0.7, 8), np.float32, 8)])
    for limits in [(0.1, 0.7), (np.float64(0.1), np.float64(0.7)), (np.float32(0.1), np.float32(0.7)), (0, 1)]:
        assert np.array_equal(kernels.histogram1d(x, 7, limits), np.histogram(x, 7, limits)[0]), limits
    python, numpy64 = (kernels.histogram1d(x, 7, r) for r in [(0.1, 0.7), (np.float64(0.1), np.float64(0.7))])
    assert not np.array_equal(python, numpy64)  # the two really differ: the test can fail


def test_histogram1d_fails_where_numpy_fails_on_mixed_range_types():
    """Python 0.7 is compared in float32 (0.69999999) but subtracted in float64 with a numpy float64
    high end: the value below 0.7 is kept, then lands below the first edge, and numpy fails."""
    x = np.float32([0.69999998807, 0.75, 0.8])
    limits = (0.7, np.float64(0.9))
    with pytest.raises(ValueError, match="negative"):
        np.histogram(x, 4, limits)
    with pytest.raises(ValueError, match="1 values of x lie inside range .* numpy.histogram fails too"):
        kernels.histogram1d(x, 4, limits)
    assert np.array_equal(kernels.histogram1d(x[1:], 4, limits), np.histogram(x[1:], 4, limits)[0])


@pytest.mark.parametrize("parallel", PARALLEL)
def test_low_equal_high_widens_by_half_as_numpy(parallel):
    x = np.array([1.0, 0.5, 0.6, 1.4, 1.5, 1.6, 0.4, 1.0])
    assert np.array_equal(kernels.histogram1d(x, 4, (1.0, 1.0), parallel=parallel), np.histogram(x, 4, (1.0, 1.0))[0])
    points = np.stack([x, x[::-1]], axis=1)
    ranges = [(1.0, 1.0), (0, 2)]
    assert np.array_equal(
        kernels.histogramdd(points, 4, ranges, parallel=parallel), kernels.histogramdd_reference(points, 4, ranges)
    )


def test_narrow_range_counts_like_numpy_and_writes_nothing_outside():
    """bins / (high - low) overflows to inf here: the answer is numpy's, no index leaves the table."""
    points = np.zeros((100_000, 1))
    assert kernels.histogramdd(points, 5, [(0.0, 1e-310)]).tolist() == [100_000, 0, 0, 0, 0]
    assert kernels.histogram1d(points[:, 0], 5, (0.0, 1e-310)).tolist() == [100_000, 0, 0, 0, 0]
    tiny = np.array([0.0, 5e-324, 2e-311, 4e-311, 1e-310, 2e-310, -5e-324, np.nan])
    for bins in (1, 3, 5):
        assert np.array_equal(
            kernels.histogramdd(tiny[:, None], bins, [(0.0, 1e-310)]),
            kernels.histogramdd_reference(tiny[:, None], bins, [(0.0, 1e-310)]),
        )
        assert np.array_equal(
            kernels.histogram1d(tiny, bins, (0.0, 1e-310)), np.histogram(tiny, bins, (0.0, 1e-310))[0]
        )
    assert _grid((5,), [(0.0, 1e-310)]).limit == (-1.0,)  # the scale overflowed: never the fast path


def test_narrow_range_does_not_corrupt_the_heap_in_a_fresh_process():
    """The original failure aborted at exit (double free): only a separate process sees that."""
    script = textwrap.dedent(
        """
        import numpy as np
        from workbench import kernels
        for parallel in (False, True):
            print(kernels.histogramdd(np.zeros((100000, 1)), 5, [(0.0, 1e-310)], parallel=parallel).tolist())
            print(kernels.histogram1d(np.zeros(100000), 5, (0.0, 1e-310), parallel=parallel).tolist())
            narrow = [(3.0, 3.0 + 1e-300), (3.0, 3.0)]
            print(kernels.histogramdd(np.full((1000, 2), 3.0), 4, narrow, parallel=parallel).sum())
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["[100000, 0, 0, 0, 0]", "[100000, 0, 0, 0, 0]", "1000"]


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning", "ignore:invalid value:RuntimeWarning")
def test_range_whose_width_overflows_is_refused_as_numpy_refuses():
    x = np.zeros(10)
    with pytest.raises(ValueError, match="Too many bins"):
        np.histogram(x, 5, (-1e308, 1e308))
    with pytest.raises(ValueError, match="cannot hold 5 bins"):
        kernels.histogram1d(x, 5, (-1e308, 1e308))
    # numpy.histogramdd computes NaN edges and counts nothing; the kernel says why instead
    assert np.isnan(np.histogramdd(x[:, None], 5, [(-1e308, 1e308)])[1][0][0])
    with pytest.raises(ValueError, match=r"range\[0\] = \(-1e\+308, 1e\+308\) is too wide"):
        kernels.histogramdd(x[:, None], 5, [(-1e308, 1e308)])
    # one bin over the same range: numpy counts every value into it, and so does the kernel
    assert np.array_equal(kernels.histogram1d(np.array([0.0, 1e300, -1e300]), 1, (-1e308, 1e308)), [3])


def test_zero_dimensions_is_a_clear_error_as_in_numpy():
    with pytest.raises(ValueError):
        np.histogramdd(np.zeros((5, 0)), [], [])
    with pytest.raises(ValueError, match=r"points must have at least one dimension \(column\), got shape \(5, 0\)"):
        kernels.histogramdd(np.zeros((5, 0)), 3, [])
    with pytest.raises(ValueError, match="at least one dimension"):
        kernels.histogramdd_blocks([np.zeros((5, 0))], 3, [])


@pytest.mark.parametrize("parallel", PARALLEL)
@pytest.mark.parametrize("dims,bins", [(1, 4), (2, (3, 5)), (3, 6), (5, 8), (5, (2, 3, 4, 5, 6))])
def test_histogramdd_equals_numpy_on_random_points(rng, many_chunks, parallel, dims, bins):
    points = rng.normal(0.5, 0.4, (20_011, dims))
    ranges = [(0.0, 1.0)] * (dims - 1) + [(-0.25, 0.75)]
    got = kernels.histogramdd(points, bins, ranges, parallel=parallel)
    assert np.array_equal(got, kernels.histogramdd_reference(points, bins, ranges))


@pytest.mark.parametrize("parallel", PARALLEL)
def test_histogramdd_edge_values_nan_and_float32(rng, parallel):
    edges = np.linspace(-1.0, 1.0, 9)
    grid = np.array(np.meshgrid(edges, edges)).reshape(2, -1).T  # every edge pair, right edges too
    extra = np.array([[np.nan, 0.0], [0.0, np.inf], [1.0, 1.0], [-1.0, -1.0], [1.0 + 1e-16, 0.0]])
    points = np.vstack([grid, extra, rng.uniform(-1.2, 1.2, (1000, 2))])
    expected = np.histogramdd(points, 8, [(-1, 1), (-1, 1)])[0]
    assert np.array_equal(kernels.histogramdd(points, 8, [(-1, 1), (-1, 1)], parallel=parallel), expected)
    p32 = points.astype(np.float32)
    assert np.array_equal(
        kernels.histogramdd(p32, 8, [(-1, 1), (-1, 1)], parallel=parallel),
        np.histogramdd(p32, 8, [(-1, 1), (-1, 1)])[0],
    )


# Ranges for the exhaustive edge test: ordinary, offset far from zero, huge, tiny, subnormal, a
# float32 pair (numpy then computes float32 edges), and bins only a few ULPs wide.
EDGE_CASES = [
    ((0.0, 1.0), 8),
    ((0.1, 0.8), 7),
    ((-3.7, 12.9), 1000),
    ((1e6 + 0.1, 1e6 + 0.3), 97),
    ((-1e300, 1e300), 13),
    ((1e-300, 3e-300), 11),
    ((0.0, 1e-310), 5),
    ((np.float32(0.1), np.float32(0.7)), 6),
    ((1.0 - 40 * EPS, 1.0 + 40 * EPS), 64),
    ((1.0, 1.0 + 16 * EPS), 16),
]


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # 1e300 as float32 data
@pytest.mark.parametrize("limits,bins", EDGE_CASES, ids=[f"{b}bins-{r[0]:.3g}-{r[1]:.3g}" for r, b in EDGE_CASES])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_edge_and_its_neighbours_bin_as_numpy(limits, bins, dtype):
    """The fast path's bound, checked exhaustively where it matters: at every edge and 1..4 ULPs off
    it (in the data's own dtype), for histogramdd and for histogram1d where numpy allows the range."""
    edges = np.linspace(limits[0], limits[1], bins + 1)
    x = _around(edges, dtype).astype(dtype)
    expected = kernels.histogramdd_reference(x[:, None], bins, [limits])
    assert np.array_equal(kernels.histogramdd(x[:, None], bins, [limits]), expected)
    try:
        expected_1d = np.histogram(x, bins, limits)[0]
    except ValueError:  # numpy: too many bins for this range in this dtype
        with pytest.raises(ValueError, match="cannot hold"):
            kernels.histogram1d(x, bins, limits)
    else:
        assert np.array_equal(kernels.histogram1d(x, bins, limits), expected_1d)


def test_fast_path_window_is_wide_for_ordinary_bins_and_narrow_for_bins_a_few_ulps_wide():
    """The measured bound: delta is a few ULPs of the bin count for ordinary bins, large when bins
    are about one ULP wide (the exact path then does most values; the answers are checked above)."""
    ordinary = _grid((8, 1000), [(0.0, 1.0), (-3.7, 12.9)])
    assert all(0.49 < limit <= 0.5 for limit in ordinary.limit)
    assert _grid((64,), [(1.0 - 40 * EPS, 1.0 + 40 * EPS)]).limit[0] < 0.2
    assert _grid((16,), [(1.0, 1.0 + 16 * EPS)]).limit[0] <= 0.5
    assert 0.49 < _line(np.dtype(np.float32), 7, 0.1, 0.7).limit <= 0.5


def test_histogramdd_empty_and_shape():
    counts = kernels.histogramdd(np.empty((0, 3)), (2, 3, 4), [(0, 1)] * 3)
    assert counts.shape == (2, 3, 4) and counts.sum() == 0


def test_histogramdd_with_float32_range_ends_uses_numpy_float32_edges(rng):
    x = np.concatenate([rng.random(5000), _around(np.linspace(0.1, 0.7, 7).astype(np.float32), np.float64)])[:, None]
    limits = [(np.float32(0.1), np.float32(0.7))]
    assert np.array_equal(kernels.histogramdd(x, 6, limits), kernels.histogramdd_reference(x, 6, limits))


# -- every kind of array the kernels can be handed -----------------------------------------------
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_histograms_read_any_layout_and_byte_order(rng, layout):
    """A native read-only call compiles first; a byte-swapped array must not reuse its code."""
    points = rng.random((500, 3))
    ranges = [(0.0, 1.0)] * 3
    expected_dd = kernels.histogramdd_reference(points, 4, ranges)
    expected_1d = np.histogram(points[:, 0], 4, (0.0, 1.0))[0]
    assert np.array_equal(kernels.histogramdd(read_only(points), 4, ranges), expected_dd)
    assert np.array_equal(kernels.histogram1d(read_only(points[:, 0]), 4, (0.0, 1.0)), expected_1d)
    arranged = LAYOUTS[layout](points)
    assert np.array_equal(kernels.histogramdd(arranged, 4, ranges), expected_dd)
    assert np.array_equal(kernels.histogramdd_blocks([arranged[:100], arranged[100:]], 4, ranges), expected_dd)
    assert np.array_equal(kernels.histogram1d(arranged[:, 0], 4, (0.0, 1.0)), expected_1d)
    assert np.array_equal(kernels.histogram1d(LAYOUTS[layout](points[:, 0]), 4, (0.0, 1.0)), expected_1d)


@pytest.mark.parametrize("dtype,words", refused_dtypes(floats_only=False), ids=str)
def test_histograms_refuse_odd_dtypes_by_name(dtype, words):
    x = np.zeros(6, dtype)
    for call, name in [
        (lambda: kernels.histogram1d(x, 4, (0, 1)), "x"),
        (lambda: kernels.histogramdd(x.reshape(3, 2), 4, [(0, 1)] * 2), "points"),
        (lambda: kernels.histogramdd_blocks([np.zeros((1, 2)), x.reshape(3, 2)], 4, [(0, 1)] * 2), "blocks[1]"),
    ]:
        with pytest.raises(TypeError) as info:
            call()
        assert str(info.value).startswith(name) and words in str(info.value)


def test_integer_dtypes_bin_as_numpy(rng):
    for dtype in (np.int8, np.uint16, np.int32, np.int64, np.uint64):
        x = rng.integers(0, 100, 2000).astype(dtype)
        assert np.array_equal(kernels.histogram1d(x, 7, (3, 90)), np.histogram(x, 7, (3, 90))[0]), dtype
        assert np.array_equal(
            kernels.histogram1d(x, 7, (np.float32(3), np.float32(90))),
            np.histogram(x, 7, (np.float32(3), np.float32(90)))[0],
        )
        points = x.reshape(-1, 2)
        assert np.array_equal(
            kernels.histogramdd(points, 7, [(3, 90)] * 2), kernels.histogramdd_reference(points, 7, [(3, 90)] * 2)
        )


@pytest.mark.parametrize("parallel", PARALLEL)
def test_integers_beyond_the_bin_dtype_are_compared_with_the_range_exactly_as_numpy(parallel):
    # 2**53 + 1 converts to 2**53 (float64): numpy compares it with the range end before converting
    for x, limits in [
        (np.array([2**53 + 1, 5]), (0, 2**53)),
        (np.array([-(2**53 + 1), -5]), (-(2**53), 0)),
        (np.array([2**63 - 1, 2**62, 3]), (1, 2**63 - 2)),
        (np.array([2**64 - 1, 2**63, 7], dtype=np.uint64), (np.uint64(0), np.uint64(2**64 - 2))),
        (np.array([2**24 + 1, 5], dtype=np.int32), (np.float32(0), np.float32(2**24))),
        (np.array([-(2**24) - 1, -5], dtype=np.int32), (np.float32(-(2**24)), np.float32(0))),
    ]:
        expected = np.histogram(x, 4, limits)[0]
        assert np.array_equal(kernels.histogram1d(x, 4, limits, parallel=parallel), expected), (x, limits)


def test_large_integers_near_random_range_ends_bin_as_numpy(rng, many_chunks):
    checked = 0
    for dtype, float_ends in [(np.int64, False), (np.uint64, False), (np.int32, True), (np.int64, True)]:
        info = np.iinfo(dtype)
        for _ in range(40):
            low = int(rng.integers(info.min // 2, info.max // 2, dtype=dtype))
            high = min(low + int(rng.integers(1, 2**40)), info.max)
            if float_ends:  # float32 ends: numpy compares in float64, then bins in float32
                low, high = np.float32(low), np.float32(high)
                if not low < high:
                    continue
            ends = np.array([int(low), int(high)], dtype=object)
            around = np.concatenate([e + np.arange(-40, 41, dtype=object) for e in ends])
            x = np.array([v for v in around if info.min <= v <= info.max], dtype=dtype)
            inner = rng.integers(max(int(low), info.min), min(int(high), info.max), 200, dtype=dtype, endpoint=True)
            x = np.concatenate([x, inner])
            try:
                expected = np.histogram(x, 9, (low, high))[0]
            except ValueError:  # numpy cannot make 9 bins of that range in its bin dtype: neither may the kernel
                with pytest.raises(ValueError, match="cannot hold 9 bins"):
                    kernels.histogram1d(x, 9, (low, high))
                continue
            checked += 1
            for parallel in PARALLEL:
                got = kernels.histogram1d(x, 9, (low, high), parallel=parallel)
                assert np.array_equal(got, expected), (dtype, low, high, parallel)
    assert checked > 100


@pytest.mark.parametrize(
    "call,error,words",
    [
        (lambda: kernels.histogram1d([1.0, 2.0], 4, (0, 1)), TypeError, "x must be a numpy.ndarray"),
        (lambda: kernels.histogram1d(np.zeros((2, 2)), 4, (0, 1)), ValueError, "x must be 1-D"),
        (lambda: kernels.histogram1d(np.zeros(3, complex), 4, (0, 1)), TypeError, "x must hold real numbers"),
        (lambda: kernels.histogram1d(np.zeros(3), 0, (0, 1)), ValueError, "bins must be a positive integer"),
        (lambda: kernels.histogram1d(np.zeros(3), 2.5, (0, 1)), ValueError, "bins must be a positive integer"),
        (lambda: kernels.histogram1d(np.zeros(3), 4, (1, 0)), ValueError, "range must have low <= high"),
        (lambda: kernels.histogram1d(np.zeros(3), 4, (0, np.inf)), ValueError, "range must be finite"),
        (lambda: kernels.histogram1d(np.zeros(3), 4, (np.nan, 1)), ValueError, "range must be finite"),
        (lambda: kernels.histogram1d(np.zeros(3), 4, 5), ValueError, "range must be a (low, high) pair"),
        (lambda: kernels.histogram1d(np.zeros(3), 4, ("a", "b")), ValueError, "range must be a (low, high) pair"),
        (lambda: kernels.histogram1d(np.zeros(3), 4, (0, np.longdouble(1))), TypeError, "range holds a"),
        (lambda: kernels.histogram1d(np.zeros(3), 4, (1.0, 1.0 + 2 * EPS)), ValueError, "cannot hold 4 bins"),
        (lambda: kernels.histogramdd(np.zeros(3), 4, [(0, 1)]), ValueError, "points must be 2-D"),
        (
            lambda: kernels.histogramdd(np.zeros((3, 2)), (4, 4, 4), [(0, 1)] * 2),
            ValueError,
            "one count per dimension (2)",
        ),
        (
            lambda: kernels.histogramdd(np.zeros((3, 2)), 4, [(0, 1)]),
            ValueError,
            "one (low, high) pair per dimension (2)",
        ),
        (
            lambda: kernels.histogramdd(np.zeros((3, 2)), 4, [(0, 1), (2, 1)]),
            ValueError,
            "range[1] must have low <= high",
        ),
        (
            lambda: kernels.histogramdd(np.zeros((3, 2)), (4, -1), [(0, 1)] * 2),
            ValueError,
            "bins[1] must be a positive integer",
        ),
        (
            lambda: kernels.histogramdd(np.zeros((3, 2)), 4, 5),
            ValueError,
            "range must be a sequence of (low, high) pairs",
        ),
        (
            lambda: kernels.histogramdd(np.zeros((3, 2), object), 4, [(0, 1)] * 2),
            TypeError,
            "points must hold real numbers",
        ),
        (
            lambda: kernels.histogramdd_blocks([np.zeros((3, 3))], 4, [(0, 1)] * 2),
            ValueError,
            "blocks[0] must have 2 columns",
        ),
        (
            lambda: kernels.histogramdd_blocks(np.zeros((3, 2)), 4, [(0, 1)] * 2),
            TypeError,
            "blocks must be a sequence of 2-D arrays",
        ),
        (
            lambda: kernels.histogramdd_blocks([[0.0, 1.0]], 4, [(0, 1)] * 2),
            TypeError,
            "blocks[0] must be a numpy.ndarray",
        ),
    ],
)
def test_histogram_bad_input_names_the_argument(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)


def test_histogramdd_adds_to_a_table(rng):
    a, b = rng.random((1000, 3)), rng.random((777, 3))
    table = kernels.histogramdd(a, 4, [(0, 1)] * 3)
    assert kernels.histogramdd(b, 4, [(0, 1)] * 3, add_to=table) is table
    np.testing.assert_array_equal(table, kernels.histogramdd_reference(np.vstack([a, b]), 4, [(0, 1)] * 3))
    with pytest.raises(ValueError, match="add_to must be a C-contiguous int64 array of shape \\(4, 4, 4\\)"):
        kernels.histogramdd(a, 4, [(0, 1)] * 3, add_to=np.zeros((4, 4), np.int64))
    frozen = np.zeros((4, 4, 4), np.int64)
    frozen.setflags(write=False)
    with pytest.raises(ValueError, match="add_to is read-only"):
        kernels.histogramdd(a, 4, [(0, 1)] * 3, add_to=frozen)
    with pytest.raises(ValueError, match="add_to has non-native byte order"):
        kernels.histogramdd(a, 4, [(0, 1)] * 3, add_to=np.zeros((4, 4, 4), ">i8"))


def test_add_to_sharing_memory_with_the_points_is_refused():
    buffer = np.zeros(64 + 30, np.int64)
    table = buffer[:64].reshape(4, 4, 4)
    points = buffer[64:].view(np.float64).reshape(10, 3)  # the same allocation, other bytes: fine
    kernels.histogramdd(points, 4, [(0, 1)] * 3, add_to=table)
    overlapping = buffer[:30].view(np.float64).reshape(10, 3)
    with pytest.raises(ValueError, match="points and add_to overlap in memory"):
        kernels.histogramdd(overlapping, 4, [(0, 1)] * 3, add_to=table)
    with pytest.raises(ValueError, match=r"blocks\[1\] and add_to overlap in memory"):
        kernels.histogramdd_blocks([points, overlapping], 4, [(0, 1)] * 3, add_to=table)


# -- many blocks into one table --------------------------------------------------------------------
@pytest.mark.parametrize("parallel", PARALLEL)
def test_histogramdd_blocks_equals_numpy_on_the_concatenation(rng, many_chunks, parallel):
    lengths = [0, 1, 333, 5000, 17, 0, 2048]
    blocks = [rng.normal(0.5, 0.4, (n, 4)) for n in lengths]
    blocks[3] = blocks[3].astype(np.float32)  # mixed dtypes: every value is binned exactly
    blocks[4] = rng.integers(-1, 3, (17, 4))
    ranges = [(0.0, 1.0), (-0.5, 1.5), (0.2, 0.2), (0, 1)]
    expected = kernels.histogramdd_reference(np.concatenate(blocks), (3, 4, 5, 6), ranges)
    got = kernels.histogramdd_blocks(blocks, (3, 4, 5, 6), ranges, parallel=parallel)
    assert got.shape == (3, 4, 5, 6) and got.dtype == np.int64
    assert np.array_equal(got, expected)
    assert np.array_equal(kernels.histogramdd_blocks(iter(blocks), (3, 4, 5, 6), ranges), expected)  # any iterable
    table = np.ones((3, 4, 5, 6), np.int64)
    assert kernels.histogramdd_blocks(blocks, (3, 4, 5, 6), ranges, add_to=table) is table
    assert np.array_equal(table, expected + 1)
    assert not kernels.histogramdd_blocks([], 4, [(0, 1)] * 2).any()


def test_histogramdd_blocks_equals_repeated_histogramdd_calls(rng):
    blocks = [rng.random((int(n), 5)) for n in rng.integers(0, 300, 200)]
    ranges = [(0.0, 1.0)] * 5
    table = np.zeros((8,) * 5, np.int64)
    for block in blocks:
        kernels.histogramdd(block, 8, ranges, add_to=table)
    assert np.array_equal(kernels.histogramdd_blocks(blocks, 8, ranges), table)
