/* The POSIX calls that programs and I/O libraries make on the names they hand to MPI-IO:
 * libtessera_posix.so, a library of its own beside libtessera_mpiio.so (no MPI in it; with
 * route.c and its own copy of the C API, and its own connection to the cluster).
 *
 * A Tessera name is not in the local file system, so without this file a program that
 * creates a file with MPI-IO and then stat()s, unlink()s or reads it through POSIX would
 * see a missing file (or, under a $TESSERA_MPIIO_PATHS directory that exists locally, some
 * other file). Where Tessera is mounted (`tessera mount`) on the $TESSERA_MPIIO_PATHS
 * directory a name lies under, the kernel answers its POSIX calls through the mount and this
 * file leaves them to the C library (tsr_route_posix). Elsewhere, the names that route to
 * Tessera (tsr_route_posix, and only those) are answered from Tessera here:
 *   - stat and every variant a program can reach in this glibc (stat, stat64, lstat,
 *     lstat64, fstatat, fstatat64, statx, and the __xstat/__lxstat/__fxstatat families
 *     that programs linked against glibc before 2.33 call): the file's or directory's
 *     attributes as the mds knows them, ENOENT when missing;
 *   - unlink, unlinkat, remove: the file is removed from the cluster;
 *   - access, faccessat, euidaccess/eaccess: whether it exists (Tessera does not enforce
 *     permissions; X_OK needs an execute bit, as for root);
 *   - truncate, truncate64: the size, set on the cluster;
 *   - open for reading (open, open64, openat, openat64 and the _FORTIFY_SOURCE forms
 *     __open_2, __open64_2): a *Tessera descriptor*, whose read, pread, lseek and fstat are
 *     served by real reads of the bytes asked for through the C API (PnetCDF's format probe
 *     reads a file's first bytes this way). At most TSR_POSIX_DESCRIPTORS_MAX are open at
 *     once (EMFILE beyond). The descriptor number is an O_PATH descriptor of /dev/null, so
 *     any call not served here (write, mmap, readv, dup'ed copies) fails with EBADF rather
 *     than see other bytes;
 *   - open for writing and fopen in any mode: EOPNOTSUPP. A stdio stream reads through
 *     glibc's internal read, which cannot be answered from Tessera, so it would see no
 *     bytes or a partial copy; refusing is the honest answer without the mount.
 * Every other name, and every descriptor not in the table, goes straight to the C library.
 * The calls on descriptors (read, close, ...) cost one atomic load while no Tessera
 * descriptor is open. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "route.h"
#include "tessera.h"

/* Most Tessera files open through POSIX open() at once in one process. */
#define TSR_POSIX_DESCRIPTORS_MAX 16
/* Most bytes one read()/pread() of a Tessera descriptor moves (a larger one is short, as
 * POSIX allows). */
#define TSR_POSIX_READ_BYTES_MAX (16 << 20)
/* st_dev of Tessera files: a device number no local file system uses (major 0 is the
 * kernel's anonymous devices; this minor is far above the ones it hands out). */
#define TSR_POSIX_DEVICE_MAJOR 0
#define TSR_POSIX_DEVICE_MINOR 0xfe55
/* st_blksize of a directory or a pattern-laid-out file. */
#define TSR_POSIX_BLOCK_BYTES 65536

/* The glibc < 2.33 entry points this glibc still exports (its headers no longer declare
 * them). _STAT_VER is 1 on x86-64 and 3 on i386; the structure is the caller's. */
int __xstat(int version, const char *path, struct stat *out);
int __xstat64(int version, const char *path, struct stat64 *out);
int __lxstat(int version, const char *path, struct stat *out);
int __lxstat64(int version, const char *path, struct stat64 *out);
int __fxstat(int version, int fd, struct stat *out);
int __fxstat64(int version, int fd, struct stat64 *out);
int __fxstatat(int version, int dirfd, const char *path, struct stat *out, int flags);
int __fxstatat64(int version, int dirfd, const char *path, struct stat64 *out, int flags);
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int eaccess(const char *path, int mode);

_Static_assert(sizeof(struct stat) == sizeof(struct stat64),
               "struct stat and struct stat64 must be one layout (64-bit glibc)");

/* The C library's own functions, found once (at load, or at first use by calls made before
 * this library's constructor ran) by tsr_next_symbol (route.c). */
#define TSR_LIBC_NEXT(name)                                                                     \
    static void *tsr_next_##name;                                                          \
    static __typeof__(&name) tsr_real_##name(void) {                                       \
        return (__typeof__(&name))tsr_next_symbol(&tsr_next_##name, #name);                \
    }

TSR_LIBC_NEXT(open)
TSR_LIBC_NEXT(open64)
TSR_LIBC_NEXT(openat)
TSR_LIBC_NEXT(openat64)
TSR_LIBC_NEXT(__open_2)
TSR_LIBC_NEXT(__open64_2)
TSR_LIBC_NEXT(fopen)
TSR_LIBC_NEXT(fopen64)
TSR_LIBC_NEXT(read)
TSR_LIBC_NEXT(pread)
TSR_LIBC_NEXT(pread64)
TSR_LIBC_NEXT(lseek)
TSR_LIBC_NEXT(lseek64)
TSR_LIBC_NEXT(close)
TSR_LIBC_NEXT(stat)
TSR_LIBC_NEXT(stat64)
TSR_LIBC_NEXT(lstat)
TSR_LIBC_NEXT(lstat64)
TSR_LIBC_NEXT(fstat)
TSR_LIBC_NEXT(fstat64)
TSR_LIBC_NEXT(fstatat)
TSR_LIBC_NEXT(fstatat64)
TSR_LIBC_NEXT(statx)
TSR_LIBC_NEXT(__xstat)
TSR_LIBC_NEXT(__xstat64)
TSR_LIBC_NEXT(__lxstat)
TSR_LIBC_NEXT(__lxstat64)
TSR_LIBC_NEXT(__fxstat)
TSR_LIBC_NEXT(__fxstat64)
TSR_LIBC_NEXT(__fxstatat)
TSR_LIBC_NEXT(__fxstatat64)
TSR_LIBC_NEXT(access)
TSR_LIBC_NEXT(faccessat)
TSR_LIBC_NEXT(euidaccess)
TSR_LIBC_NEXT(eaccess)
TSR_LIBC_NEXT(truncate)
TSR_LIBC_NEXT(truncate64)
TSR_LIBC_NEXT(unlink)
TSR_LIBC_NEXT(unlinkat)
TSR_LIBC_NEXT(remove)

/* Calls that may come from a signal handler or a progress thread (read, close) must not
 * call dlsym then: find them before main. */
__attribute__((constructor)) static void tsr_posix_init(void) {
    tsr_real_read();
    tsr_real_pread();
    tsr_real_pread64();
    tsr_real_lseek();
    tsr_real_lseek64();
    tsr_real_close();
    tsr_real_fstat();
    tsr_real_fstat64();
}

/* The Tessera FUSE mounts (`tessera mount`, type fuse.tessera) of this host, read once from
 * /proc/self/mountinfo at the first POSIX call on a routed name: a mount made after that is
 * not seen by this process. At most TSR_MOUNTS_MAX are kept. */
#define TSR_MOUNTS_MAX 16
static char tsr_mounts[TSR_MOUNTS_MAX][TSR_PATH_BYTES_MAX];
static int tsr_mount_count;
static pthread_once_t tsr_mounts_once = PTHREAD_ONCE_INIT;

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void tsr_unescape(char *field) {
    char *out = field;
    for (char *in = field; *in;) {
        if (in[0] == '\\' && in[1] >= '0' && in[1] <= '7' && in[2] >= '0' && in[2] <= '7' &&
            in[3] >= '0' && in[3] <= '7') {
            *out++ = (char)(((in[1] - '0') << 6) | ((in[2] - '0') << 3) | (in[3] - '0'));
            in += 4;
        } else {
            *out++ = *in++;
        }
    }
    *out = '\0';
}

static void tsr_read_mounts(void) {
    /* This file's fopen, which hands a name that does not route, as /proc's never do, to
     * the C library's. */
    FILE *table = fopen("/proc/self/mountinfo", "re");
    if (table == NULL)
        return;
    char line[2 * TSR_PATH_BYTES_MAX];
    while (tsr_mount_count < TSR_MOUNTS_MAX && fgets(line, sizeof line, table) != NULL) {
        const char *separator = strstr(line, " - ");
        if (separator == NULL || strncmp(separator + 3, "fuse.tessera ", 13) != 0)
            continue;
        /* Field 5 is the mount point. */
        char *field = line;
        for (int skip = 0; skip < 4 && field != NULL; skip++) {
            field = strchr(field, ' ');
            if (field != NULL)
                field++;
        }
        if (field == NULL)
            continue;
        char *end = strchr(field, ' ');
        if (end == NULL || (size_t)(end - field) >= TSR_PATH_BYTES_MAX)
            continue;
        *end = '\0';
        tsr_unescape(field);
        strcpy(tsr_mounts[tsr_mount_count++], field);
    }
    fclose(table);
}

/* As tsr_route, for the POSIX calls of this file: a name under a $TESSERA_MPIIO_PATHS
 * directory on which a Tessera FUSE mount sits is not routed, because the kernel answers
 * POSIX calls on it through the mount (docs/MOUNT.md), fopen and writes included. */
static int tsr_route_posix(const char *filename, char *path, size_t path_bytes) {
    char directory[TSR_PATH_BYTES_MAX];
    if (!tsr_route_under(filename, path, path_bytes, directory, sizeof directory))
        return 0;
    if (directory[0] == '\0')
        return 1;
    pthread_once(&tsr_mounts_once, tsr_read_mounts);
    for (int i = 0; i < tsr_mount_count; i++)
        if (strcmp(tsr_mounts[i], directory) == 0)
            return 0;
    return 1;
}

/* Fails the call with `error`, saying why on stderr under $TESSERA_MPIIO_VERBOSE. */
__attribute__((format(printf, 2, 3))) static int tsr_posix_fail(int error, const char *format,
                                                                ...) {
    if (getenv("TESSERA_MPIIO_VERBOSE")) {
        va_list args;
        va_start(args, format);
        vfprintf(stderr, format, args);
        va_end(args);
        fputc('\n', stderr);
    }
    errno = error;
    return -1;
}

/* Fails with the errno of `tessera_code` (the C API's, from the one table of error codes and
 * errno), naming the call, the name and Tessera's reason. */
static int tsr_posix_tessera_fail(int tessera_code, const char *call, const char *path) {
    int error = tessera_errno(tessera_code);
    return tsr_posix_fail(error, "tessera: %s %s: %s (%s)", call, path, strerror(error),
                          tessera_last_error());
}

/* This library's connection to the cluster (the cluster file of $TESSERA_CLUSTER), made at
 * the first call on a Tessera name and kept for the process's life; tried again at the next
 * call if it could not be made. Its own, not the MPI-IO library's: each library holds a
 * copy of the C API, and a client of one copy is not handed to the other. */
static pthread_mutex_t tsr_posix_lock = PTHREAD_MUTEX_INITIALIZER;
static TesseraClient *tsr_posix_connection;

static TesseraClient *tsr_posix_client(const char *call, const char *path) {
    pthread_mutex_lock(&tsr_posix_lock);
    if (tsr_posix_connection == NULL) {
        TesseraClient *made = NULL;
        if (tessera_connect(NULL, &made) == TESSERA_OK)
            tsr_posix_connection = made;
    }
    TesseraClient *client = tsr_posix_connection;
    pthread_mutex_unlock(&tsr_posix_lock);
    if (client == NULL)
        tsr_posix_fail(EIO, "tessera: %s %s: cannot reach the cluster: %s", call, path,
                       tessera_last_error());
    return client;
}

/* Does `path`, relative to `dirfd`, route to Tessera? A name relative to a descriptor
 * other than the working directory does not (tsr_route resolves against the working
 * directory), except a "tessera:" name, which is never relative. A null name does not:
 * Rust's standard library probes statx with one (statx(0, NULL, 0, STATX_ALL, NULL) must
 * fail with EFAULT). Not inlined: glibc declares the names non-null, and inlined into the
 * interposed functions the null check would be compiled away. */
__attribute__((noinline)) static int tsr_route_at(int dirfd, const char *path, char *tessera_path, size_t bytes) {
    if (path == NULL)
        return 0;
    if (dirfd != AT_FDCWD && path[0] != '/' && strncmp(path, "tessera:", 8) != 0)
        return 0;
    return tsr_route_posix(path, tessera_path, bytes);
}

/* An empty name (AT_EMPTY_PATH: the call is about the descriptor itself). glibc declares
 * these names non-null, but a program may pass null anyway. */
__attribute__((noinline)) static int tsr_empty_name(const char *name) {
    return name != NULL && name[0] == '\0';
}

/* ---- attributes ---- */

static void tsr_fill_stat(const TesseraStat *s, struct stat *out) {
    memset(out, 0, sizeof *out);
    out->st_dev = makedev(TSR_POSIX_DEVICE_MAJOR, TSR_POSIX_DEVICE_MINOR);
    out->st_ino = (ino_t)s->handle;
    out->st_mode = (s->is_directory ? S_IFDIR : S_IFREG) | (s->mode & 07777);
    out->st_nlink = s->nlink ? s->nlink : 1;
    out->st_uid = s->uid;
    out->st_gid = s->gid;
    out->st_size = (off_t)s->size;
    out->st_blksize = s->stripe_unit_bytes ? (blksize_t)s->stripe_unit_bytes
                                           : TSR_POSIX_BLOCK_BYTES;
    out->st_blocks = (blkcnt_t)((s->size + 511) / 512);
    out->st_atim.tv_sec = (time_t)(s->atime_ns / 1000000000u);
    out->st_atim.tv_nsec = (long)(s->atime_ns % 1000000000u);
    out->st_mtim.tv_sec = (time_t)(s->mtime_ns / 1000000000u);
    out->st_mtim.tv_nsec = (long)(s->mtime_ns % 1000000000u);
    out->st_ctim.tv_sec = (time_t)(s->ctime_ns / 1000000000u);
    out->st_ctim.tv_nsec = (long)(s->ctime_ns % 1000000000u);
}

static void tsr_fill_statx(const TesseraStat *s, unsigned int mask, struct statx *out) {
    struct stat plain;
    tsr_fill_stat(s, &plain);
    memset(out, 0, sizeof *out);
    (void)mask; /* every basic field is known, whatever was asked */
    out->stx_mask = STATX_BASIC_STATS;
    out->stx_blksize = (uint32_t)plain.st_blksize;
    out->stx_nlink = (uint32_t)plain.st_nlink;
    out->stx_uid = plain.st_uid;
    out->stx_gid = plain.st_gid;
    out->stx_mode = (uint16_t)plain.st_mode;
    out->stx_ino = plain.st_ino;
    out->stx_size = (uint64_t)plain.st_size;
    out->stx_blocks = (uint64_t)plain.st_blocks;
    out->stx_atime.tv_sec = plain.st_atim.tv_sec;
    out->stx_atime.tv_nsec = (uint32_t)plain.st_atim.tv_nsec;
    out->stx_mtime.tv_sec = plain.st_mtim.tv_sec;
    out->stx_mtime.tv_nsec = (uint32_t)plain.st_mtim.tv_nsec;
    out->stx_ctime.tv_sec = plain.st_ctim.tv_sec;
    out->stx_ctime.tv_nsec = (uint32_t)plain.st_ctim.tv_nsec;
    out->stx_dev_major = TSR_POSIX_DEVICE_MAJOR;
    out->stx_dev_minor = TSR_POSIX_DEVICE_MINOR;
}

/* The attributes of the Tessera path `path` (a directory too). */
static int tsr_stat_path(const char *call, const char *path, TesseraStat *out) {
    TesseraClient *client = tsr_posix_client(call, path);
    if (client == NULL)
        return -1;
    int code = tessera_stat(client, path, out);
    if (code != TESSERA_OK)
        return tsr_posix_tessera_fail(code, call, path);
    return 0;
}

static int tsr_stat_name(const char *call, const char *path, struct stat *out) {
    TesseraStat s;
    if (tsr_stat_path(call, path, &s) != 0)
        return -1;
    tsr_fill_stat(&s, out);
    return 0;
}

/* ---- Tessera descriptors ---- */

struct tsr_descriptor {
    int fd;            /* the O_PATH descriptor standing for it; -1: the slot is free */
    int closing;       /* closed by the program; freed when the last call in progress ends */
    int users;         /* calls in progress on it */
    TesseraFile *file; /* open read-only */
    uint64_t offset;   /* the file offset read() and lseek() use */
    uint64_t size;     /* the size last seen */
    char path[TSR_PATH_BYTES_MAX];
};

static pthread_mutex_t tsr_descriptors_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tsr_descriptor tsr_descriptors[TSR_POSIX_DESCRIPTORS_MAX] = {
    [0 ... TSR_POSIX_DESCRIPTORS_MAX - 1] = {.fd = -1}};
/* Slots in use (closing ones included): zero means no descriptor call looks further. */
static int tsr_descriptors_used;

/* The descriptor `fd` if it is a Tessera one, marked in use; NULL otherwise. */
static struct tsr_descriptor *tsr_descriptor_get(int fd) {
    if (__atomic_load_n(&tsr_descriptors_used, __ATOMIC_ACQUIRE) == 0 || fd < 0)
        return NULL;
    struct tsr_descriptor *found = NULL;
    pthread_mutex_lock(&tsr_descriptors_lock);
    for (int i = 0; i < TSR_POSIX_DESCRIPTORS_MAX; i++)
        if (tsr_descriptors[i].fd == fd && !tsr_descriptors[i].closing) {
            found = &tsr_descriptors[i];
            found->users++;
            break;
        }
    pthread_mutex_unlock(&tsr_descriptors_lock);
    return found;
}

/* Frees the slot's file if it was closed and nothing uses it any more (under the lock);
 * returns the file to close. */
static TesseraFile *tsr_descriptor_reap(struct tsr_descriptor *d) {
    if (!d->closing || d->users > 0)
        return NULL;
    TesseraFile *file = d->file;
    d->file = NULL;
    d->fd = -1;
    d->closing = 0;
    __atomic_sub_fetch(&tsr_descriptors_used, 1, __ATOMIC_RELEASE);
    return file;
}

static void tsr_descriptor_put(struct tsr_descriptor *d) {
    pthread_mutex_lock(&tsr_descriptors_lock);
    d->users--;
    TesseraFile *file = tsr_descriptor_reap(d);
    pthread_mutex_unlock(&tsr_descriptors_lock);
    tessera_close(file);
}

/* A read-only Tessera descriptor for the Tessera file `path`. */
static int tsr_descriptor_open(const char *call, const char *name, const char *path,
                               int flags) {
    TesseraClient *client = tsr_posix_client(call, name);
    if (client == NULL)
        return -1;
    TesseraFile *file = NULL;
    int code = tessera_open(client, path, TESSERA_MODE_READ_ONLY, &file);
    TesseraStat s;
    if (code == TESSERA_OK)
        code = tessera_file_stat(file, &s);
    if (code != TESSERA_OK) {
        tessera_close(file);
        if (code == TESSERA_ERR_IS_DIRECTORY)
            return tsr_posix_fail(EISDIR, "tessera: %s %s: a Tessera directory cannot be "
                                          "opened through POSIX", call, name);
        return tsr_posix_tessera_fail(code, call, name);
    }
    pthread_mutex_lock(&tsr_descriptors_lock);
    struct tsr_descriptor *d = NULL;
    for (int i = 0; i < TSR_POSIX_DESCRIPTORS_MAX && d == NULL; i++)
        if (tsr_descriptors[i].fd < 0)
            d = &tsr_descriptors[i];
    int fd = -1;
    if (d != NULL) {
        fd = tsr_real_open()("/dev/null", O_PATH | (flags & O_CLOEXEC));
        if (fd >= 0) {
            d->fd = fd;
            d->closing = 0;
            d->users = 0;
            d->file = file;
            d->offset = 0;
            d->size = s.size;
            snprintf(d->path, sizeof d->path, "%s", name);
            __atomic_add_fetch(&tsr_descriptors_used, 1, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&tsr_descriptors_lock);
    if (fd < 0) {
        int error = errno;
        tessera_close(file);
        if (d == NULL)
            return tsr_posix_fail(EMFILE, "tessera: %s %s: %d Tessera files are open through "
                                          "POSIX already (TSR_POSIX_DESCRIPTORS_MAX)",
                                  call, name, TSR_POSIX_DESCRIPTORS_MAX);
        return tsr_posix_fail(error, "tessera: %s %s: no descriptor number: %s", call, name,
                              strerror(error));
    }
    return fd;
}

/* Reads up to `bytes` at `offset`, no further than the file's end; returns the count. */
static ssize_t tsr_descriptor_read(struct tsr_descriptor *d, void *buffer, size_t bytes,
                                   uint64_t offset) {
    if (bytes > TSR_POSIX_READ_BYTES_MAX)
        bytes = TSR_POSIX_READ_BYTES_MAX;
    uint64_t size = __atomic_load_n(&d->size, __ATOMIC_RELAXED);
    if (offset + bytes > size) {
        /* The file may have grown since: ask again before a short read. */
        TesseraStat s;
        int code = tessera_file_stat(d->file, &s);
        if (code != TESSERA_OK)
            return tsr_posix_tessera_fail(code, "read", d->path);
        size = s.size;
        __atomic_store_n(&d->size, size, __ATOMIC_RELAXED);
    }
    if (offset >= size || bytes == 0)
        return 0;
    if (bytes > size - offset)
        bytes = (size_t)(size - offset);
    int code = tessera_file_read(d->file, offset, buffer, bytes, NULL, NULL);
    if (code != TESSERA_OK)
        return tsr_posix_tessera_fail(code, "read", d->path);
    return (ssize_t)bytes;
}

ssize_t read(int fd, void *buffer, size_t bytes) {
    struct tsr_descriptor *d = tsr_descriptor_get(fd);
    if (d == NULL)
        return tsr_real_read()(fd, buffer, bytes);
    pthread_mutex_lock(&tsr_descriptors_lock);
    uint64_t offset = d->offset;
    pthread_mutex_unlock(&tsr_descriptors_lock);
    ssize_t done = tsr_descriptor_read(d, buffer, bytes, offset);
    if (done > 0) {
        pthread_mutex_lock(&tsr_descriptors_lock);
        d->offset = offset + (uint64_t)done;
        pthread_mutex_unlock(&tsr_descriptors_lock);
    }
    int error = errno;
    tsr_descriptor_put(d);
    errno = error;
    return done;
}

static ssize_t tsr_pread(struct tsr_descriptor *d, void *buffer, size_t bytes, int64_t offset) {
    ssize_t done = offset < 0 ? tsr_posix_fail(EINVAL, "tessera: pread %s: negative offset",
                                               d->path)
                              : tsr_descriptor_read(d, buffer, bytes, (uint64_t)offset);
    int error = errno;
    tsr_descriptor_put(d);
    errno = error;
    return done;
}

ssize_t pread(int fd, void *buffer, size_t bytes, off_t offset) {
    struct tsr_descriptor *d = tsr_descriptor_get(fd);
    if (d == NULL)
        return tsr_real_pread()(fd, buffer, bytes, offset);
    return tsr_pread(d, buffer, bytes, offset);
}

ssize_t pread64(int fd, void *buffer, size_t bytes, off64_t offset) {
    struct tsr_descriptor *d = tsr_descriptor_get(fd);
    if (d == NULL)
        return tsr_real_pread64()(fd, buffer, bytes, offset);
    return tsr_pread(d, buffer, bytes, offset);
}

static int64_t tsr_lseek(struct tsr_descriptor *d, int64_t offset, int whence) {
    int64_t base = 0;
    int64_t result = -1;
    if (whence == SEEK_END) {
        TesseraStat s;
        int code = tessera_file_stat(d->file, &s);
        if (code != TESSERA_OK) {
            tsr_posix_tessera_fail(code, "lseek", d->path);
            goto done;
        }
        __atomic_store_n(&d->size, s.size, __ATOMIC_RELAXED);
        base = (int64_t)s.size;
    }
    pthread_mutex_lock(&tsr_descriptors_lock);
    if (whence == SEEK_CUR)
        base = (int64_t)d->offset;
    if (whence != SEEK_SET && whence != SEEK_CUR && whence != SEEK_END)
        tsr_posix_fail(EINVAL, "tessera: lseek %s: whence %d is not SEEK_SET, SEEK_CUR or "
                               "SEEK_END", d->path, whence);
    else if (base + offset < 0)
        tsr_posix_fail(EINVAL, "tessera: lseek %s: the offset would be negative", d->path);
    else
        result = (int64_t)(d->offset = (uint64_t)(base + offset));
    pthread_mutex_unlock(&tsr_descriptors_lock);
done:;
    int error = errno;
    tsr_descriptor_put(d);
    errno = error;
    return result;
}

off_t lseek(int fd, off_t offset, int whence) {
    struct tsr_descriptor *d = tsr_descriptor_get(fd);
    if (d == NULL)
        return tsr_real_lseek()(fd, offset, whence);
    return tsr_lseek(d, offset, whence);
}

off64_t lseek64(int fd, off64_t offset, int whence) {
    struct tsr_descriptor *d = tsr_descriptor_get(fd);
    if (d == NULL)
        return tsr_real_lseek64()(fd, offset, whence);
    return tsr_lseek(d, offset, whence);
}

int close(int fd) {
    if (__atomic_load_n(&tsr_descriptors_used, __ATOMIC_ACQUIRE) == 0 || fd < 0)
        return tsr_real_close()(fd);
    TesseraFile *file = NULL;
    pthread_mutex_lock(&tsr_descriptors_lock);
    for (int i = 0; i < TSR_POSIX_DESCRIPTORS_MAX; i++)
        if (tsr_descriptors[i].fd == fd && !tsr_descriptors[i].closing) {
            /* Out of the table before the number is free for reuse. */
            tsr_descriptors[i].closing = 1;
            file = tsr_descriptor_reap(&tsr_descriptors[i]);
            break;
        }
    pthread_mutex_unlock(&tsr_descriptors_lock);
    int rc = tsr_real_close()(fd);
    int error = errno;
    tessera_close(file);
    errno = error;
    return rc;
}

/* fstat of a Tessera descriptor. */
static int tsr_descriptor_stat(struct tsr_descriptor *d, struct stat *out) {
    TesseraStat s;
    int code = tessera_file_stat(d->file, &s);
    int rc = 0;
    if (code != TESSERA_OK)
        rc = tsr_posix_tessera_fail(code, "fstat", d->path);
    else
        tsr_fill_stat(&s, out);
    int error = errno;
    tsr_descriptor_put(d);
    errno = error;
    return rc;
}

int fstat(int fd, struct stat *out) {
    struct tsr_descriptor *d = tsr_descriptor_get(fd);
    return d ? tsr_descriptor_stat(d, out) : tsr_real_fstat()(fd, out);
}

int fstat64(int fd, struct stat64 *out) {
    struct tsr_descriptor *d = tsr_descriptor_get(fd);
    return d ? tsr_descriptor_stat(d, (struct stat *)out) : tsr_real_fstat64()(fd, out);
}

int __fxstat(int version, int fd, struct stat *out) {
    struct tsr_descriptor *d = tsr_descriptor_get(fd);
    return d ? tsr_descriptor_stat(d, out) : tsr_real___fxstat()(version, fd, out);
}

int __fxstat64(int version, int fd, struct stat64 *out) {
    struct tsr_descriptor *d = tsr_descriptor_get(fd);
    return d ? tsr_descriptor_stat(d, (struct stat *)out)
             : tsr_real___fxstat64()(version, fd, out);
}

/* ---- open ---- */

/* Opens `name` if it routes to Tessera (returns 1, the result in *fd), else returns 0. */
static int tsr_open_tessera(const char *call, int dirfd, const char *name, int flags, int *fd) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route_at(dirfd, name, path, sizeof path))
        return 0;
    if ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC | O_TMPFILE)))
        *fd = tsr_posix_fail(EOPNOTSUPP, "tessera: %s %s: only reading is served through "
                                         "POSIX on a Tessera name; write with MPI-IO", call,
                             name);
    else if (flags & O_PATH)
        *fd = tsr_posix_fail(EOPNOTSUPP, "tessera: %s %s: O_PATH is not served on a Tessera "
                                         "name", call, name);
    else
        *fd = tsr_descriptor_open(call, name, path, flags);
    return 1;
}

static mode_t tsr_mode_argument(int flags, va_list args) {
    return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(args, int) : 0;
}

int open(const char *name, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = tsr_mode_argument(flags, args);
    va_end(args);
    int fd;
    if (tsr_open_tessera("open", AT_FDCWD, name, flags, &fd))
        return fd;
    return tsr_real_open()(name, flags, mode);
}

int open64(const char *name, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = tsr_mode_argument(flags, args);
    va_end(args);
    int fd;
    if (tsr_open_tessera("open64", AT_FDCWD, name, flags, &fd))
        return fd;
    return tsr_real_open64()(name, flags, mode);
}

int openat(int dirfd, const char *name, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = tsr_mode_argument(flags, args);
    va_end(args);
    int fd;
    if (tsr_open_tessera("openat", dirfd, name, flags, &fd))
        return fd;
    return tsr_real_openat()(dirfd, name, flags, mode);
}

int openat64(int dirfd, const char *name, int flags, ...) {
    va_list args;
    va_start(args, flags);
    mode_t mode = tsr_mode_argument(flags, args);
    va_end(args);
    int fd;
    if (tsr_open_tessera("openat64", dirfd, name, flags, &fd))
        return fd;
    return tsr_real_openat64()(dirfd, name, flags, mode);
}

int __open_2(const char *name, int flags) {
    int fd;
    if (tsr_open_tessera("open", AT_FDCWD, name, flags, &fd))
        return fd;
    return tsr_real___open_2()(name, flags);
}

int __open64_2(const char *name, int flags) {
    int fd;
    if (tsr_open_tessera("open64", AT_FDCWD, name, flags, &fd))
        return fd;
    return tsr_real___open64_2()(name, flags);
}

static int tsr_fopen_refused(const char *call, const char *name, const char *mode) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route_posix(name, path, sizeof path))
        return 0;
    tsr_posix_fail(EOPNOTSUPP, "tessera: %s %s (mode \"%s\"): stdio streams on a Tessera name "
                               "are not served until Tessera can be mounted; use MPI-IO, or "
                               "open()/read() to read", call, name, mode ? mode : "");
    return 1;
}

FILE *fopen(const char *name, const char *mode) {
    if (tsr_fopen_refused("fopen", name, mode))
        return NULL;
    return tsr_real_fopen()(name, mode);
}

FILE *fopen64(const char *name, const char *mode) {
    if (tsr_fopen_refused("fopen64", name, mode))
        return NULL;
    return tsr_real_fopen64()(name, mode);
}

/* ---- stat ---- */

int stat(const char *name, struct stat *out) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route_posix(name, path, sizeof path))
        return tsr_real_stat()(name, out);
    return tsr_stat_name("stat", path, out);
}

int stat64(const char *name, struct stat64 *out) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route_posix(name, path, sizeof path))
        return tsr_real_stat64()(name, out);
    return tsr_stat_name("stat64", path, (struct stat *)out);
}

/* Tessera has no symbolic links: lstat is stat. */
int lstat(const char *name, struct stat *out) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route_posix(name, path, sizeof path))
        return tsr_real_lstat()(name, out);
    return tsr_stat_name("lstat", path, out);
}

int lstat64(const char *name, struct stat64 *out) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route_posix(name, path, sizeof path))
        return tsr_real_lstat64()(name, out);
    return tsr_stat_name("lstat64", path, (struct stat *)out);
}

/* fstatat and its kin: a Tessera name, or an empty name with AT_EMPTY_PATH on a Tessera
 * descriptor. Returns 1 if answered (result in *rc). */
static int tsr_statat(const char *call, int dirfd, const char *name, int flags,
                      struct stat *out, int *rc) {
    if ((flags & AT_EMPTY_PATH) && tsr_empty_name(name)) {
        struct tsr_descriptor *d = tsr_descriptor_get(dirfd);
        if (d == NULL)
            return 0;
        *rc = tsr_descriptor_stat(d, out);
        return 1;
    }
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route_at(dirfd, name, path, sizeof path))
        return 0;
    *rc = tsr_stat_name(call, path, out);
    return 1;
}

int fstatat(int dirfd, const char *name, struct stat *out, int flags) {
    int rc;
    if (tsr_statat("fstatat", dirfd, name, flags, out, &rc))
        return rc;
    return tsr_real_fstatat()(dirfd, name, out, flags);
}

int fstatat64(int dirfd, const char *name, struct stat64 *out, int flags) {
    int rc;
    if (tsr_statat("fstatat64", dirfd, name, flags, (struct stat *)out, &rc))
        return rc;
    return tsr_real_fstatat64()(dirfd, name, out, flags);
}

int statx(int dirfd, const char *name, int flags, unsigned int mask, struct statx *out) {
    struct tsr_descriptor *d = NULL;
    char path[TSR_PATH_BYTES_MAX];
    TesseraStat s;
    if ((flags & AT_EMPTY_PATH) && tsr_empty_name(name) &&
        (d = tsr_descriptor_get(dirfd)) != NULL) {
        int code = tessera_file_stat(d->file, &s);
        int rc = 0;
        if (code != TESSERA_OK)
            rc = tsr_posix_tessera_fail(code, "statx", d->path);
        else
            tsr_fill_statx(&s, mask, out);
        int error = errno;
        tsr_descriptor_put(d);
        errno = error;
        return rc;
    }
    if (!tsr_route_at(dirfd, name, path, sizeof path))
        return tsr_real_statx()(dirfd, name, flags, mask, out);
    if (tsr_stat_path("statx", path, &s) != 0)
        return -1;
    tsr_fill_statx(&s, mask, out);
    return 0;
}

int __xstat(int version, const char *name, struct stat *out) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route_posix(name, path, sizeof path))
        return tsr_real___xstat()(version, name, out);
    return tsr_stat_name("stat", path, out);
}

int __xstat64(int version, const char *name, struct stat64 *out) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route_posix(name, path, sizeof path))
        return tsr_real___xstat64()(version, name, out);
    return tsr_stat_name("stat64", path, (struct stat *)out);
}

int __lxstat(int version, const char *name, struct stat *out) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route_posix(name, path, sizeof path))
        return tsr_real___lxstat()(version, name, out);
    return tsr_stat_name("lstat", path, out);
}

int __lxstat64(int version, const char *name, struct stat64 *out) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route_posix(name, path, sizeof path))
        return tsr_real___lxstat64()(version, name, out);
    return tsr_stat_name("lstat64", path, (struct stat *)out);
}

int __fxstatat(int version, int dirfd, const char *name, struct stat *out, int flags) {
    int rc;
    if (tsr_statat("fstatat", dirfd, name, flags, out, &rc))
        return rc;
    return tsr_real___fxstatat()(version, dirfd, name, out, flags);
}

int __fxstatat64(int version, int dirfd, const char *name, struct stat64 *out, int flags) {
    int rc;
    if (tsr_statat("fstatat64", dirfd, name, flags, (struct stat *)out, &rc))
        return rc;
    return tsr_real___fxstatat64()(version, dirfd, name, out, flags);
}

/* ---- access ---- */

static int tsr_access_path(const char *call, const char *name, const char *path, int mode) {
    TesseraStat s;
    if (tsr_stat_path(call, path, &s) != 0)
        return -1;
    /* Tessera enforces no permissions; execute needs a bit to grant it, as for root. */
    if ((mode & X_OK) && !s.is_directory && !(s.mode & 0111))
        return tsr_posix_fail(EACCES, "tessera: %s %s: no execute permission bit", call,
                              name);
    return 0;
}

int access(const char *name, int mode) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route_posix(name, path, sizeof path))
        return tsr_real_access()(name, mode);
    return tsr_access_path("access", name, path, mode);
}

int faccessat(int dirfd, const char *name, int mode, int flags) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route_at(dirfd, name, path, sizeof path))
        return tsr_real_faccessat()(dirfd, name, mode, flags);
    return tsr_access_path("faccessat", name, path, mode);
}

int euidaccess(const char *name, int mode) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route_posix(name, path, sizeof path))
        return tsr_real_euidaccess()(name, mode);
    return tsr_access_path("euidaccess", name, path, mode);
}

int eaccess(const char *name, int mode) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route_posix(name, path, sizeof path))
        return tsr_real_eaccess()(name, mode);
    return tsr_access_path("eaccess", name, path, mode);
}

/* ---- truncate ---- */

static int tsr_truncate_path(const char *name, const char *path, int64_t length) {
    if (length < 0)
        return tsr_posix_fail(EINVAL, "tessera: truncate %s: negative length", name);
    TesseraClient *client = tsr_posix_client("truncate", name);
    if (client == NULL)
        return -1;
    TesseraFile *file = NULL;
    int code = tessera_open(client, path, TESSERA_MODE_READ_WRITE, &file);
    if (code == TESSERA_OK)
        code = tessera_file_set_size(file, (uint64_t)length);
    tessera_close(file);
    if (code != TESSERA_OK)
        return tsr_posix_tessera_fail(code, "truncate", name);
    return 0;
}

int truncate(const char *name, off_t length) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route_posix(name, path, sizeof path))
        return tsr_real_truncate()(name, length);
    return tsr_truncate_path(name, path, length);
}

int truncate64(const char *name, off64_t length) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route_posix(name, path, sizeof path))
        return tsr_real_truncate64()(name, length);
    return tsr_truncate_path(name, path, length);
}

/* ---- unlink ---- */

static int tsr_unlink_path(const char *call, const char *name, const char *path) {
    TesseraClient *client = tsr_posix_client(call, name);
    if (client == NULL)
        return -1;
    int code = tessera_delete(client, path);
    if (code != TESSERA_OK)
        return tsr_posix_tessera_fail(code, call, name);
    return 0;
}

int unlink(const char *name) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route_posix(name, path, sizeof path))
        return tsr_real_unlink()(name);
    return tsr_unlink_path("unlink", name, path);
}

int unlinkat(int dirfd, const char *name, int flags) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route_at(dirfd, name, path, sizeof path))
        return tsr_real_unlinkat()(dirfd, name, flags);
    if (flags & AT_REMOVEDIR)
        return tsr_posix_fail(EOPNOTSUPP, "tessera: rmdir %s: removing a Tessera directory "
                                          "through POSIX is not served (tessera rmdir)", name);
    return tsr_unlink_path("unlinkat", name, path);
}

/* remove() of a file; a Tessera directory is not removed through POSIX. */
int remove(const char *name) {
    char path[TSR_PATH_BYTES_MAX];
    if (!tsr_route_posix(name, path, sizeof path))
        return tsr_real_remove()(name);
    return tsr_unlink_path("remove", name, path);
}
