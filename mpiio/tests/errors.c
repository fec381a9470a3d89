/* Error classes and error handlers: each failure comes back with its MPI error class, goes
 * through the handler the program attached (to the file, or to MPI_FILE_NULL for open and
 * delete), and never crashes. */
#include "common.h"

static int handler_calls;
static MPI_File handler_file;
static int handler_class;

static void count_errors(MPI_File *fh, int *code, ...) {
    handler_calls++;
    handler_file = *fh;
    handler_class = error_class_of(*code);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = test_rank();
    char name[512], missing[512];
    test_names("errors", name, NULL, sizeof name);
    test_names("errors-missing", missing, NULL, sizeof missing);
    MPI_File fh;

    CHECK_CLASS(MPI_File_delete(missing, MPI_INFO_NULL), MPI_ERR_NO_SUCH_FILE);
    CHECK_CLASS(MPI_File_open(MPI_COMM_WORLD, missing, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh),
                MPI_ERR_NO_SUCH_FILE);
    CHECK(fh == MPI_FILE_NULL, "a failed open left a handle");
    CHECK_CLASS(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDONLY | MPI_MODE_CREATE,
                              MPI_INFO_NULL, &fh), MPI_ERR_AMODE);
    CHECK_CLASS(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDWR | MPI_MODE_WRONLY,
                              MPI_INFO_NULL, &fh), MPI_ERR_AMODE);
    PASS("errors: delete and open of a missing file give MPI_ERR_NO_SUCH_FILE; bad modes "
         "MPI_ERR_AMODE");

    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR,
                            MPI_INFO_NULL, &fh));
    CHECK_MPI(MPI_File_close(&fh));
    CHECK_CLASS(MPI_File_open(MPI_COMM_WORLD, name,
                              MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_RDWR, MPI_INFO_NULL,
                              &fh), MPI_ERR_FILE_EXISTS);
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh));
    int value = 42;
    CHECK_CLASS(MPI_File_write_at(fh, 0, &value, 1, MPI_INT, MPI_STATUS_IGNORE),
                MPI_ERR_READ_ONLY);
    CHECK_CLASS(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "no-such-representation",
                                  MPI_INFO_NULL), MPI_ERR_UNSUPPORTED_DATAREP);
    CHECK_CLASS(MPI_File_read_at(fh, -4, &value, 1, MPI_INT, MPI_STATUS_IGNORE), MPI_ERR_ARG);
    CHECK_CLASS(MPI_File_seek(fh, 0, 12345), MPI_ERR_ARG);
    CHECK_CLASS(MPI_File_read_all_end(fh, &value, MPI_STATUS_IGNORE), MPI_ERR_OTHER);
    PASS("errors: exclusive create of an existing file, writes to a read-only file, "
         "an unknown data representation, negative offsets, bad whence, an _end without _begin");

    /* The file's own handler sees errors on it, with the program's handle. */
    MPI_Errhandler counting;
    CHECK_MPI(MPI_File_create_errhandler(count_errors, &counting));
    CHECK_MPI(MPI_File_set_errhandler(fh, counting));
    handler_calls = 0;
    MPI_File_write_at(fh, 0, &value, 1, MPI_INT, MPI_STATUS_IGNORE);
    CHECK(handler_calls == 1 && handler_file == fh && handler_class == MPI_ERR_READ_ONLY,
          "the file's handler ran %d times (class %d)", handler_calls, handler_class);
    CHECK_MPI(MPI_File_close(&fh));
    /* The default handler (on MPI_FILE_NULL) sees open and delete failures. */
    CHECK_MPI(MPI_File_set_errhandler(MPI_FILE_NULL, counting));
    handler_calls = 0;
    MPI_File_delete(missing, MPI_INFO_NULL);
    MPI_File_open(MPI_COMM_WORLD, missing, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    CHECK(handler_calls == 2 && handler_class == MPI_ERR_NO_SUCH_FILE,
          "the default handler ran %d times (class %d)", handler_calls, handler_class);
    CHECK_MPI(MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN));
    MPI_Errhandler_free(&counting);
    PASS("errors: the file's handler and the default handler are called");

    /* Delete works, and then the file is gone. */
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        CHECK_MPI(MPI_File_delete(name, MPI_INFO_NULL));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_CLASS(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh),
                MPI_ERR_NO_SUCH_FILE);
    PASS("errors: a deleted file is gone");
    MPI_Finalize();
    return 0;
}
