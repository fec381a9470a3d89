/* A plain parallel HDF5 program (it knows nothing of Tessera; the shim is loaded with
 * LD_PRELOAD and the file name lies under $TESSERA_MPIIO_PATHS): 4 processes write column
 * blocks of a 2-D dataset through hyperslabs, one dataset collectively and one
 * independently, from noncontiguous memory; then every process reopens the file read-only and
 * checks every value, and reads its own block back through a hyperslab. */
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define ROWS 16
#define COLUMNS 32

#define CHECK(condition, ...)                                                              \
    do {                                                                                   \
        if (!(condition)) {                                                                \
            fprintf(stderr, "%s:%d: failed: %s: ", __FILE__, __LINE__, #condition);          \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                  \
        }                                                                                  \
    } while (0)

static int value(int dataset, int row, int column) { return dataset * 100000 + row * 1000 + column; }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(argc == 2 && size == 4, "usage: mpirun -n 4 %s FILE", argv[0]);
    const char *name = argv[1];
    int width = COLUMNS / size;

    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
    hid_t file = H5Fcreate(name, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK(file >= 0, "H5Fcreate %s", name);
    hsize_t dims[2] = {ROWS, COLUMNS};
    hid_t filespace = H5Screate_simple(2, dims, NULL);
    /* Memory: the block sits in the middle of a wider buffer (noncontiguous). */
    int memory[ROWS][COLUMNS / 4 + 4];
    hsize_t memory_dims[2] = {ROWS, COLUMNS / 4 + 4};
    hid_t memspace = H5Screate_simple(2, memory_dims, NULL);
    hsize_t memory_start[2] = {0, 2}, block[2] = {ROWS, (hsize_t)width};
    H5Sselect_hyperslab(memspace, H5S_SELECT_SET, memory_start, NULL, block, NULL);
    hsize_t start[2] = {0, (hsize_t)(rank * width)};
    H5Sselect_hyperslab(filespace, H5S_SELECT_SET, start, NULL, block, NULL);
    const char *datasets[2] = {"collective", "independent"};
    for (int d = 0; d < 2; d++) {
        hid_t dataset = H5Dcreate2(file, datasets[d], H5T_NATIVE_INT, filespace, H5P_DEFAULT,
                                   H5P_DEFAULT, H5P_DEFAULT);
        CHECK(dataset >= 0, "H5Dcreate2 %s", datasets[d]);
        for (int r = 0; r < ROWS; r++)
            for (int c = 0; c < COLUMNS / 4 + 4; c++)
                memory[r][c] = c >= 2 && c < 2 + width ? value(d, r, rank * width + c - 2) : -1;
        hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
        H5Pset_dxpl_mpio(dxpl, d == 0 ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT);
        CHECK(H5Dwrite(dataset, H5T_NATIVE_INT, memspace, filespace, dxpl, memory) >= 0,
              "H5Dwrite %s", datasets[d]);
        H5Pclose(dxpl);
        H5Dclose(dataset);
    }
    int attribute = 20260101;
    hid_t scalar = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(file, "stamp", H5T_NATIVE_INT, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attr, H5T_NATIVE_INT, &attribute);
    H5Aclose(attr);
    H5Sclose(scalar);
    H5Sclose(memspace);
    H5Fclose(file);

    file = H5Fopen(name, H5F_ACC_RDONLY, fapl);
    CHECK(file >= 0, "H5Fopen %s", name);
    for (int d = 0; d < 2; d++) {
        hid_t dataset = H5Dopen2(file, datasets[d], H5P_DEFAULT);
        CHECK(dataset >= 0, "H5Dopen2 %s", datasets[d]);
        static int whole[ROWS][COLUMNS];
        hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
        H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
        CHECK(H5Dread(dataset, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, dxpl, whole) >= 0, "H5Dread");
        for (int r = 0; r < ROWS; r++)
            for (int c = 0; c < COLUMNS; c++)
                CHECK(whole[r][c] == value(d, r, c), "%s[%d][%d] is %d", datasets[d], r, c,
                      whole[r][c]);
        /* The own block again, through the hyperslab, into a zeroed buffer. */
        int mine[ROWS][8];
        hsize_t mine_dims[2] = {ROWS, 8};
        hid_t minespace = H5Screate_simple(2, mine_dims, NULL);
        for (int r = 0; r < ROWS; r++)
            for (int c = 0; c < 8; c++)
                mine[r][c] = 0;
        CHECK(H5Dread(dataset, H5T_NATIVE_INT, minespace, filespace, H5P_DEFAULT, mine) >= 0,
              "H5Dread of the block");
        for (int r = 0; r < ROWS; r++)
            for (int c = 0; c < width; c++)
                CHECK(mine[r][c] == value(d, r, rank * width + c), "block [%d][%d] is %d", r, c,
                      mine[r][c]);
        H5Sclose(minespace);
        H5Pclose(dxpl);
        H5Dclose(dataset);
    }
    attr = H5Aopen(file, "stamp", H5P_DEFAULT);
    attribute = 0;
    H5Aread(attr, H5T_NATIVE_INT, &attribute);
    CHECK(attribute == 20260101, "attribute reads back as %d", attribute);
    H5Aclose(attr);
    H5Sclose(filespace);
    H5Fclose(file);
    H5Pclose(fapl);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("ok hdf5: hyperslab columns written collectively and independently, read back "
               "whole and by block, attribute\n");
    MPI_Finalize();
    return 0;
}
