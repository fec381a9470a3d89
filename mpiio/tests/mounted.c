/* An MPI program's POSIX calls on a Tessera mount: the cluster is mounted (`tessera mount`)
 * on the directory named in $TESSERA_MPIIO_PATHS, so the program's MPI-IO on names under it
 * goes through the shim to Tessera while its POSIX calls (fopen, stat, open, unlink) go to
 * the kernel and through the mount, with no interposition. The program writes with
 * collective MPI-IO and checks the file with stdio; writes a file with stdio and reads it
 * with MPI-IO; removes a file with unlink() and finds MPI-IO no longer sees it.
 * argv[1]: a directory under the mount. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

#define INTS_PER_RANK 40000 /* 160 000 bytes per process: spans stripes on every server */

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(argc == 2, "usage: mounted DIRECTORY-UNDER-THE-MOUNT");
    char written[4096], stdio_name[4096];
    snprintf(written, sizeof written, "%s/mpi-written", argv[1]);
    snprintf(stdio_name, sizeof stdio_name, "%s/stdio-written", argv[1]);
    MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN);

    /* 1. MPI-IO writes, stdio checks: each process's block at its rank's offset. */
    int *block = malloc(INTS_PER_RANK * sizeof *block);
    for (int i = 0; i < INTS_PER_RANK; i++)
        block[i] = rank * INTS_PER_RANK + i;
    MPI_File file;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, written, MPI_MODE_CREATE | MPI_MODE_WRONLY,
                            MPI_INFO_NULL, &file));
    MPI_Offset offset = (MPI_Offset)rank * INTS_PER_RANK * (MPI_Offset)sizeof(int);
    CHECK_MPI(MPI_File_write_at_all(file, offset, block, INTS_PER_RANK, MPI_INT,
                                    MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_File_close(&file));
    long total = (long)size * INTS_PER_RANK;
    if (rank == 0) {
        struct stat attributes;
        CHECK(stat(written, &attributes) == 0, "stat %s: %s", written, strerror(errno));
        CHECK(S_ISREG(attributes.st_mode) && attributes.st_size == total * (long)sizeof(int),
              "stat %s: size %ld, expected %ld", written, (long)attributes.st_size,
              total * (long)sizeof(int));
        FILE *stream = fopen(written, "rb");
        CHECK(stream != NULL, "fopen %s: %s", written, strerror(errno));
        int *all = malloc(total * sizeof *all);
        CHECK(fread(all, sizeof *all, total, stream) == (size_t)total, "fread %s", written);
        CHECK(fgetc(stream) == EOF, "%s is longer than written", written);
        fclose(stream);
        for (long i = 0; i < total; i++)
            CHECK(all[i] == (int)i, "%s: int %ld is %d", written, i, all[i]);
        /* open()/pread() through the mount: a piece of rank 1's block. */
        int descriptor = open(written, O_RDONLY);
        CHECK(descriptor >= 0, "open %s: %s", written, strerror(errno));
        int piece[16];
        CHECK(pread(descriptor, piece, sizeof piece, (off_t)(INTS_PER_RANK + 7) * 4) ==
                  (ssize_t)sizeof piece,
              "pread %s", written);
        for (int i = 0; i < 16; i++)
            CHECK(piece[i] == INTS_PER_RANK + 7 + i, "pread %s: int %d is %d", written, i, piece[i]);
        close(descriptor);
        free(all);
        printf("ok mounted: MPI-IO wrote %ld ints, stdio and open/pread read them through the mount\n",
               total);

        /* 2. stdio writes (through the mount), for MPI-IO to read below. */
        stream = fopen(stdio_name, "wb");
        CHECK(stream != NULL, "fopen %s for writing: %s", stdio_name, strerror(errno));
        for (long i = 0; i < total; i++) {
            int word = (int)(3 * i + 1);
            CHECK(fwrite(&word, sizeof word, 1, stream) == 1, "fwrite %s", stdio_name);
        }
        CHECK(fclose(stream) == 0, "fclose %s: %s", stdio_name, strerror(errno));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, stdio_name, MPI_MODE_RDONLY, MPI_INFO_NULL, &file));
    MPI_Offset bytes = 0;
    CHECK_MPI(MPI_File_get_size(file, &bytes));
    CHECK(bytes == total * (MPI_Offset)sizeof(int), "MPI_File_get_size %s: %lld", stdio_name,
          (long long)bytes);
    CHECK_MPI(MPI_File_read_at_all(file, offset, block, INTS_PER_RANK, MPI_INT,
                                   MPI_STATUS_IGNORE));
    for (int i = 0; i < INTS_PER_RANK; i++) {
        long index = (long)rank * INTS_PER_RANK + i;
        CHECK(block[i] == (int)(3 * index + 1), "%s: int %ld is %d", stdio_name, index, block[i]);
    }
    CHECK_MPI(MPI_File_close(&file));
    if (rank == 0)
        printf("ok mounted: stdio wrote through the mount, MPI-IO read it from Tessera\n");

    /* 3. unlink() through the mount; MPI-IO then finds no file. */
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        CHECK(unlink(written) == 0, "unlink %s: %s", written, strerror(errno));
        struct stat attributes;
        CHECK(stat(written, &attributes) != 0 && errno == ENOENT, "stat %s after unlink", written);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    int code = MPI_File_open(MPI_COMM_WORLD, written, MPI_MODE_RDONLY, MPI_INFO_NULL, &file);
    int class = MPI_SUCCESS;
    MPI_Error_class(code, &class);
    CHECK(class == MPI_ERR_NO_SUCH_FILE, "MPI_File_open of the unlinked %s: %s", written,
          error_text(code));
    if (rank == 0)
        printf("ok mounted: unlink through the mount removed the file MPI-IO made\n");
    free(block);
    MPI_Finalize();
    return 0;
}
