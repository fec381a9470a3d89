/* The client cache's write-back through MPI-IO: an open with the hint tessera_write_back=enable
 * makes the process's connection with write-back, and the open puts its processes in one
 * write group. Each process writes its share of an array interleaved with the others' as many
 * small independent writes (40 B each); they are buffered (the shim's
 * tessera_mpiio_write_back_stats, found with dlsym so the program links against any MPI).
 * After MPI_File_sync, a barrier and MPI_File_sync, every process reads every other
 * process's pieces; after close and a reopen without the hint, the whole array is there. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>

#include "common.h"

/* TesseraWriteBackStats of tessera.h. */
struct write_back_stats {
    uint64_t buffered, through, flushes, leases, revocations;
};

#define PIECE 40
#define PIECES 2000

static struct write_back_stats stats(void) {
    int (*get)(struct write_back_stats *) = (int (*)(struct write_back_stats *))dlsym(
        RTLD_DEFAULT, "tessera_mpiio_write_back_stats");
    CHECK(get != NULL, "the shim exports no tessera_mpiio_write_back_stats");
    struct write_back_stats counts;
    CHECK(get(&counts) == 0, "tessera_mpiio_write_back_stats failed");
    return counts;
}

static unsigned char byte_at(long long offset) { return (unsigned char)(offset * 13 + 7); }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = test_rank(), size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char name[512];
    test_names("write-back", name, NULL, sizeof name);
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "tessera_write_back", "enable");
    MPI_File fh;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh));
    MPI_Info_free(&info);
    MPI_Status status;
    unsigned char piece[PIECE];
    for (int i = 0; i < PIECES; i++) {
        long long offset = ((long long)i * size + rank) * PIECE;
        for (int b = 0; b < PIECE; b++)
            piece[b] = byte_at(offset + b);
        CHECK_MPI(MPI_File_write_at(fh, offset, piece, PIECE, MPI_BYTE, &status));
    }
    struct write_back_stats written = stats();
    CHECK(written.buffered >= PIECES / 2, "only %llu of %d writes were buffered",
          (unsigned long long)written.buffered, PIECES);
    /* MPI's sync-barrier-sync: then every process reads what the others wrote. */
    CHECK_MPI(MPI_File_sync(fh));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_MPI(MPI_File_sync(fh));
    CHECK(stats().flushes > written.flushes, "the sync flushed nothing");
    long long total = (long long)PIECES * size * PIECE;
    unsigned char *all = malloc((size_t)total);
    CHECK(all != NULL, "no memory");
    CHECK_MPI(MPI_File_read_at(fh, 0, all, (int)total, MPI_BYTE, &status));
    for (long long at = 0; at < total; at++)
        CHECK(all[at] == byte_at(at), "byte %lld (process %lld's piece) reads %u after the sync",
              at, (at / PIECE) % size, all[at]);
    CHECK_MPI(MPI_File_close(&fh));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        CHECK_MPI(MPI_File_open(MPI_COMM_SELF, name, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh));
        memset(all, 0, (size_t)total);
        CHECK_MPI(MPI_File_read_at(fh, 0, all, (int)total, MPI_BYTE, &status));
        for (long long at = 0; at < total; at++)
            CHECK(all[at] == byte_at(at), "byte %lld reads %u after close", at, all[at]);
        CHECK_MPI(MPI_File_close(&fh));
        CHECK_MPI(MPI_File_delete(name, MPI_INFO_NULL));
        printf("ok write-back: %d small writes per process buffered, seen after sync and close\n",
               PIECES);
    }
    free(all);
    MPI_Finalize();
    return 0;
}
