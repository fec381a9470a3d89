/* A profiling layer of the kind Darshan is: a shared library that defines some MPI_File_*
 * functions, counts the calls, and passes each on to PMPI_File_*. Stacked in front of the
 * shim (LD_PRELOAD=profiler:shim, or linked before it), its PMPI_File_* calls must reach the
 * shim, which serves Tessera names and hands every other file to the MPI's own MPI-IO.
 * profiled.c asks for the counts with tsr_profiler_count("MPI_File_open"), found by dlsym. */
#include <mpi.h>
#include <string.h>

enum { OPEN, CLOSE, WRITE_AT, READ_AT, WRITE_AT_ALL, READ_AT_ALL, GET_SIZE, GET_INFO, CALLS };
static const char *const names[CALLS] = {
    "MPI_File_open",         "MPI_File_close",       "MPI_File_write_at",
    "MPI_File_read_at",      "MPI_File_write_at_all", "MPI_File_read_at_all",
    "MPI_File_get_size",     "MPI_File_get_info"};
static long counts[CALLS];

/* How many times the program called `name` through this layer (-1: not counted here). */
long tsr_profiler_count(const char *name) {
    for (int i = 0; i < CALLS; i++)
        if (strcmp(names[i], name) == 0)
            return counts[i];
    return -1;
}

int MPI_File_open(MPI_Comm comm, const char *filename, int amode, MPI_Info info,
                  MPI_File *fh) {
    counts[OPEN]++;
    return PMPI_File_open(comm, filename, amode, info, fh);
}

int MPI_File_close(MPI_File *fh) {
    counts[CLOSE]++;
    return PMPI_File_close(fh);
}

int MPI_File_write_at(MPI_File fh, MPI_Offset offset, const void *buf, int count,
                      MPI_Datatype type, MPI_Status *status) {
    counts[WRITE_AT]++;
    return PMPI_File_write_at(fh, offset, buf, count, type, status);
}

int MPI_File_read_at(MPI_File fh, MPI_Offset offset, void *buf, int count, MPI_Datatype type,
                     MPI_Status *status) {
    counts[READ_AT]++;
    return PMPI_File_read_at(fh, offset, buf, count, type, status);
}

int MPI_File_write_at_all(MPI_File fh, MPI_Offset offset, const void *buf, int count,
                          MPI_Datatype type, MPI_Status *status) {
    counts[WRITE_AT_ALL]++;
    return PMPI_File_write_at_all(fh, offset, buf, count, type, status);
}

int MPI_File_read_at_all(MPI_File fh, MPI_Offset offset, void *buf, int count,
                         MPI_Datatype type, MPI_Status *status) {
    counts[READ_AT_ALL]++;
    return PMPI_File_read_at_all(fh, offset, buf, count, type, status);
}

int MPI_File_get_size(MPI_File fh, MPI_Offset *size) {
    counts[GET_SIZE]++;
    return PMPI_File_get_size(fh, size);
}

int MPI_File_get_info(MPI_File fh, MPI_Info *info) {
    counts[GET_INFO]++;
    return PMPI_File_get_info(fh, info);
}
