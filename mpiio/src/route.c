/* What both libraries of mpiio/ share, and nothing of MPI: which names are Tessera's
 * (tsr_route), and the next definition of a function this library interposes
 * (tsr_next_symbol). Compiled into libtessera_mpiio.so and libtessera_posix.so alike, each
 * with its own copy. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "route.h"

/* The MPI library's own function `name` (TSR_NEXT in shim.h, TSR_LIBC_NEXT in posix.c), cached in `*slot`. Several threads
 * may look it up at once: each finds the same address, so the plain race is benign, but the
 * slot is read and written atomically. */
void *tsr_next_symbol(void **slot, const char *name) {
    void *found = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (found == NULL) {
        found = dlsym(RTLD_NEXT, name);
        if (found != NULL)
            __atomic_store_n(slot, found, __ATOMIC_RELEASE);
    }
    return found;
}

/* Copies `source` into `path` if it fits. */
static int tsr_copy(char *path, size_t path_bytes, const char *source) {
    size_t length = strlen(source);
    if (length + 1 > path_bytes)
        return 0;
    memcpy(path, source, length + 1);
    return 1;
}

/* Is `filename` a Tessera file? If so, its Tessera path goes to `path`. "tessera:/a/b" is
 * "/a/b"; with TESSERA_MPIIO_PATHS=/mnt/t:/scratch, "/mnt/t/a/b" (or "a/b" relative to a
 * working directory of /mnt/t) is "/a/b", as if the cluster were mounted there. */
int tsr_route(const char *filename, char *path, size_t path_bytes) {
    return tsr_route_under(filename, path, path_bytes, NULL, 0);
}

/* As tsr_route, and the $TESSERA_MPIIO_PATHS directory the name lies under goes to
 * `directory` ("" for a "tessera:" name). */
int tsr_route_under(const char *filename, char *path, size_t path_bytes, char *directory,
                    size_t directory_bytes) {
    if (directory != NULL && directory_bytes > 0)
        directory[0] = '\0';
    if (filename == NULL)
        return 0;
    if (strncmp(filename, "tessera:", 8) == 0) {
        const char *rest = filename + 8;
        if (rest[0] == '/')
            return tsr_copy(path, path_bytes, rest);
        if (path_bytes < 2)
            return 0;
        path[0] = '/';
        return tsr_copy(path + 1, path_bytes - 1, rest);
    }
    const char *mounts = getenv("TESSERA_MPIIO_PATHS");
    if (mounts == NULL || mounts[0] == '\0')
        return 0;
    char absolute[TSR_PATH_BYTES_MAX];
    if (filename[0] == '/') {
        if (!tsr_copy(absolute, sizeof absolute, filename))
            return 0;
    } else {
        if (getcwd(absolute, sizeof absolute) == NULL)
            return 0;
        size_t used = strlen(absolute);
        if (used + 1 + strlen(filename) + 1 > sizeof absolute)
            return 0;
        absolute[used] = '/';
        strcpy(absolute + used + 1, filename);
    }
    const char *start = mounts;
    while (*start) {
        const char *end = strchr(start, ':');
        size_t length = end ? (size_t)(end - start) : strlen(start);
        while (length > 1 && start[length - 1] == '/')
            length--;
        if (length > 0 && strncmp(absolute, start, length) == 0 &&
            (absolute[length] == '/' || absolute[length] == '\0')) {
            const char *rest = absolute + length;
            if (rest[0] == '\0')
                rest = "/";
            if (directory != NULL) {
                if (length + 1 > directory_bytes)
                    return 0;
                memcpy(directory, absolute, length);
                directory[length] = '\0';
            }
            return tsr_copy(path, path_bytes, rest);
        }
        if (!end)
            break;
        start = end + 1;
    }
    return 0;
}
