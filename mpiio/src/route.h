/* The part of mpiio/ without MPI (route.c), shared by libtessera_mpiio.so and
 * libtessera_posix.so. */
#ifndef TESSERA_MPIIO_ROUTE_H
#define TESSERA_MPIIO_ROUTE_H

#include <stddef.h>

/* Longest Tessera path (the protocol's path_bytes_max). */
#define TSR_PATH_BYTES_MAX 4096

/* The next definition of `name` after this library's (dlsym(RTLD_NEXT)), cached in `*slot`;
 * NULL if there is none. */
void *tsr_next_symbol(void **slot, const char *name);

/* Is `filename` a Tessera file? If so, its Tessera path goes to `path`. "tessera:/a/b" is
 * "/a/b"; with TESSERA_MPIIO_PATHS=/mnt/t:/scratch, "/mnt/t/a/b" (or "a/b" relative to a
 * working directory of /mnt/t) is "/a/b", as if the cluster were mounted there. */
int tsr_route(const char *filename, char *path, size_t path_bytes);
/* tsr_route, and the $TESSERA_MPIIO_PATHS directory the name lies under goes to `directory`
 * ("" for a "tessera:" name): posix.c leaves a name under a Tessera FUSE mount to the
 * kernel. */
int tsr_route_under(const char *filename, char *path, size_t path_bytes, char *directory,
                    size_t directory_bytes);

#endif
