"""New files and directories take the process's umask, as os.open and os.mkdir apply it: the
default modes (0o666, 0o777) and given ones alike."""

import os
import stat

import pytest


@pytest.fixture
def umask():
    """Sets the process's umask for one test and puts the old one back."""
    saved = os.umask(0o022)
    os.umask(saved)
    yield os.umask
    os.umask(saved)


@pytest.mark.parametrize(
    "mask, directory, created, given_directory, given_file",
    [
        (0o077, 0o700, 0o600, 0o700, 0o600),
        (0o022, 0o755, 0o644, 0o755, 0o644),
    ],
)
def test_new_entries_take_the_umask(
    client, path, umask, mask, directory, created, given_directory, given_file
):
    umask(mask)
    client.mkdir(path + ".d")
    client.create(path).close()
    client.mkdir(path + ".given.d", mode=0o775)
    client.create(path + ".given", mode=0o664).close()
    modes = [
        stat.S_IMODE(client.stat(name).mode)
        for name in (path + ".d", path, path + ".given.d", path + ".given")
    ]
    assert modes == [directory, created, given_directory, given_file]
    assert stat.S_ISDIR(client.stat(path + ".d").mode)
    for name in (path, path + ".given"):
        client.remove(name)
    for name in (path + ".d", path + ".given.d"):
        client.rmdir(name)
