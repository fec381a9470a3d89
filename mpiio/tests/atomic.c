/* Atomic mode: two processes overwrite the same 64 KiB region (striped over every server in
 * 4 KiB units) again and again while two others read it; with MPI_File_set_atomicity(1) a
 * reader sees the region whole from one write (or never written), never a mix of writes. */
#include "common.h"

#define INTS 16384
#define ROUNDS 20

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = test_rank(), size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size == 4, "run with 4 processes, not %d", size);
    char name[512];
    test_names("atomic", name, NULL, sizeof name);
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "striping_unit", "4096");
    MPI_File fh;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh));
    CHECK_MPI(MPI_File_set_atomicity(fh, 1));
    int *region = malloc(sizeof(int) * INTS);
    int mixed = 0;
    for (int round = 0; round < ROUNDS; round++) {
        if (rank < 2) {
            for (int i = 0; i < INTS; i++)
                region[i] = (rank + 1) * 1000 + round;
            CHECK_MPI(MPI_File_write_at(fh, 0, region, INTS, MPI_INT, MPI_STATUS_IGNORE));
        } else {
            CHECK_MPI(MPI_File_read_at(fh, 0, region, INTS, MPI_INT, MPI_STATUS_IGNORE));
            for (int i = 1; i < INTS; i++)
                if (region[i] != region[0]) {
                    mixed++;
                    fprintf(stderr, "rank %d round %d: int %d is %d, int 0 is %d\n", rank,
                            round, i, region[i], region[0]);
                    break;
                }
        }
    }
    CHECK(mixed == 0, "%d reads saw a mix of writes in atomic mode", mixed);
    CHECK_MPI(MPI_File_close(&fh));
    MPI_Info_free(&info);
    free(region);
    PASS("atomic: readers never see a mix of two writers' overlapping writes");
    MPI_Finalize();
    return 0;
}
