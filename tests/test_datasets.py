import numpy as np
import pytest

from workbench import datasets


@pytest.mark.parametrize("name", datasets.names())
@pytest.mark.parametrize("size", datasets.SIZES)
def test_every_dataset_has_every_size_and_reports_bytes(name, size):
    ds = datasets.get(name, size)
    assert ds.nbytes == sum(int(np.prod(s.shape)) * s.dtype.itemsize for s in ds.arrays.values())
    assert ds.nbytes > 0 or (name == "prk" and not ds.arrays)  # the PRK make their data on each rank, by formula
    if size == "full":  # the largest dataset must leave room to compute on a 24 GB machine
        assert ds.nbytes < 8e9


@pytest.mark.parametrize("name", datasets.names())
def test_content_does_not_depend_on_block_size(name):
    ds = datasets.get(name, "ci", seed=3)
    for array, spec in ds.arrays.items():
        whole = ds.load(array)
        assert whole.shape == spec.shape and whole.dtype == spec.dtype
        odd_block = tuple(max(1, n // 3 + 1) for n in spec.shape)  # uneven last blocks
        np.testing.assert_array_equal(ds.to_dask(array, odd_block).compute(), whole)
        for index, block in ds.blocks(array, odd_block):
            region = tuple(slice(i * b, i * b + n) for i, b, n in zip(index, odd_block, block.shape))
            np.testing.assert_array_equal(block, whole[region])


def test_seed_decides_the_values():
    a = datasets.get("kmeans", "ci", seed=1).load("points")
    np.testing.assert_array_equal(a, datasets.get("kmeans", "ci", seed=1).load("points"))
    assert not np.array_equal(a, datasets.get("kmeans", "ci", seed=2).load("points"))
    assert 0.0 <= a.min() and a.max() < 1.0


def test_blocks_are_made_one_at_a_time():
    ds = datasets.get("histogram", "lab")  # 400 MB: never loaded here
    blocks = ds.blocks("points")
    index, first = next(blocks)
    assert index == (0, 0) and first.shape == ds.spec("points").block
    x = ds.to_dask("points", 1000)
    assert x.shape == ds.spec("points").shape and x.chunks[0][0] == 1000


def test_csvm_labels_line_up_with_points():
    ds = datasets.get("csvm", "ci")
    points, labels = ds.load("points"), ds.load("labels")
    assert set(np.unique(labels)) == {0, 1}
    shift = ds.params["shift"]
    # class 1 is the unit box moved by `shift`: no class-1 coordinate below it, no class-0 above 1
    assert points[labels == 1].min() >= shift and points[labels == 0].max() < 1.0
    assert abs(labels.mean() - 0.5) < 0.05


def test_matmul_blocks_are_square_tiles():
    ds = datasets.get("matmul", "ci")
    chunks = ds.chunks("A")
    assert len(chunks[0]) == ds.params["blocks"] and set(chunks[0]) == {ds.params["block_size"]}


@pytest.mark.parametrize(
    "call,error,words",
    [
        (lambda: datasets.get("kmean"), KeyError, "Did you mean 'kmeans'"),
        (lambda: datasets.get("kmeans", "huge"), ValueError, "size must be one of"),
        (lambda: datasets.get("kmeans", seed=-1), ValueError, "seed must be a non-negative integer"),
        (lambda: datasets.get("kmeans").load("labels"), KeyError, "has no array 'labels'"),
        (lambda: datasets.get("kmeans").to_dask("points", 0), ValueError, "block must be a positive number of rows"),
    ],
)
def test_bad_requests_say_what_to_do(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)


def test_shape_overrides_for_sweeps():
    ds = datasets.get("kmeans", "ci", dims=3, centres=2, points=1000, block=100)
    assert ds.spec("points").shape == (1000, 3) and ds.spec("centres").shape == (2, 3)
    assert ds.chunks("points")[0] == (100,) * 10
    with pytest.raises(ValueError, match="has no shape parameter 'colour'"):
        datasets.get("kmeans", "ci", colour=3)
    with pytest.raises(ValueError, match="dims must be a positive integer"):
        datasets.get("kmeans", "ci", dims=0)
