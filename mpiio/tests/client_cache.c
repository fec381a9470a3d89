/* The client cache through MPI-IO: an open with the hint tessera_client_cache makes the
 * process's connection with a client cache (the first open of the process chooses it), its
 * contiguous reads of the default view hit that cache the second time, and a write by
 * another process is seen at once (its read lease is revoked before the write is
 * acknowledged). The counters come from the shim's tessera_mpiio_cache_stats, found with
 * dlsym so the program still links against any MPI. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>

#include "common.h"

/* TesseraCacheStats of tessera.h. */
struct cache_stats {
    uint64_t hits, misses, evictions, revocations, demotes_sent, demotes_refused, buffer_hits;
};

#define REGION_BYTES (256 * 1024)

static struct cache_stats stats(void) {
    int (*get)(struct cache_stats *) =
        (int (*)(struct cache_stats *))dlsym(RTLD_DEFAULT, "tessera_mpiio_cache_stats");
    CHECK(get != NULL, "the shim exports no tessera_mpiio_cache_stats");
    struct cache_stats counts;
    CHECK(get(&counts) == 0, "tessera_mpiio_cache_stats failed");
    return counts;
}

static void fill(unsigned char *bytes, int rank, int generation) {
    for (int i = 0; i < REGION_BYTES; i++)
        bytes[i] = (unsigned char)(i * 7 + rank * 31 + generation * 101);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = test_rank(), size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char name[512];
    test_names("client-cache", name, NULL, sizeof name);
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "tessera_client_cache", "1048576");
    MPI_File fh;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh));
    MPI_Info_free(&info);
    static unsigned char written[REGION_BYTES], read[REGION_BYTES];
    MPI_Offset mine = (MPI_Offset)rank * REGION_BYTES;
    MPI_Status status;
    fill(written, rank, 0);
    CHECK_MPI(MPI_File_write_at(fh, mine, written, REGION_BYTES, MPI_BYTE, &status));
    MPI_Barrier(MPI_COMM_WORLD);

    struct cache_stats before = stats();
    for (int pass = 0; pass < 2; pass++) {
        memset(read, 0, sizeof read);
        CHECK_MPI(MPI_File_read_at(fh, mine, read, REGION_BYTES, MPI_BYTE, &status));
        CHECK(memcmp(read, written, REGION_BYTES) == 0, "pass %d read other bytes", pass);
    }
    struct cache_stats after = stats();
    /* 4 blocks of 64 KiB: missed, then found. */
    CHECK(after.misses - before.misses >= 4, "misses %llu",
          (unsigned long long)(after.misses - before.misses));
    CHECK(after.hits - before.hits >= 4, "hits %llu",
          (unsigned long long)(after.hits - before.hits));

    /* The next process overwrites this one's region; the cached blocks must not be read. */
    MPI_Barrier(MPI_COMM_WORLD);
    int from = (rank + size - 1) % size;
    MPI_Offset theirs = (MPI_Offset)((rank + 1) % size) * REGION_BYTES;
    fill(written, (rank + 1) % size, 1);
    CHECK_MPI(MPI_File_write_at(fh, theirs, written, REGION_BYTES, MPI_BYTE, &status));
    MPI_Barrier(MPI_COMM_WORLD);
    unsigned char expected[REGION_BYTES];
    fill(expected, rank, 1);
    CHECK_MPI(MPI_File_read_at(fh, mine, read, REGION_BYTES, MPI_BYTE, &status));
    CHECK(memcmp(read, expected, REGION_BYTES) == 0,
          "after process %d's write the read returned stale bytes", from);
    CHECK(stats().revocations > after.revocations, "no lease was revoked");
    CHECK_MPI(MPI_File_close(&fh));
    if (rank == 0)
        printf("ok client cache: a second read hit, another process's write was seen\n");
    MPI_Finalize();
    return 0;
}
