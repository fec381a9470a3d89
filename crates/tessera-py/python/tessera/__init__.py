"""Tessera from Python: files, piece lists and N-d NumPy subarrays, each in one call.

    >>> import numpy, tessera
    >>> client = tessera.connect()              # the cluster file in $TESSERA_CLUSTER
    >>> f = client.create("/grid")
    >>> f.write_array(numpy.arange(16.0).reshape(4, 4), file_shape=(8, 8), start=(2, 2))
    >>> f.read_array((8, 8), numpy.float64, start=(2, 2), count=(2, 2))
    array([[0., 1.],
           [4., 5.]])

An array call moves a block of a C- or Fortran-ordered array stored in the file as one
datatype request per server; a strided NumPy view is moved through its strides, with no
contiguous copy, and ``out=`` arrays are filled in place. Failures are ``OSError``
subclasses carrying an errno (``FileNotFoundError``, ``PermissionError``, ...). The GIL is
released while a call waits on the servers. See docs/PYTHON.md.
"""

from ._tessera import ARRAY_DIMS_MAX, Client, File, Stat, View, connect

__all__ = ["ARRAY_DIMS_MAX", "Client", "File", "Stat", "View", "connect"]
