"""Run by test_mpi.py under `mpirun -n 2`: the collective array calls over mpi4py.

Each rank owns a block-column of a 2-D array (so the ranks' file spans interleave and the
server-directed collective really merges them at the servers), writes it collectively,
reads it back collectively into a strided `out=`, and rank 0 checks the whole file.
Usage: mpi_collective.py CLUSTER_FILE PATH METHOD
"""

import sys

import numpy as np
from mpi4py import MPI

import tessera

cluster, path, method = sys.argv[1:4]
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
client = tessera.connect(cluster)
if rank == 0:
    client.create(path)
comm.Barrier()
f = client.open(path, "r+")

rows, cols = 64, 48
full = np.arange(rows * cols, dtype=np.float64).reshape(rows, cols)
width = cols // size
start = (0, rank * width)
mine = full[:, rank * width : (rank + 1) * width]
# The memory side is a strided view of the whole array: no copy either.
f.write_array_all(comm, mine, (rows, cols), start=start, offset=512, method=method)
written = f.last_io

big = np.zeros((rows, 2 * width))
out = big[:, ::2]
got = f.read_array_all(
    comm, (rows, cols), np.float64, start=start, count=(rows, width), offset=512, out=out, method=method
)
assert got is out
np.testing.assert_array_equal(big[:, ::2], mine)
assert (big[:, 1::2] == 0).all()

comm.Barrier()
if rank == 0:
    whole = f.read_array((rows, cols), np.float64, offset=512)
    np.testing.assert_array_equal(whole, full)
print(f"ok rank {rank} {method} requests={written['requests']} bytes={written['bytes']}", flush=True)
