/* A plain PnetCDF program (it knows nothing of Tessera; the shim is loaded with LD_PRELOAD and
 * the file name lies under $TESSERA_MPIIO_PATHS): 4 processes define a 2-D int variable and
 * a 1-D double variable, write column blocks with put_vara_int_all and strided elements with
 * put_vars_double_all, close, reopen read-only, and check every value and the header. */
#include <mpi.h>
#include <pnetcdf.h>
#include <stdio.h>
#include <stdlib.h>

#define ROWS 16
#define COLUMNS 32
#define SAMPLES 64

#define CHECK(condition, ...)                                                              \
    do {                                                                                   \
        if (!(condition)) {                                                                \
            fprintf(stderr, "%s:%d: failed: %s: ", __FILE__, __LINE__, #condition);          \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                  \
        }                                                                                  \
    } while (0)
#define CHECK_NC(call)                                                                     \
    do {                                                                                   \
        int status_ = (call);                                                              \
        CHECK(status_ == NC_NOERR, "%s: %s", #call, ncmpi_strerror(status_));              \
    } while (0)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(argc == 2 && size == 4, "usage: mpirun -n 4 %s FILE", argv[0]);
    const char *name = argv[1];
    int width = COLUMNS / size;

    int ncid, dims[2], sample_dim, grid, samples;
    CHECK_NC(ncmpi_create(MPI_COMM_WORLD, name, NC_CLOBBER | NC_64BIT_DATA, MPI_INFO_NULL,
                          &ncid));
    CHECK_NC(ncmpi_def_dim(ncid, "y", ROWS, &dims[0]));
    CHECK_NC(ncmpi_def_dim(ncid, "x", COLUMNS, &dims[1]));
    CHECK_NC(ncmpi_def_dim(ncid, "sample", SAMPLES, &sample_dim));
    CHECK_NC(ncmpi_def_var(ncid, "grid", NC_INT, 2, dims, &grid));
    CHECK_NC(ncmpi_def_var(ncid, "samples", NC_DOUBLE, 1, &sample_dim, &samples));
    CHECK_NC(ncmpi_put_att_text(ncid, NC_GLOBAL, "title", 7, "tessera"));
    CHECK_NC(ncmpi_enddef(ncid));
    int *block = malloc(sizeof(int) * ROWS * (size_t)width);
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < width; c++)
            block[r * width + c] = r * 1000 + rank * width + c;
    MPI_Offset start[2] = {0, rank * width}, count[2] = {ROWS, width};
    CHECK_NC(ncmpi_put_vara_int_all(ncid, grid, start, count, block));
    /* Every 4th sample from `rank`: strided in the file. */
    double mine[SAMPLES / 4];
    for (int k = 0; k < SAMPLES / 4; k++)
        mine[k] = rank + 4 * k + 0.5;
    MPI_Offset sample_start = rank, sample_count = SAMPLES / 4, stride = 4;
    CHECK_NC(ncmpi_put_vars_double_all(ncid, samples, &sample_start, &sample_count, &stride,
                                       mine));
    CHECK_NC(ncmpi_close(ncid));

    CHECK_NC(ncmpi_open(MPI_COMM_WORLD, name, NC_NOWRITE, MPI_INFO_NULL, &ncid));
    int ndims, nvars, natts, unlimited;
    CHECK_NC(ncmpi_inq(ncid, &ndims, &nvars, &natts, &unlimited));
    CHECK(ndims == 3 && nvars == 2 && natts == 1, "header: %d dims, %d vars, %d attributes",
          ndims, nvars, natts);
    char title[8] = {0};
    CHECK_NC(ncmpi_get_att_text(ncid, NC_GLOBAL, "title", title));
    CHECK(title[0] == 't' && title[6] == 'a', "title reads back as %.7s", title);
    CHECK_NC(ncmpi_inq_varid(ncid, "grid", &grid));
    CHECK_NC(ncmpi_inq_varid(ncid, "samples", &samples));
    static int whole[ROWS * COLUMNS];
    MPI_Offset all_start[2] = {0, 0}, all_count[2] = {ROWS, COLUMNS};
    CHECK_NC(ncmpi_get_vara_int_all(ncid, grid, all_start, all_count, whole));
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLUMNS; c++)
            CHECK(whole[r * COLUMNS + c] == r * 1000 + c, "grid[%d][%d] is %d", r, c,
                  whole[r * COLUMNS + c]);
    double all_samples[SAMPLES];
    MPI_Offset zero = 0, samples_count = SAMPLES;
    CHECK_NC(ncmpi_get_vara_double_all(ncid, samples, &zero, &samples_count, all_samples));
    for (int k = 0; k < SAMPLES; k++)
        CHECK(all_samples[k] == k + 0.5, "samples[%d] is %g", k, all_samples[k]);
    CHECK_NC(ncmpi_close(ncid));
    free(block);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("ok pnetcdf: put_vara_int_all column blocks and put_vars_double_all strided "
               "samples read back whole; header and attribute\n");
    MPI_Finalize();
    return 0;
}
