/* The POSIX calls that I/O libraries make on the names they hand to MPI-IO.
 *
 * PnetCDF's ncmpi_open reads the first bytes of a file with open()/read() to learn its
 * format before it calls MPI_File_open, and its create asks access() whether the file exists
 * and truncate()s it. A Tessera name is not in the local file system, so those calls would
 * fail. For names that route to Tessera (and only those), this file answers them:
 *   - open() read-only: a memfd holding a snapshot of the file's first
 *     TSR_POSIX_SNAPSHOT_BYTES_MAX bytes (enough for every format signature); opens that
 *     write go to the real open(), which fails as it would without the shim;
 *   - access(): whether the file exists (Tessera does not enforce permissions);
 *   - truncate(): the file's size, set on the cluster.
 * Every other name goes to the C library's own call. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shim.h"

/* Bytes of a Tessera file a read-only POSIX open sees. */
#define TSR_POSIX_SNAPSHOT_BYTES_MAX (1 << 20)

typedef int (*tsr_open_fn)(const char *, int, ...);

static int tsr_errno_of(int tessera_code) {
    switch (tessera_code) {
    case TESSERA_ERR_NOT_FOUND:
        return ENOENT;
    case TESSERA_ERR_IS_DIRECTORY:
        return EISDIR;
    case TESSERA_ERR_NOT_DIRECTORY:
        return ENOTDIR;
    case TESSERA_ERR_PERMISSION_DENIED:
        return EACCES;
    case TESSERA_ERR_INVALID_ARGUMENT:
        return EINVAL;
    default:
        return EIO;
    }
}

/* A read-only snapshot of the start of the Tessera file `path`, as a file descriptor. */
static int tsr_snapshot(const char *path) {
    int rc = MPI_SUCCESS;
    TesseraClient *client = tsr_client(&rc);
    if (client == NULL) {
        errno = EIO;
        return -1;
    }
    TesseraFile *file = NULL;
    int code = tessera_open(client, path, TESSERA_MODE_READ_ONLY, &file);
    TesseraStat stat;
    if (code == TESSERA_OK)
        code = tessera_file_stat(file, &stat);
    if (code != TESSERA_OK) {
        tessera_close(file);
        errno = tsr_errno_of(code);
        return -1;
    }
    size_t bytes = stat.size < TSR_POSIX_SNAPSHOT_BYTES_MAX ? (size_t)stat.size
                                                            : TSR_POSIX_SNAPSHOT_BYTES_MAX;
    char *buffer = malloc(bytes ? bytes : 1);
    if (buffer == NULL || (bytes && tessera_file_read(file, 0, buffer, bytes, NULL, NULL) !=
                                        TESSERA_OK)) {
        free(buffer);
        tessera_close(file);
        errno = EIO;
        return -1;
    }
    tessera_close(file);
    int fd = memfd_create("tessera-snapshot", MFD_CLOEXEC);
    size_t written = 0;
    while (fd >= 0 && written < bytes) {
        ssize_t n = write(fd, buffer + written, bytes - written);
        if (n <= 0) {
            close(fd);
            fd = -1;
            errno = EIO;
            break;
        }
        written += (size_t)n;
    }
    free(buffer);
    if (fd >= 0)
        lseek(fd, 0, SEEK_SET);
    return fd;
}

static int tsr_open_common(const char *name, const char *real, const char *path, int flags,
                           va_list args) {
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE))
        mode = (mode_t)va_arg(args, int);
    char tessera_path[TSR_PATH_BYTES_MAX];
    if ((flags & O_ACCMODE) == O_RDONLY && !(flags & (O_CREAT | O_TMPFILE)) &&
        tsr_route(path, tessera_path, sizeof tessera_path))
        return tsr_snapshot(tessera_path);
    tsr_open_fn next = (tsr_open_fn)dlsym(RTLD_NEXT, real);
    if (next == NULL) {
        errno = ENOSYS;
        return -1;
    }
    (void)name;
    return next(path, flags, mode);
}

int open(const char *path, int flags, ...) {
    va_list args;
    va_start(args, flags);
    int fd = tsr_open_common("open", "open", path, flags, args);
    va_end(args);
    return fd;
}

int open64(const char *path, int flags, ...) {
    va_list args;
    va_start(args, flags);
    int fd = tsr_open_common("open64", "open64", path, flags, args);
    va_end(args);
    return fd;
}

int access(const char *path, int mode) {
    char tessera_path[TSR_PATH_BYTES_MAX];
    if (!tsr_route(path, tessera_path, sizeof tessera_path)) {
        int (*next)(const char *, int) = (int (*)(const char *, int))dlsym(RTLD_NEXT, "access");
        return next ? next(path, mode) : (errno = ENOSYS, -1);
    }
    int rc = MPI_SUCCESS;
    TesseraClient *client = tsr_client(&rc);
    TesseraStat stat;
    int code = client ? tessera_stat(client, tessera_path, &stat) : TESSERA_ERR_UNAVAILABLE;
    if (code != TESSERA_OK) {
        errno = tsr_errno_of(code);
        return -1;
    }
    return 0;
}

int truncate(const char *path, off_t length) {
    char tessera_path[TSR_PATH_BYTES_MAX];
    if (!tsr_route(path, tessera_path, sizeof tessera_path)) {
        int (*next)(const char *, off_t) =
            (int (*)(const char *, off_t))dlsym(RTLD_NEXT, "truncate");
        return next ? next(path, length) : (errno = ENOSYS, -1);
    }
    if (length < 0) {
        errno = EINVAL;
        return -1;
    }
    int rc = MPI_SUCCESS;
    TesseraClient *client = tsr_client(&rc);
    TesseraFile *file = NULL;
    int code = client ? tessera_open(client, tessera_path, TESSERA_MODE_READ_WRITE, &file)
                      : TESSERA_ERR_UNAVAILABLE;
    if (code == TESSERA_OK)
        code = tessera_file_set_size(file, (uint64_t)length);
    tessera_close(file);
    if (code != TESSERA_OK) {
        errno = tsr_errno_of(code);
        return -1;
    }
    return 0;
}
