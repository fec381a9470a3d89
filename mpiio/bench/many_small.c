/* Many small independent writes, then close: every process writes its share of an array
 * interleaved with the others' — piece i of rank r at byte (i * P + r) * PIECE — one
 * MPI_File_write_at per piece, from MPI_File_open to MPI_File_close, the pattern of parallel
 * benchmarks that write a 3-D array row by row. `tessera bench small` runs it with the Tessera
 * MPI-IO library on a tessera: name and without it on a local file, in one run.
 *
 * usage: many-small FILE PIECES REPEATS WRITE_BACK PIECE...
 *   for each PIECE (bytes) and REPEATS times: barrier, open (with the hint
 *   tessera_write_back=enable when WRITE_BACK is 1; other MPI-IO libraries ignore it), the
 *   PIECES writes, close, barrier: the time is the slowest process's, barrier to barrier.
 *   Then process 0 reads the whole file back, checks every byte, and removes the file.
 *   Process 0 prints one JSON line per piece size and repeat:
 *     {"piece": B, "repeat": N, "seconds": S, "verified": true|false}
 *   The exit status is 0 only if every repeat verified. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PIECE_BYTES_MAX (1 << 20)
#define PIECES_MAX (1 << 20)
#define REPEATS_MAX 1000
#define FILE_BYTES_MAX (1LL << 30)

static unsigned char byte_at(long long offset, int repeat) {
    return (unsigned char)(offset * 29 + repeat * 131 + 11);
}

static void fail(int rank, const char *what, int code) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    fprintf(stderr, "many-small: rank %d: %s failed: %s\n", rank, what, text);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

#define CALL(rank, what, call)                                                                 \
    do {                                                                                       \
        int code_ = (call);                                                                    \
        if (code_ != MPI_SUCCESS)                                                              \
            fail(rank, what, code_);                                                           \
    } while (0)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 6) {
        if (rank == 0)
            fprintf(stderr, "usage: many-small FILE PIECES REPEATS WRITE_BACK PIECE...\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const char *name = argv[1];
    long long pieces = atoll(argv[2]);
    int repeats = atoi(argv[3]);
    int write_back = atoi(argv[4]) != 0;
    if (pieces < 1 || pieces > PIECES_MAX || repeats < 1 || repeats > REPEATS_MAX) {
        if (rank == 0)
            fprintf(stderr, "many-small: PIECES 1..%d, REPEATS 1..%d\n", PIECES_MAX, REPEATS_MAX);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Info info;
    MPI_Info_create(&info);
    if (write_back)
        MPI_Info_set(info, "tessera_write_back", "enable");
    int all_verified = 1;
    for (int arg = 5; arg < argc; arg++) {
        long long piece = atoll(argv[arg]);
        long long total = pieces * size * piece;
        if (piece < 1 || piece > PIECE_BYTES_MAX || total > FILE_BYTES_MAX) {
            if (rank == 0)
                fprintf(stderr, "many-small: PIECE %lld: 1..%d bytes, at most %lld in all\n",
                        piece, PIECE_BYTES_MAX, FILE_BYTES_MAX);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        unsigned char *data = malloc((size_t)piece);
        unsigned char *back = rank == 0 ? malloc((size_t)total) : NULL;
        if (data == NULL || (rank == 0 && back == NULL))
            fail(rank, "malloc", MPI_ERR_NO_MEM);
        for (int repeat = 0; repeat < repeats; repeat++) {
            MPI_File fh;
            MPI_Status status;
            MPI_Barrier(MPI_COMM_WORLD);
            double started = MPI_Wtime();
            CALL(rank, "open",
                 MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_WRONLY, info, &fh));
            for (long long i = 0; i < pieces; i++) {
                long long offset = (i * size + rank) * piece;
                for (long long b = 0; b < piece; b++)
                    data[b] = byte_at(offset + b, repeat);
                CALL(rank, "write_at",
                     MPI_File_write_at(fh, offset, data, (int)piece, MPI_BYTE, &status));
            }
            CALL(rank, "close", MPI_File_close(&fh));
            double mine = MPI_Wtime() - started, slowest = 0;
            MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            int verified = 1;
            if (rank == 0) {
                CALL(rank, "open to check",
                     MPI_File_open(MPI_COMM_SELF, name, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh));
                memset(back, 0, (size_t)total);
                for (long long at = 0; at < total; at += 1 << 30) {
                    long long chunk = total - at < (1 << 30) ? total - at : (1 << 30);
                    CALL(rank, "read_at",
                         MPI_File_read_at(fh, at, back + at, (int)chunk, MPI_BYTE, &status));
                }
                CALL(rank, "close after the check", MPI_File_close(&fh));
                for (long long at = 0; at < total && verified; at++)
                    if (back[at] != byte_at(at, repeat)) {
                        fprintf(stderr, "many-small: piece %lld repeat %d: byte %lld reads %u\n",
                                piece, repeat, at, back[at]);
                        verified = 0;
                    }
                CALL(rank, "delete", MPI_File_delete(name, MPI_INFO_NULL));
                printf("{\"piece\": %lld, \"repeat\": %d, \"seconds\": %.9f, \"verified\": %s}\n",
                       piece, repeat, slowest, verified ? "true" : "false");
                fflush(stdout);
            }
            all_verified &= verified;
            MPI_Barrier(MPI_COMM_WORLD);
        }
        free(data);
        free(back);
    }
    MPI_Info_free(&info);
    MPI_Bcast(&all_verified, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return all_verified ? 0 : 1;
}
