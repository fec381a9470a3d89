/* Permissions, run as an unprivileged user (run.sh starts the launcher under setpriv as uid
 * and gid 2001, no supplementary groups) against files root made beforehand:
 *
 *   permissions ROOT_ONLY ROOT_READABLE LOCAL_COPY ROOT_WRITABLE OWN_FILE FORBIDDEN_NEW
 *
 * ROOT_ONLY is root's file of mode 0600 in a world-writable sticky directory; ROOT_READABLE
 * root's file of mode 0644 in root's directory of mode 0755, whose bytes LOCAL_COPY holds;
 * ROOT_WRITABLE root's empty file of mode 0622 (rw--w--w-); OWN_FILE a name in the sticky
 * directory that this program creates; FORBIDDEN_NEW a name in root's directory of mode 0755. Every refusal must come back as MPI_ERR_ACCESS on every
 * process, with a message that names the path and says "permission denied"; what the user
 * may do (read root's readable file, write root's writable one without reading it, make,
 * write and read back its own file, use its shared pointer, delete its own file) must work. run.sh checks afterwards, as root, that
 * root's files are unchanged and that the user's file belongs to uid 2001. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "common.h"

#include <ctype.h>
#include <dlfcn.h>
#include <unistd.h>

#define BLOCK_BYTES 65536
#define RECORD_BYTES 16
#define WRITABLE_INTS 16

/* The Tessera path of a name given as tessera:/path. */
static const char *tessera_path(const char *name) {
    return strncmp(name, "tessera:", 8) == 0 ? name + 8 : name;
}

/* Does `text` contain `word`, ignoring case? */
static int contains_nocase(const char *text, const char *word) {
    size_t n = strlen(word);
    for (; *text; text++) {
        size_t i = 0;
        while (i < n && text[i] && tolower((unsigned char)text[i]) == tolower((unsigned char)word[i]))
            i++;
        if (i == n)
            return 1;
    }
    return 0;
}

/* The message of the error `code`: under Open MPI its MPI_Error_string (the shim gives each
 * class a dynamic code whose string is its latest message); under MPICH, which garbles
 * strings added to dynamic codes of predefined classes, the code is the class itself and the
 * message is the shim's tessera_mpiio_last_error() (docs/MPIIO.md, Errors). */
static const char *message_of(int code) {
#ifdef OPEN_MPI
    CHECK(code != MPI_ERR_ACCESS, "Open MPI: the code is the bare class, not a dynamic code "
          "with the shim's message");
    return error_text(code);
#else
    const char *(*last)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT,
                                                             "tessera_mpiio_last_error");
    CHECK(last != NULL, "the shim is not loaded: no tessera_mpiio_last_error");
    return last();
#endif
}

/* `code` is a refusal of `what` on `name`: class MPI_ERR_ACCESS and a message that names the
 * path and says permission denied. Every process checks its own; the job aborts on the
 * first that does not. */
static void check_refused(int code, const char *what, const char *name) {
    int error_class = error_class_of(code);
    CHECK(error_class == MPI_ERR_ACCESS, "%s %s gave class %d (%s), expected MPI_ERR_ACCESS",
          what, name, error_class, error_text(code));
    const char *text = message_of(code);
    CHECK(strstr(text, tessera_path(name)) != NULL, "%s %s: the error string does not name "
          "the path: %s", what, name, text);
    CHECK(contains_nocase(text, "permission denied"), "%s %s: the error string does not say "
          "permission denied: %s", what, name, text);
}

/* A collective open of `name` with `amode` on `comm` is refused on every process and leaves
 * no handle; rank 0 prints its error string. */
static void open_refused(const char *name, int amode, const char *mode_name, MPI_Comm comm) {
    static char sentinel; /* not a handle: a refused open must overwrite it */
    MPI_File fh = (MPI_File)(void *)&sentinel;
    int code = MPI_File_open(comm, name, amode, MPI_INFO_NULL, &fh);
    check_refused(code, mode_name, name);
    CHECK(fh == MPI_FILE_NULL, "a refused open (%s) of %s left a handle", mode_name, name);
    int refused = 1, everywhere = 0;
    MPI_Allreduce(&refused, &everywhere, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(everywhere == size, "%d of %d processes saw the refusal", everywhere, size);
    if (test_rank() == 0)
        printf("ok permissions: open %s (%s) refused on %d processes, MPI_ERR_ACCESS: %s\n",
               name, mode_name, everywhere, message_of(code));
    fflush(stdout);
}

static unsigned char own_byte(int rank, long i) {
    return (unsigned char)((rank + 1) * 37 + i * 11 + (i >> 8));
}

static unsigned char *read_local(const char *path, long *bytes) {
    FILE *file = fopen(path, "rb");
    CHECK(file != NULL, "cannot open the local copy %s", path);
    fseek(file, 0, SEEK_END);
    *bytes = ftell(file);
    fseek(file, 0, SEEK_SET);
    unsigned char *data = malloc((size_t)*bytes + 1);
    CHECK(fread(data, 1, (size_t)*bytes, file) == (size_t)*bytes, "short read of %s", path);
    fclose(file);
    return data;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = test_rank(), size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(argc == 7, "usage: %s ROOT_ONLY ROOT_READABLE LOCAL_COPY ROOT_WRITABLE OWN_FILE "
          "FORBIDDEN_NEW", argv[0]);
    const char *root_only = argv[1], *root_readable = argv[2], *local_copy = argv[3];
    const char *root_writable = argv[4], *own = argv[5], *forbidden_new = argv[6];
    CHECK(getuid() != 0 && geteuid() != 0, "run this as an unprivileged user, not uid %d",
          (int)geteuid());
    MPI_File fh;

    /* Root's file of mode 0600: no open mode gets in, collectively or alone. */
    open_refused(root_only, MPI_MODE_RDONLY, "MPI_MODE_RDONLY", MPI_COMM_WORLD);
    open_refused(root_only, MPI_MODE_RDWR, "MPI_MODE_RDWR", MPI_COMM_WORLD);
    open_refused(root_only, MPI_MODE_WRONLY, "MPI_MODE_WRONLY", MPI_COMM_WORLD);
    open_refused(root_only, MPI_MODE_RDWR | MPI_MODE_CREATE, "MPI_MODE_RDWR|MPI_MODE_CREATE",
                 MPI_COMM_WORLD);
    open_refused(root_only, MPI_MODE_RDONLY, "MPI_MODE_RDONLY on MPI_COMM_SELF", MPI_COMM_SELF);

    /* A new file in root's directory of mode 0755: refused, and nothing is made. */
    open_refused(forbidden_new, MPI_MODE_RDWR | MPI_MODE_CREATE, "MPI_MODE_RDWR|MPI_MODE_CREATE",
                 MPI_COMM_WORLD);
    CHECK_CLASS(MPI_File_open(MPI_COMM_WORLD, forbidden_new, MPI_MODE_RDONLY, MPI_INFO_NULL,
                              &fh), MPI_ERR_NO_SUCH_FILE);
    PASS("permissions: the refused create made no file");

    /* Root's file of mode 0644: reading is allowed (the library must not ask for more rights
     * than the program's mode needs), writing is not. */
    long expected_bytes = 0;
    unsigned char *expected = read_local(local_copy, &expected_bytes);
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, root_readable, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh));
    MPI_Offset file_bytes = -1;
    CHECK_MPI(MPI_File_get_size(fh, &file_bytes));
    CHECK(file_bytes == expected_bytes, "%s holds %lld bytes, root wrote %ld", root_readable,
          (long long)file_bytes, expected_bytes);
    unsigned char *back = calloc((size_t)expected_bytes + 1, 1);
    long part = (expected_bytes + size - 1) / size;
    long start = part * rank, end = start + part < expected_bytes ? start + part : expected_bytes;
    long mine = end > start ? end - start : 0;
    MPI_Status status;
    CHECK_MPI(MPI_File_read_at_all(fh, start, back + start, (int)mine, MPI_BYTE, &status));
    int count = -1;
    MPI_Get_count(&status, MPI_BYTE, &count);
    CHECK(count == mine, "read_at_all of %s gave %d bytes, expected %ld", root_readable, count,
          mine);
    CHECK(memcmp(back + start, expected + start, (size_t)mine) == 0,
          "%s: bytes %ld..%ld differ from root's", root_readable, start, end);
    CHECK_MPI(MPI_File_read_at(fh, 0, back, (int)expected_bytes, MPI_BYTE, &status));
    CHECK(memcmp(back, expected, (size_t)expected_bytes) == 0, "%s differs from root's",
          root_readable);
    CHECK_MPI(MPI_File_sync(fh));
    CHECK_MPI(MPI_File_close(&fh));
    PASS("permissions: root's 0644 file %s opened MPI_MODE_RDONLY, %ld bytes read back equal",
         root_readable, expected_bytes);
    open_refused(root_readable, MPI_MODE_RDWR, "MPI_MODE_RDWR", MPI_COMM_WORLD);
    open_refused(root_readable, MPI_MODE_WRONLY, "MPI_MODE_WRONLY", MPI_COMM_WORLD);

    /* Root's file of mode 0622: the user may write but not read it. A write-only open gets
     * in with write rights alone, and a strided write with the sieve method (which would read
     * around the ints) goes as list. run.sh checks the bytes as root afterwards. */
    MPI_Info sieve;
    CHECK_MPI(MPI_Info_create(&sieve));
    CHECK_MPI(MPI_Info_set(sieve, "tessera_method", "sieve"));
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, root_writable, MPI_MODE_WRONLY, sieve, &fh));
    MPI_Info_free(&sieve);
    MPI_Datatype every_size, strided;
    CHECK_MPI(MPI_Type_vector(1, 1, size, MPI_INT, &every_size));
    CHECK_MPI(MPI_Type_create_resized(every_size, 0, size * (MPI_Aint)sizeof(int), &strided));
    CHECK_MPI(MPI_Type_commit(&strided));
    CHECK_MPI(MPI_File_set_view(fh, rank * (MPI_Offset)sizeof(int), MPI_INT, strided, "native",
                                MPI_INFO_NULL));
    int ints[WRITABLE_INTS];
    for (int i = 0; i < WRITABLE_INTS; i++)
        ints[i] = rank * 100 + i;
    CHECK_MPI(MPI_File_write_all(fh, ints, WRITABLE_INTS, MPI_INT, &status));
    CHECK_MPI(MPI_File_write_at(fh, 0, ints, WRITABLE_INTS, MPI_INT, &status));
    MPI_Get_count(&status, MPI_INT, &count);
    CHECK(count == WRITABLE_INTS, "write_at wrote %d ints, expected %d", count, WRITABLE_INTS);
    CHECK_CLASS(MPI_File_read_at(fh, 0, ints, 1, MPI_INT, &status), MPI_ERR_ACCESS);
    CHECK_MPI(MPI_File_close(&fh));
    MPI_Type_free(&strided);
    MPI_Type_free(&every_size);
    PASS("permissions: root's 0622 file %s opened MPI_MODE_WRONLY, %d x %d strided ints written "
         "with the sieve method asked for", root_writable, size, WRITABLE_INTS);

    /* The user's own file in the sticky directory: made, written collectively, appended to
     * in rank order through the shared pointer, read back. */
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, own, MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_RDWR,
                            MPI_INFO_NULL, &fh));
    unsigned char *block = malloc(BLOCK_BYTES);
    for (long i = 0; i < BLOCK_BYTES; i++)
        block[i] = own_byte(rank, i);
    CHECK_MPI(MPI_File_write_at_all(fh, (MPI_Offset)rank * BLOCK_BYTES, block, BLOCK_BYTES,
                                    MPI_BYTE, &status));
    MPI_Get_count(&status, MPI_BYTE, &count);
    CHECK(count == BLOCK_BYTES, "write_at_all wrote %d bytes, expected %d", count, BLOCK_BYTES);
    unsigned char record[RECORD_BYTES];
    memset(record, 'a' + rank, sizeof record);
    CHECK_MPI(MPI_File_seek_shared(fh, (MPI_Offset)size * BLOCK_BYTES, MPI_SEEK_SET));
    CHECK_MPI(MPI_File_write_ordered(fh, record, RECORD_BYTES, MPI_BYTE, &status));
    CHECK_MPI(MPI_File_sync(fh));
    long own_bytes = (long)size * (BLOCK_BYTES + RECORD_BYTES);
    CHECK_MPI(MPI_File_get_size(fh, &file_bytes));
    CHECK(file_bytes == own_bytes, "%s holds %lld bytes, expected %ld", own,
          (long long)file_bytes, own_bytes);
    unsigned char *whole = malloc((size_t)own_bytes);
    CHECK_MPI(MPI_File_read_at_all(fh, 0, whole, (int)own_bytes, MPI_BYTE, &status));
    MPI_Get_count(&status, MPI_BYTE, &count);
    CHECK(count == own_bytes, "read_at_all read %d bytes, expected %ld", count, own_bytes);
    for (int r = 0; r < size; r++) {
        for (long i = 0; i < BLOCK_BYTES; i++)
            CHECK(whole[(long)r * BLOCK_BYTES + i] == own_byte(r, i),
                  "%s byte %ld of rank %d's block is %d, expected %d", own, i, r,
                  whole[(long)r * BLOCK_BYTES + i], own_byte(r, i));
        for (long i = 0; i < RECORD_BYTES; i++)
            CHECK(whole[(long)size * BLOCK_BYTES + (long)r * RECORD_BYTES + i] == 'a' + r,
                  "%s: rank %d's ordered record is not in rank order", own, r);
    }
    CHECK_MPI(MPI_File_close(&fh));
    PASS("permissions: own file %s made in the sticky directory, %d x %d bytes written "
         "collectively and %d x %d in rank order through the shared pointer, %ld read back "
         "equal", own, size, BLOCK_BYTES, size, RECORD_BYTES, own_bytes);

    /* Deleting root's files: refused by the sticky bit (ROOT_ONLY's directory is writable by
     * everyone) and by the directory's bits (ROOT_READABLE's is root's, mode 0755). */
    check_refused(MPI_File_delete(root_only, MPI_INFO_NULL), "delete", root_only);
    check_refused(MPI_File_delete(root_readable, MPI_INFO_NULL), "delete", root_readable);
    PASS("permissions: delete of %s (sticky directory) and %s (root's directory) refused with "
         "MPI_ERR_ACCESS on every process", root_only, root_readable);

    /* Deleting a file of its own in the sticky directory works. */
    char scratch[600];
    snprintf(scratch, sizeof scratch, "%s-scratch", own);
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, scratch, MPI_MODE_CREATE | MPI_MODE_WRONLY,
                            MPI_INFO_NULL, &fh));
    CHECK_MPI(MPI_File_close(&fh));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        CHECK_MPI(MPI_File_delete(scratch, MPI_INFO_NULL));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_CLASS(MPI_File_open(MPI_COMM_WORLD, scratch, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh),
                MPI_ERR_NO_SUCH_FILE);
    PASS("permissions: the user deletes its own file in the sticky directory");

    free(whole);
    free(block);
    free(back);
    free(expected);
    MPI_Finalize();
    return 0;
}
