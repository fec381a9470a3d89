/* NAS BT-IO's output, as a plain MPI program: the solution of a POINTS^3 grid, 5 doubles per
 * point (class A: 64^3, 10 MiB), appended to one file at every output step, in Fortran order.
 * The grid is dealt over P = n^2 processes by BT's multi-partition: n^3 cells of
 * (POINTS/n)^3 points, process r owning n of them, one per z layer, diagonally placed (cell c
 * of process (x, y) = r mod n, r div n is ((x + c) mod n, (y - c) mod n, c), NPB's make_set).
 * Each process's file type is a struct of one Fortran-order subarray per cell over the
 * element type of 5 doubles, set with MPI_File_set_view at the step's displacement; its
 * memory holds its cells back to back. A step is then one MPI_File_write_at_all (BT-IO's
 * "full" mode, `collective` runs) or one MPI_File_write_at (the independent methods).
 * Afterwards every process reads back its share of the whole file through the default view
 * and compares every byte with what the last step to write there should have left.
 *
 * usage: btio FILE STEPS POINTS METHOD
 *   METHOD: multiple, sieve, list, datatype, view (independent: hint tessera_method) or
 *           two_phase, server_directed (collective: hint tessera_coll)
 * Process 0 prints one line of JSON: method, mode, seconds (the slowest process's time from
 * the barrier before the first step to the end of the last), bytes, verified. verified (and
 * the exit status 0) needs every byte right and the method hint in effect (MPI_File_get_info). The program knows Tessera only by the file name and the
 * hints; run it with the shim preloaded (docs/MPIIO.md). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COMPONENTS 5 /* doubles per grid point */
#define VERIFY_CHUNK_BYTES (4 << 20)
#define STEPS_MAX 1000
#define POINTS_MAX 1024

static const char *const INDEPENDENT[] = {"multiple", "sieve", "list", "datatype", "view"};
static const char *const COLLECTIVE[] = {"two_phase", "server_directed"};

static void fail(int rank, const char *what, int code) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    fprintf(stderr, "btio: rank %d: %s failed: %s\n", rank, what, text);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

#define CALL(rank, call)                                                                   \
    do {                                                                                   \
        int code_ = (call);                                                                \
        if (code_ != MPI_SUCCESS)                                                          \
            fail(rank, #call, code_);                                                      \
    } while (0)

/* The value of component m of grid point (i, j, k) at output step `step`: distinct for every
 * double of the run, and exact in a double. */
static double value(long long step, long long points, long long i, long long j, long long k,
                    int m) {
    return (double)((((step * points + k) * points + j) * points + i) * COMPONENTS + m + 1);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 5) {
        if (rank == 0)
            fprintf(stderr, "usage: btio FILE STEPS POINTS METHOD\n");
        MPI_Finalize();
        return 2;
    }
    const char *path = argv[1];
    long long steps = atoll(argv[2]), points = atoll(argv[3]);
    const char *method = argv[4];
    int collective = -1;
    for (size_t i = 0; i < sizeof INDEPENDENT / sizeof *INDEPENDENT; i++)
        if (strcmp(method, INDEPENDENT[i]) == 0)
            collective = 0;
    for (size_t i = 0; i < sizeof COLLECTIVE / sizeof *COLLECTIVE; i++)
        if (strcmp(method, COLLECTIVE[i]) == 0)
            collective = 1;
    int cells = 0; /* n: cells per dimension */
    while ((cells + 1) * (cells + 1) <= size)
        cells++;
    const char *bad = NULL;
    if (collective < 0)
        bad = "METHOD is not one of multiple, sieve, list, datatype, view, two_phase, "
              "server_directed";
    else if (steps < 1 || steps > STEPS_MAX)
        bad = "STEPS must be 1 to 1000";
    else if (points < 1 || points > POINTS_MAX)
        bad = "POINTS must be 1 to 1024";
    else if (cells * cells != size)
        bad = "the number of processes must be a square (BT's multi-partition)";
    else if (points % cells != 0)
        bad = "POINTS must be a multiple of the square root of the number of processes";
    if (bad) {
        if (rank == 0)
            fprintf(stderr, "btio: %s\n", bad);
        MPI_Finalize();
        return 2;
    }
    const long long cell_points = points / cells;
    const long long cell_doubles = cell_points * cell_points * cell_points * COMPONENTS;
    const long long step_bytes = points * points * points * COMPONENTS * (long long)sizeof(double);

    /* The file type: one subarray per cell, in a struct. */
    MPI_Datatype element, filetype;
    CALL(rank, MPI_Type_contiguous(COMPONENTS, MPI_DOUBLE, &element));
    MPI_Datatype *subarrays = malloc(sizeof(MPI_Datatype) * (size_t)cells);
    int *lengths = malloc(sizeof(int) * (size_t)cells);
    MPI_Aint *displacements = malloc(sizeof(MPI_Aint) * (size_t)cells);
    long long (*origin)[3] = malloc(sizeof *origin * (size_t)cells);
    if (!subarrays || !lengths || !displacements || !origin) {
        fprintf(stderr, "btio: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const int x = rank % cells, y = rank / cells;
    for (int c = 0; c < cells; c++) {
        origin[c][0] = ((x + c) % cells) * cell_points;
        origin[c][1] = ((y - c + cells) % cells) * cell_points;
        origin[c][2] = (long long)c * cell_points;
        int sizes[3] = {(int)points, (int)points, (int)points};
        int subsizes[3] = {(int)cell_points, (int)cell_points, (int)cell_points};
        int starts[3] = {(int)origin[c][0], (int)origin[c][1], (int)origin[c][2]};
        CALL(rank, MPI_Type_create_subarray(3, sizes, subsizes, starts, MPI_ORDER_FORTRAN,
                                            element, &subarrays[c]));
        lengths[c] = 1;
        displacements[c] = 0;
    }
    CALL(rank, MPI_Type_create_struct(cells, lengths, displacements, subarrays, &filetype));
    CALL(rank, MPI_Type_commit(&filetype));
    CALL(rank, MPI_Type_commit(&element));
    for (int c = 0; c < cells; c++)
        MPI_Type_free(&subarrays[c]);

    /* Memory: the cells back to back, each in Fortran order. */
    const long long mine = cell_doubles * cells;
    double *data = malloc(sizeof(double) * (size_t)mine);
    if (!data) {
        fprintf(stderr, "btio: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, collective ? "tessera_coll" : "tessera_method", (char *)method);
    if (rank == 0)
        MPI_File_delete((char *)path, MPI_INFO_NULL); /* a file left by an earlier run */
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File fh;
    CALL(rank, MPI_File_open(MPI_COMM_WORLD, (char *)path, MPI_MODE_CREATE | MPI_MODE_RDWR,
                             info, &fh));
    /* The method must be in effect: a value the shim does not know would be ignored. */
    MPI_Info in_effect;
    char hint[MPI_MAX_INFO_VAL + 1] = "";
    int flag = 0;
    CALL(rank, MPI_File_get_info(fh, &in_effect));
    MPI_Info_get(in_effect, collective ? "tessera_coll" : "tessera_method", MPI_MAX_INFO_VAL,
                 hint, &flag);
    MPI_Info_free(&in_effect);
    long long wrong = 0;
    if (!flag || strcmp(hint, method) != 0) {
        fprintf(stderr, "btio: rank %d: the hint in effect is %s, not %s (is the shim loaded?)\n",
                rank, flag ? hint : "(unset)", method);
        wrong++;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double started = MPI_Wtime(), writing = 0;
    for (long long step = 0; step < steps; step++) {
        double *at = data;
        for (int c = 0; c < cells; c++)
            for (long long k = 0; k < cell_points; k++)
                for (long long j = 0; j < cell_points; j++)
                    for (long long i = 0; i < cell_points; i++)
                        for (int m = 0; m < COMPONENTS; m++)
                            *at++ = value(step, points, origin[c][0] + i, origin[c][1] + j,
                                          origin[c][2] + k, m);
        double begun = MPI_Wtime();
        CALL(rank, MPI_File_set_view(fh, (MPI_Offset)(step * step_bytes), element, filetype,
                                     "native", info));
        MPI_Status status;
        if (collective)
            CALL(rank, MPI_File_write_at_all(fh, 0, data, (int)(mine / COMPONENTS), element,
                                             &status));
        else
            CALL(rank, MPI_File_write_at(fh, 0, data, (int)(mine / COMPONENTS), element,
                                         &status));
        writing += MPI_Wtime() - begun;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double elapsed = MPI_Wtime() - started, slowest = 0, slowest_writing = 0;
    MPI_Reduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&writing, &slowest_writing, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);

    /* Read back: the default view, each process a contiguous share of the whole file. */
    CALL(rank, MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
    MPI_Offset file_bytes = 0;
    CALL(rank, MPI_File_get_size(fh, &file_bytes));
    const long long total = steps * step_bytes;
    if (file_bytes != total) {
        if (rank == 0)
            fprintf(stderr, "btio: the file holds %lld bytes, %lld expected\n",
                    (long long)file_bytes, total);
        wrong++;
    }
    const long long total_doubles = total / (long long)sizeof(double);
    long long first = total_doubles * rank / size, last = total_doubles * (rank + 1) / size;
    const long long chunk_doubles = VERIFY_CHUNK_BYTES / sizeof(double);
    double *back = malloc(VERIFY_CHUNK_BYTES);
    double verify_started = MPI_Wtime();
    for (long long from = first; from < last && back; from += chunk_doubles) {
        long long count = last - from < chunk_doubles ? last - from : chunk_doubles;
        memset(back, 0xff, (size_t)count * sizeof(double));
        MPI_Status status;
        CALL(rank, MPI_File_read_at(fh, (MPI_Offset)(from * (long long)sizeof(double)), back,
                                    (int)count, MPI_DOUBLE, &status));
        for (long long d = 0; d < count; d++) {
            long long index = from + d, m = index % COMPONENTS, point = index / COMPONENTS;
            long long i = point % points, j = point / points % points;
            long long k = point / points / points % points, step = point / points / points / points;
            double expected = value(step, points, i, j, k, (int)m);
            if (memcmp(&back[d], &expected, sizeof expected) != 0) {
                if (wrong < 5)
                    fprintf(stderr,
                            "btio: rank %d: byte %lld (step %lld, point %lld,%lld,%lld "
                            "component %lld) reads %g, expected %g\n",
                            rank, index * (long long)sizeof(double), step, i, j, k, m,
                            back[d], expected);
                wrong++;
            }
        }
    }
    if (!back) {
        fprintf(stderr, "btio: out of memory\n");
        wrong++;
    }
    double verify_seconds = MPI_Wtime() - verify_started;
    long long all_wrong = 0;
    MPI_Allreduce(&wrong, &all_wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    CALL(rank, MPI_File_close(&fh));
    if (rank == 0) {
        MPI_File_delete((char *)path, MPI_INFO_NULL);
        printf("{\"method\": \"%s\", \"mode\": \"%s\", \"processes\": %d, \"points\": %lld, "
               "\"steps\": %lld, \"seconds\": %.6f, \"write_seconds\": %.6f, "
               "\"verify_seconds\": %.6f, \"bytes\": %lld, \"errors\": %lld, "
               "\"verified\": %s}\n",
               method, collective ? "collective" : "independent", size, points, steps,
               slowest, slowest_writing, verify_seconds, total, all_wrong,
               all_wrong == 0 ? "true" : "false");
        fflush(stdout);
    }
    free(back);
    free(data);
    free(subarrays);
    free(lengths);
    free(displacements);
    free(origin);
    MPI_Info_free(&info);
    MPI_Type_free(&filetype);
    MPI_Type_free(&element);
    MPI_Finalize();
    return all_wrong == 0 ? 0 : 1;
}
