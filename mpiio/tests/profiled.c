/* A program under a profiling layer (profiler_layer.c) stacked in front of the shim: its
 * MPI_File_* calls reach the layer, which counts them and calls PMPI_File_*. Those must reach
 * the shim: the Tessera file is served by the shim (get_info reports tessera_method, which
 * only the shim sets; run.sh checks with `tessera stat` that the file is in the cluster with
 * the size written), and the reference file, a local one, by the MPI's own MPI-IO through the
 * shim (no tessera_method). Both files get the same blocks and must read back alike; the
 * layer must have seen every call. Usage: profiled TAG (the Tessera file is
 * $TSR_TEST_PREFIX-profiled-TAG; 4 processes). */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "common.h"

#define INTS 4096

typedef long (*count_fn)(const char *);

static void expect_calls(count_fn count, const char *name, long expected) {
    long seen = count(name);
    CHECK(seen == expected, "the profiling layer saw %ld calls of %s, expected %ld", seen, name,
          expected);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = test_rank(), size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(argc == 2, "usage: profiled TAG");
    count_fn count = (count_fn)dlsym(RTLD_DEFAULT, "tsr_profiler_count");
    CHECK(count != NULL, "the profiling layer is not loaded");
    char base[64], names[2][512];
    snprintf(base, sizeof base, "profiled-%s", argv[1]);
    test_names(base, names[0], names[1], sizeof names[0]);

    int block[INTS], back[INTS];
    int other = (rank + 1) % size;
    for (int k = 0; k < 2; k++) {
        MPI_File fh;
        CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, names[k], MPI_MODE_CREATE | MPI_MODE_RDWR,
                                MPI_INFO_NULL, &fh));
        MPI_Info info;
        char value[MPI_MAX_INFO_VAL + 1];
        int flag = 0;
        CHECK_MPI(MPI_File_get_info(fh, &info));
        MPI_Info_get(info, "tessera_method", MPI_MAX_INFO_VAL, value, &flag);
        MPI_Info_free(&info);
        CHECK(flag == (k == 0), "%s: %s", names[k],
              k == 0 ? "get_info has no tessera_method: the shim did not open it"
                     : "a local file reports tessera_method");
        for (int i = 0; i < INTS; i++)
            block[i] = rank * 1000000 + i;
        CHECK_MPI(MPI_File_write_at(fh, (MPI_Offset)rank * sizeof block, block, INTS, MPI_INT,
                                    MPI_STATUS_IGNORE));
        for (int i = 0; i < INTS; i++)
            block[i] = -(rank * 1000000 + i);
        CHECK_MPI(MPI_File_write_at_all(fh, (MPI_Offset)(size + rank) * sizeof block, block,
                                        INTS, MPI_INT, MPI_STATUS_IGNORE));
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Offset bytes = 0;
        CHECK_MPI(MPI_File_get_size(fh, &bytes));
        CHECK(bytes == 2 * size * (MPI_Offset)sizeof block, "%s: size %lld", names[k],
              (long long)bytes);
        memset(back, 0, sizeof back);
        CHECK_MPI(MPI_File_read_at(fh, (MPI_Offset)other * sizeof back, back, INTS, MPI_INT,
                                   MPI_STATUS_IGNORE));
        for (int i = 0; i < INTS; i++)
            CHECK(back[i] == other * 1000000 + i, "%s: read_at int %d is %d", names[k], i,
                  back[i]);
        memset(back, 0, sizeof back);
        CHECK_MPI(MPI_File_read_at_all(fh, (MPI_Offset)(size + other) * sizeof back, back,
                                       INTS, MPI_INT, MPI_STATUS_IGNORE));
        for (int i = 0; i < INTS; i++)
            CHECK(back[i] == -(other * 1000000 + i), "%s: read_at_all int %d is %d", names[k],
                  i, back[i]);
        CHECK_MPI(MPI_File_close(&fh));
    }
    /* Every call went through the layer, once for each file. */
    const char *calls[] = {"MPI_File_open",        "MPI_File_close",   "MPI_File_write_at",
                           "MPI_File_read_at",     "MPI_File_write_at_all",
                           "MPI_File_read_at_all", "MPI_File_get_size", "MPI_File_get_info"};
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
        expect_calls(count, calls[i], 2);
    PASS("profiling layer (%s) in front of the shim saw 16 calls; the Tessera file was served "
         "by the shim, the local one by the MPI's own MPI-IO, both read back alike", argv[1]);
    MPI_Finalize();
    return 0;
}
