/* POSIX calls on a name a program gave MPI-IO: the file is created with MPI-IO, then
 * checked with stat (every variant), access, open/read/pread/lseek/fstat, fopen, and
 * removed with unlink between two exclusive creates. The same steps run on a Tessera name
 * and on a local file of the MPI's own MPI-IO, and must give the same outcomes, except
 * where the shim documents a difference: fopen and open for writing of a Tessera name fail
 * with EOPNOTSUPP (docs/MPIIO.md, "POSIX calls on Tessera names"). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

/* The pre-2.33 glibc entry point, still exported; programs linked long ago call it. */
int __xstat(int version, const char *path, struct stat *out);

#define BLOCK_BYTES 1000
/* The shim's TSR_POSIX_DESCRIPTORS_MAX. */
#define TESSERA_DESCRIPTORS_MAX 16

static unsigned char expected_byte(int rank, int i) { return (unsigned char)(i * 7 + rank * 31); }

/* Each process writes its block with MPI-IO into a new file (exclusive create). */
static void create_and_write(const char *name, int rank) {
    MPI_File fh;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, name,
                            MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_RDWR, MPI_INFO_NULL,
                            &fh));
    unsigned char block[BLOCK_BYTES];
    for (int i = 0; i < BLOCK_BYTES; i++)
        block[i] = expected_byte(rank, i);
    MPI_Status status;
    CHECK_MPI(MPI_File_write_at(fh, (MPI_Offset)rank * BLOCK_BYTES, block, BLOCK_BYTES,
                                MPI_BYTE, &status));
    CHECK_MPI(MPI_File_close(&fh));
}

static void check_bytes(const unsigned char *bytes, long offset, long count, const char *what) {
    for (long i = 0; i < count; i++) {
        long at = offset + i;
        unsigned char want = expected_byte((int)(at / BLOCK_BYTES), (int)(at % BLOCK_BYTES));
        CHECK(bytes[i] == want, "%s: byte %ld is %u, expected %u", what, at, bytes[i], want);
    }
}

/* The checks process 0 makes on an existing file of `size` bytes. */
static void check_existing(const char *name, int tessera, long size) {
    struct stat st;
    CHECK(stat(name, &st) == 0, "stat %s: %s", name, strerror(errno));
    CHECK(S_ISREG(st.st_mode) && st.st_size == size, "stat %s: mode %o size %lld, want %ld",
          name, st.st_mode, (long long)st.st_size, size);
    CHECK(lstat(name, &st) == 0 && st.st_size == size, "lstat %s", name);
    struct stat64 st64;
    CHECK(stat64(name, &st64) == 0 && st64.st_size == size, "stat64 %s", name);
    CHECK(fstatat(AT_FDCWD, name, &st, 0) == 0 && st.st_size == size, "fstatat %s", name);
    struct statx stx;
    CHECK(statx(AT_FDCWD, name, 0, STATX_BASIC_STATS, &stx) == 0 &&
              stx.stx_size == (uint64_t)size && S_ISREG(stx.stx_mode),
          "statx %s", name);
    CHECK(__xstat(1, name, &st) == 0 && st.st_size == size, "__xstat %s", name);
    CHECK(st.st_mtim.tv_sec > 0, "stat %s: mtime %lld", name, (long long)st.st_mtim.tv_sec);
    CHECK(access(name, F_OK) == 0 && access(name, R_OK | W_OK) == 0, "access %s: %s", name,
          strerror(errno));
    printf("ok %s: stat, lstat, stat64, fstatat, statx, __xstat give size %ld; access\n",
           tessera ? "tessera" : "local", size);

    /* open for reading: real reads of the bytes asked for. */
    int fd = open(name, O_RDONLY);
    CHECK(fd >= 0, "open %s O_RDONLY: %s", name, strerror(errno));
    unsigned char bytes[2 * BLOCK_BYTES];
    CHECK(read(fd, bytes, 8) == 8, "read 8 of %s", name);
    check_bytes(bytes, 0, 8, "read at 0");
    CHECK(lseek(fd, 2500, SEEK_SET) == 2500, "lseek SEEK_SET");
    CHECK(read(fd, bytes, 100) == 100, "read 100 at 2500");
    check_bytes(bytes, 2500, 100, "read at 2500");
    CHECK(lseek(fd, 0, SEEK_CUR) == 2600, "lseek SEEK_CUR");
    ssize_t got = pread(fd, bytes, sizeof bytes, size - BLOCK_BYTES);
    CHECK(got == BLOCK_BYTES, "pread past the end gave %zd, want %d", got, BLOCK_BYTES);
    check_bytes(bytes, size - BLOCK_BYTES, BLOCK_BYTES, "pread of the last block");
    CHECK(lseek(fd, 0, SEEK_END) == size, "lseek SEEK_END");
    CHECK(read(fd, bytes, 10) == 0, "read at the end");
    CHECK(fstat(fd, &st) == 0 && st.st_size == size, "fstat");
    CHECK(close(fd) == 0, "close");
    printf("ok %s: open O_RDONLY, read, lseek, pread (short at the end), fstat, close\n",
           tessera ? "tessera" : "local");

    /* fopen: a stream is never a partial copy of a Tessera file. */
    errno = 0;
    FILE *stream = fopen(name, "r");
    if (tessera) {
        CHECK(stream == NULL && errno == EOPNOTSUPP, "fopen %s \"r\": %p, errno %d (%s)", name,
              (void *)stream, errno, strerror(errno));
        errno = 0;
        CHECK(open(name, O_WRONLY) < 0 && errno == EOPNOTSUPP, "open %s O_WRONLY: errno %d",
              name, errno);
        printf("ok tessera: fopen \"r\" and open O_WRONLY fail with EOPNOTSUPP\n");
    } else {
        CHECK(stream != NULL, "fopen %s: %s", name, strerror(errno));
        fclose(stream);
    }
}

/* The steps, on one name; `tessera` says which outcomes are the documented differences. */
static void steps(const char *name, int tessera) {
    int rank = test_rank(), size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == 0)
        MPI_File_delete(name, MPI_INFO_NULL); /* a leftover of an earlier run */
    MPI_Barrier(MPI_COMM_WORLD);
    create_and_write(name, rank);
    long bytes = (long)size * BLOCK_BYTES;
    if (rank == 0) {
        check_existing(name, tessera, bytes);
        CHECK(unlink(name) == 0, "unlink %s: %s", name, strerror(errno));
        struct stat st;
        errno = 0;
        CHECK(stat(name, &st) < 0 && errno == ENOENT, "stat after unlink: errno %d", errno);
        errno = 0;
        CHECK(access(name, F_OK) < 0 && errno == ENOENT, "access after unlink: errno %d",
              errno);
        errno = 0;
        CHECK(unlink(name) < 0 && errno == ENOENT, "second unlink: errno %d", errno);
        errno = 0;
        CHECK(open(name, O_RDONLY) < 0 && errno == ENOENT, "open after unlink: errno %d",
              errno);
        printf("ok %s: unlink removes the file; stat, access, unlink, open give ENOENT after\n",
               tessera ? "tessera" : "local");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    /* The name is free again: an exclusive create succeeds. */
    create_and_write(name, rank);
    if (rank == 0) {
        struct stat st;
        CHECK(stat(name, &st) == 0 && st.st_size == bytes, "stat after the second create");
        printf("ok %s: MPI_MODE_CREATE|MPI_MODE_EXCL succeeds after unlink\n",
               tessera ? "tessera" : "local");
    }
    if (rank == 0 && tessera) {
        /* The bounded table of Tessera descriptors. */
        int fds[TESSERA_DESCRIPTORS_MAX];
        for (int i = 0; i < TESSERA_DESCRIPTORS_MAX; i++) {
            fds[i] = open(name, O_RDONLY);
            CHECK(fds[i] >= 0, "open %d of %s: %s", i, name, strerror(errno));
        }
        errno = 0;
        CHECK(open(name, O_RDONLY) < 0 && errno == EMFILE,
              "open beyond TSR_POSIX_DESCRIPTORS_MAX: errno %d", errno);
        for (int i = 0; i < TESSERA_DESCRIPTORS_MAX; i++)
            CHECK(close(fds[i]) == 0, "close %d", i);
        int fd = open(name, O_RDONLY);
        CHECK(fd >= 0 && close(fd) == 0, "open after closing them all");
        printf("ok tessera: at most %d descriptors open (EMFILE beyond), reused after close\n",
               TESSERA_DESCRIPTORS_MAX);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        CHECK_MPI(MPI_File_delete(name, MPI_INFO_NULL));
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = test_rank();
    char name[512], oracle[512];
    test_names("posix", name, oracle, sizeof name);
    steps(oracle, 0);
    steps(name, 1);
    if (rank == 0) {
        char missing[600];
        struct stat st;
        snprintf(missing, sizeof missing, "%s-missing", name);
        errno = 0;
        CHECK(stat(missing, &st) < 0 && errno == ENOENT, "stat of a missing name: errno %d",
              errno);
        snprintf(missing, sizeof missing, "%s/missing", getenv("TSR_ORACLE_DIR"));
        errno = 0;
        CHECK(stat(missing, &st) < 0 && errno == ENOENT, "local stat of a missing name");
        /* The root of the Tessera name space is a directory. */
        CHECK(stat("tessera:/", &st) == 0 && S_ISDIR(st.st_mode), "stat tessera:/: %s",
              strerror(errno));
        CHECK(stat(getenv("TSR_ORACLE_DIR"), &st) == 0 && S_ISDIR(st.st_mode), "local dir");
        printf("ok stat of a missing name gives ENOENT, of a directory S_ISDIR, on both\n");
    }
    MPI_Finalize();
    return 0;
}
