/* A job that opens FILE, uses its shared file pointer, and then waits: run.sh's leftovers
 * test starts two such jobs on one file, kills one with SIGKILL while it holds its shared
 * pointer, and checks with `tessera ls /.tessera-shfp` that the next open of the file removes
 * the killed job's side file and leaves the live job's.
 *
 *   shfp_hold FILE DIR live    each process writes its pid to DIR/pid.<rank>; process 0
 *                              touches DIR/ready, then all wait (at most 300 s) for
 *                              DIR/stop, check that the shared pointer still works and
 *                              holds what this job put there, and close
 *   shfp_hold FILE DIR open    open and close FILE (the open sweeps the leftovers) */
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define WAIT_SECONDS_MAX 300

static void touch(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *file = fopen(path, "w");
    CHECK(file != NULL, "cannot create %s", path);
    fprintf(file, "%d\n", (int)getpid());
    fclose(file);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    CHECK(argc == 4, "usage: shfp_hold FILE DIR live|open");
    const char *name = argv[1], *dir = argv[2], *mode = argv[3];
    int rank = test_rank(), size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_File fh;
    CHECK_MPI(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR,
                            MPI_INFO_NULL, &fh));
    if (strcmp(mode, "open") == 0) {
        CHECK_MPI(MPI_File_close(&fh));
        if (rank == 0)
            printf("ok opened and closed %s\n", name);
        MPI_Finalize();
        return 0;
    }
    CHECK(strcmp(mode, "live") == 0, "mode %s is not live or open", mode);
    int value = rank;
    MPI_Status status;
    CHECK_MPI(MPI_File_write_shared(fh, &value, 1, MPI_INT, &status));
    char pid_name[64];
    snprintf(pid_name, sizeof pid_name, "pid.%d", rank);
    touch(dir, pid_name);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        touch(dir, "ready");
    /* Wait for the stop file (or the SIGKILL). Not a collective wait: a killed job's
     * processes must be found idle in user code, holding the shared pointer. */
    char stop[1024];
    snprintf(stop, sizeof stop, "%s/stop", dir);
    struct stat st;
    int waited = 0;
    while (stat(stop, &st) != 0 && waited < WAIT_SECONDS_MAX * 10) {
        struct timespec pause = {0, 100 * 1000 * 1000};
        nanosleep(&pause, NULL);
        waited++;
    }
    CHECK(waited < WAIT_SECONDS_MAX * 10, "no %s within %d s", stop, WAIT_SECONDS_MAX);
    MPI_Barrier(MPI_COMM_WORLD);
    /* The pointer survived the other job's death and the sweep: it still counts this job's
     * ints. */
    MPI_Offset position = -1;
    CHECK_MPI(MPI_File_get_position_shared(fh, &position));
    CHECK(position == (MPI_Offset)size * (MPI_Offset)sizeof(int),
          "the shared pointer is at %lld, expected %lld", (long long)position,
          (long long)size * (long long)sizeof(int));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_MPI(MPI_File_write_shared(fh, &value, 1, MPI_INT, &status));
    CHECK_MPI(MPI_File_close(&fh));
    if (rank == 0)
        printf("ok the live job's shared pointer survived (at %lld) and closed cleanly\n",
               (long long)position);
    MPI_Finalize();
    return 0;
}
