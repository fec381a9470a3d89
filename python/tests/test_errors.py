"""Failures are OSError subclasses with an errno; bad arguments are ValueError/TypeError."""

import errno

import numpy as np
import pytest

import tessera


def test_namespace_errors_carry_errno(client, path):
    with pytest.raises(FileNotFoundError) as caught:
        client.open(path + ".missing")
    assert caught.value.errno == errno.ENOENT
    assert caught.value.filename == path + ".missing"
    client.create(path)
    with pytest.raises(FileExistsError) as caught:
        client.create(path, exclusive=True)
    assert caught.value.errno == errno.EEXIST
    client.mkdir(path + ".d")
    with pytest.raises(FileExistsError):
        client.mkdir(path + ".d")
    with pytest.raises(IsADirectoryError) as caught:
        client.open(path + ".d")
    assert caught.value.errno == errno.EISDIR
    client.create(path + ".d/inner")
    with pytest.raises(OSError) as caught:
        client.rmdir(path + ".d")
    assert caught.value.errno == errno.ENOTEMPTY
    with pytest.raises(FileNotFoundError):
        client.stat(path + ".d/none")
    with pytest.raises(FileNotFoundError):
        client.rename(path + ".none", path + ".other")
    client.rename(path, path + ".moved")
    assert client.stat(path + ".moved").is_file()
    assert path.rsplit("/", 1)[1] + ".moved" in client.listdir("/pytest")
    client.remove(path + ".moved")
    with pytest.raises(FileNotFoundError):
        client.remove(path + ".moved")
    client.remove(path + ".d/inner")
    client.rmdir(path + ".d")


def test_mode_errors_are_permission_errors(client, path):
    client.create(path).write(0, b"abc")
    reader = client.open(path, "r")
    with pytest.raises(PermissionError) as caught:
        reader.write(0, b"x")
    assert caught.value.errno == errno.EACCES
    with pytest.raises(PermissionError):
        reader.write_array(np.zeros(3), (3,))
    writer = client.open(path, "w")
    with pytest.raises(PermissionError):
        writer.read(0, 3)
    with pytest.raises(ValueError, match="open mode"):
        client.open(path, "x")


def test_bad_arguments(client, path):
    f = client.create(path)
    with pytest.raises(ValueError, match="dimension 0"):
        f.read_array((4, 4), np.float64, start=(3, 0), count=(2, 4))
    with pytest.raises(ValueError, match="dimensions"):
        f.write_array(np.zeros((2, 2)), (4, 4, 4))
    with pytest.raises(ValueError, match="order"):
        f.read_array((4,), np.float64, order="K")
    with pytest.raises(TypeError, match="dtype"):
        f.read_array((4,))
    out = np.zeros(4)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        f.read_array((4,), out=out)
    with pytest.raises(ValueError, match="count"):
        f.read_array((8,), np.float64, count=(3,), out=np.zeros(4))
    with pytest.raises(TypeError, match="differs"):
        f.read_array((8,), np.int32, out=np.zeros(8))
    with pytest.raises(ValueError, match="bytes but the pieces"):
        f.write_list([(0, 10)], b"short")
    with pytest.raises(TypeError, match="contiguous"):
        f.write(0, memoryview(np.zeros((4, 4))[:, ::2]))
    # An `out` whose elements overlap (stride 0) cannot be read into: the client refuses
    # a memory type that selects a byte twice.
    overlapping = np.lib.stride_tricks.as_strided(np.zeros(1), (4,), (0,))
    with pytest.raises(OSError) as caught:
        f.read_array((4,), out=overlapping)
    assert caught.value.errno == errno.EINVAL
    f.close()
    assert f.closed
    with pytest.raises(ValueError, match="closed"):
        f.read(0, 1)


def test_limits_are_errors(client, path):
    f = client.create(path)
    with pytest.raises(ValueError, match="piece_bytes_max"):
        f.read(0, 1 << 62)


def test_connect_errors(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError):
        tessera.connect(str(tmp_path / "none.toml"))
    monkeypatch.delenv("TESSERA_CLUSTER", raising=False)
    with pytest.raises(ValueError, match="TESSERA_CLUSTER"):
        tessera.connect()
    bad = tmp_path / "bad.toml"
    bad.write_text("not a cluster file")
    with pytest.raises(OSError) as caught:
        tessera.connect(str(bad))
    assert caught.value.errno == errno.EINVAL
