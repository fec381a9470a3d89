/* Without a reachable cluster, opening a Tessera file fails with MPI_ERR_IO and a message
 * naming the problem; it does not hang or crash, and files outside Tessera still work. Run
 * with $TESSERA_CLUSTER naming a missing file. */
#include "common.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    char name[512], oracle[512];
    test_names("nocluster", name, oracle, sizeof name);
    MPI_File fh;
    int code = MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR,
                             MPI_INFO_NULL, &fh);
    CHECK(error_class_of(code) == MPI_ERR_IO, "open without a cluster gave class %d (%s)",
          error_class_of(code), error_text(code));
    CHECK(fh == MPI_FILE_NULL, "a failed open left a handle");
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, oracle, MPI_MODE_CREATE | MPI_MODE_RDWR,
                            MPI_INFO_NULL, &fh));
    CHECK_MPI(MPI_File_close(&fh));
    PASS("nocluster: MPI_ERR_IO without a cluster; other files unaffected");
    MPI_Finalize();
    return 0;
}
