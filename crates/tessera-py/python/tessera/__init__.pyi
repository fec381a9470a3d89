"""Type stubs of the package `tessera` (the native module `tessera._tessera`)."""

import os
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Literal, TypeVar

from typing_extensions import Buffer

import numpy
import numpy.typing

ARRAY_DIMS_MAX: int

_Order = Literal["C", "F"]
_Method = Literal["server_directed", "two_phase", "independent"]
_Transfer = Literal["auto", "gather", "pack", "multiple", "eager", "inline"]
_Array = TypeVar("_Array", bound=numpy.ndarray[Any, Any])

def connect(cluster: str | os.PathLike[str] | None = None) -> Client:
    """Connects to the cluster of the cluster file `cluster` (default `$TESSERA_CLUSTER`)."""

class Stat:
    """A file's or directory's attributes."""

    size: int
    mode: int
    uid: int
    gid: int
    nlink: int
    atime_ns: int
    mtime_ns: int
    ctime_ns: int
    handle: int
    kind: Literal["file", "directory"]
    def is_dir(self) -> bool: ...
    def is_file(self) -> bool: ...

class Client:
    """A connection to one cluster; safe to share between threads."""

    @property
    def cluster(self) -> str:
        """The cluster file."""
    def open(self, path: str, mode: Literal["r", "w", "r+"] = "r") -> File:
        """Opens an existing file for reading ('r'), writing ('w') or both ('r+')."""
    def create(
        self,
        path: str,
        mode: int = 0o666,
        exclusive: bool = False,
        stripe_unit: int | None = None,
        servers: int = 0,
    ) -> File:
        """Creates (or, unless `exclusive`, opens) a file for reading and writing, with `mode`
        less the process's umask (as `os.open`)."""
    def stat(self, path: str) -> Stat: ...
    def listdir(self, path: str) -> list[str]: ...
    def remove(self, path: str) -> None:
        """Removes a file."""
    def rmdir(self, path: str) -> None:
        """Removes an empty directory."""
    def rename(self, source: str, target: str) -> None: ...
    def mkdir(self, path: str, mode: int = 0o777) -> None:
        """Makes a directory, with `mode` less the process's umask (as `os.mkdir`)."""

class View:
    """The block of an array as one contiguous byte space, declared on the servers."""

    @property
    def size(self) -> int:
        """Bytes of one tile."""
    def read(self, offset: int, n: int) -> bytes: ...
    def write(self, offset: int, data: Buffer) -> int: ...
    def release(self) -> None: ...

class File:
    """An open file."""

    @property
    def path(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    @property
    def last_io(self) -> dict[str, int]:
        """What the last call did: requests, bytes, bytes_copied, memory_pieces,
        storage_pieces, storage_bytes, servers, messages_sent, messages_received,
        one_sided."""
    def read(self, offset: int, n: int) -> bytes: ...
    def write(self, offset: int, data: Buffer) -> int: ...
    def read_list(
        self, pieces: Sequence[tuple[int, int]], out: Buffer | None = None
    ) -> Any:
        """Reads the (offset, length) pieces in one call; bytes, or `out` filled."""
    def write_list(self, pieces: Sequence[tuple[int, int]], data: Buffer) -> int: ...
    def write_array(
        self,
        arr: numpy.typing.ArrayLike,
        file_shape: Sequence[int],
        start: Sequence[int] | None = None,
        order: _Order = "C",
        offset: int = 0,
    ) -> None:
        """Writes `arr` as the block from `start` of the file's array, in one call."""
    def read_array(
        self,
        file_shape: Sequence[int],
        dtype: numpy.typing.DTypeLike | None = None,
        start: Sequence[int] | None = None,
        count: Sequence[int] | None = None,
        order: _Order = "C",
        offset: int = 0,
        out: _Array | None = None,
    ) -> numpy.ndarray[Any, Any]:
        """Reads the block of `count` elements from `start`, in one call."""
    def write_array_all(
        self,
        comm: Any,
        arr: numpy.typing.ArrayLike,
        file_shape: Sequence[int],
        start: Sequence[int] | None = None,
        order: _Order = "C",
        offset: int = 0,
        method: _Method = "server_directed",
    ) -> None:
        """`write_array`, collectively over the mpi4py communicator `comm`."""
    def read_array_all(
        self,
        comm: Any,
        file_shape: Sequence[int],
        dtype: numpy.typing.DTypeLike | None = None,
        start: Sequence[int] | None = None,
        count: Sequence[int] | None = None,
        order: _Order = "C",
        offset: int = 0,
        out: _Array | None = None,
        method: _Method = "server_directed",
    ) -> numpy.ndarray[Any, Any]:
        """`read_array`, collectively over the mpi4py communicator `comm`."""
    def set_view(
        self,
        file_shape: Sequence[int],
        dtype: numpy.typing.DTypeLike,
        start: Sequence[int] | None = None,
        count: Sequence[int] | None = None,
        order: _Order = "C",
        offset: int = 0,
    ) -> View: ...
    def set_transfer(self, mechanism: _Transfer) -> None: ...
    def stat(self) -> Stat: ...
    def sync(self) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> File: ...
    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool: ...
