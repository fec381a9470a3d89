"""Structured dtypes move as struct datatypes: each field at its offset, padding skipped."""

import numpy as np
import pytest


def test_aligned_struct_skips_padding(client, path):
    dt = np.dtype([("a", "i4"), ("b", "f8"), ("c", "u1")], align=True)
    assert dt.itemsize == 24
    s = np.zeros(50, dtype=dt)
    s["a"] = np.arange(50)
    s["b"] = np.arange(50) * 0.5
    s["c"] = np.arange(50) % 7
    f = client.create(path)
    f.write(0, b"\xee" * (100 * dt.itemsize))
    f.write_array(s, (100,), start=(30,))
    io = f.last_io
    assert io["bytes"] == 50 * (4 + 8 + 1)
    got = f.read_array((100,), dt, start=(30,), count=(50,))
    for name in dt.names:
        np.testing.assert_array_equal(got[name], s[name])
    # The fields are at their offsets in the file; the padding kept the bytes under it.
    raw = np.frombuffer(f.read(0, 100 * dt.itemsize), dtype=dt)
    np.testing.assert_array_equal(raw["a"][30:80], s["a"])
    np.testing.assert_array_equal(raw["b"][30:80], s["b"])
    raw_bytes = f.read(30 * dt.itemsize + 4, 4)
    assert raw_bytes == b"\xee" * 4


def test_nested_and_subarray_fields_2d(client, path):
    inner = np.dtype([("x", "f4"), ("y", "f4")])
    dt = np.dtype([("id", "i8"), ("pos", inner), ("v", "f8", (3,))])
    a = np.zeros((6, 7), dtype=dt)
    a["id"] = np.arange(42).reshape(6, 7)
    a["pos"]["x"] = 1.5
    a["pos"]["y"] = np.arange(42).reshape(6, 7) * 2.0
    a["v"] = np.arange(42 * 3).reshape(6, 7, 3)
    f = client.create(path)
    f.write_array(a[1:5, ::2], (10, 10), start=(3, 3), order="F")
    got = f.read_array((10, 10), dt, start=(3, 3), count=(4, 4), order="F")
    assert got.tobytes() == np.ascontiguousarray(a[1:5, ::2]).tobytes()


def test_field_subset_view_moves_only_those_fields(client, path):
    dt = np.dtype([("a", "i4"), ("b", "i4"), ("c", "i4")])
    s = np.zeros(10, dtype=dt)
    s["a"], s["b"], s["c"] = 1, 2, 3
    f = client.create(path)
    f.write_array(s, (10,))
    t = np.zeros(10, dtype=dt)
    t["a"], t["b"], t["c"] = 7, 8, 9
    subset = t[["a", "c"]]  # a view: fields a and c at offsets 0 and 8, itemsize 12
    f.write_array(subset, (10,))
    got = f.read_array((10,), dt)
    assert (got["a"] == 7).all() and (got["b"] == 2).all() and (got["c"] == 9).all()


def test_object_dtype_is_refused(client, path):
    f = client.create(path)
    with pytest.raises(TypeError, match="Python objects"):
        f.write_array(np.array([object(), object()]), (2,))
