"""Times reading a 1024 x 1024 block of a 2048 x 2048 float64 array three ways, medians of 5:

- `File.read_array` (one call: one datatype request per involved server);
- `np.fromfile` of the same number of bytes (8 MiB) from a local file (page cache);
- a row-by-row Python loop of `File.read` (1024 calls).

Usage: TESSERA_CLUSTER=... python3 read_array.py [LOCAL_DIR]
"""

import os
import statistics
import sys
import tempfile
import time

import numpy as np

import tessera

N, BLOCK, START = 2048, 1024, 512
REPEATS = 5


def median_seconds(call):
    times = []
    for _ in range(REPEATS):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main():
    client = tessera.connect()
    array = np.random.default_rng(1).standard_normal((N, N))
    f = client.create("/bench-read-array")
    f.write_array(array, (N, N))
    expected = array[START : START + BLOCK, START : START + BLOCK]

    def read_array():
        got = f.read_array((N, N), np.float64, start=(START, START), count=(BLOCK, BLOCK))
        assert got.shape == (BLOCK, BLOCK)
        return got

    np.testing.assert_array_equal(read_array(), expected)

    local_dir = sys.argv[1] if len(sys.argv) > 1 else tempfile.gettempdir()
    local = os.path.join(local_dir, "tessera-bench-read-array.bin")
    array.tofile(local)
    block_bytes = BLOCK * BLOCK * 8

    def fromfile():
        got = np.fromfile(local, dtype=np.float64, count=BLOCK * BLOCK, offset=START * N * 8)
        assert got.nbytes == block_bytes
        return got

    def row_loop():
        out = np.empty((BLOCK, BLOCK))
        for row in range(BLOCK):
            offset = ((START + row) * N + START) * 8
            out[row] = np.frombuffer(f.read(offset, BLOCK * 8), dtype=np.float64)
        return out

    np.testing.assert_array_equal(row_loop(), expected)
    results = {
        "read_array (1 call)": median_seconds(read_array),
        "np.fromfile local 8 MiB": median_seconds(fromfile),
        "File.read row loop (1024 calls)": median_seconds(row_loop),
    }
    base = results["read_array (1 call)"]
    for name, seconds in results.items():
        print(
            f"{name:34s} {seconds * 1e3:8.2f} ms  {block_bytes / seconds / 2**20:8.0f} MiB/s"
            f"  x{seconds / base:.2f} of read_array"
        )
    os.remove(local)
    client.remove("/bench-read-array")


if __name__ == "__main__":
    main()
