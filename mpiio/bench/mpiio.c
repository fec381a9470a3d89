/* IOR-style MPI-IO bandwidth: every process writes, then reads back, its share of one file
 * with MPI_File_write_at / read_at (independent) or MPI_File_write_at_all / read_at_all
 * (collective), and checks every byte. The program stays up and runs the cases it is told,
 * so that `tessera bench mpiio` can interleave them with the other columns of the same run
 * (the same program without the shim, and Rust workers using tessera-client natively).
 *
 * Patterns, for P processes, transfer T bytes per call and S calls (segments) per process:
 *   contiguous: the default view; call s of rank r writes T bytes at file offset
 *               (s * P + r) * T (IOR's segments, block = transfer);
 *   strided:    a vector file view, MPI_Type_vector(S * T / B, B, P * B, MPI_BYTE) at
 *               displacement r * B: the ranks' blocks of B bytes interleave; call s writes
 *               T bytes at view offset s * T, i.e. T / B blocks.
 * Both fill the file's first P * S * T bytes exactly once.
 *
 * usage: mpiio-bench FILE CONTROL
 *   CONTROL is a directory holding one command source per rank, `CONTROL/rank-<r>` (a FIFO
 *   the bench writes to, or a plain file): each line is
 *     run ACCESS PATTERN TRANSFER SEGMENTS BLOCK GENERATION CHECK
 *   with ACCESS independent|collective, PATTERN contiguous|strided, BLOCK the strided view's
 *   block (ignored for contiguous), GENERATION a number mixed into the data, CHECK 1 to also
 *   read the whole file back through the default view and check which rank's data lies where;
 *   or `quit` (end of input quits too). Every rank must be given the same lines (checked).
 * A case: set the view, truncate the file to 0, barrier, the S timed writes, barrier; then
 * barrier, the S timed reads into a zeroed buffer, barrier; every 8-byte word read must hold
 * value(file offset, writing rank, GENERATION); the file must hold P * S * T bytes. Times are
 * MPI_Wtime between the barriers (which yield the processor while they wait: barrier()),
 * the slowest process's; the line also gives what one
 * barrier alone took (`barrier_seconds`), which each timed phase includes once. Process 0 prints one JSON line per
 * case on standard output. The exit status is 0 only if every case verified.
 *
 * The program knows Tessera only by the file name (run it with libtessera_mpiio.so preloaded
 * for a tessera: name, or without it on a local file: docs/MPIIO.md). */
#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE_BYTES_MAX 256
#define TRANSFER_BYTES_MAX (64LL << 20)
#define SEGMENTS_MAX 65536LL
/* The most bytes one process writes in one case (its write and read buffers are this big). */
#define PROCESS_BYTES_MAX (256LL << 20)
#define CHECK_CHUNK_BYTES (4LL << 20)
#define CASES_MAX 100000
/* Errors printed per case, at most. */
#define ERRORS_SHOWN_MAX 5

static int rank = 0, size = 0;

static void fail(const char *what, int code) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    fprintf(stderr, "mpiio: rank %d: %s failed: %s\n", rank, what, text);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

#define CALL(call)                                                                         \
    do {                                                                                   \
        int code_ = (call);                                                                \
        if (code_ != MPI_SUCCESS)                                                          \
            fail(#call, code_);                                                            \
    } while (0)

/* The word at file offset `offset` (a multiple of 8) written by `writer` in `generation`.
 * The same formula is in crates/tessera-cli/src/bench/mpiio.rs (the native workers). */
static uint64_t value(uint64_t offset, int writer, uint64_t generation) {
    return ((offset >> 3) + 1) * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)(writer + 1) << 56) ^
           (generation << 40);
}

struct Case {
    int collective, strided, check;
    long long transfer, segments, block, generation;
};

/* The file offset of byte `position` of rank `r`'s stream (its S * T bytes in call order). */
static long long file_offset(const struct Case *c, int r, long long position) {
    if (c->strided)
        return (position / c->block * size + r) * c->block + position % c->block;
    return (position / c->transfer * size + r) * c->transfer + position % c->transfer;
}

/* The rank whose data lies at file offset `offset`. */
static int owner(const struct Case *c, long long offset) {
    long long unit = c->strided ? c->block : c->transfer;
    return (int)(offset / unit % size);
}

/* Parses one command; returns NULL or what is wrong with it. */
static const char *parse(const char *line, struct Case *c, int *quit) {
    char access[32] = "", pattern[32] = "";
    *quit = 0;
    if (strncmp(line, "quit", 4) == 0) {
        *quit = 1;
        return NULL;
    }
    if (sscanf(line, "run %31s %31s %lld %lld %lld %lld %d", access, pattern, &c->transfer,
               &c->segments, &c->block, &c->generation, &c->check) != 7)
        return "a command is `run ACCESS PATTERN TRANSFER SEGMENTS BLOCK GENERATION CHECK` "
               "or `quit`";
    if (strcmp(access, "independent") == 0)
        c->collective = 0;
    else if (strcmp(access, "collective") == 0)
        c->collective = 1;
    else
        return "ACCESS must be independent or collective";
    if (strcmp(pattern, "contiguous") == 0)
        c->strided = 0;
    else if (strcmp(pattern, "strided") == 0)
        c->strided = 1;
    else
        return "PATTERN must be contiguous or strided";
    if (c->transfer < 8 || c->transfer > TRANSFER_BYTES_MAX || c->transfer % 8 != 0)
        return "TRANSFER must be a multiple of 8 from 8 to 64 MiB (TRANSFER_BYTES_MAX)";
    if (c->segments < 1 || c->segments > SEGMENTS_MAX)
        return "SEGMENTS must be 1 to 65536 (SEGMENTS_MAX)";
    if (c->transfer * c->segments > PROCESS_BYTES_MAX)
        return "TRANSFER * SEGMENTS must be at most 256 MiB (PROCESS_BYTES_MAX)";
    if (c->strided && (c->block < 8 || c->block % 8 != 0 || c->transfer % c->block != 0))
        return "BLOCK must be a multiple of 8 that divides TRANSFER";
    if (c->strided && c->block * size > INT_MAX)
        return "BLOCK times the number of processes must fit an int (the vector's stride)";
    if (c->generation < 0 || c->generation >= (1LL << 16))
        return "GENERATION must be 0 to 65535";
    return NULL;
}

/* Reads the next line of `control` into `line`, the same on every rank (rank 0's is
 * broadcast and compared). Returns 0 at the end of the input. */
static int next_line(FILE *control, char *line) {
    char mine[LINE_BYTES_MAX] = "";
    if (!fgets(mine, sizeof mine, control))
        strcpy(mine, "quit\n");
    memcpy(line, mine, LINE_BYTES_MAX);
    CALL(MPI_Bcast(line, LINE_BYTES_MAX, MPI_CHAR, 0, MPI_COMM_WORLD));
    int differs = strcmp(line, mine) != 0, any = 0;
    CALL(MPI_Allreduce(&differs, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD));
    if (any) {
        if (rank == 0)
            fprintf(stderr, "mpiio: the ranks were given different commands (first: %s)", line);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return 1;
}

/* A hint's value in effect, or "" (the JSON carries it as it is: hint values have no quotes). */
static void hint(MPI_Info info, const char *key, char *out) {
    int flag = 0;
    out[0] = '\0';
    MPI_Info_get(info, (char *)key, MPI_MAX_INFO_VAL, out, &flag);
    if (!flag || strchr(out, '"') || strchr(out, '\\'))
        out[0] = '\0';
}

/* Reads the whole file through the default view, each rank a share, and checks the owner of
 * every word; returns the wrong words. */
static long long check_layout(MPI_File fh, const struct Case *c, long long file_bytes) {
    long long wrong = 0;
    char *back = malloc((size_t)CHECK_CHUNK_BYTES);
    if (!back) {
        fprintf(stderr, "mpiio: out of memory\n");
        return 1;
    }
    long long words = file_bytes / 8;
    long long first = words * rank / size * 8, last = words * (rank + 1) / size * 8;
    for (long long from = first; from < last; from += CHECK_CHUNK_BYTES) {
        long long length = last - from < CHECK_CHUNK_BYTES ? last - from : CHECK_CHUNK_BYTES;
        MPI_Status status;
        CALL(MPI_File_read_at(fh, from, back, (int)length, MPI_BYTE, &status));
        for (long long at = 0; at < length; at += 8) {
            uint64_t got, expected = value((uint64_t)(from + at), owner(c, from + at),
                                           (uint64_t)c->generation);
            memcpy(&got, back + at, 8);
            if (got != expected) {
                if (wrong < ERRORS_SHOWN_MAX)
                    fprintf(stderr,
                            "mpiio: rank %d: layout check: file byte %lld holds %016llx, "
                            "expected %016llx (rank %d's)\n",
                            rank, from + at, (unsigned long long)got,
                            (unsigned long long)expected, owner(c, from + at));
                wrong++;
            }
        }
    }
    free(back);
    return wrong;
}

/* MPI_Barrier that gives the processor away while it waits. A process done with its part of
 * a timed phase waits here for the others; MPICH's blocking barrier spins (over UCX), and
 * with the processes oversubscribed on the cores that the Tessera servers (or, for the local
 * file, the kernel's writeback) also need, the spinning ranks would slow the phase they wait
 * for. Every column's program waits this way, so the comparison stays fair. */
static void barrier(void) {
    MPI_Request request;
    MPI_Ibarrier(MPI_COMM_WORLD, &request);
    for (int tests = 1, done = 0; !done; tests++) {
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        if (done)
            break;
        if (tests < 64) {
            sched_yield();
        } else {
            struct timespec pause = {0, 20 * 1000};
            nanosleep(&pause, NULL);
        }
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 3) {
        if (rank == 0)
            fprintf(stderr, "usage: mpiio-bench FILE CONTROL\n");
        MPI_Finalize();
        return 2;
    }
    const char *path = argv[1];
    char control_path[4096];
    snprintf(control_path, sizeof control_path, "%s/rank-%d", argv[2], rank);
    FILE *control = fopen(control_path, "r");
    if (!control) {
        perror(control_path);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank == 0)
        MPI_File_delete((char *)path, MPI_INFO_NULL); /* a file left by an earlier run */
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File fh;
    CALL(MPI_File_open(MPI_COMM_WORLD, (char *)path, MPI_MODE_CREATE | MPI_MODE_RDWR,
                       MPI_INFO_NULL, &fh));
    /* What the MPI-IO in use says about itself: the shim's methods, or ROMIO's switches. */
    char method[MPI_MAX_INFO_VAL + 1], coll[MPI_MAX_INFO_VAL + 1], cb[MPI_MAX_INFO_VAL + 1],
        ds[MPI_MAX_INFO_VAL + 1];
    MPI_Info in_effect;
    CALL(MPI_File_get_info(fh, &in_effect));
    hint(in_effect, "tessera_method", method);
    hint(in_effect, "tessera_coll", coll);
    hint(in_effect, "romio_cb_write", cb);
    hint(in_effect, "romio_ds_write", ds);
    MPI_Info_free(&in_effect);

    char *data = NULL, *back = NULL;
    long long buffer_bytes = 0, failed_cases = 0;
    char line[LINE_BYTES_MAX];
    for (int cases = 0; cases < CASES_MAX && next_line(control, line); cases++) {
        struct Case c;
        int quit = 0;
        const char *bad = parse(line, &c, &quit);
        if (quit)
            break;
        if (bad) {
            if (rank == 0)
                fprintf(stderr, "mpiio: %s: %s", bad, line);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        long long mine = c.transfer * c.segments;
        if (mine > buffer_bytes) {
            free(data);
            free(back);
            data = malloc((size_t)mine);
            back = malloc((size_t)mine);
            if (!data || !back) {
                fprintf(stderr, "mpiio: rank %d: out of memory for %lld bytes\n", rank, mine);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            buffer_bytes = mine;
        }
        for (long long at = 0; at < mine; at += 8) {
            uint64_t word = value((uint64_t)file_offset(&c, rank, at), rank,
                                  (uint64_t)c.generation);
            memcpy(data + at, &word, 8);
        }
        MPI_Datatype filetype = MPI_BYTE;
        if (c.strided) {
            CALL(MPI_Type_vector((int)(mine / c.block), (int)c.block, (int)(c.block * size),
                                 MPI_BYTE, &filetype));
            CALL(MPI_Type_commit(&filetype));
        }
        CALL(MPI_File_set_view(fh, c.strided ? (MPI_Offset)(rank * c.block) : 0, MPI_BYTE,
                               filetype, "native", MPI_INFO_NULL));
        CALL(MPI_File_set_size(fh, 0));

        /* What the timing's closing barrier costs by itself (oversubscribed ranks poll). */
        barrier();
        double started = MPI_Wtime();
        barrier();
        double barrier_seconds = MPI_Wtime() - started;

        MPI_Status status;
        barrier();
        started = MPI_Wtime();
        for (long long s = 0; s < c.segments; s++) {
            MPI_Offset at = c.strided ? s * c.transfer : (s * size + rank) * c.transfer;
            char *from = data + s * c.transfer;
            if (c.collective)
                CALL(MPI_File_write_at_all(fh, at, from, (int)c.transfer, MPI_BYTE, &status));
            else
                CALL(MPI_File_write_at(fh, at, from, (int)c.transfer, MPI_BYTE, &status));
        }
        barrier();
        double write_seconds = MPI_Wtime() - started;

        memset(back, 0, (size_t)mine);
        barrier();
        started = MPI_Wtime();
        for (long long s = 0; s < c.segments; s++) {
            MPI_Offset at = c.strided ? s * c.transfer : (s * size + rank) * c.transfer;
            char *into = back + s * c.transfer;
            if (c.collective)
                CALL(MPI_File_read_at_all(fh, at, into, (int)c.transfer, MPI_BYTE, &status));
            else
                CALL(MPI_File_read_at(fh, at, into, (int)c.transfer, MPI_BYTE, &status));
        }
        barrier();
        double read_seconds = MPI_Wtime() - started;

        /* Outside the timing: every word read against the formula, the size, the layout. */
        long long wrong = 0;
        for (long long at = 0; at < mine; at += 8) {
            long long offset = file_offset(&c, rank, at);
            uint64_t got, expected = value((uint64_t)offset, rank, (uint64_t)c.generation);
            memcpy(&got, back + at, 8);
            if (got != expected) {
                if (wrong < ERRORS_SHOWN_MAX)
                    fprintf(stderr,
                            "mpiio: rank %d: %s %s T=%lld: read %016llx at file byte %lld, "
                            "expected %016llx\n",
                            rank, c.collective ? "collective" : "independent",
                            c.strided ? "strided" : "contiguous", c.transfer,
                            (unsigned long long)got, offset, (unsigned long long)expected);
                wrong++;
            }
        }
        MPI_Offset file_bytes = 0;
        CALL(MPI_File_get_size(fh, &file_bytes));
        long long total = mine * size;
        if (file_bytes != total) {
            if (rank == 0)
                fprintf(stderr, "mpiio: the file holds %lld bytes, %lld expected\n",
                        (long long)file_bytes, total);
            wrong++;
        }
        if (c.check) {
            CALL(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
            wrong += check_layout(fh, &c, total);
        }
        if (c.strided)
            MPI_Type_free(&filetype);

        double slowest_write = 0, slowest_read = 0, slowest_barrier = 0;
        MPI_Reduce(&barrier_seconds, &slowest_barrier, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        long long all_wrong = 0;
        MPI_Reduce(&write_seconds, &slowest_write, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(&read_seconds, &slowest_read, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Allreduce(&wrong, &all_wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        if (all_wrong)
            failed_cases++;
        if (rank == 0) {
            printf("{\"access\": \"%s\", \"pattern\": \"%s\", \"transfer_bytes\": %lld, "
                   "\"segments\": %lld, \"block_bytes\": %lld, \"processes\": %d, "
                   "\"generation\": %lld, \"bytes\": %lld, \"write_seconds\": %.9f, "
                   "\"read_seconds\": %.9f, \"barrier_seconds\": %.9f, \"layout_checked\": %s, \"errors\": %lld, "
                   "\"verified\": %s, \"tessera_method\": \"%s\", \"tessera_coll\": \"%s\", "
                   "\"romio_cb_write\": \"%s\", \"romio_ds_write\": \"%s\"}\n",
                   c.collective ? "collective" : "independent",
                   c.strided ? "strided" : "contiguous", c.transfer, c.segments,
                   c.strided ? c.block : c.transfer, size, c.generation, total, slowest_write,
                   slowest_read, slowest_barrier, c.check ? "true" : "false", all_wrong,
                   all_wrong == 0 ? "true" : "false", method, coll, cb, ds);
            fflush(stdout);
        }
    }
    CALL(MPI_File_close(&fh));
    if (rank == 0)
        MPI_File_delete((char *)path, MPI_INFO_NULL);
    fclose(control);
    free(data);
    free(back);
    MPI_Finalize();
    return failed_cases == 0 ? 0 : 1;
}
