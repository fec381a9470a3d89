"""Subarrays of 1 to 4 dimensions in C and Fortran order, strided views and `out=` arrays,
each checked against NumPy slicing of a local copy of the file's array."""

import tracemalloc

import numpy as np
import pytest

SHAPES = {
    1: (1000,),
    2: (40, 70),
    3: (12, 9, 17),
    4: (6, 5, 7, 8),
}


def blocks(shape, rng, n=4):
    """`n` random (start, count) blocks inside `shape`, the full array first."""
    out = [((0,) * len(shape), shape)]
    for _ in range(n):
        start = tuple(int(rng.integers(0, size)) for size in shape)
        count = tuple(int(rng.integers(1, size - first + 1)) for size, first in zip(shape, start))
        out.append((start, count))
    return out


def index(start, count):
    return tuple(slice(first, first + n) for first, n in zip(start, count))


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dims", [1, 2, 3, 4])
def test_subarray_round_trips_match_numpy_slicing(client, path, dims, order):
    shape = SHAPES[dims]
    rng = np.random.default_rng(dims * 10 + (order == "F"))
    offset = 4096 + dims
    local = np.zeros(shape, dtype=np.float64)
    f = client.create(path, stripe_unit=4096)
    for start, count in blocks(shape, rng):
        block = rng.standard_normal(count)
        f.write_array(block, shape, start=start, order=order, offset=offset)
        local[index(start, count)] = block
        # One call is one request per involved server, never one per row.
        assert f.last_io["requests"] <= 4
        assert f.last_io["bytes"] == block.nbytes
    for start, count in blocks(shape, rng):
        got = f.read_array(shape, np.float64, start=start, count=count, order=order, offset=offset)
        assert got.shape == tuple(count)
        np.testing.assert_array_equal(got, local[index(start, count)])
        assert f.last_io["requests"] <= 4
    # The file holds the array in the order asked for, from `offset`.
    raw = f.read(offset, local.nbytes)
    assert raw == local.tobytes(order=order)
    # Reading a block into a bigger array's strided view fills it in place.
    start, count = blocks(shape, rng, 1)[1]
    big = np.full(tuple(2 * n for n in count), -1.0)
    target = big[tuple(slice(None, None, 2) for _ in count)]
    returned = f.read_array(shape, start=start, count=count, order=order, offset=offset, out=target)
    assert returned is target
    np.testing.assert_array_equal(big[tuple(slice(None, None, 2) for _ in count)], local[index(start, count)])
    assert (big[tuple(slice(1, None, 2) for _ in count)] == -1.0).all()


def test_integer_and_small_dtypes(client, path):
    shape = (33, 17)
    local = np.arange(np.prod(shape), dtype=np.int16).reshape(shape)
    f = client.create(path)
    f.write_array(local, shape)
    got = f.read_array(shape, np.int16, start=(5, 3), count=(20, 11))
    np.testing.assert_array_equal(got, local[5:25, 3:14])
    got = f.read_array(shape, "i2", start=(32, 16))
    np.testing.assert_array_equal(got, local[32:, 16:])


def test_strided_view_is_written_without_a_copy(client, path):
    """`a[::2, 1:-1]` goes through its strides: one memory slice per row in place, no pack
    copy on the client, no NumPy temporary, one request per server."""
    rows, cols = 512, 1024
    a = np.arange(rows * cols, dtype=np.float64).reshape(rows, cols)
    view = a[::2, 1:-1]
    assert not view.flags.c_contiguous
    f = client.create(path, stripe_unit=1 << 20)
    f.set_transfer("gather")
    tracemalloc.start()
    try:
        f.write_array(view, (rows // 2, cols - 2))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    io = f.last_io
    # A contiguous copy of the view would be 4 MB; NumPy reports its allocations to
    # tracemalloc, so any ascontiguousarray would show here.
    assert peak < view.nbytes // 16, peak
    assert io["bytes"] == view.nbytes
    assert io["bytes_copied"] == 0
    # Each row of the view is one run; a stripe boundary inside a row cuts it once more.
    assert rows // 2 <= io["memory_pieces"] <= rows // 2 + view.nbytes // (1 << 20) + 4
    assert io["requests"] == io["servers"] <= 4
    np.testing.assert_array_equal(f.read_array((rows // 2, cols - 2), np.float64), view)


def test_strided_out_is_filled_in_place_without_a_copy(client, path):
    rows, cols = 256, 512
    local = np.random.default_rng(7).standard_normal((rows, cols))
    f = client.create(path, stripe_unit=1 << 20)
    f.write_array(local, (rows, cols))
    f.set_transfer("gather")
    big = np.zeros((rows, 2 * cols))
    out = big[:, ::2]
    tracemalloc.start()
    try:
        f.read_array((rows, cols), np.float64, out=out)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < out.nbytes // 16, peak
    np.testing.assert_array_equal(big[:, ::2], local)
    assert (big[:, 1::2] == 0).all()
    assert f.last_io["bytes_copied"] == 0
    # Every element is its own run in memory: they are all moved in place.
    assert f.last_io["memory_pieces"] >= rows * cols


def test_negative_strides_and_transposes(client, path):
    a = np.arange(30 * 40, dtype=np.float32).reshape(30, 40)
    f = client.create(path)
    for i, view in enumerate([a[::-1], a[:, ::-3], a.T, a[::-2, ::5].T]):
        shape = view.shape
        f.write_array(view, shape, offset=i * 8192)
        np.testing.assert_array_equal(f.read_array(shape, np.float32, offset=i * 8192), view)
        assert f.read(i * 8192, view.nbytes) == view.tobytes()


def test_fortran_order_array_in_memory_and_file(client, path):
    a = np.asfortranarray(np.arange(24.0).reshape(4, 6))
    f = client.create(path)
    f.write_array(a, (8, 8), start=(2, 1), order="F")
    full = np.zeros((8, 8))
    full[2:6, 1:7] = a
    assert f.read(0, full.nbytes) == full.tobytes(order="F")
    got = f.read_array((8, 8), np.float64, order="F")
    assert got.flags.f_contiguous
    np.testing.assert_array_equal(got, full)


def test_list_io_and_views(client, path):
    f = client.create(path)
    data = bytes(range(256)) * 4
    pieces = [(0, 100), (5000, 300), (70000, 624)]
    assert f.write_list(pieces, data) == len(data)
    assert f.read_list(pieces) == data
    out = bytearray(len(data))
    assert f.read_list(pieces, out=out) is out
    assert out == data
    assert f.read(5000, 300) == data[100:400]
    # A view of the block [2:5, 3:7] of an 8 x 10 int32 array stored from byte 1024.
    view = f.set_view((8, 10), np.int32, start=(2, 3), count=(3, 4), offset=1024)
    assert view.size == 3 * 4 * 4
    block = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert view.write(0, block.tobytes()) == block.nbytes
    np.testing.assert_array_equal(
        f.read_array((8, 10), np.int32, start=(2, 3), count=(3, 4), offset=1024), block
    )
    assert view.read(16, 16) == block[1].tobytes()
    view.release()
    with pytest.raises(ValueError):
        view.read(0, 4)


def test_empty_blocks_move_nothing(client, path):
    f = client.create(path)
    f.write_array(np.zeros((0, 5)), (4, 5))
    got = f.read_array((4, 5), np.float64, start=(4, 0), count=(0, 5))
    assert got.shape == (0, 5)
