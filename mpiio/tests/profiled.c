/* A program under a profiling layer (profiler_layer.c) stacked in front of the shim: its
 * MPI_File_* calls reach the layer, which counts them and calls PMPI_File_*. Those must reach
 * the shim: the Tessera file is served by the shim (get_info reports tessera_method, which
 * only the shim sets; run.sh checks with `tessera stat` that the file is in the cluster with
 * the size written), and the reference file, a local one, by the MPI's own MPI-IO through the
 * shim (no tessera_method). Both files get the same blocks and must read back alike; the
 * layer must have seen every call. Then the program calls PMPI_File_* itself, past the layer
 * (the MPI-4 large-count _c forms where the MPI has them), on a third file, which the shim must
 * serve too. Usage: profiled TAG (the Tessera files are $TSR_TEST_PREFIX-profiled-TAG and
 * $TSR_TEST_PREFIX-profiled-TAG-pmpi; 4 processes). */
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
    /* A program written against the profiling interface calls PMPI_File_* itself (past the
     * layer, which must not count them): the shim must serve them too, with the MPI-4
     * large-count forms where the MPI has them. */
    char direct[512];
    snprintf(base, sizeof base, "profiled-%s-pmpi", argv[1]);
    test_names(base, direct, NULL, sizeof direct);
    MPI_File fh;
    CHECK_MPI(PMPI_File_open(MPI_COMM_WORLD, direct, MPI_MODE_CREATE | MPI_MODE_RDWR,
                             MPI_INFO_NULL, &fh));
    for (int i = 0; i < INTS; i++)
        block[i] = rank * 1000000 + i;
    MPI_Info info;
    char value[MPI_MAX_INFO_VAL + 1];
    int flag = 0;
    CHECK_MPI(PMPI_File_get_info(fh, &info));
    MPI_Info_get(info, "tessera_method", MPI_MAX_INFO_VAL, value, &flag);
    MPI_Info_free(&info);
    CHECK(flag, "%s: PMPI_File_get_info has no tessera_method: the shim did not open it", direct);
#if MPI_VERSION >= 4
    const char *forms = "PMPI_File_write_at_c, PMPI_File_read_at_all_c";
    CHECK_MPI(PMPI_File_write_at_c(fh, (MPI_Offset)rank * sizeof block, block, (MPI_Count)INTS,
                                   MPI_INT, MPI_STATUS_IGNORE));
    MPI_Barrier(MPI_COMM_WORLD);
    memset(back, 0, sizeof back);
    CHECK_MPI(PMPI_File_read_at_all_c(fh, (MPI_Offset)other * sizeof back, back,
                                      (MPI_Count)INTS, MPI_INT, MPI_STATUS_IGNORE));
#else
    const char *forms = "PMPI_File_write_at, PMPI_File_read_at_all";
    CHECK_MPI(PMPI_File_write_at(fh, (MPI_Offset)rank * sizeof block, block, INTS, MPI_INT,
                                 MPI_STATUS_IGNORE));
    MPI_Barrier(MPI_COMM_WORLD);
    memset(back, 0, sizeof back);
    CHECK_MPI(PMPI_File_read_at_all(fh, (MPI_Offset)other * sizeof back, back, INTS, MPI_INT,
                                    MPI_STATUS_IGNORE));
#endif
    for (int i = 0; i < INTS; i++)
        CHECK(back[i] == other * 1000000 + i, "%s: int %d is %d", direct, i, back[i]);
    MPI_Offset bytes = 0;
    CHECK_MPI(PMPI_File_get_size(fh, &bytes));
    CHECK(bytes == size * (MPI_Offset)sizeof block, "%s: size %lld", direct, (long long)bytes);
    CHECK_MPI(PMPI_File_close(&fh));
    PASS("a program calling PMPI_File_* itself (%s) reaches Tessera", forms);

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
